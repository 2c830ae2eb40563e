"""Nodes of a ClusterState grouped by everything a placement there depends on, kept current.

Placers that rank nodes by their state and then their index (every built-in one) need to look at
one node per group: on a large cluster of few node kinds, far fewer than the nodes. The groups are
refreshed from `ClusterState.changed`: only nodes whose bookings changed are looked at again.
"""

from __future__ import annotations

from typing import Any

from gpuplan.core.state import ClusterState

__all__ = ["NodeGroups", "group_key"]


def group_key(state: ClusterState, n: int) -> tuple[Any, ...]:
    """What a placement on node n depends on: free CPU and memory, and per GPU (sorted) its free
    share, occupants, free memory and capacity."""
    gpus = state.node_gpus[n]
    njobs, free_gb, cap = state.gpu_njobs, state.gpu_free_gb, state.gpu_cap_gb
    fs = state.gpu_free_share
    per_gpu = tuple(
        sorted(
            (
                round(fs[g], 9) if fs is not None else (1.0 if njobs[g] == 0 else 0.0),
                njobs[g],
                round(free_gb[g], 9),
                cap[g],
            )
            for g in gpus
        )
    )
    cpu = state.node_cpu_free[n] if state.node_cpu_free is not None else 0.0
    mem = state.node_mem_free[n] if state.node_mem_free is not None else 0.0
    return (round(cpu, 6), round(mem, 6), per_gpu, bool(state.spec.nodes[n].gpu.mig_profile))


class NodeGroups:
    """Nodes of one ClusterState by `group_key`: `first[key]` is the lowest node in that state."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.changed = state.track_changes()
        self.changed.clear()
        self.keys: list[tuple[Any, ...]] = []
        self.members: dict[tuple[Any, ...], set[int]] = {}
        self.first: dict[tuple[Any, ...], int] = {}
        for n in range(len(state.node_gpus)):
            key = group_key(state, n)
            self.keys.append(key)
            self._add(key, n)

    def current(self, state: ClusterState) -> bool:
        """Whether these groups follow `state` (not a copy made since)."""
        return state is self.state and state.changed is self.changed

    def _add(self, key: tuple[Any, ...], n: int) -> None:
        members = self.members.get(key)
        if members is None:
            self.members[key] = {n}
            self.first[key] = n
        else:
            members.add(n)
            if n < self.first[key]:
                self.first[key] = n

    def refresh(self) -> None:
        """Regroup the nodes whose bookings changed since the last refresh."""
        state = self.state
        for n in self.changed:
            old, new = self.keys[n], group_key(state, n)
            if old == new:
                continue
            members = self.members[old]
            members.discard(n)
            if not members:
                del self.members[old], self.first[old]
            elif self.first[old] == n:
                self.first[old] = min(members)
            self.keys[n] = new
            self._add(new, n)
        self.changed.clear()

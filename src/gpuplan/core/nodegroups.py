"""Per-node scores of placement requests, kept current from `ClusterState.changed` (jobs with a Need).

On a large cluster a placer that ranks nodes by their state (and then their index) need not look at
every node for every job: the score of a request on a node depends only on that node's state, so it
is kept per request in an array and recomputed only for the nodes whose bookings changed since the
request was last scored; a node state met before (under `state_key`) is looked up, not recomputed.
The best node is the lexicographic minimum of the score rows, the lowest index among equals.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from gpuplan.core.state import ClusterState

if TYPE_CHECKING:
    import numpy as np

__all__ = ["NodeScores", "state_key"]

Score = tuple[tuple[float, ...], Any] | None
"""A node's rank for a request (smaller first) and what the placer needs to pick its GPUs; None: no fit."""


def state_key(state: ClusterState, n: int) -> tuple[Any, ...]:
    """What a placement on node n depends on: free CPU and memory, and per GPU (sorted) its free
    share, whether it is idle or full (occupants only decide fit through these), its free memory and
    capacity."""
    gpus = state.node_gpus[n]
    njobs, free_gb, cap, most = state.gpu_njobs, state.gpu_free_gb, state.gpu_cap_gb, state.max_share
    fs = state.gpu_free_share
    per_gpu = tuple(
        sorted(
            (
                round(fs[g], 9) if fs is not None else (1.0 if njobs[g] == 0 else 0.0),
                njobs[g] == 0,
                njobs[g] >= most,
                round(free_gb[g], 9),
                cap[g],
            )
            for g in gpus
        )
    )
    cpu = state.node_cpu_free[n] if state.node_cpu_free is not None else 0.0
    mem = state.node_mem_free[n] if state.node_mem_free is not None else 0.0
    idle = state.node_idle[n] if not state.sharing else -1  # a masked copy lowers only these
    return (round(cpu, 6), round(mem, 6), per_gpu, idle, most, bool(state.spec.nodes[n].gpu.mig_profile))


class _Table:
    """One request's scores: a row per node (inf: no fit), the version each row was scored at."""

    __slots__ = ("extra", "rows", "seen")

    def __init__(self, nodes: int, width: int) -> None:
        import numpy as np  # here, not at import: `gpuplan policies` and --help stay quick

        self.rows = np.full((nodes, max(width, 1)), np.inf)
        self.seen = np.full(nodes, -1, dtype=np.int64)
        self.extra: list[Any] = [None] * nodes


class NodeScores:
    """The score tables of one ClusterState (the placer keeps one per state it is asked about)."""

    def __init__(self, state: ClusterState, ids: dict[tuple[Any, ...], int]) -> None:
        """`ids`: node state -> its number, shared by every state a placer scores (its memo's keys)."""
        import numpy as np

        self.state = state
        self.changed = state.track_changes()
        self.changed.clear()
        n = len(state.node_gpus)
        self.version = np.zeros(n, dtype=np.int64)
        self.ids = ids
        self.kid = [self._id(state_key(state, i)) for i in range(n)]
        self.tables: dict[Hashable, _Table] = {}

    def _id(self, key: tuple[Any, ...]) -> int:
        kid = self.ids.get(key)
        if kid is None:
            kid = self.ids[key] = len(self.ids)
        return kid

    def current(self, state: ClusterState) -> bool:
        """Whether these tables follow `state` (not a copy made since)."""
        return state is self.state and state.changed is self.changed

    def refresh(self) -> None:
        """Note the nodes whose bookings changed since the last call."""
        if not self.changed:
            return
        state = self.state
        for n in self.changed:
            kid = self._id(state_key(state, n))
            if kid != self.kid[n]:
                self.kid[n] = kid
                self.version[n] += 1
        self.changed.clear()

    def best(
        self,
        request: Hashable,
        width: int,
        memo: dict[tuple[int, Hashable], Score],
        score: Callable[[list[int]], list[Score]],
    ) -> tuple[int, Any] | None:
        """The node with the smallest score for `request` and its extra, or None when none fits.

        `score(nodes)` ranks nodes on their current state (`width` numbers each); `memo` holds the scores by
        (node state, request) across calls."""
        import numpy as np

        table = self.tables.get(request)
        if table is None:
            table = self.tables[request] = _Table(len(self.kid), width)
        stale = np.flatnonzero(table.seen != self.version)
        if len(stale):
            rows, extra, kid = table.rows, table.extra, self.kid
            nodes = stale.tolist()
            keys = [(kid[n], request) for n in nodes]
            missing: dict[int, int] = {}  # node state -> a node in it, for the states not scored yet
            for n, k in zip(nodes, keys, strict=True):
                if k not in memo and k[0] not in missing:
                    missing[k[0]] = n
            if missing:
                for k0, got in zip(missing, score(list(missing.values())), strict=True):
                    memo[(k0, request)] = got
            fit_nodes, fit_rows = [], []
            for n, k in zip(nodes, keys, strict=True):
                got = memo[k]
                if got is not None:
                    fit_nodes.append(n)
                    fit_rows.append(got[0])
                    extra[n] = got[1]
            rows[stale] = np.inf
            if fit_nodes:
                rows[fit_nodes] = fit_rows
            table.seen[stale] = self.version[stale]
        node = _lexmin(table.rows)
        return None if node < 0 else (node, table.extra[node])


def _lexmin(rows: np.ndarray) -> int:
    """Index of the lexicographically smallest finite row (the first among equals), or -1."""
    import numpy as np

    col = rows[:, 0]
    low = col.min()
    if low == np.inf:
        return -1
    cand = np.flatnonzero(col == low)
    for c in range(1, rows.shape[1]):
        if len(cand) == 1:
            break
        vals = rows[cand, c]
        cand = cand[vals == vals.min()]
    return int(cand[0])

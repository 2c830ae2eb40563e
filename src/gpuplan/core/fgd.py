"""The `fgd` placer (Fragmentation Gradient Descent, Weng et al., USENIX ATC '23).

fgd puts each job on the node and GPUs that increase the cluster's expected fragmentation
(core/fragmentation.py) least. The workload whose job types weigh the expectation is given
(`gpuplan frag` gives the whole arrival list, as FGD's authors do) or learnt from the jobs the
scheduler is handed (`learn`, called at each submit).

Fast enough for the full Alibaba trace: a node's fragmentation depends only on its `NodeKey`
(free CPU, free memory, its GPUs' free shares), so nodes in the same state form one group, the
placer keeps the groups up to date from `ClusterState.changed` (only nodes that changed are
recomputed), and the best move of a request on a group's state is memoized: a placement scans the
groups, not the nodes, and evaluates (vectorized over job types) only states it has not met.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuplan.core.fragmentation import NodeKey, Workload, node_key, type_of, type_of_need
from gpuplan.core.placement import Placer, register_placer
from gpuplan.core.state import ClusterState, Need
from gpuplan.model import Job

__all__ = ["Fgd"]

_NO_NEED = Need()
_MAX_MEMO = 500_000  # memoized moves kept before starting afresh (a long simulation meets many states)


class Fgd(Placer):
    """Fragmentation Gradient Descent: the placement that raises expected fragmentation least."""

    name = "fgd"
    description = "FGD: the node and GPUs that increase the workload's expected GPU fragmentation least"

    def __init__(self, workload: Workload | None = None) -> None:
        self.workload = workload
        self._fixed = workload is not None
        self._learnt = 0
        self._seen: Counter[tuple[int, float, float, float]] = Counter()
        self._frag: dict[NodeKey, float] = {}
        self._best: dict[tuple[Any, ...], tuple[float, float, float] | None] = {}

    # -- the workload ------------------------------------------------------------------------
    def set_workload(self, workload: Workload) -> None:
        """Weigh fragmentation by `workload` from now on (memos are dropped)."""
        self.workload = workload
        self._fixed = True
        self._frag.clear()
        self._best.clear()

    def learn(self, job: Job) -> None:
        """A job was submitted: without a given workload, the types seen so far weigh fragmentation
        (re-weighed when a new type appears or their count doubles)."""
        if self._fixed:
            return
        key = type_of(job.gpus, job.gpu_share, job.cpu_milli, None)
        self._seen[key] += 1
        self._learnt += 1
        if self._seen[key] == 1 or self._learnt & (self._learnt - 1) == 0:
            self.workload = Workload.from_counts(self._seen)
            self._frag.clear()
            self._best.clear()

    def _ensure_workload(self, gpus: int, need: Need | None) -> Workload:
        if self.workload is None:
            self._seen[type_of_need(gpus, need)] += 1
            self.workload = Workload.from_counts(self._seen)
        return self.workload

    # -- placing -----------------------------------------------------------------------------
    def node_key(self, state: ClusterState, node: int, fitting: int) -> tuple[float, ...]:
        return (node,)  # only for the base class's spanning fallback

    def gpu_key(self, state: ClusterState, gpu: int) -> tuple[float, ...]:
        return (gpu,)

    def find(
        self,
        state: ClusterState,
        gpus: int,
        mem_gb: float | None,
        may_span: bool = False,
        need: Need | None = None,
    ) -> list[int] | None:
        found = self.choose(state, gpus, mem_gb, need if need is not None else _NO_NEED)
        if found is not None:
            return found[1]
        return super().find(state, gpus, mem_gb, may_span, need) if may_span else None

    def choose(
        self, state: ClusterState, gpus: int, mem_gb: float | None, need: Need
    ) -> tuple[int, list[int]] | None:
        workload = self._ensure_workload(gpus, need)
        groups = self.node_groups(state)
        best: tuple[float, float, int, float] | None = None
        request = (gpus, mem_gb, need)
        memo = self._best
        if len(memo) > _MAX_MEMO:
            memo.clear()
            self._frag.clear()
        for key, first in groups.first.items():
            mk = (key, request)
            if mk in memo:
                move = memo[mk]
            else:
                move = memo[mk] = self._evaluate(state, first, workload, gpus, mem_gb, need)
            if move is None:
                continue
            cand = (move[0], move[2], first, move[1])
            if best is None or cand < best:
                best = cand
        if best is None:
            return None
        _, _, node, take_share = best
        return node, self._gpus_on(state, node, gpus, mem_gb, need, take_share)

    def _fragmentation(self, workload: Workload, keys: list[NodeKey]) -> list[float]:
        memo = self._frag
        todo = [k for k in dict.fromkeys(keys) if k not in memo]
        if todo:
            for k, v in zip(todo, workload.fragmentation_batch(todo), strict=True):
                memo[k] = float(v)
        return [memo[k] for k in keys]

    def _evaluate(
        self, state: ClusterState, node: int, workload: Workload, gpus: int, mem_gb: float | None, need: Need
    ) -> tuple[float, float, float] | None:
        """(rise in fragmentation, free share of the GPU a one-GPU job takes or -1, the node's free GPU
        capacity) on node's state, or None when the job does not fit there. Equal rises go to the
        node with the least free GPU capacity (then the lowest index), equal GPUs to the fullest."""
        if not state.host_fits(node, need):
            return None
        fitting = [g for g in state.node_gpus[node] if state.gpu_fits_need(g, mem_gb, need.gpu_share)]
        if len(fitting) < gpus:
            return None
        before = node_key(state, node)
        cpu, mem = before[0] - need.cpu_milli, before[1] - need.host_mem_gb
        free = list(before[2])
        d = 1.0 if need.gpu_share is None else need.gpu_share
        shares = sorted({_free_share(state, g) for g in fitting}, reverse=True)
        if gpus == 0:
            after = [(round(cpu, 6), round(mem, 6), before[2])]
            options = [-1.0]
        elif gpus == 1:
            after, options = [], []
            for s in shares:
                rest = list(free)
                rest[rest.index(s)] = max(0.0, round(s - d, 9))
                after.append((round(cpu, 6), round(mem, 6), tuple(sorted(rest))))
                options.append(s)
        else:  # whole GPUs: the freest ones (all idle when a job takes GPUs whole)
            chosen = sorted((_free_share(state, g) for g in fitting), reverse=True)[:gpus]
            rest = list(free)
            for s in chosen:
                rest[rest.index(s)] = max(0.0, round(s - d, 9))
            after = [(round(cpu, 6), round(mem, 6), tuple(sorted(rest)))]
            options = [-1.0]
        base, *values = self._fragmentation(workload, [before, *after])
        rise, option = min(
            zip((v - base for v in values), options, strict=True), key=lambda ro: (ro[0], ro[1])
        )
        return (round(rise, 9), option, round(sum(before[2]), 9))

    def _gpus_on(
        self, state: ClusterState, node: int, gpus: int, mem_gb: float | None, need: Need, take_share: float
    ) -> list[int]:
        fitting = [g for g in state.node_gpus[node] if state.gpu_fits_need(g, mem_gb, need.gpu_share)]
        if gpus == 1 and take_share >= 0:
            for g in fitting:
                if _free_share(state, g) == take_share:
                    return [g]
        fitting.sort(key=lambda g: (-_free_share(state, g), g))
        return sorted(fitting[:gpus])


def _free_share(state: ClusterState, g: int) -> float:
    fs = state.gpu_free_share
    if fs is None:
        return 1.0 if state.gpu_njobs[g] == 0 else 0.0
    return max(0.0, round(fs[g], 9))


register_placer(Fgd)

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
from gpuplan.core.params import Param
from gpuplan.core.placement import Placer, register_placer
from gpuplan.core.state import ClusterState, Need
from gpuplan.model import Job

__all__ = ["Fgd", "FgdPack"]

_NO_NEED = Need()


class Fgd(Placer):
    """Fragmentation Gradient Descent: the placement that raises expected fragmentation least."""

    name = "fgd"
    description = "FGD: the node and GPUs that increase the workload's expected GPU fragmentation least"

    params = (
        Param(
            "step",
            "step_gpus",
            "number",
            "rises of fragmentation rounded to steps of this many GPUs (0: exact)",
        ),
    )

    def __init__(self, step_gpus: float = 0.0, workload: Workload | None = None) -> None:
        self.step_gpus = step_gpus
        self.workload = workload
        self._fixed = workload is not None
        self._learnt = 0
        self._seen: Counter[tuple[int, float, float, float]] = Counter()
        self._frag: dict[NodeKey, float] = {}
        self._forget()

    # -- the workload ------------------------------------------------------------------------
    def set_workload(self, workload: Workload) -> None:
        """Weigh fragmentation by `workload` from now on (memos are dropped)."""
        self.workload = workload
        self._fixed = True
        self._forget()

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
            self._forget()

    def _ensure_workload(self, gpus: int, need: Need | None) -> Workload:
        if self.workload is None:  # asked to place before any job was submitted: that job's type alone
            self._seen[type_of_need(gpus, need)] += 1
            self.workload = Workload.from_counts(self._seen)
            self._forget()
        return self.workload

    def choose(
        self, state: ClusterState, gpus: int, mem_gb: float | None, need: Need
    ) -> tuple[int, list[int]] | None:
        self._ensure_workload(gpus, need)  # before the memos, which live on the workload
        return super().choose(state, gpus, mem_gb, need)

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

    score_width = 2
    scores_from = 0  # always: the kept scores are what makes fgd affordable

    def score_node(
        self, state: ClusterState, node: int, gpus: int, mem_gb: float | None, need: Need
    ) -> tuple[tuple[float, ...], Any] | None:
        return self.score_many(state, [node], gpus, mem_gb, need)[0]

    def score_many(
        self, state: ClusterState, nodes: list[int], gpus: int, mem_gb: float | None, need: Need
    ) -> list[tuple[tuple[float, ...], Any] | None]:
        """Every node's (rise in fragmentation, its free GPU capacity) and the free share of the GPU a
        one-GPU job takes there (-1 otherwise), or None where the job does not fit; the node states
        not met before are evaluated together, vectorized. Equal rises go to the node with the least
        free GPU capacity (then the lowest index), equal GPUs to the fullest."""
        workload = self._ensure_workload(gpus, need)
        moves = [self._moves(state, n, gpus, mem_gb, need) for n in nodes]
        self._fill(workload, [k for m in moves if m is not None for k in (m[0], *m[1])])
        frag, step = self._frag, self.step_gpus
        out: list[tuple[tuple[float, ...], Any] | None] = []
        for m in moves:
            if m is None:
                out.append(None)
                continue
            before, after, options = m
            base = frag[before]
            rise, option = min(((frag[a] - base, o) for a, o in zip(after, options, strict=True)))
            rise = round(round(rise / step) * step, 9) if step else round(rise, 9)
            out.append(((rise, round(sum(before[2]), 9)), option))
        return out

    def pick_scored(
        self, state: ClusterState, node: int, gpus: int, mem_gb: float | None, need: Need, extra: Any
    ) -> list[int]:
        return self._gpus_on(state, node, gpus, mem_gb, need, extra)

    def _forget(self) -> None:
        """Scores were computed under another workload: drop them (fragmentation values and scores
        live on the workload object, shared by every fgd placer weighing by it)."""
        self._scores_cache = {}
        if self.workload is not None:
            self._frag = self.workload.memo.setdefault("frag", {})

    def memo_home(self) -> dict[str, Any]:
        assert self.workload is not None, "choose sets a workload first"
        home: dict[str, Any] = self.workload.memo.setdefault(("moves", self.step_gpus), {})
        return home

    def _fill(self, workload: Workload, keys: list[NodeKey]) -> None:
        """Compute the fragmentation of the node states not met before, one batch per GPU count."""
        memo = self._frag
        todo: dict[int, list[NodeKey]] = {}
        for k in dict.fromkeys(keys):
            if k not in memo:
                todo.setdefault(len(k[2]), []).append(k)
        for batch in todo.values():
            for k, v in zip(batch, workload.fragmentation_batch(batch).tolist(), strict=True):
                memo[k] = v

    def _moves(
        self, state: ClusterState, node: int, gpus: int, mem_gb: float | None, need: Need
    ) -> tuple[NodeKey, list[NodeKey], list[float]] | None:
        """The node's state, the states each way of placing the job there leaves, and for a one-GPU
        job the free share of the GPU each takes (-1 otherwise); None when it does not fit."""
        if not state.host_fits(node, need):
            return None
        fitting = [g for g in state.node_gpus[node] if state.gpu_fits_need(g, mem_gb, need.gpu_share)]
        if len(fitting) < gpus:
            return None
        before = node_key(state, node)
        cpu, mem = round(before[0] - need.cpu_milli, 6), round(before[1] - need.host_mem_gb, 6)
        free = before[2]
        d = 1.0 if need.gpu_share is None else need.gpu_share
        if gpus == 0:
            return before, [(cpu, mem, free)], [-1.0]
        shares = sorted({_free_share(state, g) for g in fitting}, reverse=True)
        if gpus == 1:
            after = []
            for sh in shares:
                rest = list(free)
                rest[rest.index(sh)] = max(0.0, round(sh - d, 9))
                after.append((cpu, mem, tuple(sorted(rest))))
            return before, after, shares
        chosen = sorted((_free_share(state, g) for g in fitting), reverse=True)[
            :gpus
        ]  # whole GPUs: the idle ones
        rest = list(free)
        for sh in chosen:
            rest[rest.index(sh)] = max(0.0, round(sh - d, 9))
        return before, [(cpu, mem, tuple(sorted(rest)))], [-1.0]

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


class FgdPack(Fgd):
    """FGD's measure in steps of a quarter GPU, best-fit within a step: beats fgd on the Alibaba
    experiment (docs/fragmentation.md)."""

    name = "fgd-pack"
    description = (
        "FGD's fragmentation rise rounded to 0.25 GPU, then the fullest node (best-fit) among equals"
    )

    def __init__(self, step_gpus: float = 0.25, workload: Workload | None = None) -> None:
        super().__init__(step_gpus, workload)


register_placer(Fgd)
register_placer(FgdPack)

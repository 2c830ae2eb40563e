"""The search's objective: simulate one order and return every job's end, as fast as the cluster allows.

`Evaluator.ends(order)` gives the same end times as `simulate(jobs, cluster, FixedOrder(...), backfill)`
(tests check it), by one of three paths:

- exclusive GPUs, no backfill, first-fit, no job spanning several nodes: a dedicated list scheduler
  (the queue's head is the only job a pass can block on, so a heap of positions is all it needs);
- other exclusive runs: the scheduling core (`Scheduler`) driven by a lean copy of the simulator's loop
  that keeps no timeline, records or metrics;
- GPU sharing: `simulate` itself (progress rates move finish times; no shortcut is worth its risk).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from gpuplan.core.backfill import Backfill, get_backfill
from gpuplan.core.placement import FirstFit, Placer, get_placer
from gpuplan.core.policies import Policy
from gpuplan.core.scheduler import Scheduler
from gpuplan.errors import GpuplanError, ScheduleError, UnknownNameError
from gpuplan.model import ClusterSpec, Job

if TYPE_CHECKING:
    from gpuplan.core.interference import InterferenceModel

__all__ = ["OBJECTIVES", "Evaluator", "objective_value"]

_INF = math.inf

OBJECTIVES = ("makespan", "mean-jct", "weighted")
"""makespan: last end; mean-jct: mean (end - submit); weighted: GPU-weighted mean JCT, Σ g·JCT / Σ g."""


def check_objective(objective: str) -> str:
    """The objective's name, or UnknownNameError listing the valid ones."""
    if objective not in OBJECTIVES:
        raise UnknownNameError("objective", objective, list(OBJECTIVES))
    return objective


def objective_value(
    objective: str, ends: Sequence[float], rel: Sequence[float], gpus: Sequence[int]
) -> float:
    """The objective (seconds) of one run from each job's end and release, times from the first submit."""
    if objective == "makespan":
        return max(ends)
    if objective == "mean-jct":
        return sum(e - r for e, r in zip(ends, rel)) / len(ends)
    return sum(g * (e - r) for e, r, g in zip(ends, rel, gpus)) / sum(gpus)


class _IndexOrder(Policy):
    """FixedOrder by trace index (the simulator's job handle), for the inner loop."""

    name = "fixed-order"

    def __init__(self, position: list[int]) -> None:
        self.position = position

    def key(self, job: Job, seq: int, oracle: bool) -> tuple[float, ...]:
        return (self.position[seq],)


class Evaluator:
    """Simulates orders of one trace on one cluster; counts the evaluations.

    Args:
        jobs: the trace; each job needs a true duration (the outcome is the simulated one).
        cluster: where it runs.
        backfill, placer: as for `simulate`.
        oracle: the scheduler's decisions (backfill reservations, memory for placement) use the true
            durations and memory instead of the estimates.
        interference: the sharing model (sharing clusters only; default as in `simulate`).

    Raises:
        ScheduleError: a job has no true duration or can never fit on the cluster.
        UnknownNameError: an unknown backfill mode or placer.
    """

    def __init__(
        self,
        jobs: Sequence[Job],
        cluster: ClusterSpec,
        backfill: Backfill | str = "easy",
        placer: Placer | str = "first-fit",
        *,
        oracle: bool = False,
        interference: InterferenceModel | None = None,
    ) -> None:
        if not jobs:
            raise ScheduleError("no jobs to plan: the trace is empty")
        missing = [j.id for j in jobs if j.duration_s is None or j.duration_s < 0]
        if missing:
            raise ScheduleError(
                f"{len(missing)} job(s) have no true duration (first: {missing[0]!r}); planning simulates "
                "the trace: fill duration_s, or plan on the estimates (forecast)"
            )
        self.jobs = list(jobs)
        self.cluster = cluster
        self.backfill = get_backfill(backfill) if isinstance(backfill, str) else backfill
        self.placer = get_placer(placer) if isinstance(placer, str) else placer
        self.oracle = oracle
        self.interference = interference
        t0 = min(j.submit_s for j in jobs)
        self.rel = [j.submit_s - t0 for j in jobs]
        self.gpus = [j.gpus for j in jobs]
        self.dur = [float(j.duration_s or 0.0) for j in jobs]
        self.arrival = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
        self.count = 0
        self._check_fits()
        self._run: Callable[[list[int]], list[float]] = self._pick_path()

    @property
    def path(self) -> str:
        """Which of the three paths evaluates: 'list-scheduler', 'core' or 'simulate'."""
        return {self._none_fast: "list-scheduler", self._core: "core"}.get(self._run, "simulate")  # type: ignore[call-overload]

    def ends(self, order: Sequence[int]) -> list[float]:
        """Each job's end (seconds from the first submit, by trace index) when run in `order`.

        `order` lists trace indices, every job once.
        """
        n = len(self.jobs)
        if len(order) != n:
            raise GpuplanError(f"an order of {len(order)} jobs for a trace of {n}: give every job once")
        position = [0] * n
        for p, i in enumerate(order):
            position[i] = p
        self.count += 1
        return self._run(position)

    def value(self, objective: str, ends: Sequence[float]) -> float:
        return objective_value(objective, ends, self.rel, self.gpus)

    # -- paths ------------------------------------------------------------------------------------
    def _check_fits(self) -> None:
        probe = Scheduler(self.cluster, "fifo", self.backfill, self.placer, oracle=self.oracle)
        for i, job in enumerate(self.jobs):
            probe.submit(i, job)  # raises JobNeverFitsError with the simulator's own message

    def _pick_path(self) -> Callable[[list[int]], list[float]]:
        if self.cluster.sharing:
            return self._simulate
        multi = len(self.cluster.nodes) > 1
        if (
            self.backfill.name == "none"
            and type(self.placer) is FirstFit
            and not (multi and any(j.may_span_nodes for j in self.jobs))
        ):
            self._mem = [j.planning_mem_gb(self.oracle) for j in self.jobs]
            self._node_cap = [n.gpu.mem_gb for n in self.cluster.nodes]
            self._node_gpus = [n.gpus for n in self.cluster.nodes]
            return self._none_fast
        return self._core

    def _first_fit(self, idle: list[int], j: int) -> int:
        g, mem, caps = self.gpus[j], self._mem[j], self._node_cap
        for n, k in enumerate(idle):
            if k >= g and (mem is None or mem <= caps[n]):
                return n
        return -1

    def _none_fast(self, position: list[int]) -> list[float]:
        """Strict order, exclusive GPUs, first-fit: start the queue's head while it fits."""
        rel, dur, gpus, arrival = self.rel, self.dur, self.gpus, self.arrival
        n = len(rel)
        idle = list(self._node_gpus)
        node_of = [-1] * n
        ends = [0.0] * n
        heap: list[tuple[float, int, int]] = []
        waiting: list[tuple[int, int]] = []
        seq = itertools.count()
        ai = 0
        while ai < n or heap:
            t_arr = rel[arrival[ai]] if ai < n else _INF
            now = min(t_arr, heap[0][0] if heap else _INF)
            while heap and heap[0][0] <= now:
                _, _, j = heapq.heappop(heap)
                idle[node_of[j]] += gpus[j]
                ends[j] = now
            while ai < n and rel[arrival[ai]] <= now:
                j = arrival[ai]
                heapq.heappush(waiting, (position[j], j))
                ai += 1
            while waiting:
                j = waiting[0][1]
                node = self._first_fit(idle, j)
                if node < 0:
                    break
                heapq.heappop(waiting)
                idle[node] -= gpus[j]
                node_of[j] = node
                heapq.heappush(heap, (now + dur[j], next(seq), j))
            if not heap and ai >= n and waiting:
                raise ScheduleError(
                    f"{len(waiting)} job(s) can never start; nothing runs and nothing arrives"
                )
        return ends

    def _core(self, position: list[int]) -> list[float]:
        """The simulator's exclusive loop around the scheduling core, keeping only the end times."""
        jobs, rel, dur, arrival = self.jobs, self.rel, self.dur, self.arrival
        sched = Scheduler(self.cluster, _IndexOrder(position), self.backfill, self.placer, oracle=self.oracle)
        n = len(jobs)
        ends = [0.0] * n
        heap: list[tuple[float, int, int]] = []
        seq = itertools.count()
        ai = 0
        while ai < n or heap:
            t_arr = rel[arrival[ai]] if ai < n else _INF
            now = min(t_arr, heap[0][0] if heap else _INF)
            while heap and heap[0][0] <= now:
                _, _, j = heapq.heappop(heap)
                ends[j] = now
                sched.finish(j)
            while ai < n and rel[arrival[ai]] <= now:
                sched.submit(arrival[ai], jobs[arrival[ai]])
                ai += 1
            for st in sched.schedule(now):
                heapq.heappush(heap, (now + dur[st.jid], next(seq), st.jid))
            if not heap and ai >= n and sched.queue:
                raise ScheduleError(
                    f"{sched.waiting} job(s) can never start; nothing runs and nothing arrives"
                )
        return ends

    def _simulate(self, position: list[int]) -> list[float]:
        from gpuplan.sim.engine import simulate

        result = simulate(
            self.jobs, self.cluster, _IndexOrder(position), self.backfill, self.placer,
            oracle=self.oracle, interference=self.interference,
        )  # fmt: skip
        index = {j.id: i for i, j in enumerate(self.jobs)}
        ends = [0.0] * len(self.jobs)
        for r in result.records:
            ends[index[r.job_id]] = r.end_s
        return ends

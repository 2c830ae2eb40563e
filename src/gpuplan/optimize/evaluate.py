"""The search's objective: simulate one order and return every job's end.

`Evaluator.ends(order)` is `simulate(jobs, cluster, FixedOrder(...), backfill, placer)`: the core's own
Scheduler, on the simulator's clock. The search kept a copy of the none / EASY / first-fit rules on
free-GPU counts (a list scheduler guarded by a self-check) until issue #21: every rule now has one
implementation. Measured on this loaded 2-core machine (CPU time): one evaluation of 500 jobs on 64
GPUs 1.1 -> 7.1 ms (none) and 9.0 -> 15.7 ms (EASY); `gpuplan plan` on the article scenario, 1,000
evaluations, 3.05 -> 4.51 s. Memory is booked by the core's `booked_mem_gb`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuplan.core.backfill import Backfill, get_backfill
from gpuplan.core.booking import booked_mem_gb
from gpuplan.core.placement import Placer, get_placer
from gpuplan.core.policies import Policy
from gpuplan.core.scheduler import Scheduler
from gpuplan.errors import GpuplanError, UnknownNameError
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
        backfill, placer: as for `simulate`. A placer given by name (spec) is built afresh for every
            run, as a fresh `simulate` builds it, so a placer that learns the workload from the jobs
            submitted (fgd) scores each order the way a replay of it does; a Placer object is shared
            by every run as given.
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
        from gpuplan.sim.engine import require_durations

        require_durations(jobs, "plan", "fill duration_s, or plan on the estimates (--forecast)")
        self.jobs = list(jobs)
        self.cluster = cluster
        self.backfill = get_backfill(backfill) if isinstance(backfill, str) else backfill
        self.placer = get_placer(placer) if isinstance(placer, str) else placer
        self._run_placer: Placer | str = self.placer.spec if isinstance(placer, str) else placer
        self.oracle = oracle
        self.interference = interference
        t0 = min(j.submit_s for j in jobs)
        self.rel = [j.submit_s - t0 for j in jobs]
        self.gpus = [j.gpus for j in jobs]
        self.dur = [float(j.duration_s or 0.0) for j in jobs]
        self.arrival = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
        self.count = 0
        self._check_fits()

    @property
    def path(self) -> str:
        """How an order is evaluated: always 'simulate' (the core's own scheduler; no copy of its rules)."""
        return "simulate"

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
        return self._simulate(position)

    def value(self, objective: str, ends: Sequence[float]) -> float:
        return objective_value(objective, ends, self.rel, self.gpus)

    # -- paths ------------------------------------------------------------------------------------
    def _check_fits(self) -> None:
        # by name, a placer of its own: submitting teaches a learning placer the workload (no run may inherit it)
        probe = Scheduler(self.cluster, "fifo", self.backfill, self._run_placer, oracle=self.oracle)
        for i, job in enumerate(self.jobs):  # raises JobNeverFitsError with the simulator's own message
            probe.submit(i, job, book_mem_gb=booked_mem_gb(job, self.oracle))

    def _simulate(self, position: list[int]) -> list[float]:
        from gpuplan.sim.engine import simulate

        result = simulate(
            self.jobs, self.cluster, _IndexOrder(position), self.backfill, self._run_placer,
            oracle=self.oracle, interference=self.interference,
        )  # fmt: skip
        index = {j.id: i for i, j in enumerate(self.jobs)}
        ends = [0.0] * len(self.jobs)
        for r in result.records:
            ends[index[r.job_id]] = r.end_s
        return ends

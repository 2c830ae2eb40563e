"""The scheduling core: a queue in policy order, the running jobs, a placer and a backfill mode.

The simulator, the local agent and the Slurm loop drive the same Scheduler and differ only in their
clock: they call `submit`, `finish` and `schedule(now)` and start what `schedule` returns.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import NamedTuple

from sortedcontainers import SortedList

from gpuplan.core.backfill import Backfill, get_backfill
from gpuplan.core.placement import Placer, get_placer
from gpuplan.core.policies import Policy, get_policy
from gpuplan.core.state import ClusterState
from gpuplan.errors import JobNeverFitsError
from gpuplan.model import ClusterSpec, Job

__all__ = ["Scheduler", "Started"]

_INF = math.inf


class Started(NamedTuple):
    """A start decision: job handle and the GPUs it gets (a tuple: cheap on the hot path)."""

    jid: int
    gpus: tuple[int, ...]


class Scheduler:
    """Decides which waiting jobs start now and on which GPUs.

    Jobs are known by an integer handle `jid` chosen by the caller (the simulator uses trace order).
    Durations come from `Job.planning_duration_s(oracle)`; a job without one plans as endless.
    """

    def __init__(
        self,
        spec: ClusterSpec,
        policy: Policy | str = "fifo",
        backfill: Backfill | str = "easy",
        placer: Placer | str = "first-fit",
        oracle: bool = False,
    ) -> None:
        self.spec = spec
        self.policy = get_policy(policy) if isinstance(policy, str) else policy
        self.backfill = get_backfill(backfill) if isinstance(backfill, str) else backfill
        self.placer = get_placer(placer) if isinstance(placer, str) else placer
        self.oracle = oracle
        self.state = ClusterState(spec)
        self._empty = ClusterState(spec)
        self._fits_empty: dict[tuple[int, float | None, bool], bool] = {}
        self.queue: SortedList = SortedList()  # (policy key..., jid)
        self._qkey: dict[int, tuple[float, ...]] = {}
        self.running: SortedList = SortedList()  # (expected end, jid)
        self.expected_end: dict[int, float] = {}
        self.alloc: dict[int, tuple[int, ...]] = {}
        self.start_s: dict[int, float] = {}
        self.gpus: dict[int, int] = {}
        self.mem: dict[int, float | None] = {}
        self.plan: dict[int, float] = {}
        self.span: dict[int, bool] = {}
        self.jobs: dict[int, Job] = {}

    # -- the clock-independent API -------------------------------------------------------------
    def submit(self, jid: int, job: Job, book_mem_gb: float | None = None) -> None:
        """Queue a job. Raises JobNeverFitsError when no placement on the empty cluster hosts it.

        `book_mem_gb` overrides the per-GPU memory to book (default: the job's estimate, or its true
        memory in oracle runs)."""
        mem = job.planning_mem_gb(self.oracle) if book_mem_gb is None else book_mem_gb
        shape = (job.gpus, mem, job.may_span_nodes)
        if shape not in self._fits_empty:
            self._fits_empty[shape] = self.placer.find(self._empty, *shape) is not None
        if not self._fits_empty[shape]:
            raise JobNeverFitsError(self._never_fits_message(job, mem))
        plan = job.planning_duration_s(self.oracle)
        self.jobs[jid] = job
        self.gpus[jid] = job.gpus
        self.mem[jid] = mem
        self.plan[jid] = _INF if plan is None else max(plan, 0.0)
        self.span[jid] = job.may_span_nodes
        key = (*self.policy.key(job, jid, self.oracle), jid)
        self._qkey[jid] = key
        self.queue.add(key)

    def schedule(self, now: float) -> list[Started]:
        """Start every job the policy and the backfill mode allow now; returns the decisions."""
        if not self.queue or (not self.state.sharing and self.state.idle_total == 0):
            return []  # nothing can start on a full exclusive cluster, whatever the mode
        return self.backfill.select(self, now)

    def finish(self, jid: int) -> None:
        """A running job ended: free its GPUs."""
        self.running.remove((self.expected_end.pop(jid), jid))
        self.state.release(self.alloc.pop(jid), self.mem[jid])
        self.start_s.pop(jid, None)
        for d in (self.gpus, self.mem, self.plan, self.span, self.jobs):
            del d[jid]

    def set_expected_end(self, jid: int, end_s: float) -> None:
        """Move a running job's expected end (its rate changed, or a better estimate came)."""
        old = self.expected_end[jid]
        if old != end_s:
            self.running.remove((old, jid))
            self.running.add((end_s, jid))
            self.expected_end[jid] = end_s

    @property
    def waiting(self) -> int:
        return len(self.queue)

    def waiting_jids(self) -> Iterator[int]:
        """Waiting jobs in policy order."""
        return (key[-1] for key in self.queue)

    # -- used by backfill modes ------------------------------------------------------------------
    def start(self, jid: int, gpus: list[int] | tuple[int, ...], now: float, started: list[Started]) -> None:
        """Book `jid` on `gpus` at `now` (the queue entry is removed by `drop_started`)."""
        gpus = tuple(gpus)
        self.state.place(gpus, self.mem[jid])
        self.alloc[jid] = gpus
        self.start_s[jid] = now
        end = now + self.plan[jid]
        self.expected_end[jid] = end
        self.running.add((end, jid))
        started.append(Started(jid, gpus))

    def drop_started(self, started: list[Started]) -> None:
        for s in started:
            self.queue.remove(self._qkey.pop(s.jid))

    def fits_key(self, jid: int) -> tuple[object, ...]:
        """Jobs with equal fits_key fit or fail alike on the same state."""
        mem = self.mem[jid]
        if not self.state.sharing and mem is not None and mem <= self.state.min_cap_gb:
            mem = None
        return (self.gpus[jid], mem, self.span[jid])

    def _never_fits_message(self, job: Job, mem: float | None) -> str:
        spec = self.spec
        mem_txt = "unknown memory" if mem is None else f"{mem:g} GB per GPU"
        span = "" if job.may_span_nodes else f" on one node (largest node: {spec.max_node_gpus} GPUs)"
        biggest = max(n.gpu.mem_gb for n in spec.nodes)
        fix = "Fix the job or use a larger --cluster"
        if not job.may_span_nodes and job.gpus <= spec.total_gpus and (mem is None or mem <= biggest):
            fix += ", or allow it to span nodes (may_span_nodes)"
        return (
            f"job {job.id!r} asks for {job.gpus} GPU(s) with {mem_txt}{span}; cluster {spec.name!r} has "
            f"{spec.total_gpus} GPUs of at most {biggest:g} GB: it can never start. {fix}"
        )

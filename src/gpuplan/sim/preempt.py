"""The simulator's loop for preemptive policies (las, tiresias, gittins) on exclusive clusters.

The same Scheduler and the same loop as every clock (core/clock.py's `EventClock`), driven through
`Scheduler.decide(now)`: at each instant finishes are handled first, then arrivals, then one pass whose
preemptions are carried out before its starts. The clock also stops where a job's level changes
(`Scheduler.next_event_s`). A preempted job keeps the work
its checkpoint saved (`PreemptionCost.kept_s`) and pays a restart overhead when it resumes; a job that
cannot checkpoint starts again from scratch. A driver of its own beside `engine._Run` so runs that never
preempt pay nothing for it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Final, cast

from gpuplan.core import preemption
from gpuplan.core.booking import booked_mem_gb
from gpuplan.core.clock import EventClock
from gpuplan.core.preemption import JobTerms, Preempted, PreemptionCost, kept_by_s
from gpuplan.core.preemptive import PreemptivePolicy
from gpuplan.core.scheduler import Scheduler
from gpuplan.core.view import Started
from gpuplan.errors import ScheduleError
from gpuplan.model import PREEMPT_MODES, Job
from gpuplan.sim.bounds import lower_bound
from gpuplan.sim.columns import RecordColumns
from gpuplan.sim.metrics import compute_metrics
from gpuplan.sim.result import EstimateUse, JobRecord, SimResult, Timeline
from gpuplan.sim.steps import Steps

__all__ = ["PreemptiveRun", "simulate_preemptive"]

_INF: Final = math.inf
_PREEMPT_EVENT: Final = {a: f"preempt:{a}" for a in PREEMPT_MODES}
"""The event's action of each preempt mode (made once, not at every preemption)."""


class PreemptiveRun(EventClock):
    """One preemptive simulation run (times in seconds from the first submit): the hooks of
    `EventClock` (core/clock.py) that carry out preemptions and record the run."""

    def __init__(
        self, jobs: Sequence[Job], sched: Scheduler, cost: PreemptionCost, progress: object = None
    ) -> None:
        if sched.state.sharing:
            raise ScheduleError(
                f"policy {sched.policy.name!r} preempts jobs: the simulator runs preemptive policies on "
                "exclusive clusters only; pass --exclusive (or a cluster without sharing)"
            )
        super().__init__(sched)
        self.jobs: list[Job] = list(jobs)  # indexed at every event (a list: no generic item call)
        self.state = sched.state
        self.cost = sched.preemption_cost = cost  # the pass leases each start by the same cost
        self.interval_s = cost.checkpoint_interval_s
        self.progress = progress
        self.t0 = min(j.submit_s for j in jobs)
        self.order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
        self.set_arrivals([jobs[i].submit_s - self.t0 for i in self.order], self.order)
        # per job (by trace index): solo seconds of work still to do; its segment's start and restart
        # overhead; its first start (inf: none yet)
        self.left = [float(j.duration_s or 0.0) for j in jobs]
        self.seg_start_s = [0.0] * len(jobs)
        self.seg_overhead_s = [0.0] * len(jobs)
        self.first_start_s = [_INF] * len(jobs)
        self.records: list[JobRecord] = []
        self.timeline = Timeline([(0.0, 0)])
        self.steps = Steps(self.timeline)
        self.idle_wait_gpu_s = 0.0
        self.last_pass_s = 0.0
        self.preemptions = 0
        self.wasted_gpu_s = 0.0
        self.terms = JobTerms(cost)  # each job's restart overhead, checkpointing, preempt mode
        self.ids = [j.id for j in jobs]  # (read at each event: an attribute of a Python class)
        self.in_place: set[int] = set()  # suspended in place (SIGSTOP): it resumes, it does not restart
        self.events: list[tuple[float, str, str]] = []
        """(time, action, job id) of every start, resume, preemption (`preempt:ACTION`) and finish, in
        the order carried out: what the local agent's store logs as events, for comparison."""

    def loop(self, start_s: float | None = None) -> None:
        """The clock from the first submit; its safety net is read at run time (a test may lower it)."""
        self.max_passes = preemption.MAX_PASSES_PER_JOB * (len(self.order) + 1)
        try:
            super().loop(start_s)
        finally:
            self.steps.flush()

    # -- the clock's hooks ---------------------------------------------------------------------------
    def on_arrival(self, jid: int, t: float) -> None:
        job = self.jobs[jid]
        self.sched.submit(jid, job, booked_mem_gb(job, self.sched.oracle), now=t)

    def after_pass(self, t: float, t_next: float) -> bool:
        state = self.state
        self.steps.note(t, state.busy_gpus)
        if t_next < _INF and self.sched.waiting_count:
            self.idle_wait_gpu_s += state.idle_total * (t_next - t)
        self.last_pass_s = t
        return False

    def drained(self, t: float) -> None:
        sched = self.sched
        if sched.waiting_count:
            ids = [self.jobs[j].id for j in itertools.islice(sched.waiting_jids(), 5)]
            raise ScheduleError(f"{sched.waiting_count} job(s) can never start (first: {ids})")

    def too_many_passes(self, t: float, passes: int) -> None:
        raise ScheduleError(self._endless(self.last_pass_s, passes))

    def _endless(self, now: float, passes: int) -> str:
        """The safety net's one-line error: jobs preempt each other without progress."""
        left = self.sched.waiting_count + self.sched.running_count
        return (
            f"policy {self.sched.policy.spec!r}: {passes} scheduler passes "
            f"({preemption.MAX_PASSES_PER_JOB} per job) and {left} job(s) still unfinished at "
            f"{now:.0f} s: jobs preempt each other without progress; make each level last more than "
            "half the restart overhead (quantum / GPUs > overhead / 2, docs/preemption.md)"
        )

    def on_start(self, st: Started, now: float) -> None:
        jid = st.jid
        resumed = self.first_start_s[jid] < _INF
        overhead = self.terms.of(jid, self.jobs[jid])[0] if resumed else 0.0
        if self.in_place and jid in self.in_place:
            self.in_place.discard(jid)
            self.events.append((now, "resume", self.ids[jid]))
        else:
            self.events.append((now, "start", self.ids[jid]))
        if not resumed:
            self.first_start_s[jid] = now
        self.seg_start_s[jid], self.seg_overhead_s[jid] = now, overhead
        self.expect_end(jid, now + overhead + self.left[jid])

    def on_preempt(self, p: Preempted, now: float) -> None:
        jid, job = p.jid, self.jobs[p.jid]
        self.cancel_end(jid)  # its finish event no longer holds
        seg = now - self.seg_start_s[jid]
        progress = max(seg - self.seg_overhead_s[jid], 0.0)
        _, checkpointable, mode = self.terms.of(jid, job)
        kept = kept_by_s(self.interval_s, checkpointable, mode, progress)
        self.events.append((now, _PREEMPT_EVENT.get(p.action) or f"preempt:{p.action}", self.ids[jid]))
        if p.action == "suspend":
            self.in_place.add(jid)
        self.left[jid] = self.left[jid] - kept if checkpointable else float(job.duration_s or 0.0)
        self.wasted_gpu_s += float(len(p.gpu_ids)) * (seg - kept)
        self.preemptions += 1

    def on_end(self, jid: int, now: float) -> None:
        job = self.jobs[jid]
        slot = self.sched.finish(jid, now)
        self.forget(jid)
        self.events.append((now, "finish", self.ids[jid]))
        self.wasted_gpu_s += float(len(slot.alloc)) * self.seg_overhead_s[jid]
        self.records.append(
            JobRecord(
                job.id,
                job.submit_s - self.t0,
                self.first_start_s[jid],
                now,
                slot.alloc,
                job.mem_gb,
                job.name,
                job.user,
            )
        )


def simulate_preemptive(
    jobs: Sequence[Job], sched: Scheduler, cost: PreemptionCost | None = None
) -> SimResult:
    """Run `jobs` under `sched`'s preemptive policy (see `engine.simulate`, which calls this)."""
    run = PreemptiveRun(jobs, sched, cost or PreemptionCost())
    run.loop()
    records, columns = RecordColumns.sorting(run.records)  # in start order, and their columns
    bound = lower_bound(jobs, sched.spec).value_s
    metrics = compute_metrics(columns, run.timeline, sched.spec.total_gpus, run.idle_wait_gpu_s, bound)
    metrics.preemptions = run.preemptions
    metrics.wasted_gpu_hours = run.wasted_gpu_s / 3600.0
    policy = cast(PreemptivePolicy, sched.policy)
    fallback = policy.fallback_jobs
    warnings = []
    if sched.backfill.plans_ahead:
        warnings.append(
            f"policy {policy.name!r} preempts and starts any job that fits in rank order: backfill mode "
            f"{sched.backfill.name!r} changes nothing (its runs are the {policy.name}+none run)"
        )
    learns = policy.learns  # gittins: a distribution of finished jobs' GPU-time
    uses = EstimateUse(
        source="history" if learns else "trace",
        needed=learns,
        without=fallback,
        fallback="ranked by attained GPU-service (LAS) until finished jobs gave a distribution"
        if fallback
        else "",
    )
    return SimResult(
        policy=policy.spec,
        backfill=sched.backfill.spec,
        placer=sched.placer.spec,
        oracle=sched.oracle,
        cluster=sched.spec,
        metrics=metrics,
        records=records,
        util_timeline=run.timeline,
        gpu_labels=[sched.state.gpu_label(g) for g in range(sched.state.total_gpus)],
        warnings=warnings,
        estimates=uses,
    ).keep_columns(columns)

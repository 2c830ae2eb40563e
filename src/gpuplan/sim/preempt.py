"""The simulator's loop for preemptive policies (las, tiresias, gittins) on exclusive clusters.

The same Scheduler as every run, driven through `Scheduler.decide(now)`: at each instant finishes are
handled first, then arrivals, then one pass whose preemptions are carried out before its starts. The
clock also stops where a job's level changes (`Scheduler.next_event_s`). A preempted job keeps the work
its checkpoint saved (`PreemptionCost.kept_s`) and pays a restart overhead when it resumes; a job that
cannot checkpoint starts again from scratch. Kept apart from `engine._Run` so runs that never preempt
pay nothing for it.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from typing import cast

from gpuplan.core import preemption
from gpuplan.core.booking import booked_mem_gb
from gpuplan.core.preemption import Preempted, PreemptionCost
from gpuplan.core.preemptive import PreemptivePolicy
from gpuplan.core.scheduler import Scheduler
from gpuplan.core.view import Started
from gpuplan.errors import ScheduleError
from gpuplan.model import Job
from gpuplan.sim.bounds import lower_bound
from gpuplan.sim.metrics import compute_metrics
from gpuplan.sim.result import EstimateUse, JobRecord, SimResult

__all__ = ["PreemptiveRun", "simulate_preemptive"]

_INF = math.inf


class PreemptiveRun:
    """State of one preemptive simulation run (times in seconds from the first submit)."""

    def __init__(
        self, jobs: Sequence[Job], sched: Scheduler, cost: PreemptionCost, progress: object = None
    ) -> None:
        if sched.state.sharing:
            raise ScheduleError(
                f"policy {sched.policy.name!r} preempts jobs: the simulator runs preemptive policies on "
                "exclusive clusters only; pass --exclusive (or a cluster without sharing)"
            )
        self.jobs = jobs
        self.sched = sched
        self.cost = sched.preemption_cost = cost  # the pass leases each start by the same cost
        self.progress = progress
        self.t0 = min(j.submit_s for j in jobs)
        self.order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
        self.left = [float(j.duration_s or 0.0) for j in jobs]  # solo seconds of work still to do
        self.heap: list[tuple[float, int, int, int]] = []  # (time, seq, jid, version)
        self.seq = itertools.count()
        self.version = [0] * len(jobs)
        self.seg_start: dict[int, float] = {}
        self.seg_overhead: dict[int, float] = {}
        self.first_start: dict[int, float] = {}
        self.records: list[JobRecord] = []
        self.timeline: list[tuple[float, int]] = [(0.0, 0)]
        self.idle_wait_gpu_s = 0.0
        self.preemptions = 0
        self.wasted_gpu_s = 0.0
        self.in_place: set[int] = set()  # suspended in place (SIGSTOP): it resumes, it does not restart
        self.events: list[tuple[float, str, str]] = []
        """(time, action, job id) of every start, resume, preemption (`preempt:ACTION`) and finish, in
        the order carried out: what the local agent's store logs as events, for comparison."""

    def loop(self) -> None:
        jobs, order, heap, sched, state = self.jobs, self.order, self.heap, self.sched, self.sched.state
        n, ai, now = len(order), 0, 0.0
        arrivals = [jobs[i].submit_s - self.t0 for i in order] + [_INF]
        most_passes = preemption.MAX_PASSES_PER_JOB * (n + 1)  # read at run time: a test may lower it
        for passes in itertools.count():
            if not (ai < n or heap or sched.waiting_count):
                break
            if passes >= most_passes:
                raise ScheduleError(self._endless(now, passes))
            t_next = min(arrivals[ai], heap[0][0] if heap else _INF, sched.next_event_s())
            if sched.waiting_count:
                self.idle_wait_gpu_s += state.idle_total * (t_next - now)
            now = t_next
            while heap and heap[0][0] <= now:
                _, _, jid, ver = heapq.heappop(heap)
                if self.version[jid] == ver:
                    self._finish(jid, now)
            while arrivals[ai] <= now:
                job = jobs[order[ai]]
                sched.submit(order[ai], job, booked_mem_gb(job, sched.oracle), now=now)
                ai += 1
            decided = sched.decide(now)
            for p in decided.preempted:
                self._suspend(p, now)
            for st in decided.started:
                self._start(st, now)
            if state.busy_gpus != self.timeline[-1][1]:
                self.timeline.append((now, state.busy_gpus))
            if not heap and ai >= n and sched.waiting_count and sched.next_event_s() == _INF:
                ids = [jobs[j].id for j in itertools.islice(sched.waiting_jids(), 5)]
                raise ScheduleError(f"{sched.waiting_count} job(s) can never start (first: {ids})")

    def _endless(self, now: float, passes: int) -> str:
        """The safety net's one-line error: jobs preempt each other without progress."""
        left = self.sched.waiting_count + self.sched.running_count
        return (
            f"policy {self.sched.policy.spec!r}: {passes} scheduler passes "
            f"({preemption.MAX_PASSES_PER_JOB} per job) and {left} job(s) still unfinished at "
            f"{now:.0f} s: jobs preempt each other without progress; make each level last more than "
            "half the restart overhead (quantum / GPUs > overhead / 2, docs/preemption.md)"
        )

    def _start(self, st: Started, now: float) -> None:
        jid, job = st.jid, self.jobs[st.jid]
        resumed = jid in self.first_start
        overhead = self.cost.overhead_s(job) if resumed else 0.0
        self.events.append((now, "resume" if jid in self.in_place else "start", job.id))
        self.in_place.discard(jid)
        self.first_start.setdefault(jid, now)
        self.seg_start[jid], self.seg_overhead[jid] = now, overhead
        heapq.heappush(self.heap, (now + overhead + self.left[jid], next(self.seq), jid, self.version[jid]))

    def _suspend(self, p: Preempted, now: float) -> None:
        jid, job = p.jid, self.jobs[p.jid]
        self.version[jid] += 1  # its finish event no longer holds
        seg = now - self.seg_start.pop(jid)
        progress = max(seg - self.seg_overhead.pop(jid), 0.0)
        kept = self.cost.kept_s(job, progress)
        self.events.append((now, f"preempt:{p.action}", job.id))
        if p.action == "suspend":
            self.in_place.add(jid)
        self.left[jid] = self.left[jid] - kept if job.checkpointable else float(job.duration_s or 0.0)
        self.wasted_gpu_s += len(p.gpu_ids) * (seg - kept)
        self.preemptions += 1

    def _finish(self, jid: int, now: float) -> None:
        job = self.jobs[jid]
        slot = self.sched.finish(jid, now)
        self.events.append((now, "finish", job.id))
        self.seg_start.pop(jid)
        self.wasted_gpu_s += len(slot.alloc) * self.seg_overhead.pop(jid)
        self.records.append(
            JobRecord(
                job.id,
                job.submit_s - self.t0,
                self.first_start.pop(jid),
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
    records = sorted(run.records, key=lambda r: (r.start_s, r.job_id))
    bound = lower_bound(jobs, sched.spec).value_s
    metrics = compute_metrics(records, run.timeline, sched.spec.total_gpus, run.idle_wait_gpu_s, bound)
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
    )

"""The discrete-event simulator: the scheduling core driven by a virtual clock.

No fixed time step: the clock jumps from event to event (arrivals and finishes). At every instant the
finishes are handled first, then the arrivals, then one scheduling pass starts every job the policy
allows. With GPU sharing, a job's progress rate comes from the interference model and its finish time
moves whenever a neighbour starts or ends on one of its GPUs.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from gpuplan.core.backfill import Backfill
from gpuplan.core.placement import Placer
from gpuplan.core.policies import Policy
from gpuplan.core.scheduler import Scheduler, Started
from gpuplan.errors import ScheduleError
from gpuplan.model import ClusterSpec, Job
from gpuplan.sim.bounds import lower_bound
from gpuplan.sim.metrics import compute_metrics
from gpuplan.sim.result import JobRecord, SimResult

if TYPE_CHECKING:
    from gpuplan.core.interference import InterferenceModel

__all__ = ["ProgressFn", "require_durations", "simulate"]

ProgressFn = Callable[[int, int], None]  # (jobs finished, jobs in all)
_INF = math.inf


def simulate(
    jobs: Sequence[Job],
    cluster: ClusterSpec,
    policy: Policy | str = "fifo",
    backfill: Backfill | str = "easy",
    placer: Placer | str = "first-fit",
    *,
    oracle: bool = False,
    interference: InterferenceModel | None = None,
    progress: ProgressFn | None = None,
) -> SimResult:
    """Run `jobs` on `cluster` under one policy, backfill mode and placer.

    Times in the result are seconds from the first submit.

    Raises:
        ScheduleError: a job has no true duration (the simulator needs one), or never fits.
    """
    require_durations(jobs)
    sched = Scheduler(cluster, policy, backfill, placer, oracle=oracle)
    if interference is None and cluster.sharing:
        from gpuplan.core.interference import InterferenceModel

        interference = InterferenceModel.default()
    run = _Run(jobs, sched, interference, progress)
    run.loop()
    records = sorted(run.records, key=lambda r: (r.start_s, r.job_id))
    bound = lower_bound(jobs, cluster)
    metrics = compute_metrics(records, run.timeline, cluster.total_gpus, run.idle_wait_gpu_s, bound.value_s)
    return SimResult(
        policy=sched.policy.name,
        backfill=sched.backfill.name,
        placer=sched.placer.name,
        oracle=oracle,
        cluster=cluster,
        metrics=metrics,
        records=records,
        util_timeline=run.timeline,
        gpu_labels=[sched.state.gpu_label(g) for g in range(sched.state.total_gpus)],
        warnings=_warnings(jobs, sched, oracle),
    )


def require_durations(
    jobs: Sequence[Job], what: str = "simulate", fix: str = "drop unfinished jobs or fill duration_s"
) -> None:
    """Every job must have a true duration (what the simulator and exact models replay).

    Raises:
        ScheduleError: no jobs, or a job without duration_s (the message names the first and the fix).
    """
    if not jobs:
        raise ScheduleError(f"no jobs to {what}: the trace is empty")
    missing = [j.id for j in jobs if j.duration_s is None or j.duration_s < 0]
    if missing:
        raise ScheduleError(
            f"{len(missing)} job(s) have no true duration (first: {missing[0]!r}); to {what} needs "
            f"duration_s for every job: {fix}"
        )


def _warnings(jobs: Sequence[Job], sched: Scheduler, oracle: bool) -> list[str]:
    out = []
    if not oracle and (sched.policy.needs_duration or sched.backfill.name != "none"):
        unknown = sum(1 for j in jobs if j.planning_duration_s(False) is None)
        if unknown:
            out.append(
                f"{unknown} of {len(jobs)} jobs have neither est_duration_s nor requested_s: "
                "they plan as endless (never backfilled); fill est_duration_s or use --oracle"
            )
    return out


def _booked_mem(job: Job, oracle: bool) -> float | None:
    """Memory the simulator books for a job: its estimate, or its true use when that is larger.

    A job whose estimate is too low still takes its real memory (in life it would run out of memory
    on a full GPU and be restarted; the simulator does not model that restart, it books what the job
    really takes, so no schedule it makes is physically impossible)."""
    est, true = job.planning_mem_gb(oracle), job.mem_gb
    if est is None or true is None:
        return est
    return max(est, true)


class _Run:
    """State of one simulation run (kept out of `simulate` so each step is a small method)."""

    def __init__(
        self,
        jobs: Sequence[Job],
        sched: Scheduler,
        model: InterferenceModel | None,
        progress: ProgressFn | None,
    ) -> None:
        self.jobs = jobs
        self.sched = sched
        self.model = model
        self.progress = progress
        self.t0 = min(j.submit_s for j in jobs)
        self.order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
        self.heap: list[tuple[float, int, int, int]] = []  # (time, seq, jid, version)
        self.seq = itertools.count()
        self.records: list[JobRecord] = []
        self.timeline: list[tuple[float, int]] = [(0.0, 0)]
        self.idle_wait_gpu_s = 0.0
        self.done = 0
        self.sharing = sched.state.sharing
        # sharing only: progress bookkeeping per running job
        self.gpu_jobs: list[set[int]] = [set() for _ in sched.state.gpu_node]
        self.rate: dict[int, float] = {}
        self.work_left: dict[int, float] = {}
        self.last_t: dict[int, float] = {}
        self.version: dict[int, int] = {}
        self.start_t: dict[int, float] = {}

    def loop(self) -> None:
        jobs, order, heap, sched, state = self.jobs, self.order, self.heap, self.sched, self.sched.state
        n, ai, now = len(jobs), 0, 0.0
        arrivals = [jobs[i].submit_s - self.t0 for i in order] + [_INF]
        version, heappop, timeline = self.version, heapq.heappop, self.timeline
        while ai < n or heap:
            t_next = min(arrivals[ai], heap[0][0] if heap else _INF)
            if sched.queue:
                self.idle_wait_gpu_s += state.idle_total * (t_next - now)
            now = t_next
            while heap and heap[0][0] <= now:
                _, _, jid, ver = heappop(heap)
                if not self.sharing or version.get(jid, 0) == ver:
                    self._finish(jid, now)
            while arrivals[ai] <= now:
                job = jobs[order[ai]]
                sched.submit(order[ai], job, book_mem_gb=_booked_mem(job, sched.oracle))
                ai += 1
            for st in sched.schedule(now):
                self._start(st, now)
            busy = len(state.gpu_node) - state.idle_total
            if busy != timeline[-1][1]:
                timeline.append((now, busy))
            if not heap and ai >= n and sched.queue:
                raise ScheduleError(self._stuck_message())

    def _start(self, st: Started, now: float) -> None:
        jid = st.jid
        dur = self.jobs[jid].duration_s or 0.0
        self.start_t[jid] = now
        if not self.sharing:
            heapq.heappush(self.heap, (now + dur, next(self.seq), jid, 0))
            return
        self.work_left[jid], self.last_t[jid], self.rate[jid], self.version[jid] = dur, now, 1.0, 0
        for g in st.gpus:
            self.gpu_jobs[g].add(jid)
        self._rerate(self._neighbours(st.gpus), now, force=jid)

    def _finish(self, jid: int, now: float) -> None:
        job = self.jobs[jid]
        gpus = self.sched.alloc[jid]
        self.records.append(
            JobRecord(job.id, job.submit_s - self.t0, self.start_t.pop(jid), now, gpus, job.mem_gb, job.name)
        )
        self.sched.finish(jid)
        self.done += 1
        if self.progress is not None and self.done % 2000 == 0:
            self.progress(self.done, len(self.jobs))
        if self.sharing:
            for g in gpus:
                self.gpu_jobs[g].discard(jid)
            for d in (self.rate, self.work_left, self.last_t, self.version):
                del d[jid]
            self._rerate(self._neighbours(gpus), now)

    def _neighbours(self, gpus: tuple[int, ...]) -> set[int]:
        out: set[int] = set()
        for g in gpus:
            out |= self.gpu_jobs[g]
        return out

    def _rerate(self, affected: set[int], now: float, force: int = -1) -> None:
        """New progress rates for jobs whose GPU neighbours changed; move their finish events."""
        for a in sorted(affected):
            self.work_left[a] -= (now - self.last_t[a]) * self.rate[a]
            self.last_t[a] = now
            new = self._rate_of(a)
            if new == self.rate[a] and a != force:
                continue
            self.rate[a] = new
            self.version[a] += 1
            left = max(self.work_left[a], 0.0)
            heapq.heappush(self.heap, (now + left / new, next(self.seq), a, self.version[a]))
            plan = self.sched.plan[a]
            if plan < _INF:
                done = (self.jobs[a].duration_s or 0.0) - left
                self.sched.set_expected_end(a, now + max(plan - done, 0.0) / new)

    def _rate_of(self, jid: int) -> float:
        assert self.model is not None  # sharing runs always have a model
        if self.jobs[jid].duration_includes_sharing:
            return 1.0  # its recorded duration already holds the slowdown it had: never slow it twice
        util = self._util(jid)
        rate = 1.0
        for g in self.sched.alloc[jid]:
            others = [self._util(b) for b in self.gpu_jobs[g] if b != jid]
            if others:
                rate = min(rate, self.model.rate(util, others))
        return rate

    def _util(self, jid: int) -> float:
        u = self.jobs[jid].gpu_util_pct
        if u is not None:
            return u
        return self.model.DEFAULT_UTIL_PCT if self.model is not None else 100.0

    def _stuck_message(self) -> str:
        ids = [self.jobs[j].id for j in itertools.islice(self.sched.waiting_jids(), 5)]
        return f"{self.sched.waiting} job(s) can never start (first: {ids}); nothing runs and nothing arrives"

"""The discrete-event simulator: the scheduling core driven by a virtual clock.

No fixed time step: the clock jumps from event to event (arrivals and finishes). At every instant the
finishes are handled first, then the arrivals, then one scheduling pass starts every job the policy
allows. With GPU sharing, a job runs through three phases (start-up, init, GPU work: `Job.startup_s`,
`Job.init_s`, the rest of its duration); its progress rate in each comes from the interference model, and
its phase ends move whenever a neighbour starts, reaches its GPU phase or ends on one of its GPUs.
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
_GPU_PHASE = 2  # phases of a sharing job: 0 start-up, 1 init, 2 GPU work


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
        self.phases_left: dict[int, list[float]] = {}  # solo seconds left of [start-up, init, GPU work]
        self.phase: dict[int, int] = {}  # index of the current phase in phases_left
        self.gpu_util: dict[int, float] = {}  # busy % during the GPU phase
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
                if not self.sharing:
                    self._finish(jid, now)
                elif version.get(jid, -1) == ver:
                    self._phase_end(jid, now)
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
        job = self.jobs[jid]
        gpu_s = job.gpu_phase_s() or 0.0
        self.phases_left[jid] = [min(job.startup_s or 0.0, dur), min(job.init_s or 0.0, dur), gpu_s]
        self.phase[jid] = self._next_phase(jid, 0)
        self.gpu_util[jid] = _gpu_phase_util(self._util(jid), dur, gpu_s)
        self.last_t[jid], self.rate[jid], self.version[jid] = now, 1.0, 0
        for g in st.gpus:
            self.gpu_jobs[g].add(jid)
        self._rerate(self._neighbours(st.gpus), now, force=jid)

    def _next_phase(self, jid: int, first: int) -> int:
        """The first phase from `first` on with work left (the GPU phase when none has)."""
        left = self.phases_left[jid]
        return next((k for k in range(first, _GPU_PHASE) if left[k] > 0.0), _GPU_PHASE)

    def _phase_end(self, jid: int, now: float) -> None:
        """A sharing job's current phase is done: finish it, or move it on and rerate its GPUs' jobs."""
        phase = self.phase[jid]
        if phase == _GPU_PHASE:
            self._finish(jid, now)
            return
        self.phases_left[jid][phase] = 0.0
        self.last_t[jid] = now
        self.phase[jid] = self._next_phase(jid, phase + 1)
        self._rerate(self._neighbours(self.sched.alloc[jid]), now, force=jid)

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
            del self.rate[jid], self.phases_left[jid], self.phase[jid], self.gpu_util[jid]
            del self.last_t[jid], self.version[jid]
            self._rerate(self._neighbours(gpus), now)

    def _neighbours(self, gpus: tuple[int, ...]) -> set[int]:
        out: set[int] = set()
        for g in gpus:
            out |= self.gpu_jobs[g]
        return out

    def _rerate(self, affected: set[int], now: float, force: int = -1) -> None:
        """New progress rates for jobs whose GPU neighbours changed; move their phase-end events."""
        for a in sorted(affected):
            left = self.phases_left[a]
            phase = self.phase[a]
            left[phase] = max(left[phase] - (now - self.last_t[a]) * self.rate[a], 0.0)
            self.last_t[a] = now
            new = self._rate_of(a)
            if new == self.rate[a] and a != force:
                continue
            self.rate[a] = new
            self.version[a] += 1
            heapq.heappush(self.heap, (now + left[phase] / new, next(self.seq), a, self.version[a]))
            plan = self.sched.plan[a]
            if plan < _INF:
                done = (self.jobs[a].duration_s or 0.0) - sum(left)
                self.sched.set_expected_end(a, now + max(plan - done, 0.0) / new)

    def _rate_of(self, jid: int) -> float:
        """Progress rate of a running job in its current phase (start-up 1, init and GPU per the model)."""
        model = self.model
        assert model is not None  # sharing runs always have a model
        phase = self.phase[jid]
        if self.jobs[jid].duration_includes_sharing or phase == 0:
            return 1.0  # start-up is CPU work; a recorded shared duration is never slowed twice
        gpus = self.sched.alloc[jid]
        if phase == 1:
            return model.init_rate(any(len(self.gpu_jobs[g]) > 1 for g in gpus))
        util, rate = self.gpu_util[jid], 1.0
        for g in gpus:
            others = [self.gpu_util[b] for b in self.gpu_jobs[g] if b != jid and self.phase[b] == _GPU_PHASE]
            if others:
                rate = min(rate, model.rate(util, others))
        return rate

    def _util(self, jid: int) -> float:
        u = self.jobs[jid].gpu_util_pct
        if u is not None:
            return u
        return self.model.DEFAULT_UTIL_PCT if self.model is not None else 100.0

    def _stuck_message(self) -> str:
        ids = [self.jobs[j].id for j in itertools.islice(self.sched.waiting_jids(), 5)]
        return f"{self.sched.waiting} job(s) can never start (first: {ids}); nothing runs and nothing arrives"


def _gpu_phase_util(util_pct: float, duration_s: float, gpu_s: float) -> float:
    """Busy % during the GPU phase from the whole-job mean: the start-up and init phases leave the GPU idle,
    so the same busy seconds fall in the GPU phase (at most 100)."""
    if gpu_s <= 0.0 or gpu_s >= duration_s or util_pct != util_pct:
        return util_pct
    return min(100.0, util_pct * duration_s / gpu_s)

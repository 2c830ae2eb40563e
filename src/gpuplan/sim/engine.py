"""The discrete-event simulator: the scheduling core driven by a virtual clock.

No fixed time step: the clock jumps from event to event (arrivals and finishes) on the loop every clock
runs (core/clock.py's `EventClock`; `_Run` and `_SharedRun` are its hooks). At every instant the
finishes are handled first, then the arrivals, then one scheduling pass starts every job the policy
allows. With GPU sharing (`_SharedRun`), a job runs through three phases (start-up, init, GPU work:
`Job.startup_s`, `Job.init_s`, the rest of its duration); its progress rate in each comes from the
interference model, and its phase ends move whenever a neighbour starts, reaches its GPU phase or ends
on one of its GPUs.
"""

from __future__ import annotations

import gc
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

from gpuplan.core.backfill import Backfill
from gpuplan.core.booking import booked_mem_gb
from gpuplan.core.clock import EventClock
from gpuplan.core.placement import Placer
from gpuplan.core.policies import Policy, get_policy
from gpuplan.core.scheduler import Scheduler
from gpuplan.core.view import Started
from gpuplan.errors import ScheduleError
from gpuplan.model import ClusterSpec, Job
from gpuplan.sim.bounds import lower_bound
from gpuplan.sim.columns import RecordColumns
from gpuplan.sim.metrics import compute_metrics
from gpuplan.sim.result import EstimateUse, JobRecord, SimResult, Timeline
from gpuplan.sim.steps import Steps

if TYPE_CHECKING:
    from gpuplan.core.estimates import OnlineEstimator
    from gpuplan.core.interference import InterferenceModel
    from gpuplan.core.preemption import PreemptionCost

__all__ = [
    "ProgressFn",
    "RunningJob",
    "as_policy",
    "estimate_use",
    "queue_order",
    "require_durations",
    "simulate",
]

ProgressFn = Callable[[int, int], None]  # (jobs finished, jobs in all)
_INF: Final = math.inf
_GPU_PHASE: Final = 2  # phases of a sharing job: 0 start-up, 1 init, 2 GPU work


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
    running: Sequence[RunningJob] = (),
    now_s: float | None = None,
    lower_bound_s: float | None = None,
    preemption: PreemptionCost | None = None,
    estimator: OnlineEstimator | None = None,
) -> SimResult:
    """Run `jobs` on `cluster` under one policy, backfill mode and placer.

    Times in the result are seconds from the first submit. From a live state (`now_s` given, e.g. a
    restarted agent or `gpuplan slurm plan`), the run starts at `now_s` with the `running` jobs on their
    GPUs, `jobs` are the waiting ones (those submitted before `now_s` are queued at once), and times in
    the result are seconds from `now_s` (submits and starts in the past are negative).
    `lower_bound_s`: the jobs' lower bound when the caller already has it (`run_matrix` computes it
    once for all its runs); computed here otherwise.

    Preemptive policies (las, tiresias, gittins) run on `sim.preempt` with the `preemption` cost
    model (default `PreemptionCost()`). With an `estimator` (core/estimates.py), each job's estimate is
    learned at its submit from the jobs finished so far in this run (its own estimate is replaced).

    Raises:
        ScheduleError: a job has no true duration (the simulator needs one), or never fits;
            running jobs without `now_s`; a preemptive policy on a sharing cluster.
    """
    if running and now_s is None:
        raise ScheduleError("running jobs need now_s: the time the live state was taken")
    if jobs or not running:
        require_durations(jobs)
    sched = Scheduler(cluster, policy, backfill, placer, oracle=oracle)
    if sched.policy.preemptive:
        if running:
            raise ScheduleError(
                f"policy {sched.policy.name!r}: a live state cannot be simulated preemptively yet"
            )
        from gpuplan.sim.preempt import simulate_preemptive

        with (
            _no_cyclic_gc()
        ):  # as below: a preemptive run allocates its records at every start and preemption
            return simulate_preemptive(jobs, sched, preemption)
    if interference is None and cluster.sharing:
        from gpuplan.core.interference import InterferenceModel

        interference = InterferenceModel.default()
    make = _SharedRun if sched.state.sharing else _Run
    with _no_cyclic_gc():  # from the run's set-up on: its lists of every job would be scanned too
        run = make(
            [*jobs, *(r.job for r in running)], sched, interference, progress, waiting=len(jobs), t0=now_s
        )
        run.estimator = estimator
        run.adopt(running)
        run.loop()
    records, columns = RecordColumns.sorting(run.records)  # in start order, and their columns
    if now_s is None:
        bound_s = lower_bound(jobs, cluster).value_s if lower_bound_s is None else lower_bound_s
    else:
        bound_s = _live_bound(jobs, running, cluster, now_s)
    metrics = compute_metrics(columns, run.timeline, cluster.total_gpus, run.idle_wait_gpu_s, bound_s)
    unknown = _without_estimate(jobs, sched, oracle)  # once for the warnings and the estimate use
    result = SimResult(
        policy=sched.policy.spec,
        backfill=sched.backfill.spec,
        placer=sched.placer.spec,
        oracle=oracle,
        cluster=cluster,
        metrics=metrics,
        records=records,
        util_timeline=run.timeline,
        gpu_labels=[sched.state.gpu_label(g) for g in range(sched.state.total_gpus)],
        warnings=_warnings(jobs, sched, oracle, unknown) if estimator is None else [],
        estimates=estimate_use(jobs, sched, oracle, run.by_level if estimator is not None else None, unknown),
    )
    return result.keep_columns(columns)


def queue_order(jobs: Sequence[Job], policy: str, oracle: bool) -> bytes:
    """The queue order a policy's static keys give the jobs (their indices, packed). The simulator keeps
    waiting jobs sorted by (key, index), so two policies with one order make the same schedule
    (without an online estimator, which changes keys as jobs finish)."""
    p = get_policy(policy)
    keys = [(*p.key(j, i, oracle), i) for i, j in enumerate(jobs)]
    ranked = sorted(range(len(jobs)), key=keys.__getitem__)
    return b"".join(i.to_bytes(4, "little") for i in ranked)


def as_policy(result: SimResult, jobs: Sequence[Job], policy: str, oracle: bool) -> SimResult:
    """`result` (a run whose policy orders `jobs` as `policy` does, see `queue_order`) under the name
    of `policy`, with that policy's own warnings and estimate use: the same schedule, not re-simulated."""
    sched = Scheduler(result.cluster, policy, result.backfill, result.placer, oracle=oracle)
    return replace(
        result,
        policy=sched.policy.spec,
        warnings=_warnings(jobs, sched, oracle),
        estimates=estimate_use(jobs, sched, oracle, None),
    ).keep_columns(result.record_columns())  # the same records: their columns too


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """The cyclic garbage collector off for a run. A run makes no reference cycles, but it allocates
    containers at every scheduling pass (conservative backfill's per-GPU plans), and each collection
    scans the whole heap of jobs and records: most of a conservative Alibaba replay was collections."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


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


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job already running when a simulation from a live state starts.

    Attributes:
        job: the job (its estimate plans the scheduler's expectations, as for waiting jobs).
        gpu_ids: the global GPU indices it holds.
        start_s: when it started, on the same clock as `now_s` and the waiting jobs' submit_s.
        remaining_s: how long it really runs on from `now_s` (what the simulator replays; sharing runs
            take the time before now_s as its first phases, start-up and init first).
        expected_end_s: when the scheduler expects it to end; default start_s + its planned duration.
    """

    job: Job
    gpu_ids: tuple[int, ...]
    start_s: float
    remaining_s: float
    expected_end_s: float | None = None


def _live_bound(
    jobs: Sequence[Job], running: Sequence[RunningJob], cluster: ClusterSpec, now_s: float
) -> float:
    """A lower bound from a live state, seconds from now_s: nothing starts before now, and each running
    job still has its remaining time to run (a relaxation that forgets where it runs)."""
    rest = [replace(j, submit_s=max(j.submit_s, now_s)) for j in jobs]
    rest += [replace(r.job, submit_s=now_s, duration_s=max(r.remaining_s, 0.0)) for r in running]
    if not rest:
        return 0.0
    return lower_bound(rest, cluster).value_s + min(j.submit_s for j in rest) - now_s


def estimate_use(
    jobs: Sequence[Job],
    sched: Scheduler,
    oracle: bool,
    by_level: dict[str, int] | None = None,
    unknown: int | None = None,
) -> EstimateUse:
    """Where the run's estimates came from and what the policy and backfill did for jobs without one.

    `by_level`: jobs per level of an online estimator ("none": no estimate); None: the trace's own.
    `unknown`: `_without_estimate(jobs, sched, oracle)` when the caller has it (counted here otherwise)."""
    needed = sched.policy.needs_duration or sched.backfill.plans_ahead
    if oracle:
        return EstimateUse("oracle", needed)
    if by_level is None:
        without = _without_estimate(jobs, sched, oracle) if unknown is None else unknown
    else:
        without = by_level.get("none", 0) if needed else 0
    parts = []
    if without and sched.policy.needs_duration:
        parts.append(
            f"policy {sched.policy.name} ranks them as endless, after every job with an estimate (first come, first served among themselves)"
        )
    if without and sched.backfill.plans_ahead:
        parts.append(f"{sched.backfill.name} backfill plans them as endless: they are never backfilled")
    return EstimateUse(
        "trace" if by_level is None else "history", needed, without, "; ".join(parts), dict(by_level or {})
    )


def _without_estimate(jobs: Sequence[Job], sched: Scheduler, oracle: bool) -> int:
    """How many jobs have no duration to plan with, when the run needs estimates (else 0)."""
    if oracle or not (sched.policy.needs_duration or sched.backfill.plans_ahead):
        return 0
    return sum(1 for j in jobs if j.planning_duration_s(False) is None)


def _warnings(jobs: Sequence[Job], sched: Scheduler, oracle: bool, unknown: int | None = None) -> list[str]:
    out = []
    if not oracle and (sched.policy.needs_duration or sched.backfill.plans_ahead):
        if unknown is None:
            unknown = _without_estimate(jobs, sched, oracle)
        if unknown:
            out.append(
                f"{unknown} of {len(jobs)} jobs have neither est_duration_s nor requested_s: "
                "they plan as endless: one starts ahead of a blocked job only on GPUs no reservation ever "
                "needs, and while one runs, a blocked job that needs its GPUs gets no reservation and the "
                "jobs behind it wait as under backfill none; fill est_duration_s or use --oracle"
            )
    return out


class _Run(EventClock):
    """One simulation run on whole GPUs: the hooks of `EventClock` (core/clock.py) that replay each
    job's true duration and record the run (`_SharedRun` adds GPU sharing).

    Under 30 attributes: beyond that CPython's instances lose their shared keys and every attribute
    read in the hooks gets slower."""

    def __init__(
        self,
        jobs: Sequence[Job],
        sched: Scheduler,
        model: InterferenceModel | None,
        progress: ProgressFn | None,
        waiting: int | None = None,
        t0: float | None = None,
    ) -> None:
        super().__init__(sched)
        self.jobs = jobs
        self.state = sched.state
        self.oracle = sched.oracle
        self.model = model
        self.progress = progress
        n = len(jobs) if waiting is None else waiting  # jobs[n:] are running when the run starts
        submits = [j.submit_s for j in jobs[:n]]
        self.t0 = min(submits) if t0 is None else t0
        # by submit, ties in trace order: a stable sort on the submit times alone is the (submit_s, i)
        # order without a key tuple and a call per job
        self.order = sorted(range(n), key=submits.__getitem__)
        self.set_arrivals([max(submits[i] - self.t0, 0.0) for i in self.order], self.order)
        self.work = [float(j.duration_s or 0.0) for j in jobs]  # solo seconds of each job in all
        self.records: list[JobRecord] = []
        self.timeline = Timeline([(0.0, 0)])
        self.steps = Steps(self.timeline)
        self.idle_wait_gpu_s = 0.0
        self.gpu_count = len(sched.state.gpu_node)
        self.done = 0
        # MIG: each GPU's share of a whole GPU's compute (None when every GPU is whole)
        fractions = [node.gpu.compute_fraction for node in sched.state.spec.nodes for _ in range(node.gpus)]
        self.fraction: list[float] | None = fractions if min(fractions) < 1.0 else None
        self.start_t: dict[int, float] = {}
        self.estimator: OnlineEstimator | None = None
        self.by_level: dict[str, int] = {}  # with an estimator: jobs per level their estimate came from
        # each distinct GPU set once: a million records would otherwise hold a million small tuples
        # (and their ints above 256), about 60 MB of a 1M-job run's peak
        self.allocs: dict[tuple[int, ...], tuple[int, ...]] = {}

    def adopt(self, running: Sequence[RunningJob]) -> None:
        """Seed the jobs already running at time 0 of a live run (their jids follow the waiting jobs')."""
        base = len(self.order)
        for k, r in enumerate(running):
            jid, start = base + k, r.start_s - self.t0
            expected = None if r.expected_end_s is None else r.expected_end_s - self.t0
            slot = self.sched.adopt(
                jid, r.job, r.gpu_ids, start, expected, booked_mem_gb(r.job, self.sched.oracle)
            )
            left, elapsed = max(r.remaining_s, 0.0), max(-start, 0.0)
            self.work[jid] = elapsed + left
            self.start_t[jid] = start
            self._seed(jid, slot.alloc, elapsed, left)
        self.timeline[0] = (0.0, self.sched.state.busy_gpus)
        self.steps.last = self.sched.state.busy_gpus

    def _seed(self, jid: int, gpus: tuple[int, ...], elapsed: float, left: float) -> None:
        """A job running when the run starts, `elapsed` seconds into its work, with `left` to go."""
        self.push_end(jid, left)

    # -- the clock's hooks ---------------------------------------------------------------------------
    def on_arrival(self, jid: int, t: float) -> None:
        job = self.jobs[jid]
        if self.estimator is not None:
            job = self._estimated(job)
        self.sched.submit(jid, job, book_mem_gb=booked_mem_gb(job, self.oracle))

    def after_pass(self, t: float, t_next: float) -> bool:
        idle = self.state.idle_total
        self.steps.note(t, self.gpu_count - idle)
        if self.sched.waiting_count and t_next < _INF:
            self.idle_wait_gpu_s += idle * (t_next - t)
        return False

    def drained(self, t: float) -> None:
        if self.sched.waiting_count:
            raise ScheduleError(self._stuck_message())

    def loop(self, start_s: float | None = None) -> None:
        """`EventClock.loop`; the utilisation steps gathered on the way are in `timeline` when it returns."""
        try:
            super().loop(start_s)
        finally:
            self.steps.flush()

    def on_start(self, st: Started, now: float) -> None:
        jid = st.jid
        self.start_t[jid] = now
        self.push_end(jid, now + self.work[jid] + self._slice_extra_s(jid, st.gpu_ids))

    def _slice_extra_s(self, jid: int, gpus: tuple[int, ...]) -> float:
        """Extra seconds the job's GPU phase takes on these GPUs: 0 on whole GPUs; on MIG slices its GPU
        phase is `slice_slowdown` times longer. A duration recorded while sharing is not exempt: a slice
        has fewer SMs, not neighbours."""
        if self.fraction is None:
            return 0.0
        from gpuplan.core.mig import slice_slowdown

        job, dur = self.jobs[jid], self.work[jid]
        gpu_s = max(0.0, dur - (job.startup_s or 0.0) - (job.init_s or 0.0))
        util = _gpu_phase_util(self._util(jid), dur, gpu_s)
        return gpu_s * (max(slice_slowdown(util, self.fraction[g]) for g in gpus) - 1.0)

    def _estimated(self, job: Job) -> Job:
        """The job with the estimate learned from the jobs finished so far (none: its limit, if any)."""
        assert self.estimator is not None
        est = self.estimator.estimate(job)
        level = "none" if est is None else est.level
        self.by_level[level] = self.by_level.get(level, 0) + 1
        return replace(job, est_duration_s=None if est is None else est.duration_s)

    def on_end(self, jid: int, now: float) -> None:
        """A job's work is done: free its GPUs, record it (on a sharing cluster `_SharedRun.on_end`
        calls this at the end of its last phase)."""
        if self.estimator is not None:
            self.estimator.observe(self.jobs[jid], now - self.start_t[jid])
        job = self.jobs[jid]
        gpus = self.sched.finish(jid, now).alloc
        gpus = self.allocs.setdefault(gpus, gpus)
        start_s = self.start_t[jid]
        del self.start_t[jid]  # (a del: dict.pop is a generic method call in the compiled core)
        self.records.append(
            JobRecord(
                job.id,
                job.submit_s - self.t0 if self.t0 else job.submit_s,  # one float object fewer a job
                start_s,
                now,
                gpus,
                job.mem_gb,
                job.name,
                job.user,
            )
        )
        self.done += 1
        if self.progress is not None and self.done % 2000 == 0:
            self.progress(self.done, len(self.jobs))

    def _util(self, jid: int) -> float:
        u = self.jobs[jid].gpu_util_pct
        if u is not None:
            return u
        return self.model.DEFAULT_UTIL_PCT if self.model is not None else 100.0

    def _stuck_message(self) -> str:
        ids = [self.jobs[j].id for j in itertools.islice(self.sched.waiting_jids(), 5)]
        return f"{self.sched.waiting_count} job(s) can never start (first: {ids}); nothing runs and nothing arrives"


class _SharedRun(_Run):
    """A run on a sharing cluster: a job runs through three phases (start-up, init, GPU work) at the
    rates the interference model gives it beside its GPUs' other jobs; each event is a phase end, and
    its GPU phase's end is the job's end. A start, a phase change or an end moves the neighbours' rates
    and so their events (`expect_end`)."""

    def __init__(
        self,
        jobs: Sequence[Job],
        sched: Scheduler,
        model: InterferenceModel | None,
        progress: ProgressFn | None,
        waiting: int | None = None,
        t0: float | None = None,
    ) -> None:
        super().__init__(jobs, sched, model, progress, waiting, t0)
        # progress bookkeeping per running job
        self.gpu_jobs: list[set[int]] = [set() for _ in sched.state.gpu_node]
        self.rate: dict[int, float] = {}
        self.phases_left: dict[int, list[float]] = {}  # solo seconds left of [start-up, init, GPU work]
        self.phase: dict[int, int] = {}  # index of the current phase in phases_left
        self.gpu_util: dict[int, float] = {}  # busy % during the GPU phase
        self.last_t: dict[int, float] = {}

    def adopt(self, running: Sequence[RunningJob]) -> None:
        super().adopt(running)
        if running:
            base = len(self.order)
            self._rerate(set(range(base, base + len(running))), 0.0, force_all=True)

    def _seed(self, jid: int, gpus: tuple[int, ...], elapsed: float, left: float) -> None:
        self._set_phases(jid, elapsed)
        self.last_t[jid], self.rate[jid] = 0.0, 1.0
        for g in gpus:
            self.gpu_jobs[g].add(jid)

    def on_start(self, st: Started, now: float) -> None:
        jid = st.jid
        self.start_t[jid] = now
        extra = self._slice_extra_s(jid, st.gpu_ids)
        self._set_phases(jid, 0.0)
        self.phases_left[jid][_GPU_PHASE] += extra
        self.last_t[jid], self.rate[jid] = now, 1.0
        for g in st.gpu_ids:
            self.gpu_jobs[g].add(jid)
        self._rerate(self._neighbours(st.gpu_ids), now, force=jid)

    def on_end(self, jid: int, now: float) -> None:
        """A sharing job's current phase is done: finish it, or move it on and rerate its GPUs' jobs."""
        phase = self.phase[jid]
        if phase == _GPU_PHASE:
            gpus = self.sched.slot(jid).alloc
            super().on_end(jid, now)
            for g in gpus:
                self.gpu_jobs[g].discard(jid)
            del self.rate[jid], self.phases_left[jid], self.phase[jid], self.gpu_util[jid]
            del self.last_t[jid]
            self.forget(jid)
            self._rerate(self._neighbours(gpus), now)
            return
        self.phases_left[jid][phase] = 0.0
        self.last_t[jid] = now
        self.phase[jid] = self._next_phase(jid, phase + 1)
        self._rerate(self._neighbours(self.sched.slot(jid).alloc), now, force=jid)

    def _set_phases(self, jid: int, elapsed: float) -> None:
        """Solo seconds left of each phase after `elapsed` seconds of the job's work (sharing runs)."""
        job, dur = self.jobs[jid], self.work[jid]
        # the phases split the job's solo duration: start-up first, then init, the rest on the GPU
        startup = min(job.startup_s or 0.0, dur)
        init = min(job.init_s or 0.0, dur - startup)
        gpu_s = max(0.0, dur - startup - init)
        left = [startup, init, gpu_s]
        for k in range(3):
            took = min(left[k], elapsed)
            left[k] -= took
            elapsed -= took
        self.phases_left[jid] = left
        self.phase[jid] = self._next_phase(jid, 0)
        self.gpu_util[jid] = _gpu_phase_util(self._util(jid), dur, gpu_s)

    def _next_phase(self, jid: int, first: int) -> int:
        """The first phase from `first` on with work left (the GPU phase when none has)."""
        left = self.phases_left[jid]
        return next((k for k in range(first, _GPU_PHASE) if left[k] > 0.0), _GPU_PHASE)

    def _neighbours(self, gpus: tuple[int, ...]) -> set[int]:
        out: set[int] = set()
        for g in gpus:
            out |= self.gpu_jobs[g]
        return out

    def _rerate(self, affected: set[int], now: float, force: int = -1, force_all: bool = False) -> None:
        """New progress rates for jobs whose GPU neighbours changed; move their phase-end events."""
        for a in sorted(affected):
            left = self.phases_left[a]
            phase = self.phase[a]
            left[phase] = max(left[phase] - (now - self.last_t[a]) * self.rate[a], 0.0)
            self.last_t[a] = now
            new = self._rate_of(a)
            if new == self.rate[a] and a != force and not force_all:
                continue
            self.rate[a] = new
            self.expect_end(a, now + left[phase] / new)
            plan = self.sched.slot(a).plan_s
            if plan < _INF:
                done = self.work[a] - sum(left)
                self.sched.set_expected_end(a, now + max(plan - done, 0.0) / new)

    def _rate_of(self, jid: int) -> float:
        """Progress rate of a running job in its current phase (start-up 1, init and GPU per the model)."""
        model = self.model
        assert model is not None  # sharing runs always have a model
        phase = self.phase[jid]
        if self.jobs[jid].duration_includes_sharing or phase == 0:
            return 1.0  # start-up is CPU work; a recorded shared duration is never slowed twice
        gpus = self.sched.slot(jid).alloc
        if phase == 1:
            return model.init_rate(any(len(self.gpu_jobs[g]) > 1 for g in gpus))
        util, rate = self.gpu_util[jid], 1.0
        for g in gpus:
            others = [self.gpu_util[b] for b in self.gpu_jobs[g] if b != jid and self.phase[b] == _GPU_PHASE]
            if others:
                rate = min(rate, model.rate(util, others))
        return rate


def _gpu_phase_util(util_pct: float, duration_s: float, gpu_s: float) -> float:
    """Busy % during the GPU phase from the whole-job mean: the start-up and init phases leave the GPU idle,
    so the same busy seconds fall in the GPU phase (at most 100)."""
    if gpu_s <= 0.0 or gpu_s >= duration_s or util_pct != util_pct:
        return util_pct
    return min(100.0, util_pct * duration_s / gpu_s)

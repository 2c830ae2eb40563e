"""The forecast: what the scheduler will do if every running job ends at its expected end and nothing
new arrives, computed by the scheduler itself.

`forecast(sched, now)` forks the live Scheduler (`Scheduler.fork`: queue, running jobs, cluster,
reservation notes, preemptive ranks, a learning policy's state) and drives the copy on the loop every
clock runs (core/clock.py's `EventClock`, the simulator's too): at each instant the ends first, then
the jobs that become eligible (a dependency ended, a begin time came), then one pass (its preemptions,
then its starts); the clock then jumps to the next expected end, level change or begin time, until
every waiting job has started (under a preemptive policy until every job has ended: a later
preemption moves an end). No scheduling rule is
written here: every start, reservation, preemption and placement is the Scheduler's own, so on any
clock that drives the same Scheduler the same way, the forecast is what happens (tests/test_forecast*.py).

Each job gets its expected start and end, its GPUs, its rank, and why it waits now in Slurm's reason
vocabulary (Resources, Priority, Dependency, BeginTime, JobHeldUser, or what an eligibility rule of the
core says: `Scheduler.wait_rules`); `Forecast.waiting_for` names the jobs whose ends free its GPUs and
`Forecast.ahead` the jobs backfill starts before it. `Forecast.explain` says it in words.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from gpuplan.core import preemption
from gpuplan.core.clock import EventClock
from gpuplan.core.preemption import JobTerms, Preempted, PreemptionCost
from gpuplan.core.scheduler import Scheduler
from gpuplan.core.view import Started
from gpuplan.model import Job

__all__ = ["Deferred", "Forecast", "Frees", "JobForecast", "forecast"]

_INF: Final = math.inf


class Deferred(NamedTuple):
    """A job outside the queue now that enters it later: once every job in `after` has ended (a
    dependency) and not before `begin_s`. `submit_now_s` is the `now` its clock passes to `submit`
    then (None: the job's submit_s)."""

    jid: int
    job: Job
    after: tuple[int, ...] = ()
    begin_s: float = -_INF
    book_mem_gb: float | None = None
    submit_now_s: float | None = None
    progress: tuple[float, float, int] = (0.0, 0.0, 0)
    """What it attained before (`Scheduler.restore_progress`: GPU-service, run since its last
    promotion, preemptions), restored as it enters, as its clock does."""


class Frees(NamedTuple):
    """A job whose end frees `gpus` of the GPUs a waiting job gets, at `at_s` (`basis`: where that
    end comes from: "estimate", "time limit", "expected end"; "dependency" for a job it depends on)."""

    jid: int
    gpus: int
    at_s: float
    basis: str


@dataclass(slots=True, init=False)  # its own __init__: compiled, a dataclass's one is not
class JobForecast:
    """One job's forecast.

    Attributes:
        jid: the scheduler's handle.
        state: "running", "waiting" (in the queue), "deferred" (a dependency or begin time keeps it
            out of the queue) or "held".
        start_s: expected start (a running job's real start; None: unknown, it waits behind a job
            that never ends, or it is held).
        end_s: expected end (None: unknown or endless); never before start_s.
        gpu_ids: the GPUs it gets (a running job's own).
        rank: its place in the waiting queue now (0 first; None outside it).
        reason: why it does not run now, in Slurm's vocabulary ("" for a job that runs or starts now).
        detail: an eligibility rule's own words, when one holds it.
        reserved_s: the start the backfill mode reserved for it in the pass at now (EASY's head,
            conservative's reservations).
        after: jobs it waits for (dependencies).
    """

    jid: int
    state: str
    start_s: float | None = None
    end_s: float | None = None
    gpu_ids: tuple[int, ...] = ()
    rank: int | None = None
    reason: str = ""
    detail: str = ""
    reserved_s: float | None = None
    after: tuple[int, ...] = ()

    def __init__(
        self,
        jid: int,
        state: str,
        start_s: float | None = None,
        end_s: float | None = None,
        gpu_ids: tuple[int, ...] = (),
        rank: int | None = None,
        reason: str = "",
        detail: str = "",
        reserved_s: float | None = None,
        after: tuple[int, ...] = (),
    ) -> None:
        self.jid = jid
        self.state = state
        self.start_s = start_s
        self.end_s = end_s
        self.gpu_ids = gpu_ids
        self.rank = rank
        self.reason = reason
        self.detail = detail
        self.reserved_s = reserved_s
        self.after = after

    def __reduce__(self) -> tuple[type[JobForecast], tuple[object, ...]]:
        """Pickled as its constructor's arguments: compiled, a class with its own __init__ is
        rebuilt through it."""
        f = self
        return (
            JobForecast,
            (
                f.jid,
                f.state,
                f.start_s,
                f.end_s,
                f.gpu_ids,
                f.rank,
                f.reason,
                f.detail,
                f.reserved_s,
                f.after,
            ),
        )


@dataclass
class Forecast:
    """Every job's forecast from `now_s` (`jobs` by handle), and what explains it."""

    now_s: float
    jobs: dict[int, JobForecast]
    version: int
    """The scheduler's version the forecast was made from (a view may reuse it while it stands)."""
    basis: dict[int, str] = field(default_factory=dict)
    stopped: str = ""
    """Why the forecast stopped short ("" when it ran to its end): its safety net
    (core/preemption.py's MAX_PASSES_PER_JOB); jobs not started then get no expected start, those not
    ended no expected end, and their `detail` says why."""
    _history: list[list[_Segment]] = field(default_factory=list)  # by GPU index

    def __iter__(self) -> Iterator[JobForecast]:
        return iter(self.jobs.values())

    def __getitem__(self, jid: int) -> JobForecast:
        return self.jobs[jid]

    def __contains__(self, jid: object) -> bool:
        return jid in self.jobs

    def waiting_for(self, jid: int) -> list[Frees]:
        """The jobs whose ends free the GPUs `jid` starts on (by end), or that it depends on."""
        fc = self.jobs[jid]
        if fc.state == "deferred" and fc.after:
            return [Frees(d, 0, _INF if (e := self._end(d)) is None else e, "dependency") for d in fc.after]
        t = _INF if fc.start_s is None else fc.start_s
        freed: dict[int, list[float]] = {}
        history = self._history
        for g in fc.gpu_ids:
            entries = history[g] if 0 <= g < len(history) else []
            k = _first_at(entries, t)
            while k > 0:
                k -= 1
                seg = entries[k]
                s, e, other = seg.start_s, seg.end_s, seg.jid
                if other != jid and self.now_s <= e <= t and s < t:
                    got = freed.setdefault(other, [0, e])
                    got[0] += 1
                    break
        if fc.start_s is None:  # no known start: the jobs that never end on the GPUs it would need
            return [Frees(j, 0, _INF, self.basis.get(j, "")) for j in self._endless()]
        out = [Frees(j, int(n), e, self.basis.get(j, "")) for j, (n, e) in freed.items()]
        return sorted(out, key=lambda f: (f.at_s, f.jid))

    def ahead(self, jid: int) -> list[int]:
        """Jobs ranked after `jid` that start before it (backfill), by start."""
        fc = self.jobs[jid]
        if fc.rank is None or fc.start_s is None:
            return []
        out = [
            o
            for o in self.jobs.values()
            if o.rank is not None and o.rank > fc.rank and o.start_s is not None and o.start_s < fc.start_s
        ]
        return [o.jid for o in sorted(out, key=lambda o: (o.start_s, o.rank))]

    def explain(
        self, jid: int, label: Callable[[int], str] = str, at: Callable[[float], str] = lambda t: f"{t:g}"
    ) -> str:
        """Why `jid` waits and for what, in words (`label` names a job, `at` formats an instant)."""
        fc = self.jobs[jid]
        if fc.state == "running":
            return "running" + ("" if fc.end_s is None else f"; expected to end at {at(fc.end_s)}")
        if fc.state == "held":
            return f"{fc.reason}: held; it waits until released"
        parts = [fc.reason + (f" ({fc.detail})" if fc.detail else "")] if fc.reason else []
        parts.append(self._needs(fc, label, at))
        if fc.start_s is not None:
            on = f" on GPUs {','.join(map(str, fc.gpu_ids))}" if fc.gpu_ids else ""
            end = "" if fc.end_s is None else f", expected to end at {at(fc.end_s)}"
            parts.append(f"expected start {at(fc.start_s)}{on}{end}")
        if fc.reserved_s is not None:
            parts.append(f"the backfill mode reserves its start at {at(fc.reserved_s)}")
        ahead = self.ahead(jid)
        if ahead:
            parts.append(self._ahead_text(fc, ahead, label))
        return "; ".join(p for p in parts if p)

    # -- helpers -------------------------------------------------------------------------------------
    def _end(self, jid: int) -> float | None:
        fc = self.jobs.get(jid)
        return None if fc is None else fc.end_s

    def _endless(self) -> list[int]:
        return sorted(j.jid for j in self.jobs.values() if j.state == "running" and j.end_s is None)

    def _needs(self, fc: JobForecast, label: Callable[[int], str], at: Callable[[float], str]) -> str:
        frees = self.waiting_for(fc.jid)
        if fc.state == "deferred" and fc.after:
            deps = ", ".join(
                f"job {label(f.jid)} ends" + ("" if f.at_s == _INF else f" at {at(f.at_s)}") for f in frees
            )
            return f"waits until {deps}"
        if fc.start_s is not None and fc.start_s <= self.now_s:
            return "starts now"
        if fc.start_s is None:
            names = ", ".join(f"job {label(f.jid)}" for f in frees[:3])
            return "no expected start: it waits behind jobs without an end" + (f" ({names})" if names else "")
        if not frees:
            return ""
        each = ", ".join(
            f"job {label(f.jid)} frees {f.gpus} at {at(f.at_s)}" + (f" (its {f.basis})" if f.basis else "")
            for f in frees[:4]
        )
        more = f" and {len(frees) - 4} more" if len(frees) > 4 else ""
        n = len(fc.gpu_ids)
        return f"{n} GPU{'s' if n != 1 else ''}; {each}{more}"

    def _ahead_text(self, fc: JobForecast, ahead: list[int], label: Callable[[int], str]) -> str:
        gpus = set(fc.gpu_ids)
        ends_first = [j for j in ahead if (e := self.jobs[j].end_s) is not None and e <= (fc.start_s or 0)]
        elsewhere = [j for j in ahead if j not in ends_first and gpus.isdisjoint(self.jobs[j].gpu_ids)]
        names = ", ".join(label(j) for j in ahead[:5]) + (
            f" and {len(ahead) - 5} more" if len(ahead) > 5 else ""
        )
        why = []
        if ends_first:
            why.append(f"{len(ends_first)} end by its start")
        if elsewhere:
            why.append(f"{len(elsewhere)} run on GPUs it does not get")
        return (
            f"backfill starts {len(ahead)} job(s) ranked after it ahead of it ({names}): "
            f"{' and '.join(why)}, so none delays its start"
        )


def forecast(
    sched: Scheduler,
    now: float,
    *,
    deferred: Iterable[Deferred] = (),
    held: Mapping[int, str] | None = None,
    cost: PreemptionCost | None = None,
    progress_s: Mapping[int, float] | None = None,
) -> Forecast:
    """Run `sched`'s own code forward from `now` on a fork of it (the live scheduler is not touched).

    Args:
        sched: the live scheduler (running jobs with their expected ends, the queue).
        now: the clock's time; running jobs past their expected end are taken to end now.
        deferred: jobs that enter the queue later (dependencies, begin times).
        held: jobs held out of the queue: handle -> Slurm reason (JobHeldUser, JobHeldAdmin).
        cost: what a preemption costs (preemptive policies; default the scheduler's `preemption_cost`).
        progress_s: seconds of work waiting jobs already kept from earlier runs (checkpoint, suspend).

    Returns:
        A `Forecast` of every running, waiting, deferred and held job.

    The cyclic garbage collector is off during the call (on again after it, if it was on).
    """
    # The cyclic collector is off while it runs: the fork and the records are tens of thousands of
    # new objects without a reference cycle, so each collection meanwhile (the first ones scan the
    # live scheduler too) would free nothing; what was made is scanned once, by the next collection.
    was = gc.isenabled()
    gc.disable()
    try:
        run = _Forecaster(sched, now, list(deferred), cost or sched.preemption_cost, progress_s or {})
        run.loop()
        fc = run.result(sched.version)
    finally:
        if was:
            gc.enable()
    for jid, why in (held or {}).items():
        fc.jobs[jid] = JobForecast(jid, "held", reason=why)
    return fc


class _Forecaster(EventClock):
    """One forecast's clock over a forked scheduler: the hooks of `EventClock` (core/clock.py) that
    record what the forecast returns."""

    def __init__(
        self,
        live: Scheduler,
        now: float,
        deferred: list[Deferred],
        cost: PreemptionCost,
        progress_s: Mapping[int, float],
    ) -> None:
        sched = live.fork()
        super().__init__(sched)
        self.now = now
        self.cost = sched.preemption_cost = cost  # the fork's pass leases each start by the same cost
        self.jobs: dict[int, JobForecast] = {}
        self.runs: dict[int, _Run] = {}  # each job's state on this clock (one lookup per hook)
        # per GPU (by index): its segments, by start
        self.history: list[list[_Segment]] = [[] for _ in range(sched.state.total_gpus)]
        self.basis: dict[int, str] = {}
        self.terms = JobTerms(cost)  # each job's restart overhead, checkpointing, preempt mode
        self.deferred = {d.jid: d for d in deferred}
        self.blocking: dict[int, list[int]] = {}  # dependency -> deferred jobs waiting for it
        self.unmet: dict[int, int] = {}
        self.todo = 0  # waiting or deferred jobs not started yet
        self.stopped = ""
        self.first = True
        self.idle = 0  # passes in a row that brought no job its first start and had no end or entry ahead
        self.last_todo = 0
        kept = bool(progress_s)  # (a Mapping's get is a generic call: asked only when there is one)
        for k, jid in enumerate(sched.waiting_jids()):
            slot = sched.slot(jid)
            fc = self.jobs[jid] = JobForecast(jid, "waiting", rank=k)
            left = max(slot.plan_s - (progress_s.get(jid, 0.0) if kept else 0.0), 0.0)
            self.runs[jid] = _Run(fc, left, slot.preemptions > 0)
            self.todo += 1
        for slot in sched.running():
            jid = slot.jid
            end = max(slot.expected_end_s, now)
            fc = self.jobs[jid] = JobForecast(jid, "running", slot.start_s, None, slot.alloc)
            self.basis[jid] = _basis(slot.job)
            run = self.runs[jid] = _Run(fc, end - now, True)
            self._open(run, slot.alloc, slot.start_s if slot.start_s is not None else now, now, 0.0)
            self._expect(run, end)
        for d in deferred:
            self._defer(d)

    def loop(self, start_s: float | None = None) -> None:
        """The clock from `now` (`start_s` None): a first pass at now, whose reasons are the forecast's,
        then event to event. Its safety net is read at run time (a test may lower it)."""
        self.max_passes = preemption.MAX_PASSES_PER_JOB * (len(self.jobs) + 1)  # a test may lower it
        self.last_todo = self.todo
        super().loop(self.now if start_s is None else start_s)

    # -- the clock's hooks ---------------------------------------------------------------------------
    def after_pass(self, t: float, t_next: float) -> bool:
        if self.first:
            self._reasons(t)
            self.first = False
        if self.todo == 0 and (not self.preemptive or not self.heap):
            return True
        # Only level changes left (no running job ever ends): endless jobs take turns; once that
        # many passes brought no job its first start, the rest never starts (starts unknown)
        self.idle = 0 if self.todo < self.last_todo or self.heap or self.begins else self.idle + 1
        self.last_todo = self.todo
        return self.idle > 2 * len(self.jobs) + 64

    def too_many_passes(self, t: float, passes: int) -> None:
        """The safety net: after `passes` passes, every job not started or not ended gets none."""
        self.stopped = (
            f"the forecast stopped at {t:.0f} s after {passes} scheduler passes "
            f"({passes // (len(self.jobs) + 1)} per job) without the queue draining: jobs preempt each other "
            "without progress (a preemptive level at most half the restart overhead?)"
        )
        for jid, fc in self.jobs.items():
            if fc.end_s is None:
                self.runs[jid].ends = False
                fc.detail = fc.detail or self.stopped

    def on_end(self, jid: int, t: float) -> None:
        self.sched.finish(jid, t)
        run = self.runs[jid]
        _close(run, t)
        run.ends = False
        run.fc.end_s = t
        blocking = self.blocking
        if jid in blocking:  # (rarely: a lookup, not pop's method call and an iterator at each end)
            for d in blocking[jid]:
                self.unmet[d] -= 1
                if self.unmet[d] == 0:
                    self._eligible(self.deferred[d], t)
            del blocking[jid]

    def on_arrival(self, jid: int, t: float) -> None:
        self._submit(self.deferred[jid], t)

    def on_start(self, st: Started, t: float) -> None:
        jid = st.jid
        slot = self.sched.slot(jid)
        run = self.runs[jid]
        fc = run.fc
        if fc.state != "running" and fc.start_s is None:
            fc.start_s, fc.gpu_ids = t, st.gpu_ids
            self.todo -= 1
            self.basis[jid] = _basis(slot.job)  # (a job's own: set at its first start)
        if not self.preemptive:
            end = slot.expected_end_s
            overhead = 0.0
        else:  # the work left after what earlier segments kept, plus a restart's overhead
            overhead = self.terms.of(jid, slot.job)[0] if run.ran else 0.0
            end = t + overhead + run.left_s
            run.ran = True
        self._open(run, st.gpu_ids, t, t, overhead)
        self._expect(run, end)

    def on_preempt(self, p: Preempted, t: float) -> None:
        jid = p.jid
        self.cancel_end(jid)  # its end event no longer holds
        run = self.runs[jid]
        run.ends = False
        slot = self.sched.slot(jid)
        seg = run.seg
        seg_start, overhead = (t, 0.0) if seg is None else (seg.run_s, seg.overhead_s)
        _, checkpointable, mode = self.terms.of(jid, slot.job)
        kept = self.cost.kept_by_s(checkpointable, mode, max(t - seg_start - overhead, 0.0))
        run.left_s = run.left_s - kept if checkpointable else slot.plan_s
        _close(run, t)

    def _expect(self, run: _Run, end: float) -> None:
        run.end_s, run.ends = end, True
        self.expect_end(run.fc.jid, end)

    def _reasons(self, t: float) -> None:
        """Why each job still waiting after the pass at now waits (Slurm's vocabulary)."""
        sched = self.sched
        reserved = sched.backfill.reserved if not self.preemptive else {}
        first = True
        for jid in sched.waiting_jids():
            fc = self.jobs[jid]
            why = sched.wait_reason(sched.slot(jid), t)
            if why is not None:
                fc.reason, fc.detail = why.code, why.detail
            else:
                fc.reason = "Resources" if first else "Priority"
            first = False
            fc.reserved_s = reserved.get(jid)
        for jid, fc in self.jobs.items():
            if fc.state == "deferred" and fc.start_s is None and jid not in sched:
                fc.reason = "Dependency" if fc.after else "BeginTime"

    # -- deferred jobs -----------------------------------------------------------------------------
    def _defer(self, d: Deferred) -> None:
        fc = self.jobs[d.jid] = JobForecast(d.jid, "deferred", after=d.after)
        self.runs[d.jid] = _Run(fc, _INF, False)
        self.todo += 1
        pending = [
            a for a in d.after if (a in self.jobs and self.jobs[a].end_s is None) or a in self.deferred
        ]
        missing = [a for a in d.after if a not in self.jobs and a not in self.deferred]
        if missing:
            return  # it waits for a job the scheduler does not know (held elsewhere): never
        self.unmet[d.jid] = len(pending)
        for a in pending:
            self.blocking.setdefault(a, []).append(d.jid)
        if not pending:
            self._eligible(d, self.now)

    def _eligible(self, d: Deferred, t: float) -> None:
        if d.begin_s > t:
            self.enter_at(d.begin_s, d.jid)
        else:
            self._submit(d, t)

    def _submit(self, d: Deferred, t: float) -> None:
        slot = self.sched.submit(d.jid, d.job, d.book_mem_gb, now=d.submit_now_s)
        if any(d.progress):
            self.sched.restore_progress(d.jid, *d.progress, now=t)
        self.runs[d.jid].left_s = slot.plan_s

    # -- GPU history (what `waiting_for` reads) ---------------------------------------------------------
    def _open(self, run: _Run, gpus: tuple[int, ...], start: float, run_s: float, overhead: float) -> None:
        seg = _Segment(start, run.fc.jid)  # one record on each of its GPUs: its end is set once
        seg.run_s, seg.overhead_s = run_s, overhead
        history = self.history
        for g in gpus:
            history[g].append(seg)
        run.seg = seg

    def result(self, version: int) -> Forecast:
        for run in self.runs.values():  # still running when every job had started
            if not run.ends:
                continue
            fc, end = run.fc, run.end_s
            if fc.end_s is None and end < _INF:
                fc.end_s = end
            if fc.end_s is not None and fc.start_s is not None and fc.end_s < fc.start_s:
                fc.end_s = fc.start_s
        return Forecast(self.now, self.jobs, version, self.basis, self.stopped, self.history)


class _Run:
    """One job on the forecast's clock: its forecast `fc`; `left_s`, the work left at its run's start
    (preemptive policies); `ran`, it ran before (a restart pays the overhead); `seg`, its open
    GPU-history segment (None: not running); `end_s`, its expected end while `ends` (it runs in the fork)."""

    def __init__(self, fc: JobForecast, left_s: float, ran: bool) -> None:
        self.fc = fc
        self.left_s = left_s
        self.ran = ran
        self.seg: _Segment | None = None
        self.end_s = _INF
        self.ends = False


def _close(run: _Run, t: float) -> None:
    """`run`'s segment ends at `t` (GPU history)."""
    seg = run.seg
    if seg is not None:
        seg.end_s = t
        run.seg = None


class _Segment:
    """A job's run on its GPUs, from `start_s` to `end_s` (inf while it runs): the forecast's GPU
    history (`Forecast.waiting_for`) lists it under each of them, in start order. While it runs, the
    clock reads `run_s` and `overhead_s`: when the run began on the forecast's clock (`start_s` of a job
    running before it is its real start) and the restart overhead it pays (what a preemption keeps)."""

    def __init__(self, start_s: float, jid: int, end_s: float = _INF) -> None:
        self.start_s = start_s
        self.jid = jid
        self.end_s = end_s
        self.run_s = start_s
        self.overhead_s = 0.0

    def __reduce__(self) -> tuple[type[_Segment], tuple[float, int, float]]:
        return (_Segment, (self.start_s, self.jid, self.end_s))


def _first_at(segments: list[_Segment], t: float) -> int:
    """The index of the first segment that starts at or after `t` (`bisect_left` on their starts)."""
    lo, hi = 0, len(segments)
    while lo < hi:
        mid = (lo + hi) // 2
        if segments[mid].start_s < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _basis(job: Job) -> str:
    if job.est_duration_s is not None:
        return "estimate"
    if job.requested_s is not None:
        return "time limit"
    return ""

"""Preemption in the core: what a preemption costs, the decisions a clock carries out, and the pass
that starts and suspends jobs under a preemptive policy (core/preemptive.py).

The Scheduler owns a `PreemptiveQueue` when its policy is preemptive; `Scheduler.decide(now)` returns
`Decisions` (jobs to preempt, each by its `Job.preempt_mode`, then jobs to start or resume) that the
simulator (sim/preempt.py) and the local agent (SIGSTOP/SIGCONT in place, or SIGTERM + requeue) carry
out alike. A job suspended in place keeps its memory on its GPUs (`ClusterState.hold_suspended`): a
newcomer runs there only beside it, when its declared memory fits, and it resumes only there.

The pass: waiting jobs in rank order (level, then the policy's static key); each starts where it fits;
one that does not fit may take the GPUs of running jobs of a strictly higher level, the highest first
(a victim whose GPUs the newcomer does not need keeps running). Jobs of one level never preempt each
other. At most MAX_EXAMINED waiting jobs are looked at per pass (as Slurm's bf_max_job_test).

A preemption must pay for itself (policies whose levels never run out, `endless_levels`: las): a job
that pays a restart to resume does not take the GPUs of a running job whose level, when it (re)started,
was not above its own, before that job's lease ends (`PreemptionCost.lease_s`, as Gandiva's and
Tiresias' minimum run after a start): the restart overhead the victim paid plus the kept progress that
pays for its next restart. Without it, a level at most half the overhead let two jobs trade places
forever without progress (each one's overhead, counted as attained service, lifted it above the other).
A newcomer's first start, a job that costs no restart, or a level the victim already had preempt as
before. The pass asks again when a lease that held a preemption back ends (`next_change_s`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from mypy_extensions import mypyc_attr

from gpuplan.core.placement import Placer
from gpuplan.core.preemptive import LevelRule
from gpuplan.core.ranks import LEASE_TOL_S, Entry, JobRank, Ranks, highest
from gpuplan.core.rankseq import Cursor, RankedSeq
from gpuplan.core.state import ClusterState
from gpuplan.core.victims import (
    FailedEvictions,
    FitMemo,
    VictimTally,
    any_idle,
    find_gpus,
    follow_up_idle,
    left_idle,
    overlaps,
    release_counted,
)
from gpuplan.core.view import JobSlot, Preempted, SchedulerView, Started
from gpuplan.model import Job
from gpuplan.preempt_modes import checkpointable_of, preempt_mode_of

__all__ = [
    "DEFAULT_CHECKPOINT_INTERVAL_S",
    "DEFAULT_RESTART_OVERHEAD_S",
    "MAX_EXAMINED",
    "MAX_PASSES_PER_JOB",
    "Decisions",
    "JobTerms",
    "Preempted",
    "PreemptingScheduler",
    "PreemptionCost",
    "PreemptiveQueue",
    "VictimTally",
    "kept_by_s",
]

_INF: Final = math.inf
MAX_EXAMINED: Final = 500

MAX_PASSES_PER_JOB = 1000
"""Every preemptive clock's safety net: a run (the simulator's, a forecast's) stops after this many
scheduler passes per job (plus one job's worth). A sane run needs a few per job (its start, its end, its
level changes); only jobs that preempt each other without progress (a level at most half the restart
overhead, docs/preemption.md) come near it. The simulator then fails with a one-line error; a forecast
gives the jobs left no expected start or end and says why (`Forecast.stopped`)."""

DEFAULT_RESTART_OVERHEAD_S = 10.0
"""Seconds a resumed job spends before it makes progress again, when the job does not say (its
`startup_s + init_s`): the default overhead of the Tiresias simulator (SymbioticLab/Tiresias,
simulator/run_sim.py, models without a measured overhead)."""

DEFAULT_CHECKPOINT_INTERVAL_S = 0.0
"""0: the job is checkpointed when it is preempted (Tiresias and Gandiva checkpoint on demand), so no
work is lost; > 0: periodic checkpoints only, and the work since the last one is lost."""


@mypyc_attr(native_class=False)  # a Python class: a frozen native one cannot be unpickled (dask, workers)
@dataclass(frozen=True, slots=True)
class PreemptionCost:
    """What a preemption costs a job.

    Attributes:
        restart_overhead_s: seconds a resumed job runs before it makes progress again; None: the
            job's own `startup_s + init_s` where it has them (start-up and model build are redone), else
            DEFAULT_RESTART_OVERHEAD_S.
        checkpoint_interval_s: seconds of progress between checkpoints; 0 (default): checkpoint at the
            preemption, nothing lost. A job with `checkpointable` False loses all its progress.
    """

    restart_overhead_s: float | None = None
    checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S

    def overhead_s(self, job: Job) -> float:
        """Seconds of a resumed run before progress resumes (0 for a job that restarts from scratch:
        its start-up is part of its own duration; 0 for one suspended in place: SIGCONT is instant)."""
        meta = job.meta  # (`Job.checkpointable` and `Job.preempt_mode`'s rules, without the properties)
        if not checkpointable_of(meta) or preempt_mode_of(meta) == "suspend":
            return 0.0
        if self.restart_overhead_s is not None:
            return self.restart_overhead_s
        if job.startup_s is not None or job.init_s is not None:
            return (job.startup_s or 0.0) + (job.init_s or 0.0)
        return DEFAULT_RESTART_OVERHEAD_S

    def kept_s(self, job: Job, progress_s: float) -> float:
        """Progress of one run segment that survives a preemption."""
        return self.kept_by_s(job.checkpointable, job.preempt_mode, progress_s)

    def kept_by_s(self, checkpointable: bool, mode: str, progress_s: float) -> float:
        """`kept_s` of a job of `checkpointable` and preempt `mode` (a clock reads them once per job)."""
        return kept_by_s(self.checkpoint_interval_s, checkpointable, mode, progress_s)

    def lease_s(self, job: Job, resumed: bool) -> float:
        """Seconds a run must last after a start (`resumed`: a resume, that paid `overhead_s`) before
        the job may be preempted: the overhead paid plus the kept progress that pays the next restart
        (its overhead, rounded up to whole checkpoint intervals with periodic checkpoints). 0 for a job
        whose preemption costs no restart (suspended in place, or restarted from scratch)."""
        return self.lease_by_s(self.overhead_s(job), resumed)

    def lease_by_s(self, overhead_s: float, resumed: bool) -> float:
        """`lease_s` of a job whose `overhead_s` is given (the pass reads it once per job)."""
        if overhead_s <= 0.0:
            return 0.0
        c = self.checkpoint_interval_s
        pays = overhead_s if c <= 0.0 else max(math.ceil(overhead_s / c), 1) * c
        return (overhead_s if resumed else 0.0) + pays


def kept_by_s(interval_s: float, checkpointable: bool, mode: str, progress_s: float) -> float:
    """`PreemptionCost.kept_by_s` under checkpoints every `interval_s` (0: at the preemption), a native
    function (the cost model is a Python class: a method call on it is a generic one)."""
    if not checkpointable or progress_s <= 0.0:
        return 0.0
    if mode == "suspend":  # its process is only stopped: nothing is lost
        return progress_s
    return progress_s if interval_s <= 0.0 else math.floor(progress_s / interval_s) * interval_s


class JobTerms:
    """Each job's restart overhead, whether it checkpoints and its preempt mode under one cost model,
    read once per job (they are properties of its `meta`): what a preemptive clock (the simulator's
    `sim.preempt.PreemptiveRun`, the forecast's driver) asks at each start and preemption."""

    def __init__(self, cost: PreemptionCost) -> None:
        self.cost = cost
        self.by_jid: dict[int, tuple[float, bool, str]] = {}

    def of(self, jid: int, job: Job) -> tuple[float, bool, str]:
        """(restart overhead in seconds, checkpointable, preempt mode) of `job`, known as `jid`."""
        got = self.by_jid.get(jid)
        if got is None:
            meta = job.meta
            got = self.by_jid[jid] = (
                self.cost.overhead_s(job),
                checkpointable_of(meta),
                preempt_mode_of(meta),
            )
        return got


class Decisions:
    """One pass's decisions, in the order a clock carries them out: preemptions, then starts (a native
    class, not a NamedTuple: one is built at every pass, and a NamedTuple's constructor is interpreted)."""

    __slots__ = ("preempted", "started")

    def __init__(self, preempted: list[Preempted], started: list[Started]) -> None:
        self.preempted = preempted
        self.started = started

    def __repr__(self) -> str:
        return f"Decisions(preempted={self.preempted!r}, started={self.started!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Decisions)
            and self.preempted == other.preempted
            and self.started == other.started
        )


class PreemptingScheduler(SchedulerView):
    """What the preemptive pass needs of its scheduler: the read-only view (`SchedulerView`), plus
    starting a waiting job and preempting a running one, and what a preemption costs (the lease it
    gives a started job). A base class that core/scheduler.py's `Scheduler` subclasses, not a
    Protocol: the compiled pass then reads and calls these members natively, where a Protocol's
    are looked up by name at every use (several per pass, and at every clock stop). Every method here
    raises NotImplementedError; a subclass implements them all and sets `preemption_cost`."""

    preemption_cost: PreemptionCost

    def start_waiting(
        self, slot: JobSlot, gpu_ids: list[int] | tuple[int, ...], now: float, started: list[Started]
    ) -> None:
        """Start a waiting job on `gpu_ids` and take it out of the queue."""
        raise NotImplementedError

    def preempt(self, jid: int, now: float, released: bool = False) -> Preempted:
        """Take a running job's GPUs by its preempt mode; it waits again (`released`: the pass has
        already released its GPUs in the state, and held its memory if it is suspended)."""
        raise NotImplementedError

    def note_change(self) -> None:
        """Bump `version`: the pass changed live state (ranks, a suspended job's memory)."""
        raise NotImplementedError


class PreemptiveQueue:
    """Waiting and running jobs by rank for a preemptive policy, and the instants their levels change.

    Its records are a `Ranks` (`waiting` and `running` are that one's, to read). A compiled (native)
    class; the three rules a test may swap for a plain one (`refresh`, `shape`, `_evict_for`) are
    called through module attributes (`_refresh_rule`, `_shape_rule`, `_evict_rule`)."""

    def __init__(self, sched: PreemptingScheduler, policy: LevelRule) -> None:
        self.sched = sched
        self.policy = policy
        self.state: ClusterState = sched.state  # the scheduler's, for its life
        self._r = Ranks(self.state, policy.endless_levels)
        self._r.rule, self._r.source = policy, self
        self.waiting: RankedSeq = self._r.waiting
        self.running: RankedSeq = self._r.running
        self._tally: VictimTally | None = None
        # what a pass keeps while it walks, made once and emptied at each pass (`_pass`)
        self._fits_failed = FitMemo()
        self._doomed = FailedEvictions()
        self._failed: set[int] = set()
        self._preempted: set[int] = set()
        self._heads: dict[object, Entry | None] = {}
        self._placer: Placer | None = None  # the placer whose `node_local` is `_node_local`
        self._node_local = False

    @property
    def ranks(self) -> Ranks:
        """The queue's records, ranked sequences and queued level changes."""
        return self._r

    def fork(self, sched: PreemptingScheduler, policy: LevelRule) -> PreemptiveQueue:
        """A copy for a forked scheduler (`Scheduler.fork`): ranks, entries and pending level changes."""
        new = PreemptiveQueue(sched, policy)
        new._r = self._r.copy(new.state, {jid: sched.slot(jid) for jid in self._r.rec})
        new._r.rule, new._r.source = policy, new
        new.waiting, new.running = new._r.waiting, new._r.running
        return new

    # -- bookkeeping ------------------------------------------------------------------------------
    def enter(self, slot: JobSlot, now: float) -> None:
        """Rank a job (waiting or running) at `now` and note when its level next changes."""
        self._r.enter(slot, now, self.policy, self)

    def submitted(self, slot: JobSlot, now: float) -> None:
        """`enter` of a job just submitted (the scheduler's version bumped for it): while only jobs
        entered since a settled pass, the next pass tries them and the jobs whose victims changed
        (`Ranks.arrived`)."""
        r, version = self._r, self.sched.version
        r.enter(slot, now, self.policy, self)
        if r.settled == version - 1 or r.arrived_at == version - 1:
            r.arrived_at = version
            r.arrived.add(slot.level)
        else:
            r.arrived_at = -1

    def leave(self, slot: JobSlot) -> None:
        self._r.leave(slot)

    def finished(self, slot: JobSlot, version: int) -> None:
        """A running job ended and gave back its GPUs (`slot.alloc`; the scheduler's version is now
        `version`, bumped for it): while only ends came since a settled pass, on an exclusive cluster
        where no job keeps its memory, the next pass tries every job only while a GPU they gave back
        is idle (`_pass`'s `given_back`)."""
        r = self._r
        if (
            (r.settled == version - 1 or r.ended_at == version - 1)
            and not self.state.sharing
            and not self.state.suspended_n
            and not r.suspend_running
        ):
            r.ended_at = version
            r.freed.extend(slot.alloc)
        else:
            r.ended_at = -1
            r.freed.clear()

    def shape(self, slot: JobSlot) -> tuple[object, ...]:
        """What decides whether a waiting job finds GPUs in a pass (with whether it waits suspended):
        on an exclusive cluster where no job keeps its memory, memory every GPU has does not."""
        rule = _shape_rule
        return self.fits_shape(slot) if rule is _FITS_SHAPE else rule(self, slot)

    def fits_shape(self, slot: JobSlot) -> tuple[object, ...]:
        """`shape`'s rule."""
        mem = slot.mem_gb
        if not self._r.exact_shapes and mem is not None and mem <= self.state.min_cap_gb:
            mem = None
        return (slot.gpus, mem, slot.may_span, slot.need, bool(slot.suspended_on))

    def _keep_memory_in_shapes(self) -> None:
        """A job that keeps its memory is known: from now on shapes keep every job's memory (a job
        may fit beside a suspended one where a larger one does not); the waiting jobs' are redone."""
        self._r.keep_memory_in_shapes(self)

    def forget(self, jid: int) -> None:
        """The job left the scheduler (finished or withdrawn) after `leave`."""
        self._r.forget(jid)

    def mode(self, slot: JobSlot) -> str:
        """The job's `Job.preempt_mode`, read once per job."""
        return self._r.mode(slot)

    def _restart_costs(self, slot: JobSlot) -> bool:
        """Whether resuming the job costs a restart overhead (`PreemptionCost.overhead_s` > 0), read
        once per job and cost model."""
        return self._r.restart_costs(self._r.record(slot), self.sched.preemption_cost)

    def catch_up(self) -> None:
        """Make every running job's level current as of the last pass (`Ranks.catch_up`): what a reader
        of `JobSlot.level` outside the pass calls first."""
        self._r.settle()

    def next_change_s(self) -> float:
        """The next instant a level may change (the clock calls `decide` again then)."""
        return self._r.next_change_s()

    def next_pass_s(self) -> float:
        """The next instant a level change or a lease end may move a decision: `next_change_s`, or
        inf while no job waits (a pass with nobody waiting decides nothing, so a running job's
        change waits for the next pass, whose `refresh` ranks it at that pass's instant: its level
        is a function of that instant, so the ranks come out as if it had moved at each change).
        After a settled pass, the first change that is not quiet (`Ranks.next_loud_s`): a pass at
        each quiet one before it would be skipped."""
        r = self._r
        if not r.waiting:
            return _INF
        if r.settled == self.sched.version and _skip_quiet:
            return r.next_loud_s()  # a pass would skip each quiet change before it: no stop there
        return r.next_change_s()

    def quiet_before_s(self) -> float:
        """An instant before which a pass, with nothing entering or ending first, decides nothing (the
        clock need not stop there for a stale end): after a settled pass, the next instant a pass may
        act (`next_pass_s`; a lease end less the pass's tolerance, `refresh`); inf while no job waits
        (a pass then decides nothing); -inf otherwise."""
        r = self._r
        if not r.waiting:
            return _INF
        if r.settled != self.sched.version or not _skip_quiet:
            return -_INF
        t = self.next_pass_s()
        if r.wakes and r.wakes[0] - 2 * LEASE_TOL_S < t:
            t = r.wakes[0] - 2 * LEASE_TOL_S  # (a margin past the refresh's reach)
        return t

    def refresh(self, now: float) -> bool:
        """Rank again every job whose level may have changed by `now`. Returns whether every change was
        one no pass can act on (`Ranks.quiet_move`): a running job whose level, before and after, is at
        most every waiting job's (it can be nobody's victim, and the highest running level matters only
        above them), or whose level rose past no waiting job's.

        Waiting jobs move at once. A running job's change is made now only when the pass may be
        skipped (the last pass decided nothing and nothing else changed since: its verdict needs every
        change); otherwise the pass runs anyway, and the change is left for the first reader of running
        levels (`Ranks.catch_up`, at this instant)."""
        r, policy, sched = self._r, self.policy, self.sched
        r.now = now
        quiet = True
        wakes = r.wakes
        while wakes and wakes[0] <= now:  # a lease that held a preemption back ended
            r.pop_wake()
            quiet = False
            r.crossed = None
        if wakes and wakes[0] <= now + LEASE_TOL_S:
            quiet = False  # a lease ending within the pass's tolerance counts as ended (`Ranks.lease_binds`)
            r.crossed = None
        ch = r.wait_changes
        moved = False
        while ch.first_s() <= now:  # `leave` takes it out; `enter` queues its next change, later
            slot = ch.top().slot
            r.leave(slot)
            r.enter(slot, now, policy, self)
            moved = True
            quiet = False
            r.crossed = None
        if r.running_due(now):
            moved = True
            if r.settled == sched.version:  # the verdict may skip the pass: it needs every change
                if not r.catch_up():
                    quiet = False
            else:
                quiet = False  # the pass runs (a quiet answer skips it only while settled)
        if moved:
            sched.note_change()  # ranks moved: a view of the queue is stale
        return quiet

    def rerank_all(self, now: float) -> None:
        """Rank every job again whose level what the policy learned may have moved (every job, unless
        its `LevelRule` names them: `reranks`, gittins' jobs whose table was rebuilt; a job it does not
        name has the level it had, and its queued change still holds). A job whose level stays keeps
        its entry (the same entry a new one would be) and its queued change when that change's time
        stands (`Ranks.plan_change`); the others move (a running one's place when a pass reads the
        running order, `Ranks.settle`, as at any level change)."""
        r, policy = self._r, self.policy
        # (running jobs' changes due by the last pass are left for the first reader of running levels,
        # `Ranks.catch_up`, as at any time: a level is a function of the instant, so a job ranked again
        # here comes out at `now` as if moved at each change first; the others as they would have)
        todo = [rec for rec in r.waiting if policy.reranks(rec.slot)]
        todo.extend([rec for rec in r.running if policy.reranks(rec.slot)])
        for rec in todo:
            slot = rec.slot
            if policy.level(slot, now) == slot.level:
                r.plan_change(rec, now, policy)
            elif slot.start_s is None:
                r.leave(slot)
                r.enter(slot, now, policy, self)
            else:
                r.move_running(rec, now, policy, self)
        policy.reranked()
        self.sched.note_change()

    # -- the pass ----------------------------------------------------------------------------------
    def decide(self, now: float) -> Decisions:
        """One pass at `now` (after `refresh`): the jobs to preempt, then the jobs to start.

        A pass that decided nothing is settled: while nothing but level changes no pass can act on
        (`refresh`) happened since, the next pass would walk the same jobs through the same failures
        and decide nothing again, so it is not walked."""
        r, sched = self._r, self.sched
        settled = r.settled == sched.version
        arrived = r.arrived_at == sched.version  # only jobs entered since a settled pass
        ended = r.ended_at == sched.version  # only running jobs ended since a settled pass
        if (settled or arrived or ended) and _skip_quiet and not self.state.sharing:
            r.crossed = set(r.arrived) if arrived else set()  # and levels crossed (`Ranks.note_crossed`)
        rule = _refresh_rule  # the method itself unless a test swapped it (a direct call: no generic one)
        quiet = self.refresh(now) if rule is _REFRESH else rule(self, now)
        if (arrived or ended) and r.crossed is not None and r.running_due(now):
            state = self.state
            if (
                _full(state)
                or (ended and state.idle_total <= len(r.freed))
                or len(r.waiting) > len(r.arrived)
            ):
                # the pass reads running levels first, or jobs that waited before will wait after it
                # (`next_pass_s` then reads them): make them now, noting crossings
                r.catch_up()
            else:  # the pass may read them late, or never (their changes are left for it)
                r.crossed = None
        crossed, r.crossed = r.crossed, None
        r.arrived_at = r.ended_at = -1
        r.arrived.clear()
        if settled and quiet:
            r.settled = sched.version
            return Decisions([], [])
        if ended and crossed is not None:
            out = self._pass(now, crossed, r.freed)
        else:
            out = self._pass(now, crossed if crossed else None)
        r.freed.clear()
        # settled: a pass that decided nothing, or one that only started jobs on GPUs nobody gave back
        # and walked the whole queue (`Ranks.clean`): a job it passed by before a start failed with at
        # least the GPUs it has now, a job after the last start saw the state as it is, so the same
        # pass again decides nothing while only level changes no pass can act on come; or one that
        # preempted, after which a pass would decide nothing (`follow_up_idle`)
        r.settled = -1 if (out.preempted or out.started) and not r.clean else sched.version
        return out

    def _pass(
        self, now: float, crossed: set[float] | None = None, given_back: list[int] | None = None
    ) -> Decisions:
        """The walk of `decide`. `crossed`: the pass follows a settled one, and only running jobs' level
        changes, which crossed these waiting levels, and jobs entered at these levels came since: a job
        of another level has the same victims and the same idle GPUs as in that pass, and fails as it
        did (it is passed by, counted as examined), until a start frees GPUs it does not take (a
        resume, or a victim's GPU left idle), after which every job is tried. `given_back`: besides, running
        jobs ended since, and gave back these GPUs: every job is tried while one of them is idle (a job
        may fit there); once starts took them all, a job of another level has the victims it had, less
        the ended jobs (a job started in between ranks before it: no victim of it), and no idle GPU it
        did not have, and fails as it did."""
        r, sched, state, policy = self._r, self.sched, self.state, self.policy
        r.clean = False
        if not r.waiting:
            return Decisions([], [])
        placer, cost = sched.placer, sched.preemption_cost
        evict = _evict_rule  # the method itself unless a test swapped it (read once per pass)
        out = Decisions([], [])
        preempted = self._preempted
        preempted.clear()
        # shapes that found no GPUs (even by preempting) since the pass last freed anything: a later job
        # of the shape ranks at the same or a higher level, so its victims are among the same jobs (or
        # jobs started since on GPUs that were idle), and on an exclusive cluster a placement that
        # fails with more free fails with less: it fails alike. Suspended jobs resume by their own rule.
        failed = self._failed  # shape ids (`Ranks.shape_id`)
        failed.clear()
        # the same for jobs that differ only in memory the placer does not look at (`core.victims._fit_key`): while
        # no GPU holds a suspended job's memory and no running job would keep it, a job of a failed fit
        # key that no lease can bind fails alike (its victims are among those of the job that failed)
        fits_failed = self._fits_failed.reset()
        # evictions that failed since the pass last freed anything (`FailedEvictions`): a later job at
        # least as hard to place, whose victims are among theirs, fails alike
        doomed = self._doomed
        doomed.clear()
        min_cap = state.min_cap_gb
        memo = not state.sharing
        waiting = r.waiting
        # read from the live queue (no copy), so rebuilt from the cursor whenever the pass changes it;
        # `pending`: the entry a jump landed on, taken before the cursor's next
        entries: Cursor = waiting.cursor()
        pending: Entry | None = None
        rank, known = -1, True  # the current entry's rank in `waiting`, while no change made it unknown
        heads = self._heads  # `Ranks.next_open`'s answers, while the queue stands
        heads.clear()
        # the highest running level, read while the cluster is full or to look for victims (reading it
        # puts running jobs whose level changed in their places, `Ranks.settle`)
        full = _full(state)
        worst = r.worst() if full else _INF
        n_preempted = 0
        examined = 0
        resumes = False
        free_level, free_order = -_INF, 0  # the cursor of the last start that freed GPUs
        top_crossed = highest(crossed) if crossed is not None else _INF  # (-inf: none)
        freeing = given_back is not None  # a GPU an ended job gave back may be idle: every job is tried
        while examined < MAX_EXAMINED:
            examined += 1
            entry = pending
            if entry is None:
                entry = entries.next()
                if entry is None:
                    break
                rank += 1
            else:
                pending = None  # its rank was set by the jump
            # the cursor: where the entry is filed now (a start files its record elsewhere)
            level, order = entry.level, entry.order
            if full and level >= worst:
                break
            if preempted and entry.jid in preempted:
                continue
            if crossed is not None and not freeing and level not in crossed:
                if level > top_crossed:
                    break  # every job left fails as in the settled pass
                continue  # it fails as in the settled pass
            slot = entry.slot
            if (
                failed and r.shape_of(entry) in failed
            ):  # jump the run of failed shapes (each counts as examined)
                nxt = r.next_open(level, order, failed, heads)
                if nxt is None:
                    break
                if full:
                    after = waiting.first_after(level, order)
                    if after is not None and after.level >= worst:
                        break
                at = waiting.rank(nxt.level, nxt.order, False)
                examined += at - (rank + 1 if known else waiting.rank(level, order, True))
                rank, known = at, True
                pending, entries = nxt, waiting.cursor_after(nxt.level, nxt.order)
                continue
            gpus: list[int] | tuple[int, ...] | None
            resumed = bool(slot.suspended_on)
            if fits_failed and not resumed and r.lease_free(entry, cost) and fits_failed.has(slot, min_cap):
                failed.add(r.shape_of(entry))  # as its own try would
                if r.all_fail(failed, level, worst, full, entries.peek()):
                    break
                continue
            r.lease_held = False
            if resumed:
                r.settle()
                gpus = self._resume_on(entry, now, out.preempted, preempted)
            else:
                gpus = find_gpus(state, placer, slot)
                if gpus is None:
                    if not full:
                        worst = r.worst()  # settles `running` for `_evict_for` too
                    if level < worst:
                        if evict is not _EVICT_FOR:
                            gpus = evict(self, slot, now, out.preempted, preempted)
                        elif (
                            doomed
                            and not state.suspended_n
                            and not r.suspend_running
                            and doomed.covers(slot, min_cap, r.lease_free(entry, cost))
                        ):
                            self._note_leases(entry, now, cost)  # what its count would note, then fail
                        else:
                            gpus = self._evict(entry, now, out.preempted, preempted, placer, cost)
                            if gpus is None and memo and not state.suspended_n and not r.suspend_running:
                                doomed.add(slot, min_cap, r.lease_free(entry, cost))
            if gpus is not None:
                freed = len(out.preempted) > n_preempted or resumed
                resumes = resumes or resumed
                r.leave(slot)
                sched.start_waiting(slot, gpus, now, out.started)
                r.enter(slot, now, policy, self)
                entry.start_level = slot.level
                if freed:
                    free_level, free_order = level, order
                    if crossed is not None and (resumed or left_idle(out.preempted, n_preempted, gpus)):
                        crossed = None  # GPUs came free: every job is tried from here on
                    failed.clear()
                    fits_failed.clear()
                    doomed.clear()
                    n_preempted = len(out.preempted)
                entries = waiting.cursor_after(level, order)
                heads.clear()
                known = False
                if freeing and given_back is not None:
                    freeing = any_idle(state, given_back)
                full = _full(state)
                worst = r.worst() if full else _INF
            elif memo and not resumed and not r.lease_held:  # a lease binds this job only
                failed.add(r.shape_of(entry))
                if not state.suspended_n and not r.suspend_running:
                    fits_failed.add(slot, min_cap)
                if r.all_fail(failed, level, worst, full, entries.peek()):
                    break  # every job it could still reach fails alike: none starts in this pass
        r.clean = (
            examined < MAX_EXAMINED
            and not resumes
            and (
                not out.preempted
                or follow_up_idle(
                    r,
                    state,
                    placer,
                    [r.rec[p.jid] for p in out.preempted],
                    free_level,
                    free_order,
                    self._tally,
                )
            )
        )
        return out

    def _resume_on(
        self, by: JobRank, now: float, out: list[Preempted], preempted: set[int]
    ) -> tuple[int, ...] | None:
        """A job suspended in place (its record `by`) resumes on its own GPUs once no running job is on
        them, preempting those of a strictly higher level; None while it cannot."""
        r, sched, state = self._r, self.sched, self.state
        slot, cost = by.slot, sched.preemption_cost
        gpus = slot.suspended_on
        on = set(gpus)
        blockers = [e for e in r.running if on.intersection(e.slot.alloc)]
        for g in gpus:  # every occupant must be a suspended job or a blocker (not offline, not foreign)
            if state.gpu_njobs[g] != state.suspended_n.get(g, 0) + sum(g in b.slot.alloc for b in blockers):
                return None
        if any(b.slot.level <= slot.level or b.mode == "never" for b in blockers):
            return None
        if [b for b in blockers if r.leased(b, by, now, cost)]:  # every lease noted, so the pass asks again
            return None
        for victim in blockers:
            out.append(sched.preempt(victim.jid, now))
            preempted.add(victim.jid)
        state.drop_suspended(gpus, slot.mem_gb)
        slot.suspended_on = ()
        sched.note_change()
        return gpus

    def _evict_for(
        self, slot: JobSlot, now: float, out: list[Preempted], preempted: set[int]
    ) -> list[int] | tuple[int, ...] | None:
        """GPUs for `slot` after preempting running jobs of a higher level, or None (nothing changed).

        Victims are tried from the highest level down until the job fits. A victim of mode `suspend`
        keeps its memory: its GPUs serve only a newcomer whose memory fits beside it. Jobs of mode
        `never`, and jobs whose lease has not ended, are passed by.

        On an exclusive cluster without suspended jobs, victims are only counted (`VictimTally`) until
        their GPUs could host the job (enough idle in all, and on one node unless it may span), and
        only then released and the placer asked: the placer answers None while they could not."""
        sched = self.sched
        return self._evict(self._r.rec[slot.jid], now, out, preempted, sched.placer, sched.preemption_cost)

    def _note_leases(self, by: JobRank, now: float, cost: PreemptionCost) -> None:
        """What a failing eviction for `by` notes besides failing: every lease that binds one of its
        victims (`Ranks.lease_binds`: the pass is woken when it ends)."""
        r = self._r
        if r.lease_free(by, cost):
            return
        level = by.slot.level
        for victim in r.running.above(level):
            if victim.mode != "never":
                r.lease_binds(victim, level, now, cost)

    def _tally_for(self, slot: JobSlot) -> VictimTally:
        """The queue's one `VictimTally`, counting from nothing for `slot`."""
        tally = self._tally
        if tally is None:
            tally = self._tally = VictimTally(self.state, slot)
            return tally
        return tally.restart(self.state, slot)

    def _evict(
        self,
        by: JobRank,
        now: float,
        out: list[Preempted],
        preempted: set[int],
        placer: Placer,
        cost: PreemptionCost,
    ) -> list[int] | tuple[int, ...] | None:
        """`_evict_for` of the job whose record is `by`, with the pass's placer and cost model."""
        r, sched, state = self._r, self.sched, self.state
        slot = by.slot
        counted: list[JobRank] = []  # the victims counted, in order
        freed: list[bool] = []  # counted[k] is released in `state` (else only counted)
        n_freed = 0
        tally: VictimTally | None = (
            self._tally_for(slot) if not state.sharing and not state.suspended_n and slot.gpus > 0 else None
        )
        # a node-local placer, a job on one node: only victims on nodes that could then host it are
        # released (the others would be put back); the placer answers as if every one were
        if placer is not self._placer:  # (a class attribute: read once per placer, not per eviction)
            self._placer, self._node_local = placer, placer.node_local
        local = tally is not None and not slot.may_span and self._node_local
        lease_free = r.lease_free(by, cost)  # else `leased` comes down to `lease_binds`
        gpus: list[int] | tuple[int, ...] | None = None
        level = slot.level
        for victim in r.running.above(level):
            mode = victim.mode
            if mode == "never" or (not lease_free and r.lease_binds(victim, level, now, cost)):
                continue
            counted.append(victim)
            freed.append(False)
            hosts: list[int] | None = None
            if tally is not None and mode != "suspend":
                if not tally.add(victim.slot.alloc):
                    continue  # the placer cannot place it yet
                if local:
                    hosts = tally.hosts()
                tally.restart(state, slot)  # counts from the state once the counted ones are released
            else:
                tally = None  # a victim that keeps its memory: every later one is released and tried
            n_freed += release_counted(state, counted, freed, hosts)
            if state.sharing or state.idle_total >= slot.gpus or state.suspended_n:
                gpus = find_gpus(state, placer, slot)
                if gpus is not None:
                    break
                if hosts is not None:
                    n_freed += release_counted(
                        state, counted, freed, None
                    )  # every counted one: the count goes on
        if not n_freed:
            return None  # nothing was released: nothing to undo
        taken: tuple[int, ...] = tuple(gpus) if gpus is not None else ()
        # a victim in the way stays released on an exclusive cluster (the Scheduler is told so); on a
        # sharing one every victim is undone and preempted anew (memory sums in the same order)
        keep = gpus is not None and not state.sharing
        in_way: list[JobRank] = []  # (kept: the victims in the way, each found once)
        for k in range(len(counted)):  # undo: every victim when nothing fits, else those not in the way
            if not freed[k]:
                continue
            rv = counted[k]
            v = rv.slot
            if keep and overlaps(taken, v.alloc):
                in_way.append(rv)
                continue
            if rv.mode == "suspend":
                state.drop_suspended(v.alloc, v.mem_gb)
            state.place(v.alloc, v.mem_gb, v.need)
        if gpus is None:
            return None
        if not keep:  # (sharing: every victim was undone; those in the way are preempted anew)
            in_way = [rv for rv in counted if overlaps(taken, rv.slot.alloc)]
        for rv in in_way:
            out.append(sched.preempt(rv.jid, now, keep))
            preempted.add(rv.jid)
        return gpus


# module attributes read at each call (a test puts a plain rule in one's place to compare schedules);
# while one is the method itself, the method is called directly
_Evict = Callable[
    [PreemptiveQueue, JobSlot, float, list[Preempted], set[int]], list[int] | tuple[int, ...] | None
]
_REFRESH: Final[Callable[[PreemptiveQueue, float], bool]] = PreemptiveQueue.refresh
_FITS_SHAPE: Final[Callable[[PreemptiveQueue, JobSlot], tuple[object, ...]]] = PreemptiveQueue.fits_shape
_EVICT_FOR: Final[_Evict] = PreemptiveQueue._evict_for
_refresh_rule: Callable[[PreemptiveQueue, float], bool] = _REFRESH
_shape_rule: Callable[[PreemptiveQueue, JobSlot], tuple[object, ...]] = _FITS_SHAPE
_evict_rule: _Evict = _EVICT_FOR
_skip_quiet: bool = True  # False: the clock stops at every level change while a job waits


def _full(state: ClusterState) -> bool:
    """Whether an exclusive cluster is full (no idle GPU, no suspended job)."""
    return not state.sharing and state.idle_total == 0 and not state.suspended_n

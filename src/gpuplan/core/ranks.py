"""The preemptive queue's records (core/preemption.py's pass reads them): one record per job (`JobRank`,
core/rankseq.py), the waiting and running records by rank, the heap of level changes, waiting jobs by level
and fits-shape, and the lease wakes. A compiled (native) class, so the pass reads them at C speed; what it
needs of the queue (a job's fits-shape) and of the cost model (`PreemptionCost`) are protocols, so it
imports neither."""

from __future__ import annotations

import math
from heapq import heappop, heappush
from typing import Any, Final, Protocol

from mypy_extensions import i64

from gpuplan.core.dueheap import DueHeap
from gpuplan.core.preemptive import LevelRule
from gpuplan.core.rankseq import Entry, JobRank, RankedSeq, ranked_before
from gpuplan.core.sortedseq import SortedSeq
from gpuplan.core.state import ClusterState
from gpuplan.core.view import JobSlot
from gpuplan.model import Job
from gpuplan.preempt_modes import preempt_mode_of

__all__ = [
    "LEASE_TOL_S",
    "MAX_LEVELS",
    "Cost",
    "DueHeap",
    "Entry",
    "JobRank",
    "Ranks",
    "ShapeSource",
    "highest",
]

_INF: Final = math.inf
_NAN: Final = math.nan

MAX_LEVELS: Final = 64
"""More distinct waiting levels than this: a pass does not look for the point where all fail."""

MAX_LOUD_SCAN: Final = 64
"""More running jobs than this: `next_loud_s` gives the next change, loud or not. Its scan visits each
running job below the highest waiting level; with hundreds running (10,000 Poisson jobs on 1,024 GPUs,
las:quantum=300: 536 visited per scan, 4.5 stops saved) it costs more than the stops it saves (with 22
running on 64 GPUs: 6 stops saved per scan)."""

_RESORT_PER: Final = 32
"""`settle` sorts the running records again (`RankedSeq.resort`, ~40 instructions a record) rather than
refiling each moved one (~1,000) while they are at most this many per moved record."""

LEASE_TOL_S: Final = 1e-9
"""A lease that ends within this after now counts as ended (`Ranks.lease_binds`); what follows a lease
end (the refresh, the first loud change, the stops passed over) uses the same reach."""

_SCAN_FIRST: Final = 4
"""`_first_at_least` reads this many levels in turn before it halves the rest."""

_ORDER_GAP: Final = 1 << 20
"""The orders of two jobs given one after the other, last in static key order (the common case: jobs
arrive in that order), are this far apart; a job that goes between two takes the midpoint."""

_ORDER_LIMIT: Final = 1 << 60
"""Orders stay within +- this (the compiled core's fast ints); past it, or with no int left between
two neighbours, every job gets a new order (`Ranks.reorder`)."""


class ShapeSource(Protocol):
    """What the records ask of their queue (`PreemptiveQueue`): a waiting job's fits-shape."""

    def shape(self, slot: JobSlot) -> tuple[object, ...]: ...


class Cost(Protocol):
    """What the records ask of the cost model (`core.preemption.PreemptionCost`)."""

    def overhead_s(self, job: Job) -> float: ...

    def lease_by_s(self, overhead_s: float, resumed: bool) -> float: ...


def highest(levels: set[float]) -> float:
    """The highest of `levels`, -inf for none (`max` is a generic call that compares objects)."""
    top = -_INF
    for level in levels:
        if level > top:
            top = level
    return top


def _first_at_least(levels: list[float], level: float) -> int:
    """The index of the first of the ascending `levels` at or above `level` (`bisect_left`, compiled:
    the library's is a generic call with a boxed float). The first few are read in turn: a running
    job's level, the most asked, mostly lies below all but a few waiting ones."""
    n: i64 = len(levels)
    head: i64 = n if n < _SCAN_FIRST else _SCAN_FIRST
    i: i64 = 0
    while i < head:
        if levels[i] >= level:
            return i
        i += 1
    lo: i64 = head
    hi: i64 = n
    while lo < hi:
        mid = (lo + hi) >> 1
        if levels[mid] < level:
            lo = mid + 1
        else:
            hi = mid
    return lo


class Ranks:
    """The preemptive queue's records, a compiled (native) class: the pass reads them at C speed.

    rec: each job's record (`JobRank`), from its first entry until `forget`; waiting, running: the
    records by rank; keys, lo_key, hi_key (lo_order, hi_order): the static keys in order (once one fell
    between two) and the lowest and highest key given an order (their orders: `order_of`); changes,
    wait_changes: running and waiting jobs by their next level change (`DueHeap`s); now, rule: the instant of the last refresh and the levels' rule, at which a
    running job's change left for the first reader of running levels is made (`catch_up`); by_shape:
    each shape id's waiting records; wakes (and wake_set, its members): ends of leases that held a preemption back; lease_held: a lease held a preemption back in
    this job's try (no shape memo); suspend_running: running jobs of preempt mode `suspend` (they keep
    their memory); moved: running records whose place in `running` is left for `settle`; exact_shapes:
    shapes keep memory that every GPU has once a job that keeps its memory when preempted (mode
    `suspend`) or waits suspended is known, on sharing clusters, and under leases (las: a job a lease
    may bind is tried for itself, as its exact shape says); settled: the scheduler's version after a
    pass that decided nothing, or that was `clean` (-1: none); clean: the last pass walked the whole
    queue, resumed nobody, and only started jobs on GPUs nobody gave back, or preempted and a pass
    right after it would decide nothing (`core.victims.follow_up_idle`); crossed: while the refresh
    after a settled pass is made, the waiting levels running jobs' changes crossed (None: not kept, or
    something else changed); arrived_at, arrived: the scheduler's version while only submitted jobs
    entered since a settled pass (-1 otherwise), and their levels (`PreemptiveQueue.submitted`); ended_at,
    freed: the same while only running jobs ended, and the GPUs they gave back (`PreemptiveQueue.finished`)."""

    def __init__(self, state: ClusterState, endless: bool) -> None:
        self.endless = endless
        self.rec: dict[int, JobRank] = {}
        self.last: JobRank | None = None  # the record `known` last gave (asked again: no lookup)
        self.waiting = RankedSeq()  # by (level, order)
        self.running = RankedSeq()
        self.keys: SortedSeq[tuple[Any, ...]] | None = None  # built when a key falls between two
        self.lo_key: tuple[Any, ...] | None = None  # bounds of every key given an order (`order_of`)
        self.hi_key: tuple[Any, ...] | None = None
        self.lo_order = 0
        self.hi_order = 0
        self.changes = DueHeap()  # running jobs by their next change (`catch_up` makes those due)
        self.wait_changes = DueHeap()  # waiting jobs by theirs (a refresh makes those due at once)
        self.now = -_INF
        self.rule: LevelRule | None = None
        # shapes by a small id each (`shape_id`): a pass's sets and these dicts hash an int, not a tuple
        self.shape_ids: dict[tuple[object, ...], int] = {}
        self.by_shape: dict[int, RankedSeq] = {}  # shape id -> its waiting records
        self.wakes: list[float] = []
        self.wake_set: set[float] = set()
        self.lease_held = False
        self.suspend_running = 0
        self.exact_shapes: bool = state.sharing or endless
        self.settled = -1
        self.clean = False  # the last pass is settled though it acted
        self.moved: list[JobRank] = []
        self.loud_at, self.loud_for, self.loud_s = _NAN, -1, _INF  # `next_loud_s`'s last answer
        self.levels: list[float] = []  # the waiting levels, ascending (`count_level`)
        self.level_counts: list[int] = []  # waiting jobs per level, by index in `levels`
        self.level_epoch = 0
        self.arrived_at = -1  # the scheduler's version once only jobs entered since a settled pass
        self.arrived: set[float] = set()  # their levels
        self.ended_at = -1  # the scheduler's version once only running jobs ended since a settled pass
        self.freed: list[int] = []  # the GPUs they gave back
        self.crossed: set[float] | None = None  # waiting levels crossed since a settled pass (`note_crossed`)
        # waiting records not yet indexed by shape (`shape_of`): a job that starts at its first try in
        # a pass (most do, on a cluster with room) is never indexed
        self.unindexed: list[JobRank] = []
        self.source: ShapeSource | None = None  # the queue that gives a job's fits-shape

    # -- records and their orders --------------------------------------------------------------------
    def record(self, slot: JobSlot) -> JobRank:
        """The job's record, made at its first entry (with its order and preempt mode)."""
        rec = self.known(slot)
        if rec is None:
            mode = preempt_mode_of(slot.job.meta)  # (`Job.preempt_mode`'s rule, without the property)
            rec = JobRank(slot, self.order_of(slot.key), mode)
            self.rec[slot.jid] = rec
            if not -_ORDER_LIMIT < rec.order < _ORDER_LIMIT:
                self.reorder()
        elif rec.slot is not slot:
            rec.slot = slot
        self.last = rec
        return rec

    def known(self, slot: JobSlot) -> JobRank | None:
        """The job's record, None before its first entry. The record last given is kept (a preemption
        or a start asks for one job's two or three times in a row: no lookup by handle)."""
        rec = self.last
        if rec is None or rec.slot is not slot:
            rec = self.rec.get(slot.jid)
            if rec is None:
                return None
            self.last = rec
        return rec

    def order_of(self, key: tuple[Any, ...]) -> int:
        """The order of a new job (not yet in `rec`) of static key `key` (`JobSlot.key`, which ends in its handle): an int
        that orders it among the jobs of its level as its key does, kept until `forget`. Records are
        then compared by two numbers, never by their keys.

        A key after (or before) every key given an order so far takes the last (first) order plus (minus)
        `_ORDER_GAP`: only the two extreme keys are kept for that (`lo_key`, `hi_key`; those of jobs
        gone since still bound the others). The first key that falls between them builds the sorted
        keys (`keys`), and a key then takes the midpoint of its neighbours' orders."""
        keys, lo, hi = self.keys, self.lo_key, self.hi_key
        if keys is None and (lo is None or hi is None):  # the first job
            got = 0
            self.lo_key = self.hi_key = key
            self.lo_order = self.hi_order = got
        elif keys is None and hi is not None and hi < key:  # the common case: after every other job
            got = self.hi_order + _ORDER_GAP
            self.hi_key, self.hi_order = key, got
        elif keys is None and lo is not None and key < lo:
            got = self.lo_order - _ORDER_GAP
            self.lo_key, self.lo_order = key, got
        else:
            got = self.between(key)
        return got  # beyond +-_ORDER_LIMIT: `record` gives every job a new order

    def between(self, key: tuple[Any, ...]) -> int:
        """The order of a key that does not fall after or before every other: the midpoint of its
        neighbours' in the sorted keys (built now if they are not kept yet), or `_ORDER_LIMIT` when no
        int is left between them."""
        keys = self.sorted_keys()
        keys.add(key)
        before, after = keys.neighbours(key)
        rec = self.rec
        lo = rec[before[-1]].order if before is not None else None
        hi = rec[after[-1]].order if after is not None else None
        if lo is None:
            return hi - _ORDER_GAP if hi is not None else 0
        if hi is None:
            return lo + _ORDER_GAP
        return (lo + hi) >> 1 if hi - lo >= 2 else _ORDER_LIMIT

    def sorted_keys(self) -> SortedSeq[tuple[Any, ...]]:
        """The static keys of the jobs given an order, sorted (built from the records on first use)."""
        keys = self.keys
        if keys is None:
            keys = self.keys = SortedSeq(r.slot.key for r in self.rec.values())
        return keys

    def reorder(self) -> None:
        """Give every job a new order, `_ORDER_GAP` apart in static key order. The records keep their
        places in every sequence: the new orders are in the old ones' order."""
        rec = self.rec
        for k, key in enumerate(self.sorted_keys()):
            rec[key[-1]].order = k * _ORDER_GAP

    def forget(self, jid: int) -> None:
        """The job left for good (after `leave`): its record goes."""
        rec = self.rec.get(jid)
        if rec is None:
            return
        del self.rec[jid]
        if self.last is rec:
            self.last = None
        keys = self.keys
        if keys is not None:
            keys.remove(rec.slot.key)
            if not keys:  # nobody left: back to the two bounds, from the next job on
                self.keys = None
                self.lo_key = self.hi_key = None
        elif not self.rec:
            self.lo_key = self.hi_key = None

    def copy(self, state: ClusterState, slots: dict[int, JobSlot]) -> Ranks:
        """A copy on `state` whose records name `slots` (a forked scheduler's records)."""
        self.settle()
        self.index_all()
        new = Ranks(state, self.endless)
        fresh = {jid: rec.copy_for(slots[jid]) for jid, rec in self.rec.items()}
        new.rec = fresh
        new.waiting = self.waiting.mapped(fresh)
        new.running = self.running.mapped(fresh)
        new.by_shape = {shape: same.mapped(fresh) for shape, same in self.by_shape.items()}
        new.changes = self.changes.mapped(fresh)  # after the records, whose places they set
        new.wait_changes = self.wait_changes.mapped(fresh)
        new.now, new.rule = self.now, self.rule
        new.level_counts, new.level_epoch = list(self.level_counts), self.level_epoch
        new.levels = list(self.levels)
        new.shape_ids = dict(self.shape_ids)
        new.wakes = list(self.wakes)
        new.wake_set = set(self.wakes)
        new.suspend_running = self.suspend_running
        new.exact_shapes = self.exact_shapes
        new.keys = self.keys.copy() if self.keys is not None else None
        new.lo_key, new.hi_key = self.lo_key, self.hi_key
        new.lo_order, new.hi_order = self.lo_order, self.hi_order
        return new

    def mode(self, slot: JobSlot) -> str:
        """The job's preempt mode (read once, at its first entry)."""
        rec = self.known(slot)
        return rec.mode if rec is not None else slot.job.preempt_mode

    # -- leases -------------------------------------------------------------------------------------
    def overhead(self, rec: JobRank, cost: Cost) -> float:
        """The job's restart overhead under `cost` (`Cost.overhead_s`), read once per job and cost."""
        if rec.overhead_cost is not cost:
            rec.overhead, rec.overhead_cost = cost.overhead_s(rec.slot.job), cost
        return rec.overhead

    def restart_costs(self, rec: JobRank, cost: Cost) -> bool:
        return self.overhead(rec, cost) > 0.0

    def lease_free(self, by: JobRank, cost: Cost) -> bool:
        return not self.endless or not by.slot.preemptions or not self.restart_costs(by, cost)

    def leased(self, victim: JobRank, by: JobRank, now: float, cost: Cost) -> bool:
        """`by` may not take the victim's GPUs now: the victim's lease has not ended, `by` pays a
        restart to run, and only the victim's own service since its (re)start put it above `by` (its
        level then was not higher). The pass asks again when the lease ends."""
        if not self.endless:
            return False  # its levels run out: a trade of places ends at the last one
        if not by.slot.preemptions or not self.restart_costs(by, cost):
            return False  # its first start (or one that costs no restart): nothing to trade back
        return self.lease_binds(victim, by.slot.level, now, cost)

    def lease_binds(self, victim: JobRank, level: float, now: float, cost: Cost) -> bool:
        """`leased` for a job of `level` that no first start or free restart exempts."""
        if victim.start_level > level:
            return False  # it outranked `by` when it started: its lease is not what makes it a victim
        end = self.lease_end_s(victim, cost)
        if end <= now + LEASE_TOL_S:
            return False
        if end not in self.wake_set:
            heappush(self.wakes, end)
            self.wake_set.add(end)
        self.lease_held = True
        return True

    def lease_end_s(self, rec: JobRank, cost: Cost) -> float:
        """When the running job may first be preempted under `cost` (its start plus
        `PreemptionCost.lease_s`): kept for its run (a resume or not) and cost, read at each eviction that
        counts it (no call to the cost model)."""
        slot = rec.slot
        start = slot.start_s if slot.start_s is not None else -_INF
        resumed = slot.preemptions > 0
        if rec.overhead_cost is cost and rec.lease_start_s == start and rec.lease_resumed == resumed:
            return rec.lease_end_s
        end = start + cost.lease_by_s(self.overhead(rec, cost), resumed)
        rec.lease_end_s, rec.lease_start_s, rec.lease_resumed = end, start, resumed
        return end

    def next_change_s(self) -> float:
        """`PreemptiveQueue.next_change_s`: the first queued change (running jobs' changes due by the
        last refresh are made first, `catch_up`), or the first lease end."""
        self.catch_up()
        nxt = min(self.changes.first_s(), self.wait_changes.first_s())
        return min(nxt, self.wakes[0]) if self.wakes else nxt

    def next_loud_s(self) -> float:
        """`next_change_s` after a settled pass (one that decided nothing, or `clean`; its refresh made
        every running change due by then): the first change a pass may act on. A running job's change
        is quiet (`quiet_move`) until its level rises above the lowest waiting level at or above its
        own, and its rule says when that is (`LevelRule.rise_s`); the clock need not stop at the quiet
        ones (each would be a settled pass's verdict, skipped). A rule that does not say, or more
        running jobs than `MAX_LOUD_SCAN`, stops at each change. Kept for the instant and the settled
        pass it was asked at (the clock asks twice at an end that no longer holds)."""
        if self.loud_at == self.now and self.loud_for == self.settled:
            return self.loud_s
        self.catch_up()
        nxt = self.wait_changes.first_s()
        wake = self.wakes[0] if self.wakes else _INF
        if wake < nxt:
            nxt = wake
        rule = self.rule
        if rule is None or not rule.rises or not self.waiting or len(self.running) > MAX_LOUD_SCAN:
            first = self.changes.first_s()
            if first < nxt:
                nxt = first
        else:
            epoch = self.level_epoch
            levels = self.levels
            for rec in self.changes.items:  # (a job whose level never changes is never loud)
                level = rec.slot.level
                if rec.rise_epoch == epoch and level <= rec.rise_of:
                    t = rec.rise_s  # no waiting level came between its level and its bound, nor went there
                else:
                    at = _first_at_least(levels, level)
                    bound = levels[at] if at < len(levels) else _INF  # inf: above every waiting level
                    t = rule.rise_s(rec.slot, bound) if bound < _INF else _INF
                    rec.rise_s, rec.rise_of, rec.rise_epoch = t, bound, epoch
                due = rec.due
                if t < due:
                    t = due  # (at its next change at the earliest: a crossing rounded to now waits)
                elif due < t and wake <= due + LEASE_TOL_S:
                    t = due  # a pass there sees the lease as ended (`lease_binds`' tolerance)
                if t < nxt:
                    nxt = t
        self.loud_at, self.loud_for, self.loud_s = self.now, self.settled, nxt
        return nxt

    def count_level(self, level: float, by: int) -> None:
        """A waiting job of `level` came (`by` 1) or went (-1). A level that appears or goes ends the
        bounds `next_loud_s` keeps that it moves: a running job's whose level is at most it and whose
        bound is above it (it appeared), or whose bound it was (it went); past `MAX_LOUD_SCAN` running
        jobs, every bound (`level_epoch`)."""
        levels, counts = self.levels, self.level_counts  # (lists: no float hashed or boxed to count)
        at = _first_at_least(levels, level)
        if at < len(levels) and levels[at] == level:
            k = counts[at] + by
            if k:
                counts[at] = k
            else:
                levels.pop(at)  # it goes
                counts.pop(at)
        else:
            k = by
            levels.insert(at, level)  # it appears
            counts.insert(at, k)
        if k and (k > 1 or by < 0):
            return  # the same levels wait
        items = self.changes.items
        if len(items) > MAX_LOUD_SCAN:
            self.level_epoch += 1
        elif k:
            for rec in items:
                if rec.slot.level <= level < rec.rise_of:
                    rec.rise_of = _NAN
        else:
            for rec in items:
                if rec.rise_of == level:
                    rec.rise_of = _NAN

    def running_due(self, now: float) -> bool:
        """Whether a running job's level change is due by `now`."""
        return self.changes.first_s() <= now

    def catch_up(self) -> bool:
        """Make every running job's level change due by the last refresh (`now`), at that instant: a
        refresh leaves them for the first reader of running levels (`settle`, `next_change_s`), since a
        pass that reads none (nobody waits, or every waiting job finds idle GPUs) needs none of them.
        The levels are a function of the instant, so they come out as if moved at the refresh.
        Returns whether every move was one no pass can act on (`quiet_move`)."""
        ch, now = self.changes, self.now
        if ch.first_s() > now:
            return True
        rule = self.rule
        source = self.source
        assert rule is not None and source is not None  # set by the queue before any change is queued
        quiet = True
        due = ch.due_by(now)
        for rec in due:  # each moves once: its next change is after `now`
            before = rec.slot.level
            self.move_running(rec, now, rule, source)  # its next change (later) moves it down
            if quiet or self.crossed is not None:
                after = rec.slot.level
                if not self.quiet_move(before, after):
                    quiet = False
                    self.note_crossed(before, after)
        ch.moved(due)
        return quiet

    def note_crossed(self, before: float, after: float) -> None:
        """A running job's level went from `before` to `after`, not quietly: the waiting levels it
        crossed go in `crossed` (while it is kept; a fall makes it None: any job may act)."""
        crossed = self.crossed
        if crossed is None:
            return
        if after < before:
            self.crossed = None
            return
        levels = self.levels
        i = _first_at_least(levels, before)
        while i < len(levels) and levels[i] < after:
            crossed.add(levels[i])
            i += 1

    def quiet_move(self, before: float, after: float) -> bool:
        """Whether a running job's level change from `before` to `after` can move no decision of a pass
        that follows one that decided nothing (with nothing else changed since).

        Below every waiting level, it is nobody's victim before or after. A rise past no waiting level
        (none in [before, after)) leaves every waiting job's victims the same set (those of a higher
        level), so every eviction that failed fails again (it fails only once all of them are counted,
        whatever their order), and a suspended job's blockers stay above or below it as they were; the
        highest running level rises past no waiting job either, so the pass reaches the same jobs."""
        levels = self.levels
        lowest = levels[0] if levels else _INF
        if before <= lowest and after <= lowest:
            return True
        return after >= before and not self.waiting_in(before, after)

    def pop_wake(self) -> None:
        self.wake_set.discard(heappop(self.wakes))

    # -- entries ------------------------------------------------------------------------------------
    def enter(self, slot: JobSlot, now: float, policy: LevelRule, queue: ShapeSource) -> None:
        rec = self.record(slot)
        slot.level = rec.level = policy.level(slot, now)
        suspends = rec.mode == "suspend"
        if not self.exact_shapes and (slot.suspended_on or suspends):
            self.keep_memory_in_shapes(queue)
        self.source = queue
        if slot.start_s is None:
            self.waiting.add(rec)
            rec.waits = True
            self.unindexed.append(rec)
            self.count_level(rec.level, 1)
        else:
            self.running.add(rec)
            rec.rise_of = _NAN  # its run's own crossings (`next_loud_s`)
            if suspends:
                self.suspend_running += 1
        self.plan_change(rec, now, policy)

    def plan_change(self, rec: JobRank, now: float, policy: LevelRule) -> None:
        """Queue the job's next level change (in place of the one it has queued): a running job's
        whose levels only rise changes when its level rises above the one it has (`LevelRule.rise_s`,
        its `slot.level` made at `now`)."""
        slot = rec.slot
        running = slot.start_s is not None
        t = policy.rise_s(slot, slot.level) if running and policy.rises else policy.next_change_s(slot, now)
        self.queue_change(rec, t, now, running)

    def queue_change(self, rec: JobRank, t: float, now: float, running: bool) -> None:
        """`plan_change` of a change at `t` (inf: none)."""
        if t < _INF:
            if t <= now:
                t = now + 1e-6  # a crossing rounded to now: look again just after it
            if rec.due == t:
                return  # the change it has queued stands (gittins' rerank_all moved no crossing)
        heap = self.changes if running else self.wait_changes
        if t < _INF:
            heap.place(rec, t)
        else:
            heap.remove(rec)
            rec.due = t

    def move_running(self, rec: JobRank, now: float, policy: LevelRule, queue: ShapeSource) -> None:
        """A running job's level changed: its new level and next change now; its place in `running`
        when a pass next reads that order (`settle`). A pass reads it only to look for victims (and
        the highest level, while the cluster is full), so a change no pass looks at costs no move."""
        slot = rec.slot
        t = policy.advance(slot, now)  # its level (on the slot) and its next change
        if not self.exact_shapes and (slot.suspended_on or rec.mode == "suspend"):
            self.keep_memory_in_shapes(queue)
        if not rec.moved:
            rec.moved = True
            self.moved.append(rec)
        self.queue_change(rec, t, now, True)

    def settle(self) -> None:
        """Put every running job that `move_running` left behind in its place in `running` (what a
        move at each change would have left: the order is a function of the levels and orders), after
        making the running jobs' changes due by the last refresh (`catch_up`)."""
        self.catch_up()
        moved = self.moved
        if not moved:
            return
        running = self.running
        if running.flat() and len(moved) * _RESORT_PER >= len(running):
            for rec in moved:  # every level at once, then one sort
                if rec.moved:
                    rec.moved = False
                    rec.level = rec.slot.level
            running.resort()
        else:
            for rec in moved:
                if not rec.moved:
                    continue  # it left `running` since
                rec.moved = False
                level = rec.slot.level
                if rec.level == level:
                    continue  # back at the level it is filed under
                running.refile(rec, level)
        moved.clear()

    def leave(self, slot: JobSlot) -> None:
        """Take the job's record out of its sequences (it keeps its record until `forget`); its queued
        change no longer holds (the next `plan_change` queues one anew)."""
        rec = self.known(slot)
        if rec is None:
            raise KeyError(slot.jid)  # (it never entered)
        if slot.start_s is None:
            self.waiting.remove(rec)
            self.wait_changes.remove(rec)
            rec.due = _INF
            rec.waits = False
            self.count_level(rec.level, -1)
            shape = rec.shape
            if shape < 0:
                return  # never indexed
            rec.shape = -1
            same = self.by_shape[shape]
            same.remove(rec)
            if not same:
                del self.by_shape[shape]
        else:
            self.running.remove(rec)  # at the level it is filed under, moved or not
            self.changes.remove(rec)
            rec.due = _INF
            rec.moved = False
            if rec.mode == "suspend":
                self.suspend_running -= 1

    # -- shapes -------------------------------------------------------------------------------------
    def keep_memory_in_shapes(self, queue: ShapeSource) -> None:
        self.exact_shapes = True
        self.by_shape.clear()
        self.unindexed.clear()
        for rec in self.waiting:
            self.index_shape(rec, rec.level, queue.shape(rec.slot))

    def shape_of(self, rec: JobRank) -> int:
        """The id of a waiting job's fits-shape, indexing it now if it is not yet."""
        if rec.shape < 0:
            source = self.source
            assert source is not None  # set by the `enter` that filed it
            self.index_shape(rec, rec.level, source.shape(rec.slot))
        return rec.shape

    def index_all(self) -> None:
        """Index every waiting job not yet indexed (what reads every shape, `next_open` and `all_fail`,
        calls it first)."""
        if not self.unindexed:
            return
        for rec in self.unindexed:
            if rec.waits and rec.shape < 0:
                self.shape_of(rec)
        self.unindexed.clear()

    def shape_id(self, shape: tuple[object, ...]) -> int:
        """The small int that stands for `shape` (equal shapes, one id; ids are never reused)."""
        ids = self.shape_ids
        got = ids.get(shape)
        if got is None:
            got = ids[shape] = len(ids)
        return got

    def index_shape(self, rec: JobRank, level: float, shape_key: tuple[object, ...]) -> None:
        """File a waiting job's record under its fits-shape (`by_shape`)."""
        shape = rec.shape = self.shape_id(shape_key)
        same = self.by_shape.get(shape)
        if same is None:
            same = self.by_shape[shape] = RankedSeq()
        same.add(rec)

    def next_open(
        self, level: float, order: int, failed: set[int], heads: dict[object, JobRank | None]
    ) -> JobRank | None:
        """The first waiting record after (`level`, `order`), the cursor, of a shape not in `failed`, or
        None. `heads` keeps each shape's answer for a cursor at or before this one, valid while the
        queue does not change (the caller clears it then): one still after the cursor is the answer
        again, without a search."""
        self.index_all()
        best: JobRank | None = None
        for shape, same in self.by_shape.items():
            if shape in failed:
                continue
            if same in heads:
                first = heads[same]
                if first is None:
                    continue
                if not (level < first.level or (level == first.level and order < first.order)):
                    first = heads[same] = same.first_after(level, order)
            else:
                first = heads[same] = same.first_after(level, order)
            if first is not None and (best is None or ranked_before(first, best)):
                best = first
        return best

    def all_fail(
        self, failed: set[int], level: float, worst: float, full: bool, nxt: JobRank | None = None
    ) -> bool:
        """Whether every waiting job of a level from `level` on (below `worst` while `full`) has a
        shape in `failed`. `nxt`: the waiting job after the pass's cursor, which answers most asks at
        once."""
        if nxt is not None and not (full and nxt.level >= worst) and self.shape_of(nxt) not in failed:
            return False
        self.index_all()
        if len(self.levels) > MAX_LEVELS:
            return False
        for shape, same in self.by_shape.items():
            if shape in failed:
                continue
            first = same.first_at_level(level)  # its first job from `level` on: any later one ranks higher
            if first is not None and not (full and first.level >= worst):
                return False
        return True

    def waiting_in(self, lo: float, hi: float) -> bool:
        """Whether a waiting job's level is in [lo, hi)."""
        if hi <= lo:
            return False
        levels = self.levels
        i = _first_at_least(levels, lo)
        return i < len(levels) and levels[i] < hi

    def worst(self) -> float:
        """The highest running level (`settle`d first, when a change is due or a record left behind)."""
        if self.moved or self.changes.first_s() <= self.now:
            self.settle()
        return self.running.last().level if self.running else -_INF

"""The preemptive queue's records (core/preemption.py's pass reads them): waiting and running jobs by
rank, each job's entry and slot, the heap of level changes, waiting jobs by level and fits-shape, and the
lease wakes. A compiled (native) class, so the pass reads them at C speed; what it needs of the queue
(a job's fits-shape) and of the cost model (`PreemptionCost`) are protocols, so it imports neither."""

from __future__ import annotations

import math
from heapq import heappop, heappush
from typing import Any, Final, Protocol, final

from gpuplan.core.sortedseq import Ranked, RankedSeq, SortedSeq, ranked_before
from gpuplan.core.state import ClusterState
from gpuplan.core.view import JobSlot
from gpuplan.model import Job

__all__ = ["MAX_LEVELS", "Change", "ChangeHeap", "Cost", "Entry", "Levels", "Ranks", "ShapeSource"]

_INF: Final = math.inf

MAX_LEVELS: Final = 64
"""More distinct waiting levels than this: a pass does not look for the point where all fail."""

Entry = Ranked
"""A job's place in the queue: its level, its order among the jobs of one level (`Ranks.order_of`: the
policy's static key, ending in the job's handle, as one int) and its handle."""

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


class Levels(Protocol):
    """What the pass asks of its policy: a `core.preemptive.PreemptivePolicy`, or a wrapper that passes
    one's levels on (the agent's, which is no subclass of it)."""

    @property
    def endless_levels(self) -> bool: ...

    def level(self, slot: JobSlot, now: float) -> float: ...

    def next_change_s(self, slot: JobSlot, now: float) -> float: ...


@final
class Change:
    """A queued level change: when, whose, and the job's stamp when it was queued (a compiled class)."""

    __slots__ = ("jid", "stamp", "time_s")

    def __init__(self, time_s: float, jid: int, stamp: int) -> None:
        self.time_s = time_s
        self.jid = jid
        self.stamp = stamp


def _change_before(a: Change, b: Change) -> bool:
    """(time, jid, stamp) order, as tuples compare (no two changes share all three)."""
    if a.time_s != b.time_s:
        return a.time_s < b.time_s
    if a.jid != b.jid:
        return a.jid < b.jid
    return a.stamp < b.stamp


@final
class ChangeHeap:
    """The queued level changes: a binary heap in (time, jid, stamp) order that compares numbers in C
    (heapq over tuples compared them through Python's generic comparison); it pops in heapq's order."""

    def __init__(self) -> None:
        self.items: list[Change] = []

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return len(self.items) > 0

    def first(self) -> Change:
        """The earliest change (IndexError when empty)."""
        return self.items[0]

    def push(self, time_s: float, jid: int, stamp: int) -> None:
        new = Change(time_s, jid, stamp)
        items = self.items
        items.append(new)
        i = len(items) - 1
        while i > 0:
            parent = (i - 1) >> 1
            up = items[parent]
            if not _change_before(new, up):
                break
            items[i] = up
            i = parent
        items[i] = new

    def pop(self) -> Change:
        """Take out the earliest change (IndexError when empty)."""
        items = self.items
        first = items[0]
        last = items.pop()
        n = len(items)
        if n:
            i = 0
            while True:
                child = 2 * i + 1
                if child >= n:
                    break
                down = items[child]
                if child + 1 < n and _change_before(items[child + 1], down):
                    child += 1
                    down = items[child]
                if _change_before(last, down):
                    break
                items[i] = down
                i = child
            items[i] = last
        return first

    def copy(self) -> ChangeHeap:
        new = ChangeHeap()
        new.items = list(self.items)  # the changes themselves are never changed
        return new


class Ranks:
    """The preemptive queue's records, a compiled (native) class: the pass reads them at C speed.

    waiting, running: entries by rank; entry, slots: each job's entry and slot; order, key_of, keys,
    lo_key, hi_key (lo_order, hi_order): each job's order (an int that follows the policy's static key,
    `order_of`) and static key, the static keys in order (once one fell between two), and the lowest and
    highest key given an order (their orders); changes, stamp, due: the
    heap of level changes (stale stamps skipped) and each job's queued one; shapes, shape_of, by_shape: waiting jobs by level and
    shape; wakes (and wake_set, its members): ends of leases that held a preemption back; start_level:
    a running job's level when the pass started it; lease_held: a lease held a preemption back in this
    job's try (no shape memo); suspend_running: running jobs of preempt mode `suspend` (they keep their
    memory); modes, overheads: each job's preempt mode and restart overhead (under `cost`), read once;
    moved: running jobs whose place in `running` is left for
    `settle`; exact_shapes: shapes keep memory that every GPU has once a job
    that keeps its memory when preempted (mode `suspend`) or waits suspended is known, on sharing clusters, and under
    leases (las: a job a lease may bind is tried for itself, as its exact shape says); settled: the
    scheduler's version after a pass that decided nothing (-1: none)."""

    def __init__(self, state: ClusterState, endless: bool) -> None:
        self.endless = endless
        self.waiting = RankedSeq()  # by (level, order)
        self.running = RankedSeq()
        self.entry: dict[int, Entry] = {}
        self.order: dict[int, int] = {}
        self.key_of: dict[int, tuple[Any, ...]] = {}
        self.keys: SortedSeq[tuple[Any, ...]] | None = None  # built when a key falls between two
        self.lo_key: tuple[Any, ...] | None = None  # bounds of every key given an order (`order_of`)
        self.hi_key: tuple[Any, ...] | None = None
        self.lo_order = 0
        self.hi_order = 0
        self.slots: dict[int, JobSlot] = {}
        self.changes = ChangeHeap()
        self.stamp: dict[int, int] = {}
        # shapes by a small id each (`shape_id`): a pass's sets and these dicts hash an int, not a tuple
        self.shape_ids: dict[tuple[object, ...], int] = {}
        self.shapes: dict[float, dict[int, int]] = {}  # level -> shape id -> waiting jobs
        self.shape_of: dict[int, int] = {}  # jid -> shape id
        self.by_shape: dict[int, RankedSeq] = {}  # shape id -> its waiting entries
        self.wakes: list[float] = []
        self.wake_set: set[float] = set()
        self.start_level: dict[int, float] = {}
        self.lease_held = False
        self.suspend_running = 0
        self.modes: dict[int, str] = {}
        self.overheads: dict[int, float] = {}  # jid -> `Cost.overhead_s` under `cost`
        self.cost: Cost | None = None
        self.due: dict[int, float] = {}  # jid -> the time of its queued level change (its stamp's)
        self.exact_shapes: bool = state.sharing or endless
        self.settled = -1
        self.moved: dict[int, JobSlot] = {}  # running jobs whose entry `settle` has yet to move

    def order_of(self, slot: JobSlot) -> int:
        """The job's order: an int that orders it among the jobs of its level as its static key
        (`JobSlot.key`, which ends in its handle) does, given at its first entry and kept until `forget`.
        Entries are then compared by two numbers, never by their keys.

        A key after (or before) every key given an order so far takes the last (first) order plus (minus)
        `_ORDER_GAP`: only the two extreme keys are kept for that (`lo_key`, `hi_key`; those of jobs
        gone since still bound the others). The first key that falls between them builds the sorted
        keys (`keys`), and a key then takes the midpoint of its neighbours' orders."""
        jid = slot.jid
        got = self.order.get(jid)
        if got is not None:
            return got
        key, order = slot.key, self.order
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
        order[jid] = got
        self.key_of[jid] = key
        if not -_ORDER_LIMIT < got < _ORDER_LIMIT:
            self.reorder()
            got = order[jid]
        return got

    def between(self, key: tuple[Any, ...]) -> int:
        """The order of a key that does not fall after or before every other: the midpoint of its
        neighbours' in the sorted keys (built now if they are not kept yet), or `_ORDER_LIMIT` when no
        int is left between them."""
        keys = self.sorted_keys()
        keys.add(key)
        before, after = keys.neighbours(key)
        order = self.order
        lo = order[before[-1]] if before is not None else None
        hi = order[after[-1]] if after is not None else None
        if lo is None:
            return hi - _ORDER_GAP if hi is not None else 0
        if hi is None:
            return lo + _ORDER_GAP
        return (lo + hi) >> 1 if hi - lo >= 2 else _ORDER_LIMIT

    def sorted_keys(self) -> SortedSeq[tuple[Any, ...]]:
        """The static keys of the jobs given an order, sorted (built from `key_of` on first use)."""
        keys = self.keys
        if keys is None:
            keys = self.keys = SortedSeq(self.key_of.values())
        return keys

    def reorder(self) -> None:
        """Give every job a new order, `_ORDER_GAP` apart in static key order, and its entries new items
        in the same places (the order of the entries does not change)."""
        order = self.order
        for k, key in enumerate(self.sorted_keys()):
            order[key[-1]] = k * _ORDER_GAP
        fresh = {jid: Ranked(e.level, order[jid], jid) for jid, e in self.entry.items()}
        self.entry = fresh
        self.waiting.replace_items(lambda e: fresh[e.jid])
        self.running.replace_items(lambda e: fresh[e.jid])
        for same in self.by_shape.values():
            same.replace_items(lambda e: fresh[e.jid])

    def forget(self, jid: int) -> None:
        """The job left for good (after `leave`): its order and the rest of what was kept of it (a
        `del` per dict: `dict.pop` is a generic method call in the compiled core)."""
        for kept in (self.stamp, self.due, self.start_level, self.overheads):
            if jid in kept:
                del kept[jid]
        if jid in self.modes:
            del self.modes[jid]
        key = self.key_of.get(jid)
        if key is None:
            return
        del self.key_of[jid], self.order[jid]
        keys = self.keys
        if keys is not None:
            keys.remove(key)
            if not keys:  # nobody left: back to the two bounds, from the next job on
                self.keys = None
                self.lo_key = self.hi_key = None
        elif not self.key_of:
            self.lo_key = self.hi_key = None

    def copy(self, state: ClusterState, slots: dict[int, JobSlot]) -> Ranks:
        """A copy on `state` whose entries name `slots` (a forked scheduler's records)."""
        self.settle()
        new = Ranks(state, self.endless)
        new.waiting = self.waiting.copy()
        new.running = self.running.copy()
        new.entry = dict(self.entry)
        new.slots = {jid: slots[jid] for jid in self.entry}
        new.changes = self.changes.copy()
        new.stamp = dict(self.stamp)
        new.due = dict(self.due)
        new.shapes = {level: dict(shapes) for level, shapes in self.shapes.items()}
        new.shape_of = dict(self.shape_of)
        new.shape_ids = dict(self.shape_ids)
        new.by_shape = {shape: entries.copy() for shape, entries in self.by_shape.items()}
        new.wakes = list(self.wakes)
        new.wake_set = set(self.wakes)
        new.start_level = dict(self.start_level)
        new.suspend_running = self.suspend_running
        new.modes = dict(self.modes)
        new.exact_shapes = self.exact_shapes
        new.order = dict(self.order)
        new.keys = self.keys.copy() if self.keys is not None else None
        new.key_of = dict(self.key_of)
        new.lo_key, new.hi_key, new.lo_order, new.hi_order = (
            self.lo_key,
            self.hi_key,
            self.lo_order,
            self.hi_order,
        )
        return new

    def mode(self, slot: JobSlot) -> str:
        mode = self.modes.get(slot.jid)
        if mode is None:
            mode = self.modes[slot.jid] = slot.job.preempt_mode
        return mode

    def overhead(self, slot: JobSlot, cost: Cost) -> float:
        """The job's restart overhead under `cost` (`Cost.overhead_s`), read once per job and cost."""
        if cost is not self.cost:
            self.cost, self.overheads = cost, {}
        got = self.overheads.get(slot.jid)
        if got is None:
            got = self.overheads[slot.jid] = cost.overhead_s(slot.job)
        return got

    def restart_costs(self, slot: JobSlot, cost: Cost) -> bool:
        return self.overhead(slot, cost) > 0.0

    def lease_free(self, by: JobSlot, cost: Cost) -> bool:
        return not self.endless or not by.preemptions or not self.restart_costs(by, cost)

    def leased(self, victim: JobSlot, by: JobSlot, now: float, cost: Cost) -> bool:
        if not self.endless:
            return False  # its levels run out: a trade of places ends at the last one
        if not by.preemptions or not self.restart_costs(by, cost):
            return False  # its first start (or one that costs no restart): nothing to trade back
        return self.lease_binds(victim, by.level, now, cost)

    def lease_binds(self, victim: JobSlot, level: float, now: float, cost: Cost) -> bool:
        """`leased` for a job of `level` that no first start or free restart exempts."""
        if self.start_level.get(victim.jid, _INF) > level:
            return False  # it outranked `by` when it started: its lease is not what makes it a victim
        start = victim.start_s if victim.start_s is not None else -_INF
        end = start + cost.lease_by_s(self.overhead(victim, cost), victim.preemptions > 0)
        if end <= now + 1e-9:
            return False
        if end not in self.wake_set:
            heappush(self.wakes, end)
            self.wake_set.add(end)
        self.lease_held = True
        return True

    def next_change_s(self) -> float:
        """`PreemptiveQueue.next_change_s`: the first queued change whose stamp holds (stale ones are
        dropped), or the first lease end."""
        ch, stamp = self.changes, self.stamp
        while ch:
            first = ch.first()
            if stamp.get(first.jid) == first.stamp:
                break
            ch.pop()
        nxt = ch.first().time_s if ch else _INF
        return min(nxt, self.wakes[0]) if self.wakes else nxt

    def pop_wake(self) -> None:
        self.wake_set.discard(heappop(self.wakes))

    def enter(self, slot: JobSlot, now: float, policy: Levels, queue: ShapeSource) -> None:
        jid = slot.jid
        level = slot.level = policy.level(slot, now)
        entry = Ranked(level, self.order_of(slot), jid)
        self.entry[jid] = entry
        self.slots[jid] = slot
        suspends = self.mode(slot) == "suspend"
        if not self.exact_shapes and (slot.suspended_on or suspends):
            self.keep_memory_in_shapes(queue)
        if slot.start_s is None:
            self.waiting.add(entry)
            self.index_shape(entry, jid, level, queue.shape(slot))
        else:
            self.running.add(entry)
            if suspends:
                self.suspend_running += 1
        self.plan_change(slot, now, policy)

    def plan_change(self, slot: JobSlot, now: float, policy: Levels) -> None:
        """Queue the job's next level change (a new stamp: any earlier one is stale)."""
        jid = slot.jid
        t = policy.next_change_s(slot, now)
        due = self.due
        if t < _INF:
            t = max(t, now + 1e-6)  # a crossing rounded to now: look again just after it
            if due.get(jid, _INF) == t:
                return  # the change it has queued stands (gittins' rerank_all moved no crossing)
        stamp = self.stamp.get(jid, 0) + 1
        self.stamp[jid] = stamp
        if t < _INF:
            self.changes.push(t, jid, stamp)
            due[jid] = t
        elif jid in due:
            del due[jid]

    def move_running(self, slot: JobSlot, now: float, policy: Levels, queue: ShapeSource) -> None:
        """A running job's level changed: its new level and next change now; its place in `running`
        when a pass next reads that order (`settle`). A pass reads it only to look for victims (and
        the highest level, while the cluster is full), so a change no pass looks at costs no move."""
        slot.level = policy.level(slot, now)
        if not self.exact_shapes and (slot.suspended_on or self.mode(slot) == "suspend"):
            self.keep_memory_in_shapes(queue)
        self.moved[slot.jid] = slot
        self.plan_change(slot, now, policy)

    def settle(self) -> None:
        """Put every running job that `move_running` left behind in its place in `running` (what a
        move at each change would have left: the order is a function of the entries)."""
        moved = self.moved
        if not moved:
            return
        running, entries = self.running, self.entry
        for jid, slot in moved.items():
            old = entries[jid]
            if old.level == slot.level:
                continue  # back at the level its entry has
            running.remove(old)
            entry = Ranked(slot.level, old.order, jid)
            entries[jid] = entry
            running.add(entry)
        moved.clear()

    def leave(self, slot: JobSlot) -> None:
        """Take the job's entry out (a `del` per dict, not `dict.pop`: a generic call when compiled)."""
        jid = slot.jid
        entry = self.entry[jid]
        del self.entry[jid], self.slots[jid]
        if slot.start_s is None:
            self.waiting.remove(entry)
            shape = self.shape_of[jid]
            del self.shape_of[jid]
            same = self.by_shape[shape]
            same.remove(entry)
            if not same:
                del self.by_shape[shape]
            level = entry.level
            at = self.shapes[level]
            left = at[shape] - 1
            if left:
                at[shape] = left
            elif len(at) > 1:
                del at[shape]
            else:
                del self.shapes[level]
        else:
            self.running.remove(entry)  # its entry in `running`, moved or not
            if jid in self.moved:
                del self.moved[jid]
            if self.mode(slot) == "suspend":
                self.suspend_running -= 1

    def keep_memory_in_shapes(self, queue: ShapeSource) -> None:
        self.exact_shapes = True
        self.shapes.clear()
        self.by_shape.clear()
        for entry in self.waiting:
            jid = entry.jid
            self.index_shape(entry, jid, entry.level, queue.shape(self.slots[jid]))

    def shape_id(self, shape: tuple[object, ...]) -> int:
        """The small int that stands for `shape` (equal shapes, one id; ids are never reused)."""
        ids = self.shape_ids
        got = ids.get(shape)
        if got is None:
            got = ids[shape] = len(ids)
        return got

    def index_shape(self, entry: Entry, jid: int, level: float, shape_key: tuple[object, ...]) -> None:
        """Count a waiting job's entry under its level and fits-shape (`shapes`, `by_shape`)."""
        shape = self.shape_id(shape_key)
        self.shape_of[jid] = shape
        at = self.shapes.get(level)
        if at is None:
            at = self.shapes[level] = {}
        at[shape] = at.get(shape, 0) + 1
        same = self.by_shape.get(shape)
        if same is None:
            same = self.by_shape[shape] = RankedSeq()
        same.add(entry)

    def next_open(self, cursor: Entry, failed: set[int], heads: dict[object, Entry | None]) -> Entry | None:
        """The first waiting entry after `cursor` of a shape not in `failed`, or None. `heads` keeps each
        shape's answer for a cursor at or before this one, valid while the queue does not change (the
        caller clears it then): one still after the cursor is the answer again, without a search."""
        best: Entry | None = None
        for shape, same in self.by_shape.items():
            if shape in failed:
                continue
            if same in heads:
                first = heads[same]
                if first is None:
                    continue
                if not ranked_before(cursor, first):
                    first = heads[same] = same.first_after(cursor)
            else:
                first = heads[same] = same.first_after(cursor)
            if first is not None and (best is None or ranked_before(first, best)):
                best = first
        return best

    def all_fail(self, failed: set[int], level: float, worst: float, full: bool) -> bool:
        if len(self.shapes) > MAX_LEVELS:
            return False
        for at, shapes in self.shapes.items():
            if at < level or (full and at >= worst):
                continue
            for shape in shapes:
                if shape not in failed:
                    return False
        return True

    def waiting_in(self, lo: float, hi: float) -> bool:
        """Whether a waiting job's level is in [lo, hi)."""
        if hi <= lo:
            return False
        first = self.waiting.first_at_level(lo)
        return first is not None and first.level < hi

    def worst(self) -> float:
        """The highest running level (`settle`d first)."""
        self.settle()
        return self.running.last().level if self.running else -_INF

"""The event loop every virtual clock runs: the simulator's (sim/engine.py, sim/preempt.py) and the
forecast's (core/forecast.py); the plan search scores its orders through the simulator, so it runs it too.

`EventClock.loop` advances time from event to event (no fixed step). An instant is handled in one
order on every clock: first the events due (the ends in a heap: a job's end moves when it is preempted
or its progress rate changes, and the end that no longer holds leaves only its time), then the jobs
that enter the queue (a trace's submits, known in advance and sorted; or jobs found as the run goes, a
deferred job whose dependency ended and whose begin time comes later), then one scheduling pass
(`Scheduler.decide` under a preemptive policy: its preemptions, then its starts; `Scheduler.schedule`
otherwise). The clock then jumps to the next end, entry or level change (`Scheduler.next_pass_s`:
a preemptive policy's quantum promotions and lease ends, while a job waits; an end that no longer
holds is passed over while a pass there would decide nothing, `Scheduler.quiet_before_s`), until
nothing is left, a driver says it has learned enough, or the safety net (a bound on passes) trips.

What differs between clocks is a hook of its driver: what an end means (a job's finish, or a sharing
job's phase end that moves its neighbours' rates), what an entry submits, what a start and a
preemption record (records, GPU history, the work a checkpoint kept), what each pass leaves behind
(a utilisation timeline, reasons, the stop test) and what an exhausted clock means (an error in the
simulator, "no expected start" in the forecast). No scheduling rule is written here or in the hooks:
every decision is the Scheduler's.

Plain typed classes, no dynamic tricks: the loop is the hot path of every clock.
"""

from __future__ import annotations

import math
import sys
from heapq import heappop, heappush
from typing import Final, final

from mypy_extensions import mypyc_attr

from gpuplan.core.preemption import Preempted
from gpuplan.core.scheduler import Scheduler
from gpuplan.core.view import Started

__all__ = ["EndHeap", "EventClock"]

_INF: Final = math.inf


@final
class _End:
    """One expected end in an `EndHeap` (a compiled class: its fields are read as C fields)."""

    __slots__ = ("jid", "moves", "pos", "seq", "time_s")

    def __init__(self, time_s: float, seq: int, jid: int, moves: bool) -> None:
        self.time_s = time_s
        self.seq = seq
        self.jid = jid
        self.moves = moves  # `EndHeap.live` holds it
        self.pos = -1  # its index in `EndHeap.entries`


@final
class EndHeap:
    """A clock's expected ends that hold: a binary heap ordered by (time, seq), seq counting the pushes
    (so ties break the same way on every run), each with its job's handle and its place (`_End.pos`).
    An end that may move (`moves`) replaces the job's earlier one, and `cancel` takes it out: an end
    that no longer holds goes to a heap of its own (`stale`: its time only, a stop that is nobody's
    end), where the clock still stops (a pass may act there) until it comes or is dropped
    (`drop_stale`). So the heap of ends that hold has one per running job, not one per end ever
    expected (a job preempted a thousand times left a thousand entries to sift past). Entries of a
    compiled class: a push or a pop compares two numbers in C."""

    def __init__(self) -> None:
        self.entries: list[_End] = []
        self.live: dict[int, _End] = {}  # each job's end that may move, in `entries`
        self.stale: list[float] = []  # the times of ends that no longer hold (a heap of floats)
        self.next_seq = 0

    def __len__(self) -> int:
        return len(self.entries) + len(self.stale)

    def __bool__(self) -> bool:
        return len(self.entries) > 0 or len(self.stale) > 0

    def first_s(self) -> float:
        """The earliest time, of an end that holds or not (inf when empty)."""
        t = self.entries[0].time_s if self.entries else _INF
        stale = self.stale
        return stale[0] if stale and stale[0] < t else t

    def stale_top(self) -> bool:
        """Whether the earliest time is only that of ends that no longer hold."""
        stale = self.stale
        return len(stale) > 0 and (not self.entries or stale[0] < self.entries[0].time_s)

    def drop_stale(self, before_s: float) -> None:
        """Drop the ends that no longer hold that come before `before_s` and before the first end that
        holds."""
        stale = self.stale
        t = self.entries[0].time_s if self.entries else _INF
        if before_s < t:
            t = before_s
        while stale and stale[0] < t:
            heappop(stale)

    def push(self, at_s: float, jid: int, moves: bool) -> None:
        """`jid` ends at `at_s`; an end that may move (`moves`) in place of its earlier one, which no
        longer holds."""
        new = _End(at_s, self.next_seq, jid, moves)
        self.next_seq += 1
        if moves:
            old = self.live.get(jid)
            if old is not None:
                self._take_out(old)
            self.live[jid] = new
        _push(self.entries, new)

    def cancel(self, jid: int) -> None:
        """`jid`'s end that may move no longer holds (nothing when it has none)."""
        old = self.live.get(jid)
        if old is not None:
            self._take_out(old)

    def _take_out(self, old: _End) -> None:
        """Move `old` (an end that may move) from the ends that hold to the stale ones."""
        del self.live[old.jid]
        entries = self.entries
        last = entries.pop()
        i = old.pos
        if i < len(entries):
            _down(entries, _up(entries, i, last), last)
        heappush(self.stale, old.time_s)

    def pop(self) -> int:
        """Take out the earliest: the job of an end that holds, or -1 for an end that no longer holds
        (at one instant, the ends that hold first).

        Raises:
            IndexError: the heap is empty.
        """
        entries, stale = self.entries, self.stale
        if stale and (not entries or stale[0] < entries[0].time_s):
            heappop(stale)
            return -1
        first = _pop(entries)
        if first.moves:
            del self.live[first.jid]
        return first.jid


def _push(entries: list[_End], new: _End) -> None:
    entries.append(new)
    _up(entries, len(entries) - 1, new)


def _pop(entries: list[_End]) -> _End:
    """Take out the earliest of `entries` (IndexError when empty)."""
    first = entries[0]
    last = entries.pop()
    if entries:
        _down(entries, 0, last)
    return first


def _up(entries: list[_End], i: int, new: _End) -> int:
    """Move `new`, going in at `i`, up while its parent comes later; its index."""
    while i > 0:
        parent = (i - 1) >> 1
        up = entries[parent]
        if up.time_s < new.time_s or (
            up.time_s == new.time_s and up.seq < new.seq
        ):  # (earlier: time, then push order)
            break
        entries[i] = up
        up.pos = i
        i = parent
    entries[i] = new
    new.pos = i
    return i


def _down(entries: list[_End], i: int, last: _End) -> None:
    """Move `last`, at `i`, down while a child comes before it (the earlier child up)."""
    n = len(entries)
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        down = entries[child]
        if child + 1 < n:  # (the earlier child: time, then push order)
            other = entries[child + 1]
            if other.time_s < down.time_s or (other.time_s == down.time_s and other.seq < down.seq):
                child += 1
                down = other
        if last.time_s < down.time_s or (last.time_s == down.time_s and last.seq < down.seq):
            break
        entries[i] = down
        down.pos = i
        i = child
    entries[i] = last
    last.pos = i


@mypyc_attr(allow_interpreted_subclasses=True)  # drivers outside the compiled core (sim/preempt.py)
class EventClock:
    """The loop skeleton of a virtual clock over one Scheduler; a driver subclasses it and fills the hooks.

    Attributes:
        sched: the scheduler the clock drives.
        preemptive: whether its policy preempts (a pass is `decide`, and level changes are events).
        heap: the expected ends (an `EndHeap`: time, then push order; an end that no longer holds
            leaves its time, a stop where the pass may act); `push_end`, `expect_end` and
            `cancel_end` keep it.
        arrival_s, arrival_jid: the entries known in advance, sorted by time (`arrival_s` ends with inf);
            `next_arrival` indexes the first not yet entered.
        begins: entries found as the run goes, a heap of `(time, jid)` (`enter_at` pushes one).
        max_passes: the safety net; before a pass beyond it the loop calls `too_many_passes` and stops.
        passes, next_arrival: written back when the loop returns (the loop keeps them in locals; a
            hook that needs a count keeps its own), so a second `loop()` resumes where it stopped.
    """

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self.preemptive: bool = sched.policy.preemptive
        self.heap = EndHeap()
        self.arrival_s: list[float] = [_INF]
        self.arrival_jid: list[int] = []
        self.next_arrival = 0
        self.begins: list[tuple[float, int]] = []
        self.max_passes: int = sys.maxsize
        self.passes = 0

    # -- what drivers call ---------------------------------------------------------------------------
    def set_arrivals(self, times_s: list[float], jids: list[int]) -> None:
        """The entries known in advance: `jids[k]` enters at `times_s[k]` (sorted by time)."""
        self.arrival_s = [*times_s, _INF]
        self.arrival_jid = jids
        self.next_arrival = 0

    def enter_at(self, at_s: float, jid: int) -> None:
        """`jid` enters at `at_s` (after the instant's ends; ties by jid)."""
        heappush(self.begins, (at_s, jid))

    def push_end(self, jid: int, at_s: float) -> None:
        """`jid` ends at `at_s`, an end that never moves (never stale: no bookkeeping)."""
        self.heap.push(at_s, jid, False)

    def expect_end(self, jid: int, at_s: float) -> None:
        """`jid`'s next event (its end, or a phase end) is at `at_s` (inf: none); any earlier one no
        longer holds."""
        if at_s < _INF:
            self.heap.push(at_s, jid, True)
        else:
            self.heap.cancel(jid)

    def cancel_end(self, jid: int) -> None:
        """`jid`'s pending event no longer holds (it was preempted)."""
        self.heap.cancel(jid)

    def forget(self, jid: int) -> None:
        """`jid` ended for good: an end it still has no longer holds."""
        self.heap.cancel(jid)

    def next_time_s(self) -> float:
        """The next instant with something to do (inf: none)."""
        t = min(
            self.heap.first_s(),
            self.arrival_s[self.next_arrival],
            self.begins[0][0] if self.begins else _INF,
        )
        return min(t, self.sched.next_pass_s()) if self.preemptive else t

    # -- the loop ------------------------------------------------------------------------------------
    def loop(self, start_s: float | None = None) -> None:
        """Run the clock from `start_s` (None: its first event) until it stops."""
        sched, heap, begins = self.sched, self.heap, self.begins
        arrival_s, arrival_jid = self.arrival_s, self.arrival_jid
        preemptive = self.preemptive
        ai, passes, max_passes = self.next_arrival, self.passes, self.max_passes
        t = self.next_time_s() if start_s is None else start_s
        if t == _INF:
            self.drained(t)
            return
        while True:
            if passes >= max_passes:
                self.passes, self.next_arrival = passes, ai
                self.too_many_passes(t, passes)
                return
            passes += 1
            while heap.first_s() <= t:
                jid = heap.pop()
                if jid >= 0:  # an end that holds (-1: the time of one that no longer does)
                    self.on_end(jid, t)
            while arrival_s[ai] <= t:
                self.on_arrival(arrival_jid[ai], t)
                ai += 1
            while begins and begins[0][0] <= t:
                self.on_arrival(heappop(begins)[1], t)
            if preemptive:
                decided = sched.decide(t)
                for p in decided.preempted:
                    self.on_preempt(p, t)
                started = decided.started
            else:
                started = sched.schedule(t)
            for st in started:
                self.on_start(st, t)
            if preemptive and heap.stale_top():
                # a stop at an end that no longer holds is a pass: none while it would decide nothing
                # (`Scheduler.quiet_before_s`) and nothing enters before
                until = sched.quiet_before_s()
                if arrival_s[ai] < until:
                    until = arrival_s[ai]
                if begins and begins[0][0] < until:
                    until = begins[0][0]
                heap.drop_stale(until)
            t_next = heap.first_s()  # comparisons, not min(): this is the hot path
            if arrival_s[ai] < t_next:
                t_next = arrival_s[ai]
            if begins and begins[0][0] < t_next:
                t_next = begins[0][0]
            if preemptive:
                level_s = sched.next_pass_s()
                if level_s < t_next:
                    t_next = level_s
            if self.after_pass(t, t_next):
                break
            if t_next == _INF:
                self.passes, self.next_arrival = passes, ai
                self.drained(t)
                return
            t = t_next
        self.passes, self.next_arrival = passes, ai

    # -- the hooks -----------------------------------------------------------------------------------
    def on_end(self, jid: int, t: float) -> None:
        """`jid`'s event at `t` is due (it holds)."""
        raise NotImplementedError

    def on_arrival(self, jid: int, t: float) -> None:
        """`jid` enters the queue at `t` (the driver submits it)."""
        raise NotImplementedError

    def on_start(self, st: Started, t: float) -> None:
        """The pass at `t` started (or resumed) `st.jid` on `st.gpu_ids`."""
        raise NotImplementedError

    def on_preempt(self, p: Preempted, t: float) -> None:
        """The pass at `t` preempted `p.jid` (carried out before the pass's starts)."""
        raise NotImplementedError

    def after_pass(self, t: float, t_next: float) -> bool:
        """The pass at `t` is done and the next instant is `t_next` (inf: none): True stops the clock."""
        return False

    def drained(self, t: float) -> None:
        """Nothing is left to happen after `t` (no end, entry or level change)."""

    def too_many_passes(self, t: float, passes: int) -> None:
        """The safety net tripped at `t` after `passes` passes."""

"""Jobs' records by the time of their next level change (`DueHeap`): what the preemptive queue's records
(core/ranks.py) keep running and waiting jobs in, a compiled (native) class."""

from __future__ import annotations

import math
from typing import Final, final

from gpuplan.core.rankseq import JobRank

__all__ = ["BAG_MAX", "DueHeap"]

_INF: Final = math.inf
_NAN: Final = math.nan

BAG_MAX: Final = 64
"""A `DueHeap` of at most this many records keeps no order (a bag and its earliest due): a move is an
assignment, where a heap's sift reads a list item per level; past it, a heap, until it falls under
`_BAG_BACK` (a bound that keeps a count near this one from heapifying at each change)."""

_BAG_BACK: Final = 48


@final
class DueHeap:
    """Jobs' records by the time of their next level change (`JobRank.due`), each record once, and each
    knows its place (`JobRank.hpos`), so a job's next change moves its record in place (`place`): no
    entry per change, none stale, no pop and push. A record is in at most one (`Ranks.changes` while it
    runs, `Ranks.wait_changes` while it waits).

    Up to `BAG_MAX` records, a bag: no order, the earliest due kept (`min_s`, exact while `min_ok`;
    a move or removal of the earliest record makes it a bound, and the next `first_s` scans). Past it, a
    binary heap in (due, jid) order (`ordered`). The earliest record (`top`) and the records due by an
    instant (`due_by`) are the same in both."""

    def __init__(self) -> None:
        self.items: list[JobRank] = []
        self.ordered = False  # a heap (else a bag)
        self.min_s = _INF  # a bag's earliest due: exact while `min_ok`, else a lower bound
        self.min_ok = True
        self.rest_s = _INF  # a bag's earliest due past the last `due_by`'s instant

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return len(self.items) > 0

    def first_s(self) -> float:
        """The earliest due time (inf when empty)."""
        if self.ordered:
            return self.items[0].due if self.items else _INF
        if not self.min_ok:
            first = _INF
            for rec in self.items:
                if rec.due < first:
                    first = rec.due
            self.min_s, self.min_ok = first, True
        return self.min_s

    def top(self) -> JobRank:
        """The record due first, the least (due, jid) (IndexError when empty)."""
        items = self.items
        if self.ordered or not items:
            return items[0]
        best = items[0]
        for rec in items:
            if rec.due < best.due or (rec.due == best.due and rec.jid < best.jid):
                best = rec
        return best

    def due_by(self, now: float) -> list[JobRank]:
        """The records due by `now`, in no set order (they stay in: the caller moves each, `place`, then
        says so, `moved`). A bag keeps the earliest due of the others (`rest_s`)."""
        items = self.items
        out: list[JobRank] = []
        if not self.ordered:
            rest = _INF
            for rec in items:
                due = rec.due
                if due <= now:
                    out.append(rec)
                elif due < rest:
                    rest = due
            self.rest_s = rest
            return out
        self.rest_s = _NAN  # a heap's: not kept
        n = len(items)
        todo = [0] if n and items[0].due <= now else []
        while todo:  # the heap's nodes due by `now`: a node past it has none below it
            i = todo.pop()
            out.append(items[i])
            child = 2 * i + 1
            if child < n and items[child].due <= now:
                todo.append(child)
            if child + 1 < n and items[child + 1].due <= now:
                todo.append(child + 1)
        return out

    def place(self, rec: JobRank, due: float) -> None:
        """Put `rec` in at `due` (its new `due`), or move it there."""
        items = self.items
        i = rec.hpos
        if not self.ordered:
            was = rec.due
            rec.due = due
            if i < 0:
                rec.hpos = len(items)
                items.append(rec)
                if len(items) > BAG_MAX:
                    self._heapify()
                    return
            elif due > was and was <= self.min_s:
                self.min_ok = False  # it may have been the earliest
                return
            if due < self.min_s:
                self.min_s = due  # (every other record is due at or after the old bound)
            return
        rec.due = due
        if i < 0:
            items.append(rec)
            i = len(items) - 1
        i = self._up(i, rec)
        self._down(i, rec)

    def remove(self, rec: JobRank) -> None:
        """Take `rec` out (nothing when it is not in)."""
        i = rec.hpos
        if i < 0:
            return
        rec.hpos = -1
        items = self.items
        last = items.pop()
        if not self.ordered:
            if i < len(items):
                items[i] = last
                last.hpos = i
            if rec.due <= self.min_s:
                self.min_ok = False  # it may have been the earliest
            return
        if i < len(items):
            i = self._up(i, last)
            self._down(i, last)
        if len(items) < _BAG_BACK:
            self.ordered = False
            self.min_ok = False

    def moved(self, recs: list[JobRank]) -> None:
        """`recs`, the records `due_by` gave, moved (or left) and nothing else changed since: a bag's
        earliest due is one of theirs or the others' earliest (`rest_s`), without a scan."""
        first = self.rest_s
        if self.ordered or first != first:  # (nan: `due_by` found a heap)
            return
        for rec in recs:
            if rec.hpos >= 0 and rec.due < first:
                first = rec.due
        self.min_s, self.min_ok = first, True

    def _heapify(self) -> None:
        """From a bag to a heap (past `BAG_MAX` records)."""
        self.ordered = True
        items = self.items
        for i in range(len(items)):
            self._up(i, items[i])

    def _up(self, i: int, rec: JobRank) -> int:
        """Move `rec`, going in at `i`, up while its parent comes after it; its index."""
        items = self.items
        due, jid = rec.due, rec.jid
        while i > 0:
            parent = (i - 1) >> 1
            up = items[parent]
            if up.due < due or (up.due == due and up.jid < jid):
                break
            items[i] = up
            up.hpos = i
            i = parent
        items[i] = rec
        rec.hpos = i
        return i

    def _down(self, i: int, rec: JobRank) -> None:
        """Move `rec`, at `i`, down while a child comes before it."""
        items = self.items
        n = len(items)
        due, jid = rec.due, rec.jid
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            down = items[child]
            if child + 1 < n:
                other = items[child + 1]
                if other.due < down.due or (other.due == down.due and other.jid < down.jid):
                    child += 1
                    down = other
            if due < down.due or (due == down.due and jid < down.jid):
                break
            items[i] = down
            down.hpos = i
            i = child
        items[i] = rec
        rec.hpos = i

    def mapped(self, fresh: dict[int, JobRank]) -> DueHeap:
        """The same heap of `fresh[jid]` for each record (a forked queue's own records)."""
        new = DueHeap()
        new.items = [fresh[rec.jid] for rec in self.items]
        new.ordered, new.min_s, new.min_ok = self.ordered, self.min_s, self.min_ok
        for i, rec in enumerate(new.items):
            rec.hpos = i
        return new

"""The preemptive queue's per-job records and their ranked sequences (core/ranks.py keeps them): a
`JobRank` per job (its level, its order, its slot and what the pass keeps of it) and `RankedSeq`, records in
(level, order) order, searched by two numbers as C fields (compiled classes: the pass's hot path)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from itertools import chain
from typing import Final, final

from mypy_extensions import i64

from gpuplan.core.view import JobSlot

__all__ = ["Cursor", "Entry", "JobRank", "RankedSeq", "ranked_before"]

_INF: Final = math.inf
_NAN: Final = math.nan
_chain_all: Final = chain.from_iterable


@final
class JobRank:
    """One job's record in the preemptive queue, from its first entry until `Ranks.forget`, and its entry
    in the ranked sequences (a compiled class: a search reads `level` and `order` as C fields, and the
    pass reads the rest without a lookup by handle).

    Attributes:
        slot: the job's slot; jid: its handle.
        level: the level it is filed under in `waiting` or `running` (the slot's own `level` runs ahead
            of it for a running job `move_running` left for `settle`).
        order: an int that orders it among the jobs of one level as its static key does (`order_of`).
        mode: its `Job.preempt_mode`, read once.
        due: the time of its queued level change (inf: none queued).
        shape: the id of its fits-shape while it waits and is indexed under it (-1 otherwise).
        waits: it is filed in `waiting`.
        overhead, overhead_cost: its restart overhead under `overhead_cost` (`Ranks.overhead`).
        lease_end_s, lease_start_s, lease_resumed: when its lease ends (`Ranks.lease_end_s`), for the run
            that started at `lease_start_s` (nan: none known), a resume or not, under `overhead_cost`.
        start_level: its level when the pass last started it (inf: not started by the pass).
        moved: it waits in `Ranks.moved` for `settle`.
        hpos: its place in the `DueHeap` that queues its next change (-1: none queued).
        rise_of, rise_s, rise_epoch: while it runs, the lowest waiting level at or above its own (inf:
            none), when its level rises above it, and the waiting levels' epoch they hold for
            (`Ranks.next_loud_s`; nan: none known since it last entered).
    """

    __slots__ = (
        "due", "hpos", "jid", "lease_end_s", "lease_resumed", "lease_start_s", "level", "mode", "moved", "order",
        "overhead", "overhead_cost", "rise_epoch", "rise_of", "rise_s", "shape", "slot", "start_level", "waits",
    )  # fmt: skip

    def __init__(self, slot: JobSlot, order: int, mode: str) -> None:
        self.slot = slot
        self.jid = slot.jid
        self.level = 0.0
        self.order = order
        self.mode = mode
        self.due = _INF
        self.shape = -1
        self.overhead = 0.0
        self.overhead_cost: object = None
        self.lease_end_s = _INF
        self.lease_start_s = _NAN
        self.lease_resumed = False
        self.start_level = _INF
        self.moved = False
        self.waits = False
        self.hpos = -1
        self.rise_of = _NAN
        self.rise_s = _INF
        self.rise_epoch = -1

    def copy_for(self, slot: JobSlot) -> JobRank:
        """The same record for `slot` (a forked scheduler's copy of the job)."""
        new = JobRank(slot, self.order, self.mode)
        new.level, new.due, new.shape = self.level, self.due, self.shape
        new.waits, new.hpos = self.waits, self.hpos
        new.overhead, new.overhead_cost, new.start_level = self.overhead, self.overhead_cost, self.start_level
        new.lease_end_s, new.lease_start_s, new.lease_resumed = (
            self.lease_end_s,
            self.lease_start_s,
            self.lease_resumed,
        )
        new.rise_of, new.rise_s, new.rise_epoch = self.rise_of, self.rise_s, self.rise_epoch  # the same run
        return new

    def __repr__(self) -> str:
        return f"JobRank(jid={self.jid}, level={self.level!r}, order={self.order})"


Entry = JobRank
"""A job's place in the queue (its record): its level, its order among the jobs of one level (the
policy's static key, ending in the job's handle, as one int) and its handle."""


def ranked_before(a: JobRank, b: JobRank) -> bool:
    """Whether `a` comes before `b`: a lower level, or the same level and a lower order."""
    return a.level < b.level or (a.level == b.level and a.order < b.order)


_RANKED_LOAD: Final = 256
"""Records per RankedSeq chunk after a split (a chunk splits at twice this)."""


@final
class RankedSeq:
    """Job records in ascending (level, order), one record per (level, order) at most: the layout of
    core/sortedseq.py's `SortedSeq` (sorted chunks and each chunk's last item), searched by two numbers
    in C instead of Python's generic tuple comparison. A record's level and order must not change
    while it is in one (take it out, change it, put it back)."""

    def __init__(self) -> None:
        self._lists: list[list[JobRank]] = []
        self._maxes: list[JobRank] = []
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[JobRank]:
        return _chain_all(self._lists)

    def jids(self) -> Iterator[int]:
        """The records' handles, in order."""
        for chunk in self._lists:
            for item in chunk:
                yield item.jid

    def add(self, item: JobRank) -> None:
        """Insert `item` in order."""
        maxes, lists = self._maxes, self._lists
        self._len += 1
        if not maxes:
            lists.append([item])
            maxes.append(item)
            return
        pos = _upper(maxes, item.level, item.order)
        if pos == len(maxes):  # after every item: the end of the last chunk
            pos -= 1
            chunk = lists[pos]
            chunk.append(item)
            maxes[pos] = item
        else:
            chunk = lists[pos]
            chunk.insert(_upper(chunk, item.level, item.order), item)
        if len(chunk) > 2 * _RANKED_LOAD:
            rest = chunk[_RANKED_LOAD:]
            del chunk[_RANKED_LOAD:]
            maxes[pos] = chunk[-1]
            lists.insert(pos + 1, rest)
            maxes.insert(pos + 1, rest[-1])

    def remove(self, item: JobRank) -> None:
        """Take out `item` (found at its level and order).

        Raises:
            ValueError: it is not in the sequence.
        """
        lists, maxes = self._lists, self._maxes
        if lists and lists[0][0] is item:  # the first: a pass mostly starts the jobs at the queue's head
            pos, chunk, idx = 0, lists[0], 0
        else:
            level, order = item.level, item.order
            pos = _lower(maxes, level, order)
            if pos == len(maxes):
                raise ValueError(f"{item!r} is not in the sequence")
            chunk = lists[pos]
            idx = _lower(chunk, level, order)
            if idx == len(chunk) or chunk[idx] is not item:
                raise ValueError(f"{item!r} is not in the sequence")
        chunk.pop(idx)  # pop, not del: a list primitive of the compiled core, no generic call
        self._len -= 1
        if not chunk:
            lists.pop(pos)
            maxes.pop(pos)
        elif idx == len(chunk):
            maxes[pos] = chunk[-1]

    def refile(self, item: JobRank, level: float) -> None:
        """Give `item` (in the sequence) the level `level`, in place when it keeps its place between its
        neighbours (a level change mostly passes none of them), else by taking it out and putting it
        back.

        Raises:
            ValueError: it is not in the sequence.
        """
        lists, maxes = self._lists, self._maxes
        order = item.order
        pos = _lower(maxes, item.level, order)
        if pos < len(maxes):
            chunk = lists[pos]
            idx = _lower(chunk, item.level, order)
            if idx < len(chunk) and chunk[idx] is item:
                prev = chunk[idx - 1] if idx > 0 else (lists[pos - 1][-1] if pos > 0 else None)
                nxt = (
                    chunk[idx + 1]
                    if idx + 1 < len(chunk)
                    else (lists[pos + 1][0] if pos + 1 < len(lists) else None)
                )
                if (prev is None or prev.level < level or (prev.level == level and prev.order < order)) and (
                    nxt is None or level < nxt.level or (level == nxt.level and order < nxt.order)
                ):
                    item.level = level  # `_maxes` holds the record itself: still the chunk's last
                    return
        self.remove(item)
        item.level = level
        self.add(item)

    def flat(self) -> bool:
        """Whether the records are in one chunk (`resort` can put them back in order)."""
        return len(self._lists) == 1

    def resort(self) -> None:
        """Put the records of a `flat` sequence back in order after levels changed in place (an
        insertion sort: a few records moved, mostly by a few places). Only for one chunk."""
        chunk = self._lists[0]
        for i in range(1, len(chunk)):
            item = chunk[i]
            level, order = item.level, item.order
            j = i - 1
            prev = chunk[j]
            if prev.level < level or (prev.level == level and prev.order < order):
                continue
            while True:
                chunk[j + 1] = prev
                j -= 1
                if j < 0:
                    break
                prev = chunk[j]
                if prev.level < level or (prev.level == level and prev.order < order):
                    break
            chunk[j + 1] = item
        self._maxes[0] = chunk[-1]

    def first(self) -> JobRank:
        """The first record (IndexError when empty)."""
        if not self._lists:
            raise IndexError("first() of an empty sequence")
        return self._lists[0][0]

    def last(self) -> JobRank:
        """The last record (IndexError when empty)."""
        if not self._lists:
            raise IndexError("last() of an empty sequence")
        return self._lists[-1][-1]

    def first_after(self, level: float, order: int) -> JobRank | None:
        """The first record after (`level`, `order`), or None."""
        maxes = self._maxes
        pos = _upper(maxes, level, order)
        if pos == len(maxes):
            return None
        chunk = self._lists[pos]
        return chunk[_upper(chunk, level, order)]

    def first_at_level(self, level: float) -> JobRank | None:
        """The first record of a level >= `level`, or None."""
        maxes = self._maxes
        pos = _at_level(maxes, level)
        if pos == len(maxes):
            return None
        chunk = self._lists[pos]
        return chunk[_at_level(chunk, level)]

    def iter_after(self, level: float, order: int) -> Iterator[JobRank]:
        """The records after (`level`, `order`), in order, read from the sequence as the iteration goes:
        cheap when only a few are taken. The sequence must not change while it is used."""
        maxes = self._maxes
        pos = _upper(maxes, level, order)
        if pos == len(maxes):
            return iter(())
        return self._walk(pos, _upper(self._lists[pos], level, order))

    def _walk(self, pos: int, i: int) -> Iterator[JobRank]:
        lists = self._lists
        while pos < len(lists):
            chunk = lists[pos]
            while i < len(chunk):
                yield chunk[i]
                i += 1
            pos += 1
            i = 0

    def cursor(self) -> Cursor:
        """A cursor at the first record (`Cursor`)."""
        return Cursor(self._lists, 0, 0)

    def cursor_after(self, level: float, order: int) -> Cursor:
        """A cursor at the first record after (`level`, `order`)."""
        maxes = self._maxes
        pos = _upper(maxes, level, order)
        if pos == len(maxes):
            return Cursor(self._lists, pos, 0)
        return Cursor(self._lists, pos, _upper(self._lists[pos], level, order))

    def above(self, level: float) -> list[JobRank]:
        """The records of a level above `level`, the highest first."""
        out: list[JobRank] = []
        lists = self._lists
        k = len(lists) - 1
        while k >= 0:
            chunk = lists[k]
            i = len(chunk) - 1
            while i >= 0:
                item = chunk[i]
                if item.level <= level:
                    return out
                out.append(item)
                i -= 1
            k -= 1
        return out

    def rank(self, level: float, order: int, upper: bool) -> int:
        """How many records come before (`level`, `order`); `upper`: or are at it."""
        maxes = self._maxes
        pos = _upper(maxes, level, order) if upper else _lower(maxes, level, order)
        if pos == len(maxes):
            return self._len
        before = 0
        for k in range(pos):
            before += len(self._lists[k])
        chunk = self._lists[pos]
        return before + (_upper(chunk, level, order) if upper else _lower(chunk, level, order))

    def mapped(self, fresh: dict[int, JobRank]) -> RankedSeq:
        """The same places with `fresh[jid]` for each record (a forked queue's own records)."""
        new = RankedSeq()
        new._lists = [[fresh[x.jid] for x in chunk] for chunk in self._lists]
        new._maxes = [chunk[-1] for chunk in new._lists]
        new._len = self._len
        return new


@final
class Cursor:
    """A walk over a `RankedSeq` in order, one record per `next`, read from the sequence as it goes (a
    native method call, where `next()` on a generator is a generic one). The sequence must not change
    while it is used."""

    __slots__ = ("i", "lists", "pos")

    def __init__(self, lists: list[list[JobRank]], pos: int, i: int) -> None:
        self.lists = lists
        self.pos = pos
        self.i = i

    def peek(self) -> JobRank | None:
        """The record `next` would give, without moving on."""
        return self._seek()

    def next(self) -> JobRank | None:
        """The next record, or None past the last."""
        item = self._seek()
        if item is not None:
            self.i += 1
        return item

    def _seek(self) -> JobRank | None:
        """The record at the cursor, past any chunk it has used up (None past the last)."""
        lists = self.lists
        pos, i = self.pos, self.i
        while pos < len(lists):
            chunk = lists[pos]
            if i < len(chunk):
                self.pos, self.i = pos, i
                return chunk[i]
            pos += 1
            i = 0
        self.pos, self.i = pos, 0
        return None


def _lower(items: list[JobRank], level: float, order: int) -> int:
    """The first index whose record is not before (`level`, `order`)."""
    lo: i64 = 0
    hi: i64 = len(items)  # (machine ints: no tagged arithmetic)
    while lo < hi:
        mid = (lo + hi) >> 1
        x = items[mid]
        if x.level < level or (x.level == level and x.order < order):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _upper(items: list[JobRank], level: float, order: int) -> int:
    """The first index whose record comes after (`level`, `order`)."""
    lo: i64 = 0
    hi: i64 = len(items)  # (machine ints: no tagged arithmetic)
    while lo < hi:
        mid = (lo + hi) >> 1
        x = items[mid]
        if x.level < level or (x.level == level and x.order <= order):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _at_level(items: list[JobRank], level: float) -> int:
    """The first index whose record's level is >= `level`."""
    lo: i64 = 0
    hi: i64 = len(items)  # (machine ints: no tagged arithmetic)
    while lo < hi:
        mid = (lo + hi) >> 1
        if items[mid].level < level:
            lo = mid + 1
        else:
            hi = mid
    return lo

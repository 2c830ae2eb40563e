"""`SortedSeq`: a sorted sequence of tuples, the container of the scheduler's queues (waiting jobs in
policy order, running jobs by expected end, core/shapes.py's index).

The layout of sortedcontainers' SortedList (a list of sorted chunks and each chunk's last item, so an
insert or a removal moves at most a chunk's items), written with the few operations the core uses and
typed, so that the compiled core (docs/install.md, "The compiled core") runs it as C: on the hot path
of every clock, an add or a removal per start, end and submit. Items are compared as tuples; two
equal items are the same entry (every entry of the core ends with a unique handle).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Iterator
from itertools import chain, islice
from typing import Any, Final, Generic, TypeVar

__all__ = ["SortedSeq"]

T = TypeVar("T", bound=tuple[Any, ...])

_LOAD: Final = 512
"""Items per chunk after a split (a chunk splits at twice this)."""


class SortedSeq(Generic[T]):
    """Tuples kept in ascending order: `add`, `remove`, `clear`, `len`, iteration in order (and
    `reversed_items`), `first`, `last`, `first_after`, `after`, `iter_after`, `starting_at`, `bisect_left`,
    `bisect_right`, `head`, `islice` and `copy`."""

    def __init__(self, items: Iterable[T] = ()) -> None:
        ordered = sorted(items)
        self._lists: list[list[T]] = [ordered[i : i + _LOAD] for i in range(0, len(ordered), _LOAD)]
        self._maxes: list[T] = [chunk[-1] for chunk in self._lists]
        self._len = len(ordered)

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[T]:
        return chain.from_iterable(self._lists)

    def add(self, item: T) -> None:
        """Insert `item` in order (after the items equal to it)."""
        maxes, lists = self._maxes, self._lists
        self._len += 1
        if not maxes:
            lists.append([item])
            maxes.append(item)
            return
        pos = bisect_right(maxes, item)
        if pos == len(maxes):  # after every item: the end of the last chunk
            pos -= 1
            chunk = lists[pos]
            chunk.append(item)
            maxes[pos] = item
        else:
            chunk = lists[pos]
            insort(chunk, item)
        if len(chunk) > 2 * _LOAD:
            rest = chunk[_LOAD:]
            del chunk[_LOAD:]
            maxes[pos] = chunk[-1]
            lists.insert(pos + 1, rest)
            maxes.insert(pos + 1, rest[-1])

    def remove(self, item: T) -> None:
        """Take out the entry equal to `item`.

        Raises:
            ValueError: no entry equals it.
        """
        maxes = self._maxes
        pos = bisect_left(maxes, item)
        if pos == len(maxes):
            raise ValueError(f"{item!r} is not in the sequence")
        chunk = self._lists[pos]
        idx = bisect_left(chunk, item)
        if not chunk[idx] == item:
            raise ValueError(f"{item!r} is not in the sequence")
        del chunk[idx]
        self._len -= 1
        if not chunk:
            del self._lists[pos]
            del maxes[pos]
        elif idx == len(chunk):
            maxes[pos] = chunk[-1]

    def first(self) -> T:
        """The smallest item.

        Raises:
            IndexError: the sequence is empty.
        """
        if not self._lists:
            raise IndexError("first() of an empty sequence")
        return self._lists[0][0]

    def last(self) -> T:
        """The largest item.

        Raises:
            IndexError: the sequence is empty.
        """
        if not self._lists:
            raise IndexError("last() of an empty sequence")
        return self._lists[-1][-1]

    def first_after(self, bound: tuple[Any, ...]) -> T | None:
        """The smallest item greater than `bound`, or None."""
        maxes = self._maxes
        pos = bisect_right(maxes, bound)
        if pos == len(maxes):
            return None
        chunk = self._lists[pos]
        return chunk[bisect_right(chunk, bound)]

    def clear(self) -> None:
        """Take out every item."""
        self._lists = []
        self._maxes = []
        self._len = 0

    def reversed_items(self) -> Iterator[T]:
        """The items in descending order."""
        lists = self._lists
        for k in range(len(lists) - 1, -1, -1):  # by index: mypyc cannot type reversed() of T chunks
            chunk = lists[k]
            for i in range(len(chunk) - 1, -1, -1):
                yield chunk[i]

    def starting_at(self, bound: tuple[Any, ...]) -> Iterator[T]:
        """The items greater than or equal to `bound`, in order."""
        maxes = self._maxes
        pos = bisect_left(maxes, bound)
        if pos == len(maxes):
            return iter(())
        chunk = self._lists[pos]
        head = chunk[bisect_left(chunk, bound) :]
        return chain(head, chain.from_iterable(islice(self._lists, pos + 1, None)))

    def after(self, bound: T) -> Iterator[T]:
        """The items greater than `bound`, in order."""
        maxes = self._maxes
        pos = bisect_right(maxes, bound)
        if pos == len(maxes):
            return iter(())
        chunk = self._lists[pos]
        head = chunk[bisect_right(chunk, bound) :]
        return chain(head, chain.from_iterable(islice(self._lists, pos + 1, None)))

    def iter_after(self, bound: tuple[Any, ...]) -> Iterator[T]:
        """The items greater than `bound`, in order, read from the sequence as the iteration goes
        (`after` copies the rest of the first chunk up front): cheap when only a few are taken. The
        sequence must not change while it is used."""
        maxes = self._maxes
        pos = bisect_right(maxes, bound)
        if pos == len(maxes):
            return iter(())
        return self._walk(pos, bisect_right(self._lists[pos], bound))

    def _walk(self, pos: int, i: int) -> Iterator[T]:
        lists = self._lists
        while pos < len(lists):
            chunk = lists[pos]
            while i < len(chunk):
                yield chunk[i]
                i += 1
            pos += 1
            i = 0

    def bisect_left(self, item: tuple[Any, ...]) -> int:
        """How many items are smaller than `item`."""
        maxes = self._maxes
        pos = bisect_left(maxes, item)
        if pos == len(maxes):
            return self._len
        before = 0
        for k in range(pos):
            before += len(self._lists[k])
        return before + bisect_left(self._lists[pos], item)

    def bisect_right(self, item: tuple[Any, ...]) -> int:
        """How many items are smaller than or equal to `item`."""
        maxes = self._maxes
        pos = bisect_right(maxes, item)
        if pos == len(maxes):
            return self._len
        before = 0
        for k in range(pos):
            before += len(self._lists[k])
        return before + bisect_right(self._lists[pos], item)

    def head(self, n: int) -> list[T]:
        """The `n` smallest items, in order, as a list (all of them when there are fewer)."""
        out: list[T] = []
        for chunk in self._lists:
            if len(out) + len(chunk) >= n:
                out.extend(chunk[: n - len(out)])
                return out
            out.extend(chunk)
        return out

    def islice(self, start: int, stop: int) -> Iterator[T]:
        """The items of ranks start..stop-1, in order."""
        return islice(chain.from_iterable(self._lists), start, stop)

    def copy(self) -> SortedSeq[T]:
        """An independent sequence of the same items (the items themselves are shared)."""
        new: SortedSeq[T] = SortedSeq()
        new._lists = [list(chunk) for chunk in self._lists]
        new._maxes = list(self._maxes)
        new._len = self._len
        return new

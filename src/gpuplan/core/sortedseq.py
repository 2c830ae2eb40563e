"""`SortedSeq`: a sorted sequence of tuples, the container of the scheduler's queues (waiting jobs in
policy order, running jobs by expected end, core/shapes.py's index).

The layout of sortedcontainers' SortedList (a list of sorted chunks and each chunk's last item, so an
insert or a removal moves at most a chunk's items), written with the few operations the core uses and
typed, so that the compiled core (docs/install.md, "The compiled core") runs it as C: on the hot path
of every clock, an add or a removal per start, end and submit. Items are compared as tuples; two
equal items are the same entry (every entry of the core ends with a unique handle).

`KeyedSeq` is the same layout for values ordered by a float and an integer handle (the running jobs
by expected end, then handle): the two are kept in typed lists beside the values, so a search compares
two numbers in C, not two tuples through Python's generic comparisons (a tuple comparison cost about as
much as a whole search on the typed lists).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, islice
from typing import Any, Final, Generic, TypeVar

from mypy_extensions import i64

__all__ = ["KeyedSeq", "SortedSeq", "bisect_left_f", "bisect_right_f"]

T = TypeVar("T", bound=tuple[Any, ...])
V = TypeVar("V")

_chain_all: Final = chain.from_iterable  # a C static: the attribute is not looked up at each call

_LOAD: Final = 512
"""Items per chunk after a split (a chunk splits at twice this)."""

_KEYED_LOAD: Final = 64
"""Values per KeyedSeq chunk after a split: smaller than SortedSeq's, as an insert or a removal there
shifts three lists (CPython moves their items one by one) while a search step is cheap."""


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
        return _chain_all(self._lists)

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
        lists, maxes = self._lists, self._maxes
        if lists and lists[0][0] == item:  # the first: a pass mostly starts the jobs at the queue's head
            pos, chunk, idx = 0, lists[0], 0
        else:
            pos = bisect_left(maxes, item)
            if pos == len(maxes):
                raise ValueError(f"{item!r} is not in the sequence")
            chunk = lists[pos]
            idx = bisect_left(chunk, item)
            if not chunk[idx] == item:
                raise ValueError(f"{item!r} is not in the sequence")
        chunk.pop(idx)  # pop, not del: list primitives of the compiled core, no generic call
        self._len -= 1
        if not chunk:
            lists.pop(pos)
            maxes.pop(pos)
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

    def neighbours(self, item: T) -> tuple[T | None, T | None]:
        """The items just before and just after `item`, which is in the sequence (None at an end)."""
        lists = self._lists
        pos = bisect_left(self._maxes, item)
        chunk = lists[pos]
        i = bisect_left(chunk, item)
        before = chunk[i - 1] if i > 0 else (lists[pos - 1][-1] if pos > 0 else None)
        after = chunk[i + 1] if i + 1 < len(chunk) else (lists[pos + 1][0] if pos + 1 < len(lists) else None)
        return before, after

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
        return chain(head, _chain_all(islice(self._lists, pos + 1, None)))

    def after(self, bound: T) -> Iterator[T]:
        """The items greater than `bound`, in order."""
        maxes = self._maxes
        pos = bisect_right(maxes, bound)
        if pos == len(maxes):
            return iter(())
        chunk = self._lists[pos]
        head = chunk[bisect_right(chunk, bound) :]
        return chain(head, _chain_all(islice(self._lists, pos + 1, None)))

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
        return islice(_chain_all(self._lists), start, stop)

    def copy(self) -> SortedSeq[T]:
        """An independent sequence of the same items (the items themselves are shared)."""
        new: SortedSeq[T] = SortedSeq()
        new._lists = [list(chunk) for chunk in self._lists]
        new._maxes = list(self._maxes)
        new._len = self._len
        return new


class KeyedSeq(Generic[V]):
    """Values kept in ascending order of (`key`, `handle`), a float and an int, the handle unique:
    `add`, `remove`, `len`, `values` and `items` in order, `copy_with`. What `SortedSeq` of
    `(key, handle, value)` tuples gives, in the same order, with the numbers compared as numbers."""

    def __init__(self) -> None:
        self._keys: list[list[float]] = []  # per chunk, ascending (key, handle)
        self._handles: list[list[int]] = []
        self._values: list[list[V]] = []
        self._max_keys: list[float] = []  # each chunk's last key and handle
        self._max_handles: list[int] = []
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def values(self) -> Iterator[V]:
        """The values in order (read as the iteration goes: do not change the sequence meanwhile)."""
        return _chain_all(self._values)

    def items(self) -> Iterator[tuple[float, int, V]]:
        """(key, handle, value) in order."""
        for keys, handles, values in zip(self._keys, self._handles, self._values):
            yield from zip(keys, handles, values)

    def add(self, key: float, handle: int, value: V) -> None:
        """Insert `value` at (`key`, `handle`), which no value holds yet."""
        self._len += 1
        if not self._keys:
            self._keys.append([key])
            self._handles.append([handle])
            self._values.append([value])
            self._max_keys.append(key)
            self._max_handles.append(handle)
            return
        pos = _lower(self._max_keys, self._max_handles, key, handle)
        if pos == len(self._max_keys):  # after every value: the end of the last chunk
            pos -= 1
            self._keys[pos].append(key)
            self._handles[pos].append(handle)
            self._values[pos].append(value)
            self._max_keys[pos] = key
            self._max_handles[pos] = handle
        else:
            keys, handles = self._keys[pos], self._handles[pos]
            i = _lower(keys, handles, key, handle)
            keys.insert(i, key)
            handles.insert(i, handle)
            self._values[pos].insert(i, value)
        if len(self._keys[pos]) > 2 * _KEYED_LOAD:
            self._split(pos)

    def _split(self, pos: int) -> None:
        _split_chunk(self._keys, pos)
        _split_chunk(self._handles, pos)
        _split_chunk(self._values, pos)
        self._max_keys[pos] = self._keys[pos][-1]
        self._max_handles[pos] = self._handles[pos][-1]
        self._max_keys.insert(pos + 1, self._keys[pos + 1][-1])
        self._max_handles.insert(pos + 1, self._handles[pos + 1][-1])

    def remove(self, key: float, handle: int) -> V:
        """Take out and return the value at (`key`, `handle`).

        Raises:
            ValueError: no value is there.
        """
        pos = _lower(self._max_keys, self._max_handles, key, handle)
        if pos < len(self._max_keys):
            keys, handles = self._keys[pos], self._handles[pos]
            i = _lower(keys, handles, key, handle)
            if i < len(keys) and keys[i] == key and handles[i] == handle:
                keys.pop(i)  # pop, not del: a list primitive of the compiled core, no generic call
                handles.pop(i)
                value = self._values[pos].pop(i)
                self._len -= 1
                if not keys:
                    del self._keys[pos], self._handles[pos], self._values[pos]
                    del self._max_keys[pos], self._max_handles[pos]
                elif i == len(keys):
                    self._max_keys[pos] = keys[-1]
                    self._max_handles[pos] = handles[-1]
                return value
        raise ValueError(f"nothing at ({key!r}, {handle!r}) in the sequence")

    def copy_with(self, value_of: Callable[[V], V]) -> KeyedSeq[V]:
        """The same keys and handles with `value_of(value)` for each value (a forked scheduler's
        copied records)."""
        new: KeyedSeq[V] = KeyedSeq()
        new._keys = [list(c) for c in self._keys]
        new._handles = [list(c) for c in self._handles]
        new._values = [[value_of(v) for v in c] for c in self._values]
        new._max_keys = list(self._max_keys)
        new._max_handles = list(self._max_handles)
        new._len = self._len
        return new


def _split_chunk(lists: list[list[Any]], pos: int) -> None:
    chunk = lists[pos]
    lists.insert(pos + 1, chunk[_KEYED_LOAD:])
    del chunk[_KEYED_LOAD:]


def _lower(keys: list[float], handles: list[int], key: float, handle: int) -> int:
    """The first index whose (key, handle) is not below (`key`, `handle`) (keys ascending)."""
    lo: i64 = 0
    hi: i64 = len(keys)  # (machine ints: no tagged arithmetic)
    while lo < hi:
        mid = (lo + hi) >> 1
        k = keys[mid]
        if k < key or (k == key and handles[mid] < handle):
            lo = mid + 1
        else:
            hi = mid
    return lo


def bisect_left_f(xs: list[float], x: float, lo: i64 = 0) -> int:
    """`bisect.bisect_left` on a list of floats, compiled: machine ints, the floats compared in C (the
    bisect module's function is a generic call that compares objects)."""
    hi: i64 = len(xs)
    while lo < hi:
        mid = (lo + hi) >> 1
        if xs[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def bisect_right_f(xs: list[float], x: float) -> int:
    """`bisect.bisect_right` on a list of floats, compiled (as `bisect_left_f`)."""
    lo: i64 = 0
    hi: i64 = len(xs)
    while lo < hi:
        mid = (lo + hi) >> 1
        if x < xs[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo

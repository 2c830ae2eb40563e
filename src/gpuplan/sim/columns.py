"""A run's job records as columns: their times as arrays, their users and GPU sets as codes.

Every figure of a run (metrics, per-user figures, jobs across nodes, the JSONL schedule) reads the
same few fields of every record. On a million records made one at a time during a pass, each field
read over the records in start order costs about 0.2 s of cache misses (the simulator made them in end
order, and their objects lie scattered over the heap); read in the order they were made, about
0.03 s. So the simulator takes the columns once, in that order, sorts them (the records' start order
by columns) and every figure reads the columns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from operator import attrgetter
from typing import Any, Protocol, TypeVar

import numpy as np

__all__ = ["RecordColumns", "RecordLike", "RecordList", "start_permutation"]

_TIMES = attrgetter("submit_s", "start_s", "end_s")
_USER, _GPUS, _JOB_ID = attrgetter("user"), attrgetter("gpus"), attrgetter("job_id")
_SLICE = 1 << 16


class RecordLike(Protocol):
    """What the columns read of a `sim.result.JobRecord`."""

    job_id: str
    submit_s: float
    start_s: float
    end_s: float
    gpus: tuple[int, ...]
    user: str


R = TypeVar("R", bound=RecordLike)


class RecordList(list[R]):
    """A run's records: a list that counts its changes (`version`), so that columns taken of it can
    tell when they no longer hold (a record replaced, added or moved). A record changed in place
    (`rec.start_s = ...`) is not counted: replace it in the list instead (records are values)."""

    __slots__ = ("version",)

    def __init__(self, records: Iterable[R] = ()) -> None:
        super().__init__(records)
        self.version = 0

    def __reduce__(self) -> tuple[Any, ...]:
        return (RecordList, (list(self),))  # a copy or an unpickled list starts at version 0


def _counted(name: str) -> Callable[..., Any]:
    change = getattr(list, name)

    def counted(self: RecordList[Any], *args: Any, **kwargs: Any) -> Any:
        self.version += 1
        return change(self, *args, **kwargs)

    counted.__name__ = name
    return counted


for _name in ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend", "insert", "pop",
              "remove", "clear", "sort", "reverse"):  # fmt: skip
    setattr(RecordList, _name, _counted(_name))


class RecordColumns:
    """The fields of `records` (a run's list, in its order) as columns, each group taken on first use.

    Attributes (properties):
        submit_s, start_s, end_s: float64 arrays; exact_floats: every time was a float object (not an
            int): json's text of each follows from the arrays alone.
        users: each distinct user once; user_codes: each record's index in it (int32).
        gpu_sets: each distinct GPU set once; set_codes: each record's index in it (int32).
    """

    __slots__ = ("_sets", "_times", "_users", "records", "version")

    def __init__(self, records: Sequence[RecordLike]) -> None:
        self.records = records  # the list the columns are of
        self.version = records.version if isinstance(records, RecordList) else None
        self._times: tuple[Any, Any, Any, bool] | None = None
        self._users: tuple[list[str], Any] | None = None
        self._sets: tuple[list[tuple[int, ...]], Any] | None = None

    @classmethod
    def sorting(cls, records: list[R]) -> tuple[RecordList[R], RecordColumns]:
        """`records` (the run's list, in the order it made them) in start order: by start, then job
        id, else as they were (the order of `sim.result.start_order`), as a new `RecordList`, and its
        columns; `records` is left empty. Every column is taken before the sort, in the order the
        records were made (fewer cache misses than in start order), and sorted as arrays, one at a
        time (a million-job pass peaks about here)."""
        taken = cls(records)
        submit, start, end, exact = taken.times()
        (users, user_codes), (sets, set_codes) = taken.user_column(), taken.set_column()
        del taken
        order = start_permutation(start, records)
        sorted_records: RecordList[R] = RecordList()
        for at in range(0, len(order), _SLICE):  # a slice of positions as ints at a time, not a million
            sorted_records.extend(map(records.__getitem__, order[at : at + _SLICE].tolist()))
        records.clear()
        start, submit, end = start[order], submit[order], end[order]
        user_codes, set_codes = user_codes[order], set_codes[order]
        del order
        columns = cls(sorted_records)
        columns._times = (submit, start, end, exact)
        columns._users = (users, user_codes)
        columns._sets = (sets, set_codes)
        return sorted_records, columns

    def holds(self, records: Sequence[RecordLike]) -> bool:
        """Whether these are still the columns of `records`: the same list, unchanged since (only a
        `RecordList` can say so; columns of a plain list are never kept)."""
        return (
            self.records is records
            and self.version is not None
            and getattr(records, "version", None) == self.version
        )

    def __len__(self) -> int:
        return len(self.records)

    def times(self) -> tuple[Any, Any, Any, bool]:
        """The submit, start and end columns (float64) and whether every time was a float."""
        if self._times is None:
            n, exact = len(self.records), True
            try:  # one read of each record: float.__float__ refuses anything but a float (the type check)
                flat = np.fromiter(
                    map(float.__float__, chain.from_iterable(map(_TIMES, self.records))), np.float64, 3 * n
                )
            except TypeError:
                flat = np.fromiter(chain.from_iterable(map(_TIMES, self.records)), np.float64, 3 * n)
                exact = False
            times = flat.reshape(n, 3).T.copy()  # a row a column
            del flat
            self._times = (times[0], times[1], times[2], exact)
        return self._times

    def user_column(self) -> tuple[list[str], Any]:
        """Each distinct user once and each record's index in that list (int32)."""
        if self._users is None:
            self._users = _coded(list(map(_USER, self.records)))
        return self._users

    def set_column(self) -> tuple[list[tuple[int, ...]], Any]:
        """Each distinct GPU set once and each record's index in that list (int32)."""
        if self._sets is None:
            self._sets = _coded(list(map(_GPUS, self.records)))
        return self._sets

    @property
    def submit_s(self) -> Any:
        return self.times()[0]

    @property
    def start_s(self) -> Any:
        return self.times()[1]

    @property
    def end_s(self) -> Any:
        return self.times()[2]

    @property
    def exact_floats(self) -> bool:
        return self.times()[3]

    @property
    def users(self) -> list[str]:
        return self.user_column()[0]

    @property
    def user_codes(self) -> Any:
        return self.user_column()[1]

    @property
    def gpu_sets(self) -> list[tuple[int, ...]]:
        return self.set_column()[0]

    @property
    def set_codes(self) -> Any:
        return self.set_column()[1]

    def widths(self) -> Any:
        """Each record's number of GPUs (int64)."""
        sets, codes = self.set_column()
        return np.fromiter(map(len, sets), np.int64, len(sets))[codes]

    def job_ids(self) -> list[Any]:
        """Each record's job id (read from the records: only the schedule's rows need them)."""
        return list(map(_JOB_ID, self.records))


def _coded(values: list[Any]) -> tuple[list[Any], Any]:
    """Each distinct value once (first seen first) and each value's index in that list (int32)."""
    index = {v: i for i, v in enumerate(dict.fromkeys(values))}
    return list(index), np.fromiter(map(index.__getitem__, values), np.int32, len(values))


def start_permutation(start_s: Any, records: Sequence[RecordLike]) -> Any:
    """The positions of `records` in start order: by start, then (among equal starts only) job id,
    then as they are; `start_s` is their start column. One stable sort of the starts, and the ids
    read only where starts tie."""
    order = np.argsort(start_s, kind="stable")
    starts = start_s[order]
    same = starts[1:] == starts[:-1]
    if not same.any():
        return order
    tied = np.flatnonzero(np.concatenate(([False], same)) | np.concatenate((same, [False])))
    at = order[tied]
    ids = [records[i].job_id for i in at.tolist()]
    keys = starts[tied].tolist()
    by = sorted(range(len(ids)), key=ids.__getitem__)
    by.sort(key=keys.__getitem__)  # stable: by start, then id, then as they were
    order[tied] = at[by]
    return order

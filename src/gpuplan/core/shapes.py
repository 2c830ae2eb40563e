"""The waiting jobs grouped by what decides whether they fit (`JobSlot.fits_key`), each group by planned
duration: how EASY's backfill scan learns which jobs it still could start (core/backfill.py).

A backfill pass skips every job whose fits-shape already failed to fit in that pass, and every job of a
shape that would delay the head's reservation unless it ends by the head's shadow time. Once every
shape still waiting is one of those, only the jobs that end by the shadow can start; `ShapeIndex.short`
lists them in queue order, so the pass visits those few instead of every job (the same jobs, in the
same order: the decisions do not change).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from typing import Final

from mypy_extensions import mypyc_attr

from gpuplan.core.sortedseq import SortedSeq
from gpuplan.core.state import ClusterState, Need
from gpuplan.core.view import JobSlot, fits_key

__all__ = ["INDEX_WAITING", "MAX_SHAPES", "Shape", "ShapeIndex"]

_Keys = SortedSeq[tuple[object, ...]]  # a shape's queue keys
_Plans = SortedSeq[tuple[float, tuple[object, ...]]]  # its (planned duration, queue key)

MAX_SHAPES: Final = 64
"""More distinct shapes than this waiting: the index does not pay, the pass scans every job."""

INDEX_WAITING = True
"""False: `Scheduler.waiting_shapes` gives None, so a backfill pass visits every waiting job (the
plain scan; tests compare the two). A module variable, not a Final: the compiled core reads it at
each call, so setting it works whether the core is compiled or not."""


Shape = tuple[int, "float | None", bool, "Need | None"]
"""The fields of a slot that `JobSlot.fits_key` reads: (gpus, mem_gb, may_span, need). A plain tuple,
not a NamedTuple: one is made at every submit and start, and a NamedTuple's constructor is Python."""


def shape_of(slot: JobSlot) -> Shape:
    return (slot.gpus, slot.mem_gb, slot.may_span, slot.need)


def _shape_fits_key(shape: Shape, state: ClusterState) -> tuple[object, ...]:
    return fits_key(shape[0], shape[1], shape[2], shape[3], state)  # the one rule


def _fits_key_of(
    known: dict[Shape, tuple[object, ...]], shape: Shape, state: ClusterState
) -> tuple[object, ...]:
    """`shape`'s fits-key on `state`, from `known` (the shapes met on its basis) or made and kept there."""
    fk = known.get(shape)
    if fk is None:
        fk = known[shape] = _shape_fits_key(shape, state)
    return fk


@mypyc_attr(allow_interpreted_subclasses=True)  # tests wrap `after` to see that a scan narrowed
class ShapeIndex:
    """Waiting jobs by shape: each shape's queue keys in queue order, and by planned duration."""

    def __init__(self, slots: Iterable[JobSlot] = ()) -> None:
        self._by_shape: dict[Shape, tuple[_Keys, _Plans]] = {}  # (keys, (plan_s, key))
        self._of: dict[int, tuple[Shape, float, tuple[object, ...], JobSlot]] = {}
        self._basis: tuple[bool, float] | None = None  # what the cached fits-keys were made on
        self._fk: dict[Shape, tuple[object, ...]] = {}
        self._present: set[tuple[object, ...]] | None = None
        self._rows: list[tuple[tuple[object, ...], _Keys, _Plans]] | None = None  # (fits-key, keys, plans)
        # jobs added since the index was last read, not yet in its sequences: most jobs start in the
        # pass they arrive in, and their add and removal then cost a dict entry (`_flush`)
        self._pending: dict[int, JobSlot] = {}
        # in bulk: each shape's two sequences sorted once, not built job by job
        keys: dict[Shape, list[tuple[object, ...]]] = {}
        plans: dict[Shape, list[tuple[float, tuple[object, ...]]]] = {}
        of = self._of
        for slot in slots:
            shape = shape_of(slot)
            key = slot.key
            of[slot.jid] = (shape, slot.plan_s, key, slot)
            got = keys.get(shape)
            if got is None:
                got = keys[shape] = []
                plans[shape] = []
            got.append(key)
            plans[shape].append((slot.plan_s, key))
        for shape, shape_keys in keys.items():
            self._by_shape[shape] = (SortedSeq(shape_keys), SortedSeq(plans[shape]))

    def add(self, slot: JobSlot) -> None:
        """Index a waiting job (its shape, planned duration and queue key: fixed while it waits); it
        enters the sequences when the index is next read."""
        self._pending[slot.jid] = slot

    def _flush(self) -> None:
        """Put the jobs added since the last read into the sequences (the order of the adds does not
        matter: every key is unique)."""
        pending = self._pending
        if pending:
            for slot in pending.values():
                self._insert(slot)
            pending.clear()

    def _insert(self, slot: JobSlot) -> None:
        shape = shape_of(slot)
        self._of[slot.jid] = (shape, slot.plan_s, slot.key, slot)
        got = self._by_shape.get(shape)
        if got is None:
            got = self._by_shape[shape] = (SortedSeq(), SortedSeq())
            self._present = self._rows = None
        got[0].add(slot.key)
        got[1].add((slot.plan_s, slot.key))

    def remove(self, jid: int) -> None:
        pending = self._pending
        if jid in pending:  # never read while it waited: it never entered the sequences
            del pending[jid]
            return
        shape, plan_s, key, _ = self._of.pop(jid)
        keys, plans = self._by_shape[shape]
        keys.remove(key)
        plans.remove((plan_s, key))
        if not keys:
            del self._by_shape[shape]
            self._present = self._rows = None

    def copy(self, slots: dict[int, JobSlot]) -> ShapeIndex:
        """The same index over the copied slots of a forked scheduler."""
        self._flush()
        new = ShapeIndex()
        new._by_shape = {
            shape: (keys.copy(), plans.copy()) for shape, (keys, plans) in self._by_shape.items()
        }
        new._of = {jid: (shape, plan_s, key, slots[jid]) for jid, (shape, plan_s, key, _) in self._of.items()}
        return new

    def __len__(self) -> int:
        return len(self._of) + len(self._pending)

    def fits_keys(self, state: ClusterState) -> set[tuple[object, ...]] | None:
        """The fits-keys of the waiting jobs on `state` (do not change the set), or None when there
        are too many shapes."""
        self._flush()
        if len(self._by_shape) > MAX_SHAPES:
            return None
        if self._present is None or self._basis != (state.sharing, state.min_cap_gb):
            known = self._known_on(state)
            present: set[tuple[object, ...]] = set()
            for shape in self._by_shape:
                present.add(_fits_key_of(known, shape, state))
            self._present = present
        return self._present

    def _known_on(self, state: ClusterState) -> dict[Shape, tuple[object, ...]]:
        """The fits-keys of the shapes met so far on `state`'s basis (every cache made on another
        basis is dropped)."""
        basis = (state.sharing, state.min_cap_gb)  # all of the state that fits_key reads
        if basis != self._basis:
            self._basis, self._fk, self._present, self._rows = basis, {}, None, None
        return self._fk

    def after(
        self,
        state: ClusterState,
        every: set[tuple[object, ...]],
        short: set[tuple[object, ...]],
        now: float,
        shadow: float,
        cursor: tuple[object, ...],
    ) -> Iterator[JobSlot]:
        """The waiting jobs ranked after the queue key `cursor`, in queue order, that are either of a
        fits-key in `every`, or of one in `short` and end by `shadow` if started at `now`."""
        self._flush()
        runs: list[Iterator[tuple[object, ...]]] = []
        for fk, keys, plans in self._rows_on(state):
            if fk in every:
                runs.append(keys.iter_after(cursor))
            elif fk in short:
                runs.append(self._short(keys, plans, now, shadow, cursor))
        if len(runs) == 1:
            return self._slots_of(runs[0])
        return _merge(runs, self._of)

    def _rows_on(self, state: ClusterState) -> list[tuple[tuple[object, ...], _Keys, _Plans]]:
        """Each shape's fits-key on `state` with its two sequences, kept until a shape comes or goes
        or the state's basis of fits-keys changes."""
        rows = self._rows
        if rows is None or self._basis != (state.sharing, state.min_cap_gb):
            known = self._known_on(state)
            rows = [
                (_fits_key_of(known, shape, state), keys, plans)
                for shape, (keys, plans) in self._by_shape.items()
            ]
            self._rows = rows
        return rows

    # generator functions, not generator expressions: compiled (mypyc), an expression becomes a list
    def _slots_of(self, keys: Iterator[tuple[object, ...]]) -> Iterator[JobSlot]:
        of = self._of
        for key in keys:
            yield of[key[-1]][3]  # type: ignore[index]

    def _ending_by(
        self, keys: Iterator[tuple[object, ...]], now: float, shadow: float
    ) -> Iterator[tuple[object, ...]]:
        of = self._of
        for k in keys:
            if now + of[k[-1]][1] <= shadow:  # type: ignore[index]
                yield k

    def _short(
        self, keys: _Keys, plans: _Plans, now: float, shadow: float, cursor: tuple[object, ...]
    ) -> Iterator[tuple[object, ...]]:
        room = shadow - now
        bound = math.nextafter(room, math.inf) + abs(shadow) * 1e-12
        n = plans.bisect_left((bound,))
        if n <= _FEW:  # few end in time: list them (those after the cursor found by bisection)
            picked = [k for p, k in plans.head(n) if now + p <= shadow]
            picked.sort()
            return iter(picked[bisect_right(picked, cursor) :])
        return self._ending_by(keys.iter_after(cursor), now, shadow)


_FEW: Final = 256


def _merge(
    runs: list[Iterator[tuple[object, ...]]],
    of: dict[int, tuple[Shape, float, tuple[object, ...], JobSlot]],
) -> Iterator[JobSlot]:
    """The slots of sorted runs of queue keys (`of`: the index's records by handle), in the order of
    their keys: `heapq.merge`, compiled (that one is a generator in Python); keys are unique (each
    ends with a job's handle), so no tie is left. A few runs (the common case) are merged by
    comparing their heads, without a heap."""
    if len(runs) > _HEAP_RUNS:
        yield from _heap_merge(runs, of)
        return
    heads: list[tuple[object, ...]] = []
    live: list[Iterator[tuple[object, ...]]] = []
    for run in runs:
        first = next(run, None)
        if first is not None:
            heads.append(first)
            live.append(run)
    while heads:
        m = 0
        for i in range(1, len(heads)):
            if heads[i] < heads[m]:
                m = i
        key = heads[m]
        yield of[key[-1]][3]  # type: ignore[index]
        nxt = next(live[m], None)
        if nxt is None:
            del heads[m]
            del live[m]
        else:
            heads[m] = nxt


_HEAP_RUNS: Final = 4
"""More runs than this: `_merge` keeps their heads in a heap."""


def _heap_merge(
    runs: list[Iterator[tuple[object, ...]]],
    of: dict[int, tuple[Shape, float, tuple[object, ...], JobSlot]],
) -> Iterator[JobSlot]:
    heap: list[tuple[tuple[object, ...], int]] = []
    for i, run in enumerate(runs):
        first = next(run, None)
        if first is not None:
            heap.append((first, i))
    heapq.heapify(heap)
    while heap:
        key, i = heap[0]
        yield of[key[-1]][3]  # type: ignore[index]
        nxt = next(runs[i], None)
        if nxt is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (nxt, i))

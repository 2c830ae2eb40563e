"""The availability profile of a sharing cluster: booked intervals per GPU with their memory, kept
across passes.

Conservative backfill on a sharing cluster (core/gpu_plan.py) asks at which candidate time the placer
finds GPUs for a job in the window [t, t + its duration): the cluster with every booking that overlaps
the window. The bookings come in two layers, both kept here:

- the running jobs: per GPU, (planned end, handle, memory) sorted by planned end then handle (the
  order of `SchedulerView.running()`), updated when a job starts, ends (early or late), is preempted
  or its expected end moves. A job that started during a pass joins this layer when the next pass
  begins (during its own pass it is booked where the pass booked it, after the bookings before it);
- the pass layer: the bookings made during the current pass (reservations and starts), per GPU in
  booking order, dropped when the next pass begins.

`full` is the cluster with every booking of both layers placed, GPU by GPU in booking order, from the
cluster without jobs (offline GPUs and foreign memory stay): the window [now, inf). A GPU's value is
always recomputed from the empty cluster by its bookings in that order (`replay`), the very float
operations a fresh window does, so every fit and every best-fit rank agrees to the last bit with a
plan built from scratch (tests/test_profile_structure.py, tests/test_conservative_fast.py).

A running job past its planned end is planned to end at the next instant after now (`soon`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable

from gpuplan.core.state import ClusterState
from gpuplan.core.view import JobSlot

__all__ = ["GpuProfile"]

_INF = math.inf
_Running = tuple[float, int, float | None]  # (planned end, handle, memory per GPU; None: whole GPU)
_Booking = tuple[float, float, float | None]  # (start, end, memory per GPU)


class GpuProfile:
    """Booked intervals per GPU on a sharing cluster: the running jobs and the current pass's bookings.

    `state` is the live cluster; its holds (offline GPUs, foreign memory) are read once (`stale` asks
    the owner for a new profile when they change).
    """

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.base = state.without_jobs()
        self.full = self.base.copy()
        self.running: dict[int, list[_Running]] = {}
        """Per GPU, the running layer sorted by (planned end, handle)."""
        self.jobs: dict[int, tuple[float, tuple[int, ...], float | None]] = {}
        """The running layer's jobs: handle -> (planned end, GPUs, memory)."""
        self.ends: dict[float, list[int]] = {}
        """Finite planned end of the running layer -> its GPUs (one entry per booking)."""
        self.end_times: list[float] = []
        """The running layer's distinct finite planned ends, sorted."""
        self.new: dict[int, JobSlot] = {}
        """Jobs that started since the last pass began: they join the running layer at the next one."""
        self.extra: dict[int, list[_Booking]] = {}
        """Per GPU, the pass layer in booking order."""
        self.extra_ends: dict[float, list[int]] = {}
        self.starts: list[tuple[float, int]] = []
        """(start, GPU) of the pass layer's bookings that start after now, sorted."""
        self.now = -_INF
        self.soon = -_INF
        self._overdue: list[int] | None = []
        self.stale = False
        self.flat: dict[int, list[_Booking]] = {}
        """Per GPU, both layers as bookings, built on first use (`bookings`)."""

    # -- the running layer ---------------------------------------------------------------------
    @classmethod
    def build(
        cls, state: ClusterState, running: Iterable[tuple[int, float, Iterable[int], float | None]]
    ) -> GpuProfile:
        """A profile from scratch: `running` as (handle, planned end, GPUs, memory per GPU)."""
        profile = cls(state)
        for jid, end_s, gpus, mem in running:
            profile.start(jid, end_s, gpus, mem)
        return profile

    def start(self, jid: int, end_s: float, gpus: Iterable[int], mem: float | None) -> None:
        """Add a running job to the running layer."""
        gpus = tuple(gpus)
        self.jobs[jid] = (end_s, gpus, mem)
        entry = (end_s, jid, mem)
        for g in gpus:
            bisect.insort(self.running.setdefault(g, []), entry)
            self.flat.pop(g, None)
            self.replay_full(g)
        if end_s <= self.soon:
            self._overdue = None
        if end_s < _INF:
            got = self.ends.get(end_s)
            if got is None:
                self.ends[end_s] = list(gpus)
                bisect.insort(self.end_times, end_s)
            else:
                got.extend(gpus)

    def stop(self, jid: int) -> None:
        """Take a running job out of the running layer (it ended or was preempted)."""
        end_s, gpus, mem = self.jobs.pop(jid)
        entry = (end_s, jid, mem)
        if end_s <= self.soon:
            self._overdue = None
        for g in gpus:
            books = self.running[g]
            del books[bisect.bisect_left(books, entry)]
            if not books:
                del self.running[g]
            self.flat.pop(g, None)
            self.replay_full(g)
        if end_s < _INF:
            got = self.ends[end_s]
            for g in gpus:
                got.remove(g)
            if not got:
                del self.ends[end_s]
                del self.end_times[bisect.bisect_left(self.end_times, end_s)]

    def move(self, jid: int, end_s: float) -> None:
        """A running job's planned end moved."""
        old, gpus, mem = self.jobs[jid]
        if old != end_s:
            self.stop(jid)
            self.start(jid, end_s, gpus, mem)

    # -- the pass layer ------------------------------------------------------------------------
    def begin_pass(self, now: float) -> None:
        """A new pass at `now`: the last pass's layer is dropped, the jobs started since join the
        running layer, and the running jobs past their planned end are found."""
        extra = self.extra
        if extra:
            self.extra = {}
            self.extra_ends = {}
            self.starts = []
            for g in extra:
                self.replay_full(g)
        for jid, slot in self.new.items():
            self.start(jid, slot.expected_end_s, slot.alloc, slot.mem_gb)
        self.new.clear()
        self.now = now
        self.soon = math.nextafter(now, _INF)
        self._overdue = None
        self.flat.clear()

    @property
    def overdue(self) -> list[int]:
        """GPUs of running bookings planned to end by `soon` (they end at `soon`)."""
        if self._overdue is None:
            times = self.end_times
            k = bisect.bisect_right(times, self.soon)
            self._overdue = [g for t in times[:k] for g in self.ends[t]]
        return self._overdue

    def candidates(self) -> list[float]:
        """The candidate starts of this pass so far: now and every booking's end after it, sorted (a
        fresh list: the pass adds the ends of its own bookings)."""
        rest = self.end_times[bisect.bisect_right(self.end_times, self.soon) :]
        return [self.now, self.soon, *rest] if self.overdue else [self.now, *rest]

    def book(self, t0: float, t1: float, gpus: Iterable[int], mem: float | None) -> bool:
        """Add a booking over [t0, t1) to the pass layer; True when t1 is a new candidate time."""
        gpus = tuple(gpus)
        for g in gpus:
            self.extra.setdefault(g, []).append((t0, t1, mem))
            flat = self.flat.get(g)
            if flat is not None:
                flat.append((t0, t1, mem))
            self.replay_full(g)
            if t0 > self.now:
                bisect.insort(self.starts, (t0, g))
        if t1 == _INF:
            return False
        got = self.extra_ends.get(t1)
        if got is None:
            self.extra_ends[t1] = list(gpus)
            return not self.ends_at_known(t1)
        got.extend(gpus)
        return False

    def ends_at_known(self, t: float) -> bool:
        """Whether some running booking ends at t (after clamping to `soon`)."""
        if t == self.soon:
            return bool(self.overdue)
        return t > self.soon and t in self.ends

    def ends_at(self, t: float) -> list[int] | tuple[()]:
        """GPUs of the bookings (both layers) that end at t (> now); read it, do not change it."""
        running = self.overdue if t == self.soon else self.ends.get(t, ())
        extra = self.extra_ends.get(t)
        if extra is None:
            return running
        return [*running, *extra] if running else extra

    def booked_gpus(self) -> set[int]:
        """GPUs with a booking in either layer."""
        return self.running.keys() | self.extra.keys()

    def booked_count(self) -> int:
        extra = self.extra
        if not extra:
            return len(self.running)
        return len(self.running) + sum(1 for g in extra if g not in self.running)

    # -- GPU values ------------------------------------------------------------------------------
    def bookings(self, g: int) -> list[_Booking]:
        """GPU g's bookings as (start, end, memory) in booking order: the running layer from now to
        its planned end (`soon` at the earliest), then the pass layer (kept until either changes:
        read it, do not change it). A window [t0, t1) holds those with start < t1 and end > t0."""
        books = self.flat.get(g)
        if books is None:
            now, soon = self.now, self.soon
            books = [(now, end if end > soon else soon, mem) for end, _jid, mem in self.running.get(g, ())]
            books.extend(self.extra.get(g, ()))
            self.flat[g] = books
        return books

    def replay_full(self, g: int) -> None:
        """Recompute GPU g of `full` (the window [now, inf): every booking of both layers counts)."""
        base, st = self.base, self.full
        nj, free = base.gpu_njobs[g], base.gpu_free_gb[g]
        cap = base.gpu_cap_gb[g]
        for _end, _jid, mem in self.running.get(g, ()):
            nj += 1
            free -= cap if mem is None else mem
        for _a, _b, mem in self.extra.get(g, ()):
            nj += 1
            free -= cap if mem is None else mem
        set_gpu(st, g, nj, free)

    # -- kept current by the scheduler (core/view.py's RunningObserver) ---------------------------
    def job_started(self, slot: JobSlot) -> None:
        self.new[slot.jid] = slot

    def job_stopped(self, slot: JobSlot) -> None:
        if self.new.pop(slot.jid, None) is None and slot.jid in self.jobs:
            self.stop(slot.jid)

    def end_moved(self, slot: JobSlot) -> None:
        if slot.jid in self.jobs:
            self.move(slot.jid, slot.expected_end_s)

    def holds_changed(self) -> None:
        self.stale = True


def set_gpu(st: ClusterState, g: int, nj: int, free: float) -> None:
    """Set GPU g's occupants and free memory on `st`, keeping its idle counts."""
    was_idle = st.gpu_njobs[g] == 0
    st.gpu_njobs[g], st.gpu_free_gb[g] = nj, free
    if was_idle != (nj == 0):
        delta = 1 if nj == 0 else -1
        st.node_idle[st.gpu_node[g]] += delta
        st.idle_total += delta

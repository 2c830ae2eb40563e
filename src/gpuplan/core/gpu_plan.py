"""Conservative backfill's pass on sharing clusters: booked intervals per GPU with memory, kept across
passes (core/gpu_profile.py: the running jobs' layer is updated as jobs start, end and move; a pass
drops the last pass's bookings and makes its own).

A job's earliest start is the first candidate time (now, or the end of a booking) at which the placer
finds GPUs for it in the window [t, t + its duration): the cluster with every booking that overlaps
the window. Windows are not rebuilt for each candidate: from one candidate to the next only the GPUs of
bookings that leave (they end at the new candidate) or enter (they start within the longer window)
change, and each such GPU is recomputed from the empty cluster by its bookings in booking order, the
very float operations a fresh window does (so fits and best-fit ranks agree to the last bit). The placer
runs only where some node, or the spanning total, has enough GPUs the job fits on: it finds GPUs
exactly then (tests/test_conservative_fast.py checks all of it against tests/legacy_conservative.py).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable

from gpuplan.core.gpu_profile import GpuProfile
from gpuplan.core.profile import booked_end
from gpuplan.core.view import JobSlot, SchedulerView

__all__ = ["GpuPlan"]

_INF = math.inf


class GpuPlan:
    """Sharing clusters: booked intervals per GPU (running jobs and reservations) with their memory."""

    def __init__(self, s: SchedulerView, now: float, profile: GpuProfile) -> None:
        self.s = s
        self.now = now
        self.p = profile
        profile.begin_pass(now)
        self.times: list[float] = profile.candidates()  # sorted: now and every finite booking end
        self._found: list[tuple[int, float | None, bool, float, float]] = []  # see _no_placement_before

    @property
    def horizon_s(self) -> float:
        """The first candidate time after now: until then, with nothing changed, a pass plans the same."""
        return self.times[1] if len(self.times) > 1 else _INF

    def _book(self, t0: float, t1: float, gpus: tuple[int, ...] | list[int], mem: float | None) -> None:
        if self.p.book(t0, t1, gpus, mem):
            bisect.insort(self.times, t1)

    def earliest(self, slot: JobSlot, only_now: bool) -> tuple[float, list[int] | None]:
        """(earliest start, GPUs); (inf, None) when it never fits. `only_now`: only the first candidate
        (now) is tried, as for a job beyond the depth."""
        lo = self._no_placement_before(slot)
        if only_now:
            return (self.now, None) if lo > self.now else self._search(slot, self.now, True)
        if lo == _INF:
            return _INF, None
        t, gpus = self._search(slot, lo, False)
        self._found.append((slot.gpus, slot.mem_gb, slot.may_span, slot.plan_s, t))
        return t, gpus

    def _no_placement_before(self, slot: JobSlot) -> float:
        """A time before which no window holds the job, learnt from the jobs searched earlier in this
        pass (now when none tells). A job searched from now found its first window with a placement
        at t (inf: none); a job that needs as many GPUs or more, as much memory or more (both
        unknown, or both known), runs as long or longer, and spans nodes only if that one could, finds
        no placement before t either: its windows hold a superset of the bookings that one's held then
        (the plan only fills up during a pass), and a fit only gets harder with more bookings, more
        GPUs, more memory or no spanning. Between two candidates nothing leaves a window, so no
        placement at the candidates before t means none at any time before t."""
        lo = self.now
        g, mem, span, d = slot.gpus, slot.mem_gb, slot.may_span, slot.plan_s
        for g0, mem0, span0, d0, t0 in self._found:
            if (
                t0 > lo
                and g >= g0
                and d >= d0
                and (span0 or not span)
                and (mem is None if mem0 is None else mem is not None and mem >= mem0)
            ):
                lo = t0
        return lo

    def _search(self, slot: JobSlot, lo: float, only_now: bool) -> tuple[float, list[int] | None]:
        """The first candidate from `lo` on whose window holds the job: its reservation note if that
        still fits, else the placer's choice."""
        d, mem, note = slot.plan_s, slot.mem_gb, slot.reservation
        find = self.s.placer.find
        win: _Window | None = None
        times = self.times
        t0 = t1 = lo
        for k in range(bisect.bisect_left(times, lo), len(times)):
            t = times[k]
            u1 = booked_end(t, d)
            if win is None:
                win = _Window(self, t, u1)
                may_fit = True  # the first window: the placer looks itself (counting first costs as much)
            else:
                win.shift(t0, t1, t, u1)
                may_fit = win.may_fit(slot)
            t0, t1 = t, u1
            st = win.state
            if isinstance(note, list) and all(st.gpu_fits(g, mem) for g in note):
                return t, list(note)  # the GPUs it was reserved on, whatever the placer ranks first
            gpus = find(st, slot.gpus, mem, slot.may_span) if may_fit else None
            if gpus is not None or only_now:
                return t, gpus
        return _INF, None

    def gpus_now(self, slot: JobSlot, gpus: list[int]) -> list[int]:
        return gpus

    def book_started(self, slot: JobSlot, gpus: list[int]) -> None:
        self._book(self.now, booked_end(self.now, slot.plan_s), gpus, slot.mem_gb)

    def book(self, slot: JobSlot, t: float, gpus: list[int]) -> list[int]:
        """Reserve the job from t on `gpus`; returns them."""
        self._book(t, booked_end(t, slot.plan_s), gpus, slot.mem_gb)
        return gpus


class _Window:
    """The cluster as a job running over [t0, t1) sees it (everything booked then counts), moved
    forward candidate by candidate; per node, how many GPUs one job of a given memory fits on."""

    def __init__(self, plan: GpuPlan, t0: float, t1: float) -> None:
        self.p = p = plan.p
        self._flat = p.flat
        self._fits: list[int] | None = None  # per node: GPUs the job fits on (built by may_fit)
        self._mem: float | None = None
        # from the window [now, inf) (every booking counts) only GPUs with a booking that ends by t0 or
        # starts at t1 or later differ; from the empty cluster, every GPU with a booking
        apart = {g for t in plan.times[1 : bisect.bisect_right(plan.times, t0)] for g in p.ends_at(t)}
        starts = p.starts
        apart.update(g for _, g in starts[bisect.bisect_left(starts, (t1, -1)) :])
        if len(apart) < p.booked_count():
            self.state = p.full.copy()
            todo: Iterable[int] = apart
        else:
            self.state = p.base.copy()
            todo = p.booked_gpus()
        for g in todo:
            self._replay(g, t0, t1)

    def _replay(self, g: int, t0: float, t1: float) -> None:
        """GPU g from the empty cluster by its bookings overlapping [t0, t1), in booking order."""
        st, base = self.state, self.p.base
        nj, free = base.gpu_njobs[g], base.gpu_free_gb[g]
        cap = base.gpu_cap_gb[g]
        books = self._flat.get(g)
        if books is None:
            books = self.p.bookings(g)
        for a, b, mem in books:
            if a < t1 and b > t0:
                nj += 1
                free -= cap if mem is None else mem
        fits = self._fits
        before = fits is not None and st.gpu_fits(g, self._mem)
        was_idle = st.gpu_njobs[g] == 0
        st.gpu_njobs[g], st.gpu_free_gb[g] = nj, free
        if was_idle != (nj == 0):
            delta = 1 if nj == 0 else -1
            st.node_idle[st.gpu_node[g]] += delta
            st.idle_total += delta
        if fits is not None:
            fits[st.gpu_node[g]] += st.gpu_fits(g, self._mem) - before

    def shift(self, t0: float, t1: float, u0: float, u1: float) -> None:
        """From the window [t0, t1) to [u0, u1), u0 the next candidate after t0 (so t1 <= u1): bookings
        ending at u0 leave, bookings starting in [t1, u1) enter; no other GPU changes."""
        p = self.p
        changed = set(p.ends_at(u0))
        starts = p.starts
        lo = bisect.bisect_left(starts, (t1, -1))
        hi = bisect.bisect_left(starts, (u1, -1), lo)
        changed.update(g for _, g in starts[lo:hi])
        for g in changed:
            self._replay(g, u0, u1)

    def may_fit(self, slot: JobSlot) -> bool:
        """False only when the placer cannot find GPUs for the job in this window: no node has
        `slot.gpus` GPUs it fits on, nor (a spanning job) all non-MIG nodes together."""
        st = self.state
        fits = self._fits
        if fits is None:  # one window serves one job: its memory is fixed from here on
            self._mem = mem = slot.mem_gb
            fits_on = st.gpu_fits
            fits = self._fits = [sum(1 for g in gpus if fits_on(g, mem)) for gpus in st.node_gpus]
        if max(fits) >= slot.gpus:
            return True
        if not slot.may_span:
            return False
        spec_nodes = st.spec.nodes
        return sum(f for n, f in enumerate(fits) if not spec_nodes[n].gpu.mig_profile) >= slot.gpus

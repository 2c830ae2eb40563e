"""Backfill modes: whether and how jobs behind the first one that does not fit may start ahead of it.

- none: strict order; the first job that does not fit blocks every job behind it.
- easy: the first blocked job (the head) gets a reservation at the earliest time it fits, assuming
  running jobs end at their expected ends; a later job may start now if it ends by then or leaves the
  head's reservation intact.
- conservative: every waiting job, in order, gets a reservation; a job starts now only where it
  delays no earlier job's reservation.

Jobs without an estimate plan as endless, under one rule for EASY and conservative: when a blocked job
can get no reservation because it needs GPUs that such a job holds (running, or reserved ahead of it),
its start time is unknown and no job behind it starts in that pass (as under `none`). An endless job
itself starts ahead of a blocked one only on GPUs no reservation ever needs.
"""

from __future__ import annotations

import bisect
import math
from abc import ABC, abstractmethod

from gpuplan.core.state import ClusterState
from gpuplan.core.view import JobSlot, SchedulerView, Started
from gpuplan.errors import UnknownNameError

__all__ = [
    "Backfill",
    "Conservative",
    "Easy",
    "NoBackfill",
    "backfill_classes",
    "backfill_names",
    "get_backfill",
    "register_backfill",
]

_INF = math.inf


class Backfill(ABC):
    """Walks the queue in policy order and starts jobs on the scheduler."""

    name: str = ""
    description: str = ""

    def __init__(self) -> None:
        self.reserved: dict[int, float] = {}
        """Planned start of each job the last pass gave a reservation (jid -> s); tests read it."""

    @abstractmethod
    def select(self, s: SchedulerView, now: float) -> list[Started]:
        """Start what may start now (via `s.start`) and return the decisions.

        The scheduler takes the started jobs out of its queue after the pass."""


class NoBackfill(Backfill):
    name = "none"
    description = "strict order: the first job that does not fit blocks all behind it"

    def select(self, s: SchedulerView, now: float) -> list[Started]:
        started: list[Started] = []
        state, find = s.state, s.placer.find
        for slot in s.waiting():
            gpus = find(state, slot.gpus, slot.mem_gb, slot.may_span)
            if gpus is None:
                break
            s.start(slot, gpus, now, started)
        return started


class Easy(Backfill):
    name = "easy"
    description = "EASY: later jobs may start if they do not delay the first blocked job's reservation"

    def select(self, s: SchedulerView, now: float) -> list[Started]:
        started: list[Started] = []
        state, find = s.state, s.placer.find
        slots = s.waiting()
        head: JobSlot | None = None
        for slot in slots:
            gpus = find(state, slot.gpus, slot.mem_gb, slot.may_span)
            if gpus is None:
                head = slot
                break
            s.start(slot, gpus, now, started)
        self.reserved = {}
        if head is not None and not (not state.sharing and state.idle_total == 0):
            shadow, freed = _reservation(s, head, now)
            if shadow < _INF:
                self.reserved[head.jid] = shadow
                self._backfill(s, now, head, shadow, freed, slots, started)
        return started

    @staticmethod
    def _backfill(s, now, head, shadow, freed, slots, started) -> None:  # type: ignore[no-untyped-def]
        state, find = s.state, s.placer.find
        exclusive = not state.sharing
        # built before any backfill: jobs started below that end by the shadow are gone by then too
        proj = _Projection(s, freed, head)
        no_fit: set[tuple[object, ...]] = set()  # the state only fills up during a pass: a miss stays a miss
        hurts_head: set[tuple[object, ...]] = set()
        for slot in slots:
            if exclusive and state.idle_total == 0:
                break
            fk = slot.fits_key(state)
            if fk in no_fit:
                continue
            gpus = find(state, slot.gpus, slot.mem_gb, slot.may_span)
            if gpus is None:
                no_fit.add(fk)
                continue
            if now + slot.plan_s <= shadow:
                s.start(slot, gpus, now, started)
                continue
            if fk in hurts_head:
                continue
            if not proj.keeps_head_placeable(gpus, slot.mem_gb):
                gpus = proj.place_elsewhere(slot)  # the placer's first choice took the head's GPUs
                if gpus is None:
                    hurts_head.add(fk)
                    continue
            s.start(slot, gpus, now, started)


class _Projection:
    """The cluster at the head's shadow time: running jobs that end by then are gone, and backfilled
    jobs that outlive it are still there. Exclusive single-node heads need only free-GPU counts."""

    def __init__(self, s: SchedulerView, freed: list[JobSlot], head: JobSlot) -> None:
        self.s = s
        self.hg, self.hmem, self.hspan = head.gpus, head.mem_gb, head.may_span
        self.freed = freed
        self._counts: list[int] | None = None
        self._idle_before: list[int] | None = None
        self.state: ClusterState | None = None
        if not s.state.sharing:
            self._idle_before = s.state.node_idle.copy()  # cheap; the freed jobs are added when needed
        else:
            self.state = s.state.copy()
            for r in freed:
                self.state.release(r.alloc, r.mem_gb)

    @property
    def counts(self) -> list[int] | None:
        """Free GPUs per node at the shadow time (exclusive clusters), built on first use."""
        if self._counts is None and self._idle_before is not None:
            counts = self._idle_before
            node_of, held = self.s.state.gpu_node, self.s.state.held
            for r in self.freed:
                for g in r.alloc:
                    if not held or g not in held:
                        counts[node_of[g]] += 1
            self._counts = counts
        return self._counts

    def _head_fits_counts(self, counts: list[int]) -> bool:
        hg, hmem, caps = self.hg, self.hmem, self.s.state.node_cap_gb
        if hmem is None or hmem <= self.s.state.min_cap_gb:
            return max(counts) >= hg or (self.hspan and sum(counts) >= hg)
        usable = [k for n, k in enumerate(counts) if hmem <= caps[n]]
        return max(usable, default=0) >= hg or (self.hspan and sum(usable) >= hg)

    def keeps_head_placeable(self, gpus: list[int], mem: float | None) -> bool:
        """Book a candidate that outlives the shadow; undo it and say False if the head no longer fits."""
        if self.counts is not None:
            counts, node_of = self.counts, self.s.state.gpu_node
            for g in gpus:
                counts[node_of[g]] -= 1
            if self._head_fits_counts(counts):
                return True
            for g in gpus:
                counts[node_of[g]] += 1
            return False
        assert self.state is not None
        self.state.place(gpus, mem)
        if self.s.placer.find(self.state, self.hg, self.hmem, self.hspan) is None:
            self.state.release(gpus, mem)
            return False
        return True

    def _head_nodes(self) -> set[int]:
        """Nodes the head could use at the shadow time."""
        st = self.s.state
        if self.counts is not None:
            caps, hg, hmem = st.node_cap_gb, self.hg, self.hmem
            ok = [n for n, k in enumerate(self.counts) if k > 0 and (hmem is None or hmem <= caps[n])]
            single = {n for n in ok if self.counts[n] >= hg}
            return single if single or not self.hspan else set(ok)
        assert self.state is not None
        gpus = self.s.placer.find(self.state, self.hg, self.hmem, self.hspan) or []
        return {st.gpu_node[g] for g in gpus}

    def place_elsewhere(self, slot: JobSlot) -> list[int] | None:
        """GPUs for a job now on nodes the head does not need at the shadow time (booked), or None."""
        s = self.s
        masked = s.state.copy()
        for n in self._head_nodes():
            for g in masked.node_gpus[n]:
                masked.gpu_njobs[g] = max(masked.gpu_njobs[g], masked.max_share)
            masked.idle_total -= masked.node_idle[n]
            masked.node_idle[n] = 0
        gpus = s.placer.find(masked, slot.gpus, slot.mem_gb, slot.may_span)
        if gpus is None or not self.keeps_head_placeable(gpus, slot.mem_gb):
            return None
        return gpus


def _reservation(s: SchedulerView, head: JobSlot, now: float) -> tuple[float, list[JobSlot]]:
    """Earliest time the head fits if running jobs end at their expected ends, and the jobs ended by then.

    Returns (inf, []) when that time is unknown (a running job has no estimate).
    """
    if s.state.sharing:
        return _reservation_general(s, head, now)
    # exclusive: free-GPU counts per node are all it takes
    idle = s.state.node_idle.copy()
    caps, node_of, held = s.state.node_cap_gb, s.state.gpu_node, s.state.held
    hg, hmem, hspan = head.gpus, head.mem_gb, head.may_span
    usable = sum(k for n, k in enumerate(idle) if hmem is None or hmem <= caps[n]) if hspan else 0
    freed: list[JobSlot] = []
    shadow = _INF
    for r in s.running():
        end = r.expected_end_s
        if end > shadow:
            break
        if end == _INF:
            return _INF, []
        freed.append(r)
        if shadow < _INF:
            continue  # jobs ending at the same instant as the shadow are free by then too
        for g in r.alloc:
            if held and g in held:
                continue  # offline, or held by another process: not freed by this job's end
            n = node_of[g]
            idle[n] += 1
            mem_ok = hmem is None or hmem <= caps[n]
            usable += mem_ok
            if mem_ok and (idle[n] >= hg or (hspan and usable >= hg)):
                shadow = max(end, now)
    return (shadow, freed) if shadow < _INF else (_INF, [])


def _reservation_general(s: SchedulerView, head: JobSlot, now: float) -> tuple[float, list[JobSlot]]:
    proj = s.state.copy()
    hg, hmem, hspan = head.gpus, head.mem_gb, head.may_span
    placer, node_of = s.placer, proj.gpu_node
    freed: list[JobSlot] = []
    shadow = _INF
    for r in s.running():
        end = r.expected_end_s
        if end > shadow:
            break
        if end == _INF:
            return _INF, []
        gpus = r.alloc
        proj.release(gpus, r.mem_gb)
        freed.append(r)
        if shadow < _INF:
            continue
        if hspan:
            ok = placer.find(proj, hg, hmem, True) is not None
        else:
            ok = any(placer.node_can_host(proj, n, hg, hmem) for n in {node_of[g] for g in gpus})
        if ok:
            shadow = max(end, now)
    return (shadow, freed) if shadow < _INF else (_INF, [])


class Conservative(Backfill):
    """Every waiting job gets a reservation in policy order (up to `depth` jobs, like Slurm's
    bf_max_job_test); a job starts now only where no earlier reservation needs its GPUs during its run.

    Exclusive clusters plan with a free-GPU count per node over time (GPUs of a node are interchangeable
    until a job starts); sharing clusters plan per GPU with its memory.
    """

    name = "conservative"
    description = "conservative: every waiting job gets a reservation; no start may delay an earlier one"

    def __init__(self, depth: int = 500) -> None:
        super().__init__()
        self.depth = depth

    def select(self, s: SchedulerView, now: float) -> list[Started]:
        started: list[Started] = []
        reserved: dict[int, float] = {}
        self.reserved = reserved
        plan: _CountPlan | _GpuPlan = _GpuPlan(s, now) if s.state.sharing else _CountPlan(s, now)
        for i, slot in enumerate(s.waiting()):
            if i >= self.depth and not s.state.sharing and s.state.idle_total == 0:
                break
            t, where = plan.earliest(slot, only_now=i >= self.depth)
            if t == _INF and i < self.depth:
                break  # no known start (it needs GPUs a job without an estimate holds): as EASY's head, it blocks the rest
            if where is None:
                continue
            if t <= now:
                gpus = plan.gpus_now(slot, where)
                s.start(slot, gpus, now, started)
                plan.book_started(slot, gpus)
            else:
                slot.reservation = plan.book(slot, t, where)  # kept there by later passes
                reserved[slot.jid] = t
        return started


def _booked_end(t: float, plan_s: float) -> float:
    """End of a booking from t: a job planned to take no time still holds its GPUs for an instant."""
    return max(t + plan_s, math.nextafter(t, _INF))


class _CountPlan:
    """Exclusive clusters: free GPUs per node at each breakpoint time (a step function)."""

    def __init__(self, s: SchedulerView, now: float) -> None:
        self.s = s
        self.now = now
        self.times: list[float] = [now]
        self.free: list[list[int]] = [list(s.state.node_idle)]
        node_of, held = s.state.gpu_node, s.state.held
        for r in s.running():
            end = max(
                r.expected_end_s, math.nextafter(now, _INF)
            )  # past its estimate: ends at the next instant
            if end == _INF:
                continue
            per_node: dict[int, int] = {}
            for g in r.alloc:
                if held and g in held:
                    continue  # offline, or held by another process: not freed by this job's end
                per_node[node_of[g]] = per_node.get(node_of[g], 0) + 1
            i = self._breakpoint(end)
            for row in self.free[i:]:
                for n, k in per_node.items():
                    row[n] += k

    def _breakpoint(self, t: float) -> int:
        """Index of the breakpoint at time t, inserting one (a copy of the step before) if needed."""
        i = bisect.bisect_left(self.times, t)
        if i < len(self.times) and self.times[i] == t:
            return i
        self.times.insert(i, t)
        self.free.insert(i, list(self.free[i - 1]))
        return i

    def _earliest_on(self, nodes_fit, g: int, d: float) -> tuple[float, int]:  # type: ignore[no-untyped-def]
        """Earliest start (and breakpoint index) where `nodes_fit(row) >= g` holds for d seconds."""
        times, free = self.times, self.free
        cand = -1
        for i, row in enumerate(free):
            if nodes_fit(row) < g:
                cand = -1
                continue
            if cand < 0:
                cand = i
            if i + 1 == len(times) or times[i + 1] >= times[cand] + d:
                return times[cand], cand
        return _INF, -1

    def _earliest_spanning(self, nodes: list[int], g: int, d: float) -> float:
        """Earliest start where the GPUs free on each node throughout [t, t+d) add up to g: a spanning
        job holds the same GPUs for its whole run."""
        for i, t in enumerate(self.times):
            row = self.free[i]
            if sum(row[n] for n in nodes) < g:
                continue  # not even free at t: no need to look over the window
            window_min = self._window_min(i, d)
            if sum(window_min[n] for n in nodes) >= g:
                return t
        return _INF

    def earliest(self, slot: JobSlot, only_now: bool) -> tuple[float, list[int] | None]:
        s = self.s
        g, d, mem = slot.gpus, slot.plan_s, slot.mem_gb
        caps = s.state.node_cap_gb
        nodes = [n for n in range(len(caps)) if mem is None or mem <= caps[n]]
        best_t, best_nodes = _INF, None
        for n in nodes:
            t, _i = self._earliest_on(lambda row, n=n: row[n], g, d)
            if t < best_t:
                best_t, best_nodes = t, [n]
            elif t == best_t and best_nodes is not None:
                best_nodes.append(n)
        if slot.may_span and best_t > self.now:
            # free GPUs of several nodes together may host it before any single node can
            span_t = self._earliest_spanning(nodes, g, d)
            if span_t < best_t:
                best_t, best_nodes = span_t, nodes
        note = slot.reservation
        if best_nodes is not None and len(best_nodes) > 1 and isinstance(note, dict) and len(note) == 1:
            (kept,) = note
            if kept in best_nodes and not (slot.may_span and best_nodes is nodes):
                best_nodes = [kept]  # the node it was reserved on, whatever the placer ranks first
        if only_now and best_t > self.now:
            return best_t, None
        return best_t, best_nodes

    def gpus_now(self, slot: JobSlot, nodes: list[int]) -> list[int]:
        """GPUs for a start now, on the nodes whose plan allows it, chosen by the placer (a spanning job
        reserved across nodes takes its reserved share of each, when it still fits)."""
        s = self.s
        window_min = self._window_min(0, slot.plan_s)
        kept = self._kept(slot, window_min)
        if kept is not None and len(kept) > 1:
            njobs = s.state.gpu_njobs
            return sorted(
                g for n, k in kept.items() for g in [x for x in s.state.node_gpus[n] if njobs[x] == 0][:k]
            )
        masked = s.state.copy()
        allowed = set(nodes)
        for n in range(len(masked.node_idle)):
            masked.node_idle[n] = min(masked.node_idle[n], window_min[n]) if n in allowed else 0
        masked.idle_total = sum(masked.node_idle)
        gpus = s.placer.find(masked, slot.gpus, slot.mem_gb, slot.may_span)
        assert gpus is not None, "the count plan said the job fits now"
        return gpus

    def _window_min(self, i: int, d: float) -> list[int]:
        t_end = self.times[i] + d
        rows = [self.free[i]] + [r for t, r in zip(self.times[i + 1 :], self.free[i + 1 :]) if t < t_end]
        return [min(col) for col in zip(*rows)]

    def book_started(self, slot: JobSlot, gpus: list[int]) -> None:
        per_node: dict[int, int] = {}
        for g in gpus:
            n = self.s.state.gpu_node[g]
            per_node[n] = per_node.get(n, 0) + 1
        self._take(self.now, _booked_end(self.now, slot.plan_s), per_node)

    @staticmethod
    def _kept(slot: JobSlot, window_min: list[int]) -> dict[int, int] | None:
        """The GPUs per node the job was last reserved on, if they are all free over this window."""
        note = slot.reservation
        if isinstance(note, dict) and note and all(window_min[n] >= k for n, k in note.items()):
            return note
        return None

    def book(self, slot: JobSlot, t: float, nodes: list[int]) -> dict[int, int]:
        """Reserve the job from t on `nodes`; returns the GPUs taken per node."""
        g = slot.gpus
        i = bisect.bisect_left(self.times, t)
        window_min = self._window_min(i, slot.plan_s)
        kept = self._kept(slot, window_min) if slot.may_span and len(nodes) > 1 else None
        if kept is not None and sum(kept.values()) == g:
            self._take(t, _booked_end(t, slot.plan_s), kept)
            return kept
        per_node: dict[int, int] = {}
        for n in sorted(nodes, key=lambda n: -window_min[n]) if len(nodes) > 1 else nodes:
            take = min(window_min[n], g - sum(per_node.values()))
            if take > 0:
                per_node[n] = take
            if sum(per_node.values()) == g:
                break
        if len(nodes) > 1 and not slot.may_span:
            per_node = {nodes[0]: g}  # a single-node job: the first node that fits earliest
        self._take(t, _booked_end(t, slot.plan_s), per_node)
        return per_node

    def _take(self, t0: float, t1: float, per_node: dict[int, int]) -> None:
        i0 = self._breakpoint(t0)
        i1 = self._breakpoint(t1) if t1 < _INF else len(self.times)
        for row in self.free[i0:i1]:
            for n, k in per_node.items():
                row[n] -= k


class _GpuPlan:
    """Sharing clusters: booked intervals per GPU (running jobs and reservations) with their memory."""

    def __init__(self, s: SchedulerView, now: float) -> None:
        self.s = s
        self.now = now
        self.base = s.state.without_jobs()  # offline GPUs and memory held by others stay
        self.booked: list[list[tuple[float, float, float | None]]] = [[] for _ in s.state.gpu_node]
        self.times: set[float] = {now}
        for r in s.running():
            self._book(now, max(r.expected_end_s, math.nextafter(now, _INF)), r.alloc, r.mem_gb)

    def _book(self, t0: float, t1: float, gpus: tuple[int, ...] | list[int], mem: float | None) -> None:
        for g in gpus:
            self.booked[g].append((t0, t1, mem))
        if t1 < _INF:
            self.times.add(t1)

    def earliest(self, slot: JobSlot, only_now: bool) -> tuple[float, list[int] | None]:
        s = self.s
        d = slot.plan_s
        note = slot.reservation
        for t in sorted(x for x in self.times if x >= self.now):
            window = self._window(t, _booked_end(t, d))
            if isinstance(note, list) and all(window.gpu_fits(g, slot.mem_gb) for g in note):
                return t, list(note)  # the GPUs it was reserved on, whatever the placer ranks first
            gpus = s.placer.find(window, slot.gpus, slot.mem_gb, slot.may_span)
            if gpus is not None or only_now:
                return t, gpus
        return _INF, None

    def gpus_now(self, slot: JobSlot, gpus: list[int]) -> list[int]:
        return gpus

    def book_started(self, slot: JobSlot, gpus: list[int]) -> None:
        self._book(self.now, _booked_end(self.now, slot.plan_s), gpus, slot.mem_gb)

    def book(self, slot: JobSlot, t: float, gpus: list[int]) -> list[int]:
        """Reserve the job from t on `gpus`; returns them."""
        self._book(t, _booked_end(t, slot.plan_s), gpus, slot.mem_gb)
        return gpus

    def _window(self, t0: float, t1: float) -> ClusterState:
        """The cluster as a job running over [t0, t1) sees it: everything booked then counts."""
        st = self.base.copy()
        for g, booked in enumerate(self.booked):
            for a, b, mem in booked:
                if a < t1 and b > t0:
                    st.place((g,), mem)
        return st


_BACKFILLS: dict[str, type[Backfill]] = {}


def register_backfill(cls: type[Backfill]) -> type[Backfill]:
    """Add a backfill mode class to the registry under its `name` (usable as a decorator)."""
    _BACKFILLS[cls.name] = cls
    return cls


for _cls in (NoBackfill, Easy, Conservative):
    register_backfill(_cls)


def backfill_names() -> list[str]:
    return list(_BACKFILLS)


def backfill_classes() -> dict[str, type[Backfill]]:
    """The registered backfill mode classes by name (a copy: register with `register_backfill`)."""
    return dict(_BACKFILLS)


def get_backfill(name: str) -> Backfill:
    """A backfill mode by name. Raises UnknownNameError listing the valid names."""
    try:
        return _BACKFILLS[name]()
    except KeyError:
        raise UnknownNameError("backfill mode", name, backfill_names()) from None

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

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar, Final, NamedTuple

from mypy_extensions import mypyc_attr

from gpuplan.core.count_plan import CountPlan, booked_end
from gpuplan.core.gpu_plan import GpuPlan
from gpuplan.core.gpu_profile import GpuProfile
from gpuplan.core.params import Configurable, Param, build, register_in
from gpuplan.core.profile import CountProfile
from gpuplan.core.state import ClusterState
from gpuplan.core.view import JobSlot, SchedulerView, Started, WaitingShapes

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

_INF: Final = math.inf
# list items are updated as `a[i] = a[i] + 1`: the compiled core makes `a[i] += 1` a generic number call


@mypyc_attr(allow_interpreted_subclasses=True)  # plugins and test doubles subclass it
class Backfill(Configurable, ABC):
    """Walks the queue in policy order and starts jobs on the scheduler (parameters: `params`,
    core/params.py: `get_backfill("conservative:depth=100")`).

    `plans_ahead`: it starts jobs ahead of a blocked one by planning with the running jobs' expected
    ends, so it needs estimates (easy, conservative); False for strict order (none).
    """

    # class attributes (ClassVar), not fields: the registry and --help read them on the class, and
    # subclasses in interpreted code (plugins, test doubles) set them there (`name` too: `_NAMES` below)
    description: ClassVar[str] = ""
    plans_ahead: ClassVar[bool] = True

    def __init__(self) -> None:
        self.reserved: dict[int, float] = {}
        """Planned start of each job the last pass gave a reservation (jid -> s); tests read it."""

    @abstractmethod
    def select(self, s: SchedulerView, now: float) -> list[Started]:
        """Start what may start now (via `s.start`) and return the decisions.

        The scheduler takes the started jobs out of its queue after the pass."""


@mypyc_attr(allow_interpreted_subclasses=True)  # plugins and test doubles subclass it
class NoBackfill(Backfill):
    plans_ahead: ClassVar[bool] = False
    description: ClassVar[str] = "strict order: the first job that does not fit blocks all behind it"

    def select(self, s: SchedulerView, now: float) -> list[Started]:
        started: list[Started] = []
        state, placer = s.state, s.placer
        for slot in s.waiting():
            gpus = placer.find(state, slot.gpus, slot.mem_gb, slot.may_span, slot.need)
            if gpus is None:
                break
            s.start(slot, gpus, now, started)
        return started


@mypyc_attr(allow_interpreted_subclasses=True)  # plugins and test doubles subclass it
class Easy(Backfill):
    description: ClassVar[str] = (
        "EASY: later jobs may start if they do not delay the first blocked job's reservation"
    )

    def select(self, s: SchedulerView, now: float) -> list[Started]:
        started: list[Started] = []
        state, placer = s.state, s.placer
        slots = s.waiting()
        head: JobSlot | None = None
        for slot in slots:
            gpus = placer.find(state, slot.gpus, slot.mem_gb, slot.may_span, slot.need)
            if gpus is None:
                head = slot
                break
            s.start(slot, gpus, now, started)
        self.reserved = {}
        if head is not None and not (not state.sharing and state.idle_total == 0):
            shadow, freed, idle, counted = _reservation(s, head, now)
            if shadow < _INF:
                self.reserved[head.jid] = shadow
                proj = _Projection(s, freed, head, idle, counted)
                self._backfill(s, now, head, shadow, proj, slots, started)
        return started

    @staticmethod
    def _backfill(
        s: SchedulerView,
        now: float,
        head: JobSlot,
        shadow: float,
        proj: _Projection,
        slots: Iterator[JobSlot],
        started: list[Started],
    ) -> None:
        """`proj` is built before any backfill: jobs started here that end by the shadow are gone by
        then too."""
        state, placer = s.state, s.placer
        exclusive = not state.sharing
        no_fit: set[tuple[object, ...]] = set()  # the state only fills up during a pass: a miss stays a miss
        hurts_head: set[tuple[object, ...]] = set()
        scan = _Scan(s, slots, now, shadow)
        for slot in scan:
            if exclusive and state.idle_total == 0:
                break
            fk = slot.fits_key(state)
            if fk in no_fit:
                continue
            ends_by_shadow = now + slot.plan_s <= shadow
            if not ends_by_shadow and fk in hurts_head:
                continue  # asked before the placer: a miss here would only be a miss there too
            gpus = placer.find(state, slot.gpus, slot.mem_gb, slot.may_span, slot.need)
            if gpus is None:
                no_fit.add(fk)
                scan.classified(no_fit, hurts_head)
                continue
            if ends_by_shadow:
                s.start(slot, gpus, now, started)
                continue
            if not proj.keeps_head_placeable(gpus, slot.mem_gb):
                gpus = proj.place_elsewhere(slot)  # the placer's first choice took the head's GPUs
                if gpus is None:
                    hurts_head.add(fk)
                    scan.classified(no_fit, hurts_head)
                    continue
            s.start(slot, gpus, now, started)


class _Scan:
    """The jobs EASY's backfill visits after the head, in queue order. Each time a shape joins
    `no_fit` or `hurts_head`, the rest of the scan narrows to the jobs that may still start: those
    of shapes in neither set, and those of `hurts_head` shapes that end by the shadow
    (`ShapeIndex.after`). Every job left out would have been passed by (both sets only grow during
    a pass), so the decisions are the plain scan's."""

    def __init__(self, s: SchedulerView, slots: Iterable[JobSlot], now: float, shadow: float) -> None:
        self.s, self.slots, self.now, self.shadow = s, slots, now, shadow
        self.sets: tuple[set[tuple[object, ...]], set[tuple[object, ...]]] | None = None
        self.present: set[tuple[object, ...]] | None = None  # fits-keys of the waiting jobs
        self.index: WaitingShapes | None = None
        self.usable = True

    def __iter__(self) -> Iterator[JobSlot]:
        source, n = iter(self.slots), 0
        while True:
            for slot in source:
                yield slot
                n += 1
                if self.sets is not None and n >= _NARROW_AFTER:
                    rest = self._narrow(slot)
                    if rest is not None:
                        source, n = rest, 0
                        break
            else:
                return

    def classified(self, no_fit: set[tuple[object, ...]], hurts: set[tuple[object, ...]]) -> None:
        """A shape joined `no_fit` or `hurts`: the scan narrows once it has gone on a little (a
        pass that ends within a few jobs is not worth it)."""
        if self.usable:
            self.sets = (no_fit, hurts)

    def _narrow(self, slot: JobSlot) -> Iterator[JobSlot] | None:
        assert self.sets is not None
        no_fit, hurts = self.sets
        self.sets = None
        state = self.s.state
        if self.index is None:
            index = self.s.waiting_shapes()
            present = None if index is None else index.fits_keys(state)
            if index is None or present is None:
                self.usable = False
                return None
            self.index, self.present = index, present
        assert self.present is not None
        every = self.present - no_fit - hurts
        return self.index.after(state, every, hurts - no_fit, self.now, self.shadow, slot.key)


_NARROW_AFTER: Final = 8
"""Jobs a backfill scan visits past a new no-fit or hurts-head shape before it narrows (`_Scan`)."""


class _Projection:
    """The cluster at the head's shadow time: running jobs that end by then are gone, and backfilled
    jobs that outlive it are still there. Exclusive clusters need only free-GPU counts per node,
    begun by `_reservation`: `idle` counts the GPUs of the first `counted` jobs of `freed` (the
    projection takes the list over); None with sharing."""

    def __init__(
        self, s: SchedulerView, freed: list[JobSlot], head: JobSlot, idle: list[int] | None, counted: int
    ) -> None:
        self.s = s
        self.hg, self.hmem, self.hspan = head.gpus, head.mem_gb, head.may_span
        self.freed, self.counted = freed, counted
        self._idle = idle
        self._counts: list[int] | None = None
        self.state: ClusterState | None = None
        if idle is None:
            self.state = s.state.copy()
            for r in freed:
                self.state.release(r.alloc, r.mem_gb, r.need)

    @property
    def counts(self) -> list[int] | None:
        """Free GPUs per node at the shadow time (exclusive clusters), completed on first use with the
        jobs `_reservation` did not count (those that end at the shadow's instant, after the one whose
        end let the head fit)."""
        if self._counts is None and self._idle is not None:
            counts = self._idle
            node_of, held = self.s.state.gpu_node, self.s.state.held
            any_held = len(held) > 0
            freed = self.freed
            for k in range(self.counted, len(freed)):
                for g in freed[k].alloc:
                    if not any_held or g not in held:
                        at = node_of[g]
                        counts[at] = counts[at] + 1
            self._counts = counts
        return self._counts

    def _head_fits_counts(self, counts: list[int]) -> bool:
        """Whether the head fits on the free-GPU counts: a node with its GPUs (of enough memory),
        or enough of them in all for a head that may span nodes."""
        hg, hmem, caps = self.hg, self.hmem, self.s.state.node_cap_gb
        need_gb = -1.0 if hmem is None or hmem <= self.s.state.min_cap_gb else hmem  # -1: every node
        total = 0
        for n in range(len(counts)):  # a typed loop that stops at the first node that hosts it
            if caps[n] >= need_gb:
                k = counts[n]
                if k >= hg:
                    return True
                total += k
        return self.hspan and total >= hg

    def keeps_head_placeable(self, gpus: list[int], mem: float | None) -> bool:
        """Book a candidate that outlives the shadow; undo it and say False if the head no longer fits."""
        if self.counts is not None:
            counts, node_of = self.counts, self.s.state.gpu_node
            for g in gpus:
                at = node_of[g]
                counts[at] = counts[at] - 1
            if self._head_fits_counts(counts):
                return True
            for g in gpus:
                at = node_of[g]
                counts[at] = counts[at] + 1
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
        gpus = s.placer.find(masked, slot.gpus, slot.mem_gb, slot.may_span, slot.need)
        if gpus is None or not self.keeps_head_placeable(gpus, slot.mem_gb):
            return None
        return gpus


def _reservation(
    s: SchedulerView, head: JobSlot, now: float
) -> tuple[float, list[JobSlot], list[int] | None, int]:
    """Earliest time the head fits if running jobs end at their expected ends, and the jobs ended by
    then; on an exclusive cluster also the free GPUs per node once the first k of those ended, and k
    (the rest end at the same instant: `_Projection.counts` adds them if a pass needs them). With
    sharing: None and 0.

    Returns (inf, [], None, 0) when that time is unknown (a running job has no estimate).
    """
    if s.state.sharing:
        at_s, ended = _reservation_general(s, head, now)
        return at_s, ended, None, 0
    # exclusive: free-GPU counts per node are all it takes
    idle = s.state.node_idle.copy()
    caps, node_of, held = s.state.node_cap_gb, s.state.gpu_node, s.state.held
    any_held = len(held) > 0  # (a set's truth is a generic call in the compiled core, its len is not)
    hg, hmem, hspan = head.gpus, head.mem_gb, head.may_span
    usable = sum(k for n, k in enumerate(idle) if hmem is None or hmem <= caps[n]) if hspan else 0
    freed: list[JobSlot] = []
    shadow = _INF
    counted = 0
    for r in s.running():
        end = r.expected_end_s
        if end > shadow:
            break
        if end == _INF:
            return _INF, [], None, 0
        freed.append(r)
        if shadow < _INF:
            continue  # jobs ending at the same instant as the shadow are free by then too
        for g in r.alloc:
            if any_held and g in held:
                continue  # offline, or held by another process: not freed by this job's end
            n = node_of[g]
            idle[n] = idle[n] + 1
            if hmem is None or hmem <= caps[n]:
                usable += 1
                if idle[n] >= hg or (hspan and usable >= hg):
                    shadow = max(end, now)
        if shadow < _INF:
            counted = len(freed)
    return (shadow, freed, idle, counted) if shadow < _INF else (_INF, [], None, 0)


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


@mypyc_attr(allow_interpreted_subclasses=True)  # plugins and test doubles subclass it
class Conservative(Backfill):
    """Every waiting job gets a reservation in policy order (up to `depth` jobs, like Slurm's
    bf_max_job_test); a job starts now only where no earlier reservation needs its GPUs during its run.

    Exclusive clusters plan with a free-GPU count per node over time (core/count_plan.py: GPUs of a
    node are interchangeable until a job starts); sharing clusters plan per GPU with its memory
    (core/gpu_plan.py). Both plan on an availability profile kept across passes (core/profile.py,
    core/gpu_profile.py): the scheduler reports every start, end and moved end to it (`observe`), and
    a pass only drops the last pass's reservations and books its own.

    A pass is skipped, its decisions and reservations standing, when the scheduler has not changed
    since the last pass (`SchedulerView.version`), that pass started nothing, and now is still before
    the first time after that pass's now at which its plan changes step (`horizon_s`: the first end
    of a running job or reservation; the next instant when a running job is past its estimate, as such
    a job is planned to end at the next instant). Why that pass would plan the same: the queue, the
    running jobs, their expected ends, the cluster and every reservation note are as they were; every
    running job ends where it was planned to end (none is past its estimate, or now has not moved);
    every reservation of that pass lies at or after the horizon, where the plan is the same step
    function; a start now would need the job to fit over [now, now + d), rows that include every row
    [then, then + d) covered, which did not fit then (or the job would have started); and each
    reservation note points where that pass booked the job, which is again its earliest place, so a
    kept note changes nothing. tests/test_conservative_fast.py checks it against the plain planner.

    On an exclusive cluster a pass keeps the last pass's reservations instead of planning them again
    when since then only running jobs ended, each at its planned end (`_kept_books` says why that
    pass would book each one again where it is): it starts the jobs whose reservation is now and plans
    only the jobs that pass did not reach. A forecast (every job ends as planned) and the simulator with
    exact estimates make nearly every pass such a pass: the forecast of 2,000 waiting jobs on one 8-GPU
    node went from 8.3 s to 1.0 s.
    """

    description: ClassVar[str] = (
        "conservative: every waiting job gets a reservation; no start may delay an earlier one"
    )
    params: ClassVar[tuple[Param, ...]] = (
        Param("depth", "depth", "count", "waiting jobs that get a reservation (Slurm's bf_max_job_test)"),
    )

    def __init__(self, depth: int = 500) -> None:
        super().__init__()
        self.depth = depth
        self.skipped = 0
        """Passes skipped because the last one stands (tests and benchmarks read it)."""
        self._idle_until: tuple[object, int, int, float, float] | None = None
        """(view's identity, its version, depth, now, horizon) of the last pass if it started nothing
        (`SchedulerView.identity`, not the view: a scheduler holds its backfill mode, and a run makes
        no reference cycles)."""
        self._profile: tuple[object, CountProfile | GpuProfile] | None = None
        """The availability profile and the view it follows (core/profile.py, core/gpu_profile.py)."""
        self._kept: _KeptPass | None = None
        """The last pass's reservations, where the next pass may keep them (`_kept_books`)."""
        self.kept_passes = 0
        """Passes that kept the last pass's reservations (tests and benchmarks read it)."""

    def _profile_of(self, s: SchedulerView) -> CountProfile | GpuProfile:
        """The profile of `s`, kept current by its notifications; built afresh for a new view (a
        scheduler's fork gets its own), after its holds changed, or every pass for a view that does
        not notify."""
        kept = self._profile
        if kept is not None and kept[0] is s.identity and not kept[1].stale:
            return kept[1]
        if kept is not None and kept[0] is s.identity:
            s.unobserve(kept[1])
        profile: CountProfile | GpuProfile
        if s.state.sharing:
            running = ((r.jid, r.expected_end_s, r.alloc, r.mem_gb) for r in s.running())
            profile = GpuProfile.build(s.state, running)
        else:
            profile = CountProfile.build(s.state, ((r.jid, r.expected_end_s, r.alloc) for r in s.running()))
        observe = getattr(s, "observe", None)
        if observe is None:
            profile.stale = True
        else:
            observe(profile)
        self._profile = (s.identity, profile)
        return profile

    def select(self, s: SchedulerView, now: float) -> list[Started]:
        version = s.version
        last = self._idle_until
        if (
            last is not None
            and last[0] is s.identity
            and last[1] == version
            and last[2] == self.depth
            and last[3] <= now < last[4]
        ):
            self.skipped += 1
            return []
        self._idle_until = None
        started: list[Started] = []
        reserved: dict[int, float] = {}
        self.reserved = reserved
        profile = self._profile_of(s)
        plan: CountPlan | GpuPlan
        books: dict[int, tuple[float, float, dict[int, int]]] = {}
        if isinstance(profile, GpuProfile):
            plan = GpuPlan(s, now, profile)
        else:
            kept = self._kept_books(s, now, profile)
            if kept is not None:
                books = kept
                self.kept_passes += 1
            plan = CountPlan(s, now, profile, keep=kept is not None)
        # the next pass may keep this one's reservations where the queue is in plain order (no quota,
        # fair-share or preemptive order) and no job here needs more than GPUs or spans nodes
        keep = isinstance(plan, CountPlan) and s.plain_order
        booked: dict[int, tuple[float, float, dict[int, int]]] = {}
        state = s.state
        most_idle = -1  # beyond the depth on an exclusive cluster: the most idle GPUs of a node now
        for i, slot in enumerate(s.waiting()):
            if i >= self.depth and not state.sharing:
                if state.idle_total == 0:
                    break
                if most_idle < 0:
                    most_idle = max(state.node_idle)
                if slot.gpus > (state.idle_total if slot.may_span else most_idle):
                    continue  # it cannot start now on any node (and idle GPUs only go in this pass)
                if isinstance(plan, CountPlan) and not plan.may_start_now(slot):
                    continue
            book = books.pop(slot.jid, None) if books else None
            if book is not None:
                if book[0] > now:  # its reservation stands (the last pass's, where it is again earliest)
                    reserved[slot.jid] = book[0]
                    booked[slot.jid] = book
                    continue
                assert isinstance(profile, CountProfile)  # books come from count plans only
                profile.unreserve(*book)  # it starts now
            t, where = plan.earliest(slot, only_now=i >= self.depth)
            if t == _INF and i < self.depth:
                break  # no known start (it needs GPUs a job without an estimate holds): as EASY's head, it blocks the rest
            if where is None:
                continue
            if t <= now:
                gpus = plan.gpus_now(slot, where)
                if slot.need is not None and not s.state.fits_need(gpus, slot.mem_gb, slot.need):
                    keep = False
                    continue  # the plan counts GPUs only: CPU, host memory or a GPU share is short there now
                s.start(slot, gpus, now, started)
                plan.book_started(slot, gpus)
                most_idle = -1
            else:
                slot.reservation = plan.book(slot, t, where)  # kept there by later passes
                reserved[slot.jid] = t
                if isinstance(slot.reservation, dict) and not slot.may_span:
                    booked[slot.jid] = (t, booked_end(t, slot.plan_s), slot.reservation)
                else:
                    keep = False
        for book in books.values():  # kept for jobs this pass did not reach: not this pass's
            assert isinstance(profile, CountProfile)
            profile.unreserve(*book)
            keep = False
        if not started:
            self._idle_until = (s.identity, version, self.depth, now, plan.horizon_s)
        if keep and isinstance(profile, CountProfile):
            self._kept = _KeptPass(s.identity, s.version, self.depth, now, profile, booked)
            profile.arm()
        return started

    def _kept_books(
        self, s: SchedulerView, now: float, profile: CountProfile
    ) -> dict[int, tuple[float, float, dict[int, int]]] | None:
        """The last pass's reservations when this pass would book each of them again where it is:
        since that pass nothing changed but running jobs ending at or before now at their planned
        ends (after that pass's now), none runs past its planned end, and none of them starts before
        now. Then the profile from now on is the one that pass planned on, so in queue order each job
        it reserved finds the same earliest start on the same node again (its reservation note picks
        the node among equals), jobs it did not reach plan after them as in a full pass, and a job
        whose reservation is now starts as a full pass starts it. None: plan afresh.
        tests/test_conservative_fast.py checks it against the plain planner."""
        kept, self._kept = self._kept, None
        log = profile.disarm()
        if kept is None or log is None or kept.view is not s.identity or kept.profile is not profile:
            return None
        if kept.depth != self.depth or not now > kept.now or s.version != kept.version + len(log):
            return None
        if any(not kept.now < e <= now for e in log):
            return None
        first = next(iter(s.running()), None)
        if first is not None and first.expected_end_s <= now:
            return None
        if any(book[0] < now for book in kept.books.values()):
            return None
        return dict(kept.books)


class _KeptPass(NamedTuple):
    """A conservative pass's reservations (job -> start, GPUs per node), with what they rest on."""

    view: Any  # the view's identity (SchedulerView.identity)
    version: int
    depth: int
    now: float
    profile: CountProfile
    books: dict[int, tuple[float, float, dict[int, int]]]


_BACKFILLS: dict[str, type[Backfill]] = {}


def register_backfill(cls: type[Backfill]) -> type[Backfill]:
    """Add a backfill mode class to the registry under its `name` (usable as a decorator)."""
    return register_in(_BACKFILLS, cls)


# Configurable's `name`, set on the classes: in the body of a compiled class it would be a field of
# each instance, which the registry cannot read off the class
_NAMES: dict[type[Backfill], str] = {NoBackfill: "none", Easy: "easy", Conservative: "conservative"}
for _cls, _name in _NAMES.items():
    _cls.name = _name
    register_backfill(_cls)


def backfill_names() -> list[str]:
    return list(_BACKFILLS)


def backfill_classes() -> dict[str, type[Backfill]]:
    """The registered backfill mode classes by name (a copy: register with `register_backfill`)."""
    return dict(_BACKFILLS)


def get_backfill(spec: str, **overrides: object) -> Backfill:
    """A new backfill mode from its spec: a name, then its parameters (`conservative:depth=100`).

    Raises:
        UnknownNameError: an unknown name; SpecError: an unknown parameter or a bad value (each
            message lists the valid ones).
    """
    mode: Backfill = build("backfill mode", _BACKFILLS, spec, **overrides)
    return mode

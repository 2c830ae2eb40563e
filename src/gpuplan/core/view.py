"""What a scheduler shows to its backfill modes and to the clocks that drive it.

`JobSlot` is the one record a Scheduler keeps per job (waiting or running); `SchedulerView` is the
read-only surface over those records that backfill modes (core/backfill.py), the simulator, the local
agent and the Slurm planner use. Backfill modes make exactly one change through it: `start`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, final

from gpuplan.core.placement import Placer
from gpuplan.core.state import ClusterState, Need
from gpuplan.model import Job

__all__ = [
    "JobSlot",
    "Preempted",
    "RunningObserver",
    "SchedulerView",
    "Started",
    "WaitReason",
    "WaitingShapes",
]


@final
class Started:
    """A start decision: job handle and the GPUs it gets (a tuple: cheap on the hot path).

    A compiled class, not a NamedTuple: made once per start and preemption, in C (a NamedTuple is
    made through `tuple.__new__`, a generic call that cost ~10x as much). Compares, hashes, prints
    and unpacks (`jid, gpu_ids = st`) as the NamedTuple it was."""

    __slots__ = ("gpu_ids", "jid")
    __match_args__ = ("jid", "gpu_ids")

    def __init__(self, jid: int, gpu_ids: tuple[int, ...]) -> None:
        self.jid = jid
        self.gpu_ids = gpu_ids

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Started) and self.jid == other.jid and self.gpu_ids == other.gpu_ids

    def __hash__(self) -> int:
        return hash((self.jid, self.gpu_ids))

    def __repr__(self) -> str:
        return f"Started(jid={self.jid!r}, gpu_ids={self.gpu_ids!r})"

    def __iter__(self) -> Iterator[object]:
        return iter((self.jid, self.gpu_ids))

    def __reduce__(self) -> tuple[type[Started], tuple[int, tuple[int, ...]]]:
        return (Started, (self.jid, self.gpu_ids))


@final
class Preempted:
    """A preemption decision: job handle, the GPUs it gave back, and how (the job's `preempt_mode`).

    `action` is "suspend" (stopped in place, SIGSTOP in the agent: it keeps its GPU memory there and
    resumes on the same GPUs with nothing lost), "checkpoint" (it saves a checkpoint and stops: the
    agent's SIGTERM, grace, SIGKILL, Slurm `scontrol requeue` of a job that checkpoints; it resumes
    anywhere from its checkpoint, after a restart overhead) or "requeue" (killed, it starts from
    scratch). A compiled class, as `Started` is (and for the same reason)."""

    __slots__ = ("action", "gpu_ids", "jid")
    __match_args__ = ("jid", "gpu_ids", "action")

    def __init__(self, jid: int, gpu_ids: tuple[int, ...], action: str) -> None:
        self.jid = jid
        self.gpu_ids = gpu_ids
        self.action = action

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Preempted)
            and self.jid == other.jid
            and self.gpu_ids == other.gpu_ids
            and self.action == other.action
        )

    def __hash__(self) -> int:
        return hash((self.jid, self.gpu_ids, self.action))

    def __repr__(self) -> str:
        return f"Preempted(jid={self.jid!r}, gpu_ids={self.gpu_ids!r}, action={self.action!r})"

    def __iter__(self) -> Iterator[object]:
        return iter((self.jid, self.gpu_ids, self.action))

    def __reduce__(self) -> tuple[type[Preempted], tuple[int, tuple[int, ...], str]]:
        return (Preempted, (self.jid, self.gpu_ids, self.action))


class WaitReason(NamedTuple):
    """Why a job waits, as an eligibility rule of the core says it (a quota, a limit): `code` in Slurm's
    reason vocabulary where one exists (e.g. "AssocGrpGRES"), `detail` for people
    ("quota: alice uses 4 of 4 GPUs"). `Scheduler.wait_rules` produce them; the forecast shows them."""

    code: str
    detail: str


@dataclass(slots=True, eq=False, init=False)  # its own __init__: compiled, a dataclass's one is not
class JobSlot:
    """Everything the scheduler knows of one job.

    Attributes:
        jid: the caller's integer handle.
        job: the job as submitted.
        gpus: GPUs it asks for.
        mem_gb: memory booked per GPU (None: unknown, the job takes whole GPUs).
        plan_s: planned duration (its estimate; `math.inf` when there is none).
        may_span: it may take GPUs from several nodes.
        key: its place in the waiting queue (policy key + jid).
        alloc: the GPUs it holds while running (empty while waiting).
        start_s: when it started (None while waiting).
        expected_end_s: when the scheduler expects it to end (running jobs; `math.inf` when unknown).
        service_gpu_s: GPU-seconds it held GPUs in earlier runs (since its last promotion; preemptive
            policies rank by it, core/preemptive.py).
        run_since_promotion_s: seconds it ran since its last promotion (Tiresias' starvation clock).
        waiting_since_s: when it last started waiting (its preemption; 0 before it ever ran).
        preemptions: how many times it was preempted.
        suspended_on: while it waits suspended in place (preempt mode `suspend`), the GPUs that keep
            its memory; it resumes only there. Empty otherwise.
        level: its rank level under a preemptive policy (lower runs first).
        reservation: the backfill mode's note of where it last reserved the job (conservative: GPUs
            per node, or the GPUs with sharing), so a later pass keeps it there whatever the placer
            would rank first; the one field a backfill mode writes.
        need: what it needs beyond GPUs and GPU memory (CPU, host memory, a GPU share;
            `core.state.need_of`), None when nothing (the GPU-only rules).
    """

    jid: int
    job: Job
    gpus: int
    mem_gb: float | None
    plan_s: float
    may_span: bool
    key: tuple[object, ...] = ()
    alloc: tuple[int, ...] = ()
    start_s: float | None = None
    expected_end_s: float = math.inf
    service_gpu_s: float = 0.0
    run_since_promotion_s: float = 0.0
    waiting_since_s: float = 0.0
    preemptions: int = 0
    suspended_on: tuple[int, ...] = ()
    level: float = 0.0
    reservation: Any = None
    need: Need | None = None

    def __init__(
        self,
        jid: int,
        job: Job,
        gpus: int,
        mem_gb: float | None,
        plan_s: float,
        may_span: bool,
        key: tuple[object, ...] = (),
        alloc: tuple[int, ...] = (),
        start_s: float | None = None,
        expected_end_s: float = math.inf,
        service_gpu_s: float = 0.0,
        run_since_promotion_s: float = 0.0,
        waiting_since_s: float = 0.0,
        preemptions: int = 0,
        suspended_on: tuple[int, ...] = (),
        level: float = 0.0,
        reservation: Any = None,
        need: Need | None = None,
    ) -> None:
        self.jid = jid
        self.job = job
        self.gpus = gpus
        self.mem_gb = mem_gb
        self.plan_s = plan_s
        self.may_span = may_span
        self.key = key
        self.alloc = alloc
        self.start_s = start_s
        self.expected_end_s = expected_end_s
        self.service_gpu_s = service_gpu_s
        self.run_since_promotion_s = run_since_promotion_s
        self.waiting_since_s = waiting_since_s
        self.preemptions = preemptions
        self.suspended_on = suspended_on
        self.level = level
        self.reservation = reservation
        self.need = need

    def __reduce__(self) -> tuple[type[JobSlot], tuple[Any, ...]]:
        """Pickled as its constructor's arguments (records of a sweep travel to workers): compiled, a
        class with its own __init__ is rebuilt through it."""
        return (JobSlot, _fields_of(self))

    @property
    def is_running(self) -> bool:
        return self.start_s is not None

    def copy(self) -> JobSlot:
        """An independent record with the same fields (a forked scheduler's, core/forecast.py; field by
        field, in the order they are declared: tests/test_forecast.py checks that every field travels)."""
        return JobSlot(
            self.jid,
            self.job,
            self.gpus,
            self.mem_gb,
            self.plan_s,
            self.may_span,
            self.key,
            self.alloc,
            self.start_s,
            self.expected_end_s,
            self.service_gpu_s,
            self.run_since_promotion_s,
            self.waiting_since_s,
            self.preemptions,
            self.suspended_on,
            self.level,
            self.reservation,
            self.need,
        )

    def fits_key(self, state: ClusterState) -> tuple[object, ...]:
        """Jobs with equal fits_key fit or fail alike on the same state."""
        return fits_key(self.gpus, self.mem_gb, self.may_span, self.need, state)


def fits_key(
    gpus: int, mem_gb: float | None, may_span: bool, need: Need | None, state: ClusterState
) -> tuple[object, ...]:
    """The one rule of `JobSlot.fits_key` (core/shapes.py applies it to a shape): memory every GPU
    of an exclusive cluster has is left out, since it changes nothing there."""
    if not state.sharing and mem_gb is not None and mem_gb <= state.min_cap_gb:
        mem_gb = None
    return (gpus, mem_gb, may_span, need)


def _fields_of(slot: JobSlot) -> tuple[Any, ...]:
    """Every field of `slot`, in the order JobSlot's constructor takes them."""
    return (
        slot.jid,
        slot.job,
        slot.gpus,
        slot.mem_gb,
        slot.plan_s,
        slot.may_span,
        slot.key,
        slot.alloc,
        slot.start_s,
        slot.expected_end_s,
        slot.service_gpu_s,
        slot.run_since_promotion_s,
        slot.waiting_since_s,
        slot.preemptions,
        slot.suspended_on,
        slot.level,
        slot.reservation,
        slot.need,
    )


class WaitingShapes(Protocol):
    """The waiting jobs by fits-shape and planned duration (core/shapes.py's `ShapeIndex`)."""

    def fits_keys(self, state: ClusterState) -> set[tuple[object, ...]] | None:
        """The fits-keys of the waiting jobs (None: too many shapes to be worth it)."""

    def after(
        self,
        state: ClusterState,
        every: set[tuple[object, ...]],
        short: set[tuple[object, ...]],
        now: float,
        shadow: float,
        cursor: tuple[object, ...],
    ) -> Iterator[JobSlot]:
        """The waiting jobs after queue key `cursor`, in queue order: those of a fits-key in `every`,
        and those of one in `short` that end by `shadow` if started at `now`."""


class RunningObserver(Protocol):
    """Told of every change to a scheduler's running jobs and to its cluster's holds, as it happens
    (`SchedulerView.observe`): how conservative backfill keeps its availability profile (core/profile.py)
    without rebuilding it per pass."""

    def job_started(self, slot: JobSlot) -> None:
        """`slot` now runs on `slot.alloc` (a start, a resume or an adopted job) until `expected_end_s`."""

    def job_stopped(self, slot: JobSlot) -> None:
        """`slot` ended or was preempted: its GPUs (`slot.alloc`, still set) are free again."""

    def end_moved(self, slot: JobSlot) -> None:
        """A running job's `expected_end_s` changed."""

    def holds_changed(self) -> None:
        """A GPU went offline or back, or memory held by other processes changed."""


class SchedulerView:
    """The read-only surface of a Scheduler (plus `start`, the one change a backfill mode makes).

    A base class that `Scheduler` subclasses, not a Protocol: the compiled core (backfill modes, their
    plans) then calls the scheduler's members natively instead of looking each up by name at every
    call. Every member here raises NotImplementedError; a subclass implements them all.

    Backfill modes must not change `state` themselves: `start` books a job on it.
    """

    @property
    def state(self) -> ClusterState:
        """The live cluster: GPUs held by running jobs, offline GPUs, memory held by others."""
        raise NotImplementedError

    @property
    def placer(self) -> Placer:
        raise NotImplementedError

    @property
    def identity(self) -> object:
        """An object unique to this view (a scheduler's fork gets its own): what a backfill mode's
        memo of a pass keeps instead of the view itself, so that a scheduler holding its backfill
        mode makes no reference cycle."""
        raise NotImplementedError

    @property
    def waiting_count(self) -> int:
        raise NotImplementedError

    @property
    def version(self) -> int:
        """Bumped by every change to the queue, the running jobs or the cluster (see Scheduler)."""
        raise NotImplementedError

    def waiting(self) -> Iterator[JobSlot]:
        """Waiting jobs in policy order."""
        raise NotImplementedError

    def running(self) -> Iterator[JobSlot]:
        """Running jobs by expected end (then jid)."""
        raise NotImplementedError

    @property
    def plain_order(self) -> bool:
        """`waiting()` is the plain queue order (no preemptive or fair-share order, no quota passing
        jobs by): an order that moves only when jobs are queued or leave it."""
        raise NotImplementedError

    def waiting_shapes(self) -> WaitingShapes | None:
        """The waiting jobs by fits-shape and planned duration (core/shapes.py), or None where
        `waiting()` is not plain queue order (a backfill pass then visits every job)."""
        raise NotImplementedError

    def slot(self, jid: int) -> JobSlot:
        """The record of a waiting or running job (KeyError when unknown)."""
        raise NotImplementedError

    def projected_state(self, at_s: float) -> ClusterState:
        """A copy of the cluster as it will be at `at_s` if every running job ends at its expected end."""
        raise NotImplementedError

    def start(
        self, slot: JobSlot, gpu_ids: list[int] | tuple[int, ...], now: float, started: list[Started]
    ) -> None:
        """Book a waiting job on `gpu_ids` at `now` and append the decision to `started`."""
        raise NotImplementedError

    def observe(self, observer: RunningObserver) -> None:
        """Tell `observer` of every change to the running jobs and the cluster's holds from now on."""
        raise NotImplementedError

    def unobserve(self, observer: RunningObserver) -> None:
        """Stop telling `observer` (no error when it was not observing)."""
        raise NotImplementedError

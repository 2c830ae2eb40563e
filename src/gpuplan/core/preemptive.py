"""Preemptive policies that need no durations (las, tiresias, gittins) and the cost of preempting a job.

A preemptive policy ranks jobs by a *level* that changes while they run (attained GPU-service) or wait
(promotion against starvation). The scheduler (core/scheduler.py, `Scheduler.decide`) starts waiting
jobs in rank order and suspends a running job only for a waiting job of a strictly lower level, so jobs
of one level never preempt each other (no thrashing). Levels change only at known instants
(`next_change_s`), where the clock calls the scheduler again.

Attained service is GPU-seconds: GPUs x seconds the job has held them (restart overhead included: the
scheduler sees wall time, not progress). docs/preemption.md says what each policy assumes.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Final, Protocol

from mypy_extensions import mypyc_attr

from gpuplan.core.params import Param
from gpuplan.core.policy import Policy, register_policy
from gpuplan.model import Job

if TYPE_CHECKING:
    from gpuplan.core.view import JobSlot

__all__ = [
    "Gittins",
    "Las",
    "LevelRule",
    "Levels",
    "PolicyLevels",
    "PreemptivePolicy",
    "Tiresias",
    "gittins_table",
    "gpu_bucket",
]

_INF: Final = math.inf


class Levels(Protocol):
    """What ranks a policy's jobs: a `PreemptivePolicy`, or a wrapper that passes one's levels on (the
    agent's, which is no subclass of it). A preemptive queue asks a compiled `LevelRule` (a built-in's
    own, or `PolicyLevels`, which asks such an object)."""

    @property
    def endless_levels(self) -> bool: ...

    def level(self, slot: JobSlot, now: float) -> float: ...

    def next_change_s(self, slot: JobSlot, now: float) -> float: ...


@mypyc_attr(native_class=False)  # a Policy (a Python class): subclassed and deep-copied as one
class PreemptivePolicy(Policy):
    """A policy whose rank changes while jobs run or wait; lower level first, then the static key.

    Subclasses give `level` (from the slot's attained service at `now`) and `next_change_s` (the
    first instant after `now` its level may change). `observe` learns from a finished job; it returns
    True when the levels of other jobs may have changed (the scheduler then ranks every job again).
    `learns`: its ranks come from finished jobs (`observe`), so a run without history falls back.
    `quantum_param`: the key of the parameter that sets the first level boundary in GPU-seconds (what
    `--quantum-gpu-s` sets; "" when there is none).
    """

    preemptive = True
    quantum_param: ClassVar[str] = ""
    learns: ClassVar[bool] = False  # ranks by what `observe` learned from finished jobs (gittins)
    endless_levels: ClassVar[bool] = False
    """Its levels never run out (las): two jobs whose restart overhead lifts each above the other could
    trade places forever, so the pass leases their starts (core/preemption.py, `PreemptionCost.lease_s`).
    Tiresias' K queues and Gittins' finite grid end such a trade at their last level."""

    def key(self, job: Job, seq: int, oracle: bool) -> tuple[float, ...]:
        return (job.submit_s, seq)

    def level(self, slot: JobSlot, now: float) -> float:
        raise NotImplementedError

    def next_change_s(self, slot: JobSlot, now: float) -> float:
        return _INF

    def observe(self, job: Job, service_gpu_s: float) -> bool:
        return False

    def level_rule(self) -> LevelRule:
        """What ranks its jobs in a scheduler's preemptive queue, read when the queue is made: a
        compiled `LevelRule` that computes the same levels by the same functions (a built-in whose
        class keeps its `level` and `next_change_s`), else one that asks this policy (`PolicyLevels`)."""
        return PolicyLevels(self)

    @property
    def observes(self) -> bool:
        """Whether `observe` may learn anything: False where the class keeps this base one (it learns
        nothing and moves no level), so a scheduler need not call it at each end."""
        return type(self).observe is not PreemptivePolicy.observe

    @property
    def fallback_jobs(self) -> int:
        """Jobs ranked without what the policy needs (Gittins before any history): 0 by default."""
        return 0


class LevelRule:
    """A built-in policy's `level` and `next_change_s` on a compiled object (`PreemptivePolicy.level_rule`):
    the preemptive queue asks them several times per job and pass; asked of a policy (a Python class)
    each call is a generic one that binds a method object first. Its parameters are the policy's when
    the queue was made."""

    def __init__(self, endless_levels: bool) -> None:
        self.endless_levels = endless_levels

    def __reduce__(self) -> tuple[type[LevelRule], tuple[object, ...]]:
        """Pickled (and deep-copied) as its constructor's arguments (a compiled class's default needs
        an __init__ without them)."""
        return (type(self), self.args())

    def args(self) -> tuple[object, ...]:
        """Its constructor's arguments."""
        return (self.endless_levels,)

    def level(self, slot: JobSlot, now: float) -> float:
        raise NotImplementedError

    def next_change_s(self, slot: JobSlot, now: float) -> float:
        return _INF


class PolicyLevels(LevelRule):
    """The levels of a policy of its own (a Python object with `endless_levels`, `level` and
    `next_change_s`: a subclass's, a learning policy's, a wrapper's): each call asks it."""

    def __init__(self, policy: Levels) -> None:
        super().__init__(bool(policy.endless_levels))
        self.policy = policy

    def args(self) -> tuple[object, ...]:
        return (self.policy,)

    def level(self, slot: JobSlot, now: float) -> float:
        return self.policy.level(slot, now)

    def next_change_s(self, slot: JobSlot, now: float) -> float:
        return self.policy.next_change_s(slot, now)


def attained_gpu_s(slot: JobSlot, now: float) -> float:
    """GPU-seconds the job has held GPUs (since its last promotion), up to `now`."""
    run = 0.0 if slot.start_s is None else max(now - slot.start_s, 0.0)
    return slot.service_gpu_s + slot.gpus * run


def _crossing_s(slot: JobSlot, now: float, threshold_gpu_s: float) -> float:
    """When a running job's attained service reaches `threshold_gpu_s` (inf for a waiting job)."""
    if slot.start_s is None:
        return _INF
    return slot.start_s + (threshold_gpu_s - slot.service_gpu_s) / slot.gpus


@register_policy
class Las(PreemptivePolicy):
    """Least attained GPU-service first, in quanta: level = whole quanta of GPU-time attained."""

    name = "las"
    description = "least attained GPU-service first (preemptive, quanta of 1 GPU-hour; no durations needed)"
    params = (Param("quantum", "quantum_gpu_s", "gpu_time", "GPU-time per level"),)
    quantum_param = "quantum"
    endless_levels = True

    def __init__(self, quantum_gpu_s: float = 3600.0) -> None:
        self.quantum_gpu_s = quantum_gpu_s

    def level(self, slot: JobSlot, now: float) -> float:
        return _quanta(slot, now, self.quantum_gpu_s)

    def next_change_s(self, slot: JobSlot, now: float) -> float:
        return _next_quantum_s(slot, now, self.quantum_gpu_s)

    def level_rule(self) -> LevelRule:
        cls = type(self)
        if cls.level is not Las.level or cls.next_change_s is not Las.next_change_s:
            return PolicyLevels(self)  # a subclass's own levels
        return _LasLevels(self.endless_levels, self.quantum_gpu_s)


def _quanta(slot: JobSlot, now: float, quantum_gpu_s: float) -> float:
    """`Las.level`: whole quanta of GPU-time attained (a function, so `next_change_s` calls it
    directly rather than through the policy's method)."""
    return float(math.floor(attained_gpu_s(slot, now) / quantum_gpu_s))


def _next_quantum_s(slot: JobSlot, now: float, quantum_gpu_s: float) -> float:
    """`Las.next_change_s`: when a running job attains its next whole quantum."""
    if slot.start_s is None:
        return _INF  # a waiting job attains nothing (`_crossing_s`)
    return _crossing_s(slot, now, (_quanta(slot, now, quantum_gpu_s) + 1.0) * quantum_gpu_s)


class _LasLevels(LevelRule):
    """`Las`'s levels (`LevelRule`)."""

    def __init__(self, endless_levels: bool, quantum_gpu_s: float) -> None:
        super().__init__(endless_levels)
        self.quantum_gpu_s = quantum_gpu_s

    def args(self) -> tuple[object, ...]:
        return (self.endless_levels, self.quantum_gpu_s)

    def level(self, slot: JobSlot, now: float) -> float:
        return _quanta(slot, now, self.quantum_gpu_s)

    def next_change_s(self, slot: JobSlot, now: float) -> float:
        return _next_quantum_s(slot, now, self.quantum_gpu_s)


@register_policy
class Tiresias(PreemptivePolicy):
    """Discretized two-dimensional LAS (Tiresias, NSDI '19): K queues by attained GPU-time, FIFO within a
    queue, and promotion to the first queue of a job that waited `promote_knob` x its last run time.

    Args:
        thresholds_gpu_s: attained GPU-seconds at which a job moves down a queue (K-1 values; the
            authors' simulator uses 2 queues split at 3600).
        promote_knob: PROMOTEKNOB (STARVELIMIT); 0 disables promotion.
    """

    name = "tiresias"
    description = (
        "Tiresias 2D-LAS: 2 queues split at 1 GPU-hour, FIFO inside, promotion after 8x the last run"
    )
    params = (
        Param(
            "threshold", "thresholds_gpu_s", "gpu_times", "attained GPU-time where a job moves down a queue"
        ),
        Param(
            "promote",
            "promote_knob",
            "number",
            "promotion after waiting this many times its last run (0: never)",
        ),
    )
    quantum_param = "threshold"

    def __init__(self, thresholds_gpu_s: Sequence[float] = (3600.0,), promote_knob: float = 8.0) -> None:
        self.thresholds_gpu_s = self.thresholds = tuple(sorted(thresholds_gpu_s))
        self.promote_knob = promote_knob

    def level(self, slot: JobSlot, now: float) -> float:
        return _queue_of(slot, now, self.thresholds, self.promote_knob)

    def next_change_s(self, slot: JobSlot, now: float) -> float:
        return _next_queue_s(slot, now, self.thresholds, self.promote_knob)

    def level_rule(self) -> LevelRule:
        cls = type(self)
        if cls.level is not Tiresias.level or cls.next_change_s is not Tiresias.next_change_s:
            return PolicyLevels(self)  # a subclass's own levels
        thresholds = tuple(float(x) for x in self.thresholds)
        return _TiresiasLevels(self.endless_levels, thresholds, float(self.promote_knob))


def _queue_of(slot: JobSlot, now: float, thresholds: tuple[float, ...], promote_knob: float) -> float:
    """`Tiresias.level`: the queue of the job's attained GPU-time, after its promotion to the first
    queue once it waited `promote_knob` x its last run (its service and starvation clock start again)."""
    if (
        promote_knob > 0
        and slot.start_s is None
        and slot.run_since_promotion_s > 0
        and now - slot.waiting_since_s >= promote_knob * slot.run_since_promotion_s
    ):
        slot.service_gpu_s = 0.0
        slot.run_since_promotion_s = 0.0
    return float(bisect_right(thresholds, attained_gpu_s(slot, now)))


def _next_queue_s(slot: JobSlot, now: float, thresholds: tuple[float, ...], promote_knob: float) -> float:
    """`Tiresias.next_change_s`: a waiting job's promotion, a running job's next threshold."""
    if slot.start_s is None:
        if promote_knob <= 0 or slot.run_since_promotion_s <= 0 or slot.service_gpu_s <= 0:
            return _INF
        return slot.waiting_since_s + promote_knob * slot.run_since_promotion_s
    k = bisect_right(thresholds, attained_gpu_s(slot, now))
    return _crossing_s(slot, now, thresholds[k]) if k < len(thresholds) else _INF


class _TiresiasLevels(LevelRule):
    """`Tiresias`' levels (`LevelRule`)."""

    def __init__(self, endless_levels: bool, thresholds: tuple[float, ...], promote_knob: float) -> None:
        super().__init__(endless_levels)
        self.thresholds = thresholds
        self.promote_knob = promote_knob

    def args(self) -> tuple[object, ...]:
        return (self.endless_levels, self.thresholds, self.promote_knob)

    def level(self, slot: JobSlot, now: float) -> float:
        return _queue_of(slot, now, self.thresholds, self.promote_knob)

    def next_change_s(self, slot: JobSlot, now: float) -> float:
        return _next_queue_s(slot, now, self.thresholds, self.promote_knob)


def gpu_bucket(gpus: int) -> int:
    """The GPU-count bucket of a job: 1, 2, 4, 8, ... (its GPU count rounded up to a power of 2)."""
    return 1 << max(gpus - 1, 0).bit_length()


def gittins_table(samples: Sequence[float], grid: Sequence[float]) -> list[float]:
    """Gittins index of a job at each attained service of `grid`, from finished jobs' services.

    At attained a, the index is the best ratio, over quanta that end at a later grid point a + d, of
    the chance to finish within the quantum to the expected service it takes:
    P(a < S <= a + d) / E[min(S, a + d) - a | S > a] (up to the common factor P(S > a)). A job that has
    outlived every sample gets 0 (it runs last).
    """
    s = sorted(samples)
    prefix = [0.0]
    for v in s:
        prefix.append(prefix[-1] + v)
    n = len(s)
    out = []
    for k, a in enumerate(grid):
        lo = bisect_right(s, a)
        best = 0.0
        for b in [*grid[k + 1 :], s[-1] if s else a]:
            if b <= a or lo >= n:
                continue
            hi = bisect_right(s, b)
            done = hi - lo
            cost = (prefix[hi] - prefix[lo]) - done * a + (n - hi) * (b - a)
            if cost > 0:
                best = max(best, done / cost)
        out.append(best)
    return out


@mypyc_attr(native_class=False)  # deep-copied with its policy (a forked scheduler's)
class _Distribution:
    """Services of finished jobs of one bucket and their Gittins table (rebuilt as the sample doubles)."""

    __slots__ = ("built_at", "samples", "table")

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.table: list[float] = []
        self.built_at = 0

    def add(self, service_gpu_s: float, grid: Sequence[float]) -> bool:
        self.samples.append(service_gpu_s)
        n = len(self.samples)
        if n >= 2 * self.built_at or n - self.built_at >= 500:
            self.table = gittins_table(self.samples, grid)
            self.built_at = n
            return True
        return False


def _grid_point(grid: list[float], slot: JobSlot, now: float) -> int:
    """`Gittins._point`: the grid point at or below the job's attained GPU-time (a function: the
    policy's methods call it directly)."""
    x = attained_gpu_s(slot, now)
    lo, hi = 0, len(grid)
    while lo < hi:  # bisect_right on the typed list: compiled, no call and no object comparison
        mid = (lo + hi) // 2
        if x < grid[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo - 1


@register_policy
class Gittins(PreemptivePolicy):
    """Gittins index from the empirical GPU-time distribution of finished jobs, per GPU-count bucket.

    A job's level is minus its index at the grid point below its attained GPU-time (a geometric grid,
    the discretization that keeps preemptions few). A bucket with fewer than `min_samples` finished jobs
    uses every bucket's jobs; before any bucket has enough, jobs rank by attained service on the same
    grid (LAS) and count as fallbacks.
    """

    name = "gittins"
    description = "Gittins index of attained GPU-time over finished jobs' GPU-time, per GPU-count bucket"
    params = (
        Param("first", "first_gpu_s", "gpu_time", "first grid point (the grid doubles from there)"),
        Param("levels", "levels", "count", "grid points after 0"),
        Param(
            "min_samples", "min_samples", "count", "finished jobs a bucket needs before its own table is used"
        ),
    )
    quantum_param = "first"
    learns = True

    def __init__(self, first_gpu_s: float = 600.0, levels: int = 24, min_samples: int = 10) -> None:
        self.first_gpu_s = first_gpu_s
        self.levels = levels
        self.grid = [0.0, *(first_gpu_s * 2.0**k for k in range(levels))]
        self.min_samples = min_samples
        self._dist: dict[int | None, _Distribution] = {}
        self._fallback: set[int] = set()
        self._tables: dict[int, list[float] | None] = {}  # GPU count -> `_table` (until a table is rebuilt)

    def _table(self, gpus: int) -> list[float] | None:
        tables = self._tables
        if gpus in tables:
            return tables[gpus]
        found: list[float] | None = None
        for key in (gpu_bucket(gpus), None):
            d = self._dist.get(key)
            if d is not None and d.built_at >= self.min_samples:
                found = d.table
                break
        tables[gpus] = found
        return found

    def _point(self, slot: JobSlot, now: float) -> int:
        return _grid_point(self.grid, slot, now)

    def level(self, slot: JobSlot, now: float) -> float:
        table = self._table(slot.gpus)
        if table is None:  # no history yet: least attained service, on the same grid
            self._fallback.add(slot.jid)
            return float(_grid_point(self.grid, slot, now))
        return -table[_grid_point(self.grid, slot, now)]

    def next_change_s(self, slot: JobSlot, now: float) -> float:
        if slot.start_s is None:
            return _INF  # a waiting job attains nothing (`_crossing_s`)
        grid = self.grid
        k = _grid_point(grid, slot, now)
        return _crossing_s(slot, now, grid[k + 1]) if k + 1 < len(grid) else _INF

    def observe(self, job: Job, service_gpu_s: float) -> bool:
        changed = False
        for key in (gpu_bucket(job.gpus), None):
            d = self._dist.setdefault(key, _Distribution())
            if d.add(service_gpu_s, self.grid):  # a table rebuilt: `_table`'s answers may change
                self._tables.clear()
                changed |= d.built_at >= self.min_samples
        return changed

    @property
    def fallback_jobs(self) -> int:
        return len(self._fallback)

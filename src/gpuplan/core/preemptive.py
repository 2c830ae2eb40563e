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

from mypy_extensions import i64, mypyc_attr

from gpuplan.core.params import Param
from gpuplan.core.policy import Policy, register_policy
from gpuplan.core.sortedseq import bisect_right_f
from gpuplan.errors import GpuplanError
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

    rises: bool = False
    """Whether `rise_s` answers (a rule whose running jobs' levels only rise, by a formula)."""

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

    def rise_s(self, slot: JobSlot, level: float) -> float:
        """When a running job's level first rises above `level` (`rises`: its levels only rise, and
        one level's crossing time is a formula), so the clock need not stop at each change below it;
        -inf when the rule does not say (the clock stops at each change)."""
        return -_INF

    def advance(self, slot: JobSlot, now: float) -> float:
        """A running job's `level` at `now`, set on its slot, and when it next changes (`rise_s` above
        it where `rises`, else `next_change_s`): what a catch-up asks of each running job it moves."""
        level = slot.level = self.level(slot, now)
        return self.rise_s(slot, level) if self.rises else self.next_change_s(slot, now)

    def reranks(self, slot: JobSlot) -> bool:
        """Whether what the policy learned since `reranked` may have moved the job's level (when the
        scheduler ranks its jobs again after `observe`): True unless the rule knows better."""
        return True

    def reranked(self) -> None:
        """Every job `reranks` named was ranked again."""


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
        self.rises = True

    def args(self) -> tuple[object, ...]:
        return (self.endless_levels, self.quantum_gpu_s)

    def level(self, slot: JobSlot, now: float) -> float:
        return _quanta(slot, now, self.quantum_gpu_s)

    def next_change_s(self, slot: JobSlot, now: float) -> float:
        return _next_quantum_s(slot, now, self.quantum_gpu_s)

    def rise_s(self, slot: JobSlot, level: float) -> float:
        """The crossing of the quantum after `level`'s (a whole number of quanta: the time
        `_next_quantum_s` gives there)."""
        return _crossing_s(slot, 0.0, (level + 1.0) * self.quantum_gpu_s)

    def advance(self, slot: JobSlot, now: float) -> float:
        """`level` and `rise_s` in one call (the same functions)."""
        q = self.quantum_gpu_s
        level = slot.level = _quanta(slot, now, q)
        return _crossing_s(slot, 0.0, (level + 1.0) * q)


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
    return _table_of_sorted(sorted(float(v) for v in samples), [float(a) for a in grid])


def _table_of_sorted(s: list[float], grid: list[float]) -> list[float]:
    """`gittins_table` of sorted samples `s`. The samples below a service are counted (bisected) and
    summed (in sorted order, as a list of prefix sums would) once per grid point, not per pair."""
    n, g = len(s), len(grid)
    pos = [bisect_right_f(s, a) for a in grid]
    below = _sums_below(s, [*pos, n])  # (the last: every sample's)
    top = s[-1] if n else 0.0
    out: list[float] = []
    for k in range(g):
        a, lo, best = grid[k], pos[k], 0.0
        if lo < n:  # a job that outlived every sample: 0
            for j in range(k + 1, g + 1):  # quanta ending at each later grid point, then at the last sample
                b, hi = (grid[j], pos[j]) if j < g else (top, n)
                if b <= a:
                    continue
                done = hi - lo
                cost = (below[j] - below[k]) - done * a + (n - hi) * (b - a)
                if cost > 0:
                    ratio = done / cost
                    if ratio > best:
                        best = ratio
        out.append(best)
    return out


def _sums_below(s: list[float], counts: list[int]) -> list[float]:
    """The sum of the first `c` samples for each `c` of `counts`, added one by one in order (the floats
    a list of prefix sums holds), in one walk over the samples."""
    at: dict[int, float] = {}
    acc = 0.0
    i: i64 = 0
    for c in sorted(set(counts)):
        end: i64 = c
        while i < end:
            acc = acc + s[i]
            i += 1
        at[c] = acc
    return [at[c] for c in counts]


class _Distribution:
    """Services of finished jobs of one bucket (kept sorted) and their Gittins table (rebuilt as the
    sample doubles). A compiled class: pickled and deep-copied as its constructor's arguments."""

    def __init__(self, samples: list[float] | None = None, table: list[float] | None = None,
                 built_at: int = 0) -> None:  # fmt: skip
        self.samples: list[float] = [] if samples is None else samples
        self.table: list[float] = [] if table is None else table
        self.built_at = built_at

    def __reduce__(self) -> tuple[type[_Distribution], tuple[object, ...]]:
        return (type(self), (self.samples, self.table, self.built_at))

    def add(self, service_gpu_s: float, grid: list[float]) -> bool:
        samples = self.samples
        samples.append(service_gpu_s)
        n = len(samples)
        if n >= 2 * self.built_at or n - self.built_at >= 500:
            samples.sort()  # in place: the next sort finds this sorted run and merges the new ones in
            self.table = _table_of_sorted(samples, grid)
            self.built_at = n
            return True
        return False


_POOLED: Final = 0
"""The key of the distribution of every bucket's jobs together (buckets are 1, 2, 4, ...)."""


class _Learned:
    """What a `Gittins` policy learned from finished jobs, and its levels: a compiled object the policy
    owns and its `LevelRule` reads (one object: the rule sees each table the policy rebuilds).
    Pickled and deep-copied as its constructor's arguments (a policy is deep-copied per run; a copy
    of a policy and its rule together keeps them one)."""

    def __init__(
        self,
        grid: list[float],
        min_samples: int,
        dists: dict[int, _Distribution] | None = None,
        fallback: set[int] | None = None,
        fresh: list[list[float]] | None = None,
    ) -> None:
        self.grid = grid
        self.min_samples = min_samples
        self.dists: dict[int, _Distribution] = {} if dists is None else dists
        self.fallback: set[int] = set() if fallback is None else fallback  # jobs ranked without a table
        # the tables that rank jobs rebuilt since `reranked` (a bucket's and the pooled one, at most)
        self.fresh: list[list[float]] = [] if fresh is None else fresh
        self.tables: list[list[float] | None] = []  # by GPU count: `table` (until a table is rebuilt)
        # the last `point` asked, by attained GPU-time: a queue asks a job's level, then its next change
        self.last_gpu_s = -1.0
        self.last_point = 0

    def __reduce__(self) -> tuple[type[_Learned], tuple[object, ...]]:
        return (type(self), (self.grid, self.min_samples, self.dists, self.fallback, self.fresh))

    def table(self, gpus: int) -> list[float]:
        """The table that ranks a job of `gpus`: its bucket's once it has `min_samples`, else the
        pooled one once that has, else [] (none yet)."""
        tables = self.tables
        if gpus < len(tables):
            got = tables[gpus]
            if got is not None:
                return got
        found: list[float] = []
        for key in (gpu_bucket(gpus), _POOLED):
            d = self.dists.get(key)
            if d is not None and d.built_at >= self.min_samples:
                found = d.table
                break
        while len(tables) <= gpus:
            tables.append(None)
        tables[gpus] = found
        return found

    def point(self, slot: JobSlot, now: float) -> int:
        """The grid point at or below the job's attained GPU-time: `bisect_right_f` - 1, by a scan
        from the bottom of the grid (it ascends: `Gittins` starts it above 0; most jobs attain a few
        points, fewer steps than a bisect's five)."""
        x = attained_gpu_s(slot, now)
        if x != self.last_gpu_s:
            grid = self.grid
            k: i64 = 0
            n: i64 = len(grid)
            while k < n and not x < grid[k]:  # (bisect's comparison)
                k += 1
            self.last_point = k - 1
            self.last_gpu_s = x
        return self.last_point

    def level(self, slot: JobSlot, now: float) -> float:
        """`Gittins.level`."""
        table = self.table(slot.gpus)
        point = self.point(slot, now)
        if not table:  # no history yet: least attained service, on the same grid
            self.fallback.add(slot.jid)
            return float(point)
        return -table[point]

    def next_change_s(self, slot: JobSlot, now: float) -> float:
        """`Gittins.next_change_s`: when a running job reaches its next grid point."""
        if slot.start_s is None:
            return _INF  # a waiting job attains nothing (`_crossing_s`)
        grid = self.grid
        k = self.point(slot, now)
        return _crossing_s(slot, now, grid[k + 1]) if k + 1 < len(grid) else _INF

    def observe(self, gpus: int, service_gpu_s: float) -> bool:
        """`Gittins.observe`: learn a finished job's GPU-time; True when a table that ranks jobs was
        rebuilt (it is then `fresh`)."""
        mine = self.learn(gpu_bucket(gpus), service_gpu_s)
        return self.learn(_POOLED, service_gpu_s) or mine

    def learn(self, key: int, service_gpu_s: float) -> bool:
        """`observe` for one distribution: whether a table that ranks jobs was rebuilt."""
        d = self.dists.get(key)
        if d is None:
            d = self.dists[key] = _Distribution()
        if not d.add(service_gpu_s, self.grid):
            return False
        self.tables = []  # a table rebuilt: `table`'s answers may change
        if d.built_at < self.min_samples:
            return False
        self.fresh.append(d.table)
        return True

    def reranks(self, gpus: int) -> bool:
        """Whether a job of `gpus` may have a new level since `reranked`: the table it ranks by (its
        bucket's, else the pooled one) was rebuilt since."""
        table = self.table(gpus)
        return any(t is table for t in self.fresh)


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
        if not first_gpu_s > 0:
            raise GpuplanError(
                f"gittins: first grid point {first_gpu_s!r} GPU-s: must be > 0 (the grid doubles from it)"
            )
        self.first_gpu_s = first_gpu_s
        self.levels = levels
        self.grid = [0.0, *(first_gpu_s * 2.0**k for k in range(levels))]
        self.min_samples = min_samples
        self._learned = _Learned(self.grid, min_samples)

    def level(self, slot: JobSlot, now: float) -> float:
        return self._learned.level(slot, now)

    def next_change_s(self, slot: JobSlot, now: float) -> float:
        return self._learned.next_change_s(slot, now)

    def observe(self, job: Job, service_gpu_s: float) -> bool:
        return self._learned.observe(job.gpus, service_gpu_s)

    def level_rule(self) -> LevelRule:
        cls = type(self)
        if (
            cls.level is not Gittins.level
            or cls.next_change_s is not Gittins.next_change_s
            or cls.observe is not Gittins.observe
        ):
            return PolicyLevels(self)  # a subclass's own levels or lessons
        return _GittinsLevels(self.endless_levels, self._learned)

    @property
    def fallback_jobs(self) -> int:
        return len(self._learned.fallback)


class _GittinsLevels(LevelRule):
    """`Gittins`' levels (`LevelRule`), from the tables its policy learns (`_Learned`, shared)."""

    def __init__(self, endless_levels: bool, learned: _Learned) -> None:
        super().__init__(endless_levels)
        self.learned = learned

    def args(self) -> tuple[object, ...]:
        return (self.endless_levels, self.learned)

    def level(self, slot: JobSlot, now: float) -> float:
        return self.learned.level(slot, now)

    def next_change_s(self, slot: JobSlot, now: float) -> float:
        return self.learned.next_change_s(slot, now)

    def reranks(self, slot: JobSlot) -> bool:
        return self.learned.reranks(slot.gpus)

    def reranked(self) -> None:
        self.learned.fresh = []

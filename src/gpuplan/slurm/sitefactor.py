"""SiteFactor values that make Slurm's own multifactor priority rank the managed jobs in the planned order.

Slurm 22.05 (../shared/slurm/NOTES.md section 9): a job's priority is the integer part of
`SiteFactor + sum(weight x factor) - nice`, at least 1, recomputed every PriorityCalcPeriod and right
after `scontrol update JobId=N SiteFactor=X` (X within +-2147483645). Setting the SiteFactor keeps age,
job size and fair-share live; `Priority=` would freeze them.

Pure: sprio rows and the plan in, the values to set out (`nice_values`: the Nice values of
nice mode, by the same arithmetic and gaps). The rules:
- Consecutive planned jobs get priorities at least `Headroom.gap` apart: 3 for rounding, plus the age a
  job gains between the sprio reading and its update (`drift`, 2 s worth), plus what a job
  updated now gains over one Slurm recomputes only at the next PriorityCalcPeriod (its age moves on),
  plus what the younger of the two can still gain in age over `horizon_s` once the older one stops at
  PriorityMaxAge (while both age, their difference stays the same). A job keeps its value while it
  still leads the next one by 2 plus that age lead, so `watch` re-sets only jobs that really drifted.
- Slurm recomputes priorities every PriorityCalcPeriod, and a job at once when it is updated, so some
  readings lag: each job's lag is its age from the clock (EligibleTime) minus sprio's, within
  0..stale. A job that keeps its value is its reading now and its reading + lag once recomputed; the
  order must hold at both moments (a job set now is recomputed at once: its target is both).
- The fewest changes: the jobs that can keep their current priority are the longest chain, in plan
  order, whose priorities leave room for the gaps of the jobs between them (a longest non-increasing
  subsequence of priority + cumulative gap); only the others change.
- A changed job goes to the priority its slot had in Slurm's own ranking when the gaps allow it, so
  the jobs gpuplan leaves alone keep their place as far as the plan allows; where they land is reported.
- `weight` below 1 moves each job only that fraction of the way from Slurm's own priority to its
  planned one: a nudge; the jobs that then stay out of plan order are reported.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.slurm.parse import PrioRow, parse_limit_s

__all__ = ["NICE_MAX", "SITE_FACTOR_MAX", "Headroom", "SiteFactorPlan", "headroom_for", "nice_values",
           "site_factor_plan"]  # fmt: skip

SITE_FACTOR_MAX = 2147483645
"""`scontrol update SiteFactor=` accepts -2147483645..2147483645 (22.05: "value out of range")."""
NICE_MAX = 2147483645
"""`scontrol update Nice=` accepts up to this (22.05: NICE_OFFSET - 3); below 0 needs an operator."""
_DEFAULT_MAX_AGE_S = 7 * 86400.0  # Slurm's defaults for PriorityMaxAge and PriorityCalcPeriod
_DEFAULT_CALC_S = 300.0
_UPDATE_DELAY_S = 2.0  # sprio read -> a job's update: its age moves on meanwhile (drift)


@dataclass(frozen=True, slots=True)
class Headroom:
    """How far apart consecutive planned jobs' priorities are set (see the module docstring)."""

    base: int = 3
    stale: int = 0
    drift: int = 0
    age_weight: float = 0.0
    age_rate_per_s: float = 0.0
    horizon_s: float = 0.0

    def gap(self, above_age: float, below_age: float, keep: bool = False) -> int:
        """Priority points a job must lead the next one by, from their age points now. `keep`: the
        smaller gap that still lets a job keep its value (without the recalculation lag, which a
        reading taken between two PriorityCalcPeriods shows on some jobs and not others)."""
        lead = 0.0
        if self.age_rate_per_s > 0 and self.horizon_s > 0:
            lead = max(self._grow(below_age) - self._grow(above_age), 0.0)
        if keep:  # hysteresis: a value set with the full gap is kept until that gap is nearly used up
            return 2 + self.drift + math.floor(lead)
        return self.base + self.drift + self.stale + math.ceil(lead)

    def age_points(self, age_s: float) -> float:
        """The weighted age factor of a job eligible for `age_s` seconds."""
        return min(max(age_s, 0.0) * self.age_rate_per_s, self.age_weight)

    def _grow(self, age: float) -> float:
        return max(min(age + self.age_rate_per_s * self.horizon_s, self.age_weight) - age, 0.0)

    def as_dict(self) -> dict[str, Any]:
        return {"base": self.base, "stale": self.stale, "drift": self.drift, "age_weight": self.age_weight,
                "age_per_s": round(self.age_rate_per_s, 6), "horizon_s": self.horizon_s}  # fmt: skip


def headroom_for(config: Mapping[str, str], horizon_s: float) -> Headroom:
    """The headroom this cluster's PriorityWeightAge, PriorityMaxAge and PriorityCalcPeriod call for."""
    weight = _number(config.get("PriorityWeightAge", "0"))
    max_age = _seconds(config.get("PriorityMaxAge", ""), _DEFAULT_MAX_AGE_S)
    calc = _seconds(config.get("PriorityCalcPeriod", ""), _DEFAULT_CALC_S)
    rate = weight / max_age if weight > 0 and max_age > 0 else 0.0
    return Headroom(
        3, math.ceil(rate * calc), math.ceil(rate * _UPDATE_DELAY_S), weight, rate, max(horizon_s, 0.0)
    )


def _number(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        return 0.0


def _seconds(text: str, default: float) -> float:
    try:
        value = parse_limit_s(text)
    except (ValueError, GpuplanError):
        return default
    return default if value is None else value


@dataclass
class SiteFactorPlan:
    """What to set: per managed job its SiteFactor and the priority that gives it."""

    order: list[str]
    site: dict[str, int]
    expected_priority: dict[str, int]
    changes: list[tuple[str, int, int]]  # (job id, SiteFactor now, to set), top of the plan first
    out_of_order: list[str]  # managed jobs whose rank is not the plan's (weight < 1)
    unmanaged: dict[str, dict[str, int]]  # job id -> rank_before, rank_after (1 = first), priority
    headroom: Headroom
    weight: float
    kept: list[str] = field(default_factory=list)  # managed jobs whose priority stays as it is

    def as_dict(self) -> dict[str, Any]:
        return {
            "weight": self.weight,
            "headroom": self.headroom.as_dict(),
            "site_factor": self.site,
            "expected_priority": self.expected_priority,
            "changes": [{"job": j, "from": a, "to": b} for j, a, b in self.changes],
            "out_of_plan_order": self.out_of_order,
            "unmanaged": self.unmanaged,
        }


def site_factor_plan(
    order: Sequence[str],
    rows: Mapping[str, PrioRow],
    original_site: Mapping[str, int],
    others: Sequence[str] = (),
    headroom: Headroom | None = None,
    weight: float = 1.0,
    ages_s: Mapping[str, float] | None = None,
) -> SiteFactorPlan:
    """SiteFactors that rank `order` (every id must have a row) first to last.

    `original_site`: the SiteFactor each job had before gpuplan changed it (default: its current one);
    `others`: the pending jobs gpuplan leaves alone (their ranks are reported); `ages_s`: seconds each
    job has been eligible: the age lead comes from them (sprio's age lags by up to one
    PriorityCalcPeriod on the jobs Slurm did not recompute since, which would make the gaps flap).

    Raises:
        GpuplanError: a weight outside 0..1, or a SiteFactor out of Slurm's range.
    """
    if not 0.0 <= weight <= 1.0:
        raise GpuplanError(f"--weight {weight:g}: must be between 0 and 1 (1 = the plan's exact order)")
    room = headroom or Headroom()
    managed = [rows[j] for j in order]
    lag = [_lag(r, ages_s, room) for r in managed]
    reading = [max(r.base + r.site, 1) for r in managed]  # what Slurm uses until it recomputes the job
    base = [r.base + g for r, g in zip(managed, lag)]  # what multifactor gives each job once recomputed
    own = [b + original_site.get(r.job_id, r.site) for b, r in zip(base, managed)]  # Slurm's own priority
    now = [max(b + r.site, 1) for b, r in zip(base, managed)]  # the priority once recomputed (floor 1)
    ages = [
        room.age_points(ages_s[r.job_id]) if ages_s and r.job_id in ages_s else float(r.age) for r in managed
    ]
    pairs = list(itertools.pairwise(ages))
    gaps = [room.gap(a, b) for a, b in pairs]
    keep_gaps = [room.gap(a, b, keep=True) for a, b in pairs]
    slots = sorted(own, reverse=True)
    if weight >= 1.0:
        target, kept = _targets(reading, now, gaps, keep_gaps, slots)
    else:  # a nudge is measured from Slurm's own order, every pass alike
        target, kept = _targets(own, own, gaps, keep_gaps, slots)
    site: dict[str, int] = {}
    keep = set(kept) if weight >= 1.0 else set()
    for i, r in enumerate(managed):
        orig = original_site.get(r.job_id, r.site)
        if i in keep:
            site[r.job_id] = r.site
            continue
        value = target[i] - base[i] if weight >= 1.0 else orig + round(weight * (target[i] - own[i]))
        if abs(value) > SITE_FACTOR_MAX:
            raise GpuplanError(
                f"job {r.job_id}: SiteFactor {value} is outside Slurm's range +-{SITE_FACTOR_MAX}; lower "
                "--horizon-s or the PriorityWeight* values"
            )
        site[r.job_id] = value
    expected = {r.job_id: max(b + site[r.job_id], 1) for b, r in zip(base, managed)}  # once recomputed
    changes = [(r.job_id, r.site, site[r.job_id]) for r in managed if site[r.job_id] != r.site]
    ranked = sorted(order, key=lambda j: (-expected[j], _id_key(j)))
    out_of_order = [j for j, planned in zip(ranked, order) if j != planned]
    out_of_order.sort(key=list(order).index)
    return SiteFactorPlan(list(order), site, expected, changes, out_of_order,
                          _landing(managed, own, expected, [rows[j] for j in others if j in rows]), room, weight,
                          [managed[i].job_id for i in kept])  # fmt: skip


def nice_values(
    order: Sequence[str],
    rows: Mapping[str, PrioRow],
    headroom: Headroom | None = None,
    ages_s: Mapping[str, float] | None = None,
) -> list[int]:
    """Nice mode: the Nice of each job of `order` (every id must have a row) that makes Slurm's
    `SiteFactor + sum(weight x factor) - nice` rank them first to last, none below 0 (a negative nice
    needs an operator): the first job gets 0, each next one the nice that puts it the full
    `Headroom.gap` below the one before, or 0 when multifactor already ranks it that far below. Nice can
    only lower a priority, and Slurm's priority is at least 1: where the full gaps would push the later
    jobs under that floor, a job is set just high enough to leave the jobs below it the smallest gap
    (rounding and drift: every job is updated, so recomputed, in the same pass); a first job
    already too low for that leaves ties at 1 (an operator's site-factor mode has no such floor).

    Raises:
        GpuplanError: a nice beyond Slurm's range (NICE_MAX).
    """
    room = headroom or Headroom()
    managed = [rows[j] for j in order]
    free = [r.base + r.site + r.nice + _lag(r, ages_s, room) for r in managed]  # the priority at nice 0
    ages = [
        room.age_points(ages_s[r.job_id]) if ages_s and r.job_id in ages_s else float(r.age) for r in managed
    ]
    least = room.base + room.drift
    out: list[int] = []
    above = 0
    for i, (r, f) in enumerate(zip(managed, free)):
        floor = 1 + least * (len(managed) - 1 - i)  # room for the jobs below at the smallest gap
        gap = room.gap(ages[i - 1], ages[i]) if i else 0
        target = f if i == 0 else min(f, max(above - gap, floor), above - least)  # never above the one before
        if f - target > NICE_MAX:
            raise GpuplanError(
                f"job {r.job_id}: Nice {f - target} is beyond Slurm's {NICE_MAX}; lower --horizon-s or "
                "order fewer jobs"
            )
        out.append(f - target)
        above = target
    return out


def _targets(low: Sequence[int], high: Sequence[int], gaps: Sequence[int], keep_gaps: Sequence[int],
             slots: Sequence[int]) -> tuple[list[int], list[int]]:  # fmt: skip
    """Priorities in plan order, as they will be once Slurm has recomputed every job (returned with
    the indices that keep their value).

    A job's priority now is `low` (what Slurm uses until its next recalculation) and will be `high`
    (its lag added); a job that is updated is recomputed at once, so both are its target. The kept
    jobs: a longest chain in which two neighbours in plan order lead by their `keep_gaps` both now
    and once recomputed, and two with jobs between them leave room for those jobs at full `gaps`
    (the first one's `low` leads the second one's `high` by the gaps in between), as does the last
    one above the jobs below it, down to 1. Every other job takes its slot's value, moved just enough
    to be `gaps` away from its neighbours: a job set now always gets the full gap, so it is kept at
    the next pass until it really drifts (the slack between the two gaps)."""
    k = len(low)
    cum = _cumulative(gaps)
    floor = 1 + cum[-1]
    zlo = [low[i] + cum[i] for i in range(k)]
    zhi = [high[i] + cum[i] for i in range(k)]
    kept = _longest_chain(zlo, zhi, low, high, keep_gaps, floor)
    keep = set(kept)
    nxt: list[int | None] = [None] * k
    following: int | None = None
    for i in range(k - 1, -1, -1):
        nxt[i] = following
        if i in keep:
            following = i
    out: list[int] = []
    for i in range(k):
        if i in keep:
            out.append(high[i])
            continue
        n = nxt[i]
        value = max(slots[i], (zhi[n] - cum[i]) if n is not None else (floor - cum[i]))
        if i:
            prev = low[i - 1] if i - 1 in keep else out[-1]  # a kept job above: its priority until recomputed
            value = min(value, prev - gaps[i - 1])
        out.append(value)
    return out, kept


def _cumulative(gaps: Sequence[int]) -> list[int]:
    out = [0]
    for g in gaps:
        out.append(out[-1] + g)
    return out


def _longest_chain(zlo: Sequence[int], zhi: Sequence[int], low: Sequence[int], high: Sequence[int],
                   keep_gaps: Sequence[int], floor: int) -> list[int]:  # fmt: skip
    """Indices (ascending) of a longest chain of jobs that may keep their values (see `_targets`):
    neighbours need `keep_gaps` at both moments, others `zlo` >= `zhi`, the last `zlo` >= `floor`.
    O(n log n): a Fenwick tree of the best chain ending at each `zlo`, a job entering it once it is
    no longer the next one's neighbour."""
    k = len(zlo)
    if not k:
        return []
    keys = sorted({-z for z in zlo})  # ascending -zlo: "zlo >= q" is a prefix
    size = len(keys)
    tree: list[tuple[int, int]] = [(0, -1)] * (size + 1)  # (chain length, its last index)
    prev: list[int] = [-1] * k
    length: list[int] = [0] * k
    best = (0, -1)
    for i in range(k):
        if i >= 2:  # i - 2 is no longer a neighbour of anything to come
            a = i - 2
            p = bisect.bisect_left(keys, -zlo[a]) + 1
            while p <= size:
                tree[p] = max(tree[p], (length[a], a))
                p += p & -p
        got = (0, -1)
        p = bisect.bisect_right(keys, -zhi[i])  # earlier non-neighbours with zlo >= zhi[i]
        while p > 0:
            got = max(got, tree[p])
            p -= p & -p
        a = i - 1
        if a >= 0 and low[a] - low[i] >= keep_gaps[a] and high[a] - high[i] >= keep_gaps[a]:
            got = max(got, (length[a], a))
        prev[i], length[i] = got[1], got[0] + 1
        if zlo[i] >= floor:  # room for the jobs below it: it may end the chain
            best = max(best, (length[i], i))
    out: list[int] = []
    cur = best[1]
    while cur != -1:
        out.append(cur)
        cur = prev[cur]
    return out[::-1]


def _lag(r: PrioRow, ages_s: Mapping[str, float] | None, room: Headroom) -> int:
    """The age points a job's sprio reading lags behind now (Slurm recomputes a job every
    PriorityCalcPeriod, and at once when it is updated): its age from the clock (EligibleTime) minus
    sprio's, within 0..`room.stale`."""
    if not ages_s or r.job_id not in ages_s or room.age_rate_per_s <= 0 or r.frozen:
        return 0
    return min(max(round(room.age_points(ages_s[r.job_id]) - r.age), 0), room.stale)


def _landing(managed: Sequence[PrioRow], own: Sequence[int], expected: Mapping[str, int],
             others: Sequence[PrioRow]) -> dict[str, dict[str, int]]:  # fmt: skip
    """Rank (1 = first) of each job left alone among all pending jobs, before and after."""
    prio = {r.job_id: r.priority for r in others}
    before = {r.job_id: own[i] for i, r in enumerate(managed)} | prio
    after = dict(expected) | prio
    rb = {j: n for n, j in enumerate(sorted(before, key=lambda j: (-before[j], _id_key(j))), start=1)}
    ra = {j: n for n, j in enumerate(sorted(after, key=lambda j: (-after[j], _id_key(j))), start=1)}
    return {r.job_id: {"rank_before": rb[r.job_id], "rank_after": ra[r.job_id], "priority": prio[r.job_id]}
            for r in others}  # fmt: skip


def _id_key(job_id: str) -> tuple[int, str]:
    head = job_id.split("_")[0].split("+")[0]
    return (int(head), job_id) if head.isdigit() else (1 << 62, job_id)

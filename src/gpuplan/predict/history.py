"""History features computed from the past only.

For each job, the statistics of earlier records of the same (user, job name), of the same user, and of
all users: how many there are, the last value, and the median of the last k. A record counts for a job
only once it has ENDED, strictly before the job's submit (`job_end_s`): a job still running when
another is submitted is not yet history for it, and a job is never history for itself.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuplan.core.estimates import job_name
from gpuplan.model import Job
from gpuplan.predict.base import job_end_s, target_value

__all__ = ["K_LONG", "LEVELS", "STATS", "STAT_NAMES", "PastRecords", "history_stats", "job_name"]

LEVELS: tuple[str, ...] = ("user_name", "user", "all")
STATS: tuple[str, ...] = ("n", "last", "median", "median_long", "max")
STAT_NAMES: tuple[str, ...] = tuple(f"{lvl}_{s}" for lvl in LEVELS for s in STATS)
K_LONG = 25
"""Recent values `median_long` and `max` take; `median` takes the last k."""


@dataclass(slots=True)
class PastRecords:
    """Finished records, column by column: end time, value, user and name key, id. Sorted by end."""

    end_s: np.ndarray
    value: np.ndarray
    user: list[str] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)

    @classmethod
    def from_jobs(cls, jobs: Sequence[Job], target: str) -> PastRecords:
        """The jobs whose target and end are known, in end order (equal ends keep the jobs' order)."""
        rows = []
        for i, j in enumerate(jobs):
            v, end = target_value(j, target), job_end_s(j)
            if v is not None and end is not None:
                rows.append((end, i, v, j))
        rows.sort(key=lambda r: (r[0], r[1]))
        return cls(
            np.array([r[0] for r in rows], dtype=float),
            np.array([r[2] for r in rows], dtype=float),
            [r[3].user for r in rows],
            [job_name(r[3]) for r in rows],
            [r[3].id for r in rows],
        )

    def __len__(self) -> int:
        return len(self.ids)

    def without(self, ids: set[str]) -> PastRecords:
        """These records less those whose id is in `ids`."""
        keep = [i for i, x in enumerate(self.ids) if x not in ids]
        return PastRecords(
            self.end_s[keep],
            self.value[keep],
            [self.user[i] for i in keep],
            [self.name[i] for i in keep],
            [self.ids[i] for i in keep],
        )


def _median(values: list[float]) -> float:
    s = sorted(values)
    m = len(s) // 2
    return s[m] if len(s) % 2 else 0.5 * (s[m - 1] + s[m])


class _Window:
    """The last `long` values of one key, how many there were in all, and the median of the last k."""

    __slots__ = ("count", "k", "values")

    def __init__(self, k: int, long: int) -> None:
        self.values: deque[float] = deque(maxlen=max(k, long))
        self.k = k
        self.count = 0

    def add(self, v: float) -> None:
        self.values.append(v)
        self.count += 1

    def stats(self) -> tuple[float, float, float, float, float]:
        if not self.count:
            return 0.0, np.nan, np.nan, np.nan, np.nan
        values = list(self.values)
        return float(self.count), values[-1], _median(values[-self.k :]), _median(values), max(values)


def history_stats(
    jobs: Sequence[Job],
    target: str,
    *,
    before_all: PastRecords | None = None,
    online: Sequence[Job] = (),
    k: int = 5,
    k_all: int = 50,
) -> np.ndarray:
    """The STAT_NAMES columns for each job (rows in the order of `jobs`).

    Args:
        jobs: the jobs to describe.
        target: "duration" or "memory".
        before_all: records taken as ended before every job (a fitted history).
        online: records that count for a job only if they ended strictly before its submit (usually the
            trace so far, including `jobs` themselves).
        k: how many recent values the (user, name) and user medians use.
        k_all: how many recent values the all-users median uses.

    Returns:
        An array (len(jobs), len(STAT_NAMES)): per level, the count (0 when none), the last value, the
        median of the last k and of the last K_LONG (k_all for everyone) values, and the largest of
        those (NaN when none).
    """
    windows: dict[tuple[str, ...], _Window] = {}

    def add(user: str, name: str, v: float) -> None:
        for key, size, long in (((user, name), k, K_LONG), ((user,), k, K_LONG), ((), k_all, k_all)):
            w = windows.get(key)
            if w is None:
                w = windows[key] = _Window(size, long)
            w.add(v)

    if before_all is not None:
        for u, n, v in zip(before_all.user, before_all.name, before_all.value.tolist()):
            add(u, n, v)
    rec = PastRecords.from_jobs(_unique(online), target)
    ends, values = rec.end_s.tolist(), rec.value.tolist()
    out = np.full((len(jobs), len(STAT_NAMES)), np.nan)
    empty = _Window(1, 1)
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
    r = 0
    for i in order:
        job = jobs[i]
        while r < len(ends) and ends[r] < job.submit_s:
            add(rec.user[r], rec.name[r], values[r])
            r += 1
        user, name = job.user, job_name(job)
        row: list[float] = []
        for key in ((user, name), (user,), ()):
            row.extend(windows.get(key, empty).stats())
        out[i] = row
    return out


def _unique(jobs: Sequence[Job]) -> list[Job]:
    seen: set[str] = set()
    out = []
    for j in jobs:
        if j.id not in seen:
            seen.add(j.id)
            out.append(j)
    return out

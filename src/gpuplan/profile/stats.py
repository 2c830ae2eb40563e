"""Counts, distributions and histograms of a job history: the plain numbers an audit starts from."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from gpuplan.model import Job

__all__ = [
    "STATE_KEYS",
    "UNKNOWN_STATE",
    "Distribution",
    "Histogram",
    "distribution",
    "gpu_hours",
    "histogram",
    "meta_seconds",
    "state_counts",
    "state_of",
]

UNKNOWN_STATE = "unknown"
# The first of these meta keys that a job sets is its state: readers name it after their source
# (sacct State, Alibaba pod_phase, SWF status).
STATE_KEYS: tuple[str, ...] = ("state", "phase", "status")


@dataclass(slots=True, frozen=True)
class Distribution:
    """Summary of a sample. Percentiles interpolate linearly between order statistics (numpy's
    default); every figure but `count` is None for an empty sample."""

    count: int
    min: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None
    mean: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True, frozen=True)
class Histogram:
    """Counts per bin: `edges` has one more entry than `counts` (bins are [edge_i, edge_i+1), the
    last one closed). `log` says the edges are spaced evenly in log10."""

    edges: tuple[float, ...]
    counts: tuple[int, ...]
    log: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"edges": list(self.edges), "counts": list(self.counts), "log": self.log}


def distribution(values: Iterable[float]) -> Distribution:
    """count, min, p50, p90, p99, max and mean of `values` (None entries are not allowed)."""
    a = np.fromiter(values, float)
    if a.size == 0:
        return Distribution(0)
    p50, p90, p99 = (float(v) for v in np.percentile(a, [50, 90, 99]))
    return Distribution(int(a.size), float(a.min()), p50, p90, p99, float(a.max()), float(a.mean()))


def histogram(values: Sequence[float], bins: int = 30, log: bool = False) -> Histogram:
    """Counts of `values` in `bins` equal bins (equal in log10 with `log`; values <= 0 then go to the
    first bin). One value, or all values equal, gives one bin."""
    a = np.asarray(values, float)
    if a.size == 0:
        return Histogram((), (), log)
    if log:
        positive = a[a > 0]
        lo = float(positive.min()) if positive.size else 1.0
        a = np.log10(np.maximum(a, lo))
    lo, hi = float(a.min()), float(a.max())
    if hi <= lo:
        hi = lo + 1.0
        bins = 1
    counts, edges = np.histogram(a, bins=bins, range=(lo, hi))
    if log:
        edges = 10.0**edges
    return Histogram(tuple(float(e) for e in edges), tuple(int(c) for c in counts), log)


def state_of(job: Job) -> str:
    """The job's state: the first of meta 'state', 'phase', 'status' that is set, else 'unknown'."""
    for key in STATE_KEYS:
        value = job.meta.get(key)
        if value is not None and str(value).strip():
            return str(value).strip()
    return UNKNOWN_STATE


def state_counts(jobs: Iterable[Job]) -> dict[str, int]:
    """Jobs per state (`state_of`) as the trace writes it, most common first."""
    counts: Counter[str] = Counter(state_of(j) for j in jobs)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def gpu_hours(job: Job) -> float | None:
    """GPU-time of a job in GPU-hours (gpus x duration_s / 3600), None when its duration is unknown."""
    return None if job.duration_s is None else job.gpus * job.duration_s / 3600.0


def meta_seconds(job: Job, key: str) -> float | None:
    """A time in `job.meta[key]` as seconds: a finite number or a numeric string, else None.

    Foreign CSVs keep unrecognised columns as strings, so "1234.5" counts as a number.
    """
    value = job.meta.get(key)
    if value is None or isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if math.isfinite(seconds) else None

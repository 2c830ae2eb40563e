"""The profile matrix (duration x memory x GPU count), the article's three classes and the top users
and queues, each with job counts and shares of GPU-hours. Definitions: docs/audit.md."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gpuplan.core.policies import ARTICLE_CLASSES, article_class
from gpuplan.model import ClusterSpec, Job
from gpuplan.profile.stats import gpu_hours

__all__ = [
    "ARTICLE_UNKNOWN",
    "DURATION_CLASSES",
    "GPU_CLASSES",
    "MEMORY_CLASSES",
    "QUEUE_KEYS",
    "ClassShare",
    "MemoryBasis",
    "ProfileMatrix",
    "Ranking",
    "article_shares",
    "duration_class",
    "gpu_class",
    "memory_basis",
    "memory_class",
    "profile_matrix",
    "queue_of",
    "top_queues",
    "top_users",
]

# (label, upper bound in seconds, exclusive); the last class is open-ended.
_DURATION_BINS: tuple[tuple[str, float], ...] = (
    ("< 10 min", 600.0),
    ("10 min–1 h", 3600.0),
    ("1–6 h", 6 * 3600.0),
    ("> 6 h", float("inf")),
)
DURATION_CLASSES: tuple[str, ...] = (*(label for label, _ in _DURATION_BINS), "unknown")
MEMORY_CLASSES: tuple[str, ...] = ("low", "moderate", "high", "unknown")
GPU_CLASSES: tuple[str, ...] = ("1", "2–4", "5–8", "> 8")
ARTICLE_UNKNOWN = "unknown-duration"
# Where readers keep a job's queue: Slurm partition, SWF queue, Helios/Philly virtual cluster, and
# Alibaba's QoS class as the last resort (the trace's only grouping of pods).
QUEUE_KEYS: tuple[str, ...] = ("queue", "partition", "vc", "qos")

# The absolute memory bounds (GB per GPU) are those of an 80 GB GPU; with a known cluster they scale
# with its largest GPU, so a 30 GB job is "high" on 32 GB V100s and "moderate" on 80 GB A100s.
_LOW_GB, _HIGH_GB, _REFERENCE_GB = 20.0, 50.0, 80.0
_NO_USER = "(no user)"
_NO_QUEUE = "(no queue)"
_K = TypeVar("_K", bound=Hashable)


@dataclass(slots=True, frozen=True)
class MemoryBasis:
    """How memory classes are drawn: low < `low_below_gb` <= moderate <= `high_above_gb` < high."""

    relative: bool
    reference_gpu_mem_gb: float
    low_below_gb: float
    high_above_gb: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": "relative" if self.relative else "absolute",
            "reference_gpu_mem_gb": self.reference_gpu_mem_gb,
            "low_below_gb": self.low_below_gb,
            "high_above_gb": self.high_above_gb,
        }


def memory_basis(cluster: ClusterSpec | None = None) -> MemoryBasis:
    """Absolute bounds (20 / 50 GB) without a cluster; with one, the same fractions (25 % / 62.5 %)
    of its largest GPU's memory."""
    if cluster is None:
        return MemoryBasis(False, _REFERENCE_GB, _LOW_GB, _HIGH_GB)
    ref = max(n.gpu.mem_gb for n in cluster.nodes)
    scale = ref / _REFERENCE_GB
    return MemoryBasis(True, ref, _LOW_GB * scale, _HIGH_GB * scale)


def duration_class(duration_s: float | None) -> str:
    """'< 10 min', '10 min–1 h', '1–6 h', '> 6 h' (lower bounds inclusive) or 'unknown'."""
    if duration_s is None:
        return DURATION_CLASSES[-1]
    return next(label for label, upper in _DURATION_BINS if duration_s < upper)


def memory_class(mem_gb: float | None, basis: MemoryBasis | None = None) -> str:
    """'low', 'moderate', 'high' or 'unknown' for a per-GPU memory, under `basis` (absolute by default)."""
    basis = basis or memory_basis(None)
    if mem_gb is None:
        return "unknown"
    if mem_gb < basis.low_below_gb:
        return "low"
    return "moderate" if mem_gb <= basis.high_above_gb else "high"


def gpu_class(gpus: int) -> str:
    """'1', '2–4', '5–8' or '> 8'."""
    if gpus <= 1:
        return GPU_CLASSES[0]
    if gpus <= 4:
        return GPU_CLASSES[1]
    return GPU_CLASSES[2] if gpus <= 8 else GPU_CLASSES[3]


@dataclass(slots=True, frozen=True)
class ClassShare:
    """Jobs and GPU-hours of one class (or user, or queue), with shares of the whole history.

    `gpu_hours` counts jobs with a known duration only; `gpu_hour_share` is of all such GPU-hours.
    """

    name: str
    jobs: int
    job_share: float
    gpu_hours: float
    gpu_hour_share: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "jobs": self.jobs,
            "job_share": self.job_share,
            "gpu_hours": self.gpu_hours,
            "gpu_hour_share": self.gpu_hour_share,
        }


def _shares(groups: dict[_K, list[Job]], total_jobs: int, total_h: float) -> dict[_K, ClassShare]:
    out = {}
    for key, members in groups.items():
        hours = sum(h for j in members if (h := gpu_hours(j)) is not None)
        out[key] = ClassShare(
            key if isinstance(key, str) else " / ".join(str(k) for k in key),  # type: ignore[attr-defined]
            len(members),
            len(members) / total_jobs if total_jobs else 0.0,
            hours,
            hours / total_h if total_h > 0 else 0.0,
        )
    return out


def _total_gpu_hours(jobs: Sequence[Job]) -> float:
    return sum(h for j in jobs if (h := gpu_hours(j)) is not None)


@dataclass(slots=True)
class ProfileMatrix:
    """The non-empty cells of duration class x memory class x GPU class.

    Attributes:
        basis: the memory bounds used.
        cells: (duration class, memory class, GPU class) -> counts and shares, in class order.
        total_jobs, total_gpu_hours: the whole history (GPU-hours of jobs with a known duration).
    """

    basis: MemoryBasis
    cells: dict[tuple[str, str, str], ClassShare] = field(default_factory=dict)
    total_jobs: int = 0
    total_gpu_hours: float = 0.0

    def margin(self, axis: int) -> dict[str, ClassShare]:
        """Totals per class of one axis (0 duration, 1 memory, 2 GPUs), every class listed."""
        classes = (DURATION_CLASSES, MEMORY_CLASSES, GPU_CLASSES)[axis]
        out = {}
        for c in classes:
            inside = [s for k, s in self.cells.items() if k[axis] == c]
            jobs, hours = sum(s.jobs for s in inside), sum(s.gpu_hours for s in inside)
            out[c] = ClassShare(
                c,
                jobs,
                jobs / self.total_jobs if self.total_jobs else 0.0,
                hours,
                hours / self.total_gpu_hours if self.total_gpu_hours > 0 else 0.0,
            )
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "duration_classes": list(DURATION_CLASSES),
            "memory_classes": list(MEMORY_CLASSES),
            "gpu_classes": list(GPU_CLASSES),
            "memory_basis": self.basis.as_dict(),
            "total_jobs": self.total_jobs,
            "total_gpu_hours": self.total_gpu_hours,
            "cells": [
                {
                    "duration": d,
                    "memory": m,
                    "gpus": g,
                    **{k: v for k, v in s.as_dict().items() if k != "name"},
                }
                for (d, m, g), s in self.cells.items()
            ],
        }


def profile_matrix(jobs: Sequence[Job], cluster: ClusterSpec | None = None) -> ProfileMatrix:
    """Jobs and GPU-hours per (duration class, memory class, GPU class); see `memory_basis`."""
    basis = memory_basis(cluster)
    groups: dict[tuple[str, str, str], list[Job]] = defaultdict(list)
    for j in jobs:
        groups[(duration_class(j.duration_s), memory_class(j.mem_gb, basis), gpu_class(j.gpus))].append(j)
    order = {c: i for axis in (DURATION_CLASSES, MEMORY_CLASSES, GPU_CLASSES) for i, c in enumerate(axis)}
    total_h = _total_gpu_hours(jobs)
    shares = _shares(groups, len(jobs), total_h)
    cells = {k: shares[k] for k in sorted(groups, key=lambda k: tuple(order[c] for c in k))}
    return ProfileMatrix(basis, cells, len(jobs), total_h)


def article_shares(jobs: Sequence[Job]) -> list[ClassShare]:
    """The article's three classes from each job's true duration and memory (`article_class` with
    oracle=True), plus 'unknown-duration' for jobs without a duration (never started, still running
    or censored), which `article_class` alone would file as long-moderate-mem. Every class listed."""
    groups: dict[str, list[Job]] = {c: [] for c in (*ARTICLE_CLASSES, ARTICLE_UNKNOWN)}
    for j in jobs:
        name = ARTICLE_UNKNOWN if j.duration_s is None else article_class(j, oracle=True)
        groups[name].append(j)
    shares = _shares(groups, len(jobs), _total_gpu_hours(jobs))
    return [shares[c] for c in groups]


def queue_of(job: Job) -> str | None:
    """The job's queue: the first of meta 'queue', 'partition', 'vc', 'qos' that is set, else None."""
    for key in QUEUE_KEYS:
        value = job.meta.get(key)
        if value is not None and str(value).strip():
            return str(value).strip()
    return None


@dataclass(slots=True)
class Ranking:
    """The top entries by GPU-hours (then jobs, then name), and how many distinct names there are."""

    entries: list[ClassShare]
    distinct: int

    def as_dict(self) -> dict[str, Any]:
        return {"distinct": self.distinct, "top": [e.as_dict() for e in self.entries]}


def _ranking(jobs: Sequence[Job], key: Callable[[Job], str], top: int) -> Ranking:
    groups: dict[str, list[Job]] = defaultdict(list)
    for j in jobs:
        groups[key(j)].append(j)
    shares = _shares(groups, len(jobs), _total_gpu_hours(jobs))
    ranked = sorted(shares.values(), key=lambda s: (-s.gpu_hours, -s.jobs, s.name))
    return Ranking(ranked[:top], len(groups))


def top_users(jobs: Sequence[Job], top: int = 10) -> Ranking:
    """Users by GPU-hours; jobs without a user count as '(no user)'. Empty when no job names a user."""
    if not any(j.user for j in jobs):
        return Ranking([], 0)
    return _ranking(jobs, lambda j: j.user or _NO_USER, top)


def top_queues(jobs: Sequence[Job], top: int = 10) -> Ranking:
    """Queues (`queue_of`) by GPU-hours; jobs without one count as '(no queue)'. Empty when no job has one."""
    if not any(queue_of(j) is not None for j in jobs):
        return Ranking([], 0)
    return _ranking(jobs, lambda j: queue_of(j) or _NO_QUEUE, top)

"""Lower bounds on the makespan (seconds from the first submit) that no schedule can beat.

Each bound holds for every policy, placer and backfill mode, given the jobs' true durations; the
simulator reports the largest. The argument for each is in docs/bounds.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

from gpuplan.model import ClusterSpec, Job

__all__ = ["Bound", "least_gpu_share", "least_mem_gb", "lower_bound"]

_SUBMIT, _DURATION = attrgetter("submit_s"), attrgetter("duration_s")
_GPUS, _SPANS = attrgetter("gpus"), attrgetter("may_span_nodes")


@dataclass(slots=True)
class Bound:
    """The best lower bound and every bound that was computed, by name."""

    value_s: float
    name: str
    parts: dict[str, float] = field(default_factory=dict)


def lower_bound(jobs: Sequence[Job], cluster: ClusterSpec) -> Bound:
    """The strongest of the bounds below that applies to this cluster (sharing or exclusive).

    Columnar (numpy) and exact: every area bound sweeps the jobs latest release first (a stable sort,
    so equal releases keep trace order) and sums the work in that order, as a plain loop would."""
    n = len(jobs)
    submit = np.fromiter(map(_SUBMIT, jobs), float, n)
    rel = submit - submit.min()
    dur = _durations(jobs)
    gpus = np.fromiter(map(_GPUS, jobs), np.int64, n)
    order = np.argsort(-rel, kind="stable")  # latest release first
    rel, dur, gpus = rel[order], dur[order], gpus[order]
    parts = {"longest-job": float(np.max(rel + dur))}
    if cluster.sharing:
        mem = np.fromiter((_mem_taken(jobs[i], cluster) for i in order), float, n)
        parts["memory-area"] = _area_bound(rel, gpus * mem * dur, cluster.total_mem_gb)
        alone = np.fromiter((_cannot_share(jobs[i], cluster) for i in order), bool, n)
        parts["exclusive-area"] = _area_bound(rel[alone], gpus[alone] * dur[alone], cluster.total_gpus)
        if any(_is_share_job(j) for j in jobs):  # without GPU shares it never beats exclusive-area
            share = np.fromiter((least_gpu_share(jobs[i]) for i in order), float, n)
            parts["share-area"] = _area_bound(rel, share * dur, cluster.total_gpus)
    else:
        parts["gpu-area"] = _area_bound(rel, gpus * dur, cluster.total_gpus)
        span = np.fromiter(map(_SPANS, jobs), bool, n)[order]
        parts["big-jobs"] = _big_jobs_bound(rel, dur, gpus, span, cluster)
    name = max(parts, key=lambda k: parts[k])
    return Bound(parts[name], name, parts)


def _durations(jobs: Sequence[Job]) -> np.ndarray:
    """Each job's duration_s, 0 when unknown (or zero)."""
    try:  # fromiter refuses a None: every duration known, read once
        return np.fromiter(map(_DURATION, jobs), float, len(jobs)) + 0.0  # -0.0 counts as 0, as `d or 0.0`
    except TypeError:
        return np.fromiter((d or 0.0 for d in map(_DURATION, jobs)), float, len(jobs))


def _area_bound(rel: np.ndarray, work: np.ndarray, capacity: float) -> float:
    """max over release times r of r + (work released at or after r) / capacity.

    `rel` (releases, latest first) and `work` (each job's width x duration) are in sweep order; the
    running sum is a sequential accumulate, the float operations of a plain loop."""
    if len(rel) == 0:
        return 0.0
    return max(0.0, float(np.max(rel + np.cumsum(work) / capacity)))


def _big_jobs_bound(
    rel: np.ndarray, dur: np.ndarray, gpus: np.ndarray, span: np.ndarray, cluster: ClusterSpec
) -> float:
    """Jobs wider than 1/(k+1) of the cluster (or of a node, for single-node jobs) cannot run k+1 at once."""
    total, node_max, nodes = cluster.total_gpus, cluster.max_node_gpus, len(cluster.nodes)
    widths = _width_counts(gpus)
    single = _width_counts(gpus[~span])
    best = 0.0
    seen: set[tuple[str, int]] = set()  # groups are nested in k: one already bounded with a smaller k
    for k in range(1, 9):  # gives a weaker bound with this k, so each distinct group is swept once
        for kind, counts, cap, concurrent in (
            ("whole", widths, total, k),
            ("node", single, node_max, k * nodes),
        ):
            size = sum(n for g, n in counts.items() if g * (k + 1) > cap)
            if size == 0 or (kind, size) in seen:
                continue
            seen.add((kind, size))
            group = gpus * (k + 1) > cap
            if kind == "node":
                group &= ~span
            best = max(best, _area_bound(rel[group], dur[group] * 1.0, concurrent))
    return best


def _width_counts(gpus: np.ndarray) -> dict[int, int]:
    """How many jobs ask for each number of GPUs (those that some job asks for), by columns."""
    if len(gpus) == 0 or gpus.min() < 0:  # (a negative width: no reader makes one)
        return {int(g): int(n) for g, n in zip(*np.unique(gpus, return_counts=True), strict=True)}
    counts = np.bincount(gpus)
    present = np.flatnonzero(counts)
    return dict(zip(present.tolist(), counts[present].tolist(), strict=True))


def _is_share_job(job: Job) -> bool:
    """A one-GPU job with a GPU share below 1 (on a sharing cluster, as core/booking.py's Need)."""
    return job.gpus == 1 and job.gpu_share is not None and job.gpu_share < 1.0


def least_mem_gb(job: Job) -> float | None:
    """The least memory per GPU any gpuplan schedule on a sharing cluster books for the job: its true
    use when known (an oracle run books exactly that; others book at least that), else, for a job with
    a GPU share, 0 (a run that knows no memory binds it by its share alone), else its estimate (what runs
    on the estimates book; an oracle run books the whole GPU), else None (every run books whole GPUs)."""
    if job.mem_gb is not None:
        return job.mem_gb
    return 0.0 if _is_share_job(job) else job.est_mem_gb


def least_gpu_share(job: Job) -> float:
    """The least share of GPU compute (GPUs' worth) any gpuplan schedule on a sharing cluster books for
    the job at once: its GPU share, else its GPUs whole when no run knows its memory, else 0 (a job of
    known memory shares by memory alone). The shares on one GPU never add up to more than 1."""
    if _is_share_job(job):
        return float(job.gpu_share or 0.0)
    if job.gpus == 1 and job.gpu_share is not None:  # a share of 1 or more: one whole GPU's share
        return 1.0
    return float(job.gpus) if least_mem_gb(job) is None else 0.0


def _mem_taken(job: Job, cluster: ClusterSpec) -> float:
    """GPU memory a job holds on each GPU at the least: see `_least_mem_gb`; unknown: the smallest GPU whole."""
    smallest = min(n.gpu.mem_gb for n in cluster.nodes)
    mem = least_mem_gb(job)
    return smallest if mem is None else min(mem, smallest)


def _cannot_share(job: Job, cluster: ClusterSpec) -> bool:
    """A job using more than half of the largest GPU (or taking it whole) shares it with no other such job."""
    largest = max(n.gpu.mem_gb for n in cluster.nodes)
    mem = least_mem_gb(job)
    return mem is None or mem * 2 > largest

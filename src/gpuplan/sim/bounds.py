"""Lower bounds on the makespan (seconds from the first submit) that no schedule can beat.

Each bound holds for every policy, placer and backfill mode, given the jobs' true durations; the
simulator reports the largest. The argument for each is in docs/bounds.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuplan.model import ClusterSpec, Job

__all__ = ["Bound", "lower_bound"]


@dataclass(slots=True)
class Bound:
    """The best lower bound and every bound that was computed, by name."""

    value_s: float
    name: str
    parts: dict[str, float] = field(default_factory=dict)


def lower_bound(jobs: Sequence[Job], cluster: ClusterSpec) -> Bound:
    """The strongest of the bounds below that applies to this cluster (sharing or exclusive)."""
    t0 = min(j.submit_s for j in jobs)
    # latest release first: every area bound sweeps the jobs in this order
    rel = sorted(((j.submit_s - t0, j) for j in jobs), key=lambda rj: -rj[0])
    parts = {"longest-job": max(r + (j.duration_s or 0.0) for r, j in rel)}
    if cluster.sharing:
        parts["memory-area"] = _area_bound(
            rel, lambda j: j.gpus * _mem_taken(j, cluster), cluster.total_mem_gb
        )
        parts["exclusive-area"] = _area_bound(
            [(r, j) for r, j in rel if _cannot_share(j, cluster)], lambda j: float(j.gpus), cluster.total_gpus
        )
    else:
        parts["gpu-area"] = _area_bound(rel, lambda j: float(j.gpus), cluster.total_gpus)
        parts["big-jobs"] = _big_jobs_bound(rel, cluster)
    name = max(parts, key=lambda k: parts[k])
    return Bound(parts[name], name, parts)


def _area_bound(rel: list[tuple[float, Job]], width, capacity: float) -> float:  # type: ignore[no-untyped-def]
    """max over release times r of r + (work released at or after r) / capacity.

    `rel` holds (release, job) sorted by release, latest first."""
    best, work = 0.0, 0.0
    for r, j in rel:
        work += width(j) * (j.duration_s or 0.0)
        value = r + work / capacity
        if value > best:
            best = value
    return best


def _big_jobs_bound(rel: list[tuple[float, Job]], cluster: ClusterSpec) -> float:
    """Jobs wider than 1/(k+1) of the cluster (or of a node, for single-node jobs) cannot run k+1 at once."""
    total, node_max, nodes = cluster.total_gpus, cluster.max_node_gpus, len(cluster.nodes)
    widths = Counter(j.gpus for _, j in rel)
    single = Counter(j.gpus for _, j in rel if not j.may_span_nodes)
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
            group = [
                (r, j) for r, j in rel if j.gpus * (k + 1) > cap and (kind == "whole" or not j.may_span_nodes)
            ]
            best = max(best, _area_bound(group, lambda j: 1.0, concurrent))
    return best


def _least_mem_gb(job: Job) -> float | None:
    """The least memory per GPU any gpuplan schedule books for the job: its true use when known (an
    oracle run books exactly that; others book at least that), else its estimate (what runs on the
    estimates book; an oracle run books the whole GPU), else None (every run books whole GPUs)."""
    return job.mem_gb if job.mem_gb is not None else job.est_mem_gb


def _mem_taken(job: Job, cluster: ClusterSpec) -> float:
    """GPU memory a job holds on each GPU at the least: see `_least_mem_gb`; unknown: the smallest GPU whole."""
    smallest = min(n.gpu.mem_gb for n in cluster.nodes)
    mem = _least_mem_gb(job)
    return smallest if mem is None else min(mem, smallest)


def _cannot_share(job: Job, cluster: ClusterSpec) -> bool:
    """A job using more than half of the largest GPU shares it with no other such job."""
    largest = max(n.gpu.mem_gb for n in cluster.nodes)
    mem = _least_mem_gb(job)
    return mem is None or mem * 2 > largest

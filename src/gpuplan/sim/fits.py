"""Jobs that can never start on a cluster: one test for every command (the scheduler's own rule).

The library's `simulate` refuses such a job (`JobNeverFitsError`); every command leaves them out with
one warning on stderr that names the first and says how many (docs/formats.md, "Jobs that never fit").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter

from gpuplan.core.booking import booked_mem_gb, fits_empty_cluster, split_fitting
from gpuplan.core.placement import get_placer
from gpuplan.model import ClusterSpec, Job

__all__ = ["allow_spanning", "fits_on", "never_fit_warning", "split_never_fitting"]

_GPUS = attrgetter("gpus")


def fits_on(cluster: ClusterSpec, oracle: bool = False) -> Callable[[Job], bool]:
    """Whether a job can start on the empty cluster, with the memory the simulator books: the
    scheduler's own test (`core.booking.fits_empty_cluster`)."""
    cache: dict[tuple[int, float | None, bool], bool] = {}
    placer = get_placer("first-fit")

    def fits(job: Job) -> bool:
        mem = booked_mem_gb(job, oracle)
        key = (job.gpus, mem, job.may_span_nodes)
        if key not in cache:
            cache[key] = fits_empty_cluster(cluster, placer, *key)
        return cache[key]

    return fits


def split_never_fitting(
    jobs: Sequence[Job], cluster: ClusterSpec, oracle: bool = False
) -> tuple[list[Job], list[Job]]:
    """(jobs that can start on `cluster`, jobs that never can), each in their order: `fits_on`'s test
    of each job, in one compiled loop (`core.booking.split_fitting`)."""
    return split_fitting(jobs, cluster, get_placer("first-fit"), oracle)


def never_fit_warning(never: Sequence[Job], total: int, cluster: ClusterSpec) -> str:
    """One line: how many jobs never fit, the first of them, the cluster, and the fix."""
    first = never[0]
    mem = "" if first.mem_gb is None else f" with {first.mem_gb:g} GB per GPU"
    biggest = max(n.gpu.mem_gb for n in cluster.nodes)
    return (
        f"{len(never)} of {total} jobs can never start on {cluster.name!r} ({cluster.describe()}; "
        f"largest node {cluster.max_node_gpus} GPUs, GPUs of at most {biggest:g} GB): left out "
        f"(first: {first.id!r}, {first.gpus} GPU(s){mem}); pass a larger --cluster to include them"
    )


def allow_spanning(jobs: Sequence[Job], cluster: ClusterSpec) -> tuple[list[Job], int]:
    """Jobs where every job wider than the cluster's largest node, but no wider than the cluster, may
    span nodes (a job that wide can only have run that way in its own trace), and how many changed."""
    from dataclasses import replace

    widest, total = cluster.max_node_gpus, cluster.total_gpus
    if not jobs or max(map(_GPUS, jobs)) <= widest:
        return list(jobs), 0  # no job is wider than a node (checked at C speed)
    out, n = [], 0
    for j in jobs:
        if widest < j.gpus <= total and not j.may_span_nodes:
            j = replace(j, may_span_nodes=True)
            n += 1
        out.append(j)
    return out, n

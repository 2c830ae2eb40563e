"""Jobs that can never start on a cluster: one test for every command (the scheduler's own rule).

The library's `simulate` refuses such a job (`JobNeverFitsError`); every command leaves them out with
one warning on stderr that names the first and says how many (docs/formats.md, "Jobs that never fit").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpuplan.model import ClusterSpec, Job
from gpuplan.sim.engine import _booked_mem

__all__ = ["fits_on", "never_fit_warning", "split_never_fitting"]


def fits_on(cluster: ClusterSpec, oracle: bool = False) -> Callable[[Job], bool]:
    """Whether a job can start on the empty cluster: one node with enough GPUs of enough memory, or
    enough such GPUs in all when the job may span nodes, with the memory the simulator books."""
    cache: dict[tuple[int, float | None, bool], bool] = {}

    def fits(job: Job) -> bool:
        mem = _booked_mem(job, oracle)
        key = (job.gpus, mem, job.may_span_nodes)
        if key not in cache:
            sizes = [n.gpus for n in cluster.nodes if mem is None or mem <= n.gpu.mem_gb]
            cache[key] = bool(sizes) and (
                max(sizes) >= job.gpus or (job.may_span_nodes and sum(sizes) >= job.gpus)
            )
        return cache[key]

    return fits


def split_never_fitting(
    jobs: Sequence[Job], cluster: ClusterSpec, oracle: bool = False
) -> tuple[list[Job], list[Job]]:
    """(jobs that can start on `cluster`, jobs that never can), each in their order."""
    fits = fits_on(cluster, oracle)
    ok: list[Job] = []
    never: list[Job] = []
    for j in jobs:
        (ok if fits(j) else never).append(j)
    return ok, never


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

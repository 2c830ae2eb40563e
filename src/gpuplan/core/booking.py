"""What a job books and whether it can ever fit: the rules every clock and every evaluator share."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from gpuplan.core.placement import Placer
from gpuplan.core.state import ClusterState, Need
from gpuplan.model import ClusterSpec, Job

__all__ = ["booked_mem_gb", "fits_empty_cluster", "never_fits_message", "split_fitting"]


def booked_mem_gb(job: Job, oracle: bool = False) -> float | None:
    """Memory per GPU the simulator books for a job: its estimate, or its true use when that is larger.

    A job whose estimate is too low still takes its real memory (in life it would run out of memory
    on a full GPU and be restarted; the simulator does not model that restart, it books what the job
    really takes, so no schedule it makes is physically impossible). None: unknown, whole GPUs.
    """
    est, true = job.planning_mem_gb(oracle), job.mem_gb
    if est is None or true is None:
        return est
    return max(est, true)


def fits_empty_cluster(
    spec: ClusterSpec,
    placer: Placer,
    gpus: int,
    mem_gb: float | None,
    may_span: bool,
    *,
    empty: ClusterState | None = None,
    need: Need | None = None,
) -> bool:
    """Whether some placement on the empty cluster (every GPU in service) hosts the job (with `need`:
    its CPU, host memory and GPU share too).

    `empty`: an empty ClusterState of `spec` the caller keeps (saves building or looking one up)."""
    st = _empty_state(spec) if empty is None else empty
    return placer.find(st, gpus, mem_gb, may_span, need) is not None


def split_fitting(
    jobs: Sequence[Job], spec: ClusterSpec, placer: Placer, oracle: bool = False
) -> tuple[list[Job], list[Job]]:
    """(jobs that can start on the empty `spec`, jobs that never can), each in their order: whether
    `fits_empty_cluster` hosts the job's GPUs with the memory `booked_mem_gb` books for it, asked
    once per distinct (GPUs, booked memory, may span nodes). One compiled loop for a whole trace
    (sim/fits.py's `split_never_fitting`): a million jobs take one call, not a million."""
    verdicts: dict[tuple[int, float | None, bool], bool] = {}
    empty = _empty_state(spec)
    ok: list[Job] = []
    never: list[Job] = []
    for job in jobs:
        gpus, mem, span = job.gpus, booked_mem_gb(job, oracle), job.may_span_nodes
        key = (gpus, mem, span)
        fit = verdicts.get(key)
        if fit is None:
            fit = verdicts[key] = fits_empty_cluster(spec, placer, gpus, mem, span, empty=empty)
        if fit:
            ok.append(job)
        else:
            never.append(job)
    return ok, never


@functools.lru_cache(maxsize=16)
def _empty_state(spec: ClusterSpec) -> ClusterState:
    # one empty state per cluster: placers only read it (first-fit's node hint stays valid on it)
    return ClusterState(spec)


def never_fits_message(spec: ClusterSpec, job: Job, mem_gb: float | None, need: Need | None = None) -> str:
    """Why a job can never start on `spec`, and the fix (the text of JobNeverFitsError)."""
    if need is not None and (need.cpu_milli or need.host_mem_gb):
        cpu = max((n.cpu_milli for n in spec.nodes if n.cpu_milli is not None), default=None)
        ram = max((n.host_mem_gb for n in spec.nodes if n.host_mem_gb is not None), default=None)
        if (cpu is not None and need.cpu_milli > cpu) or (ram is not None and need.host_mem_gb > ram):
            return (
                f"job {job.id!r} needs {need.cpu_milli:g} milli-CPU and {need.host_mem_gb:g} GB of host memory; "
                f"the largest node of cluster {spec.name!r} has {cpu if cpu is not None else 'unlimited'} "
                f"milli-CPU and {ram if ram is not None else 'unlimited'} GB: it can never start. Fix the "
                "job's cpu_milli/host_mem_gb or give the cluster larger nodes (cpu_milli, host_mem_gb in "
                "its TOML)"
            )
    mem_txt = "unknown memory" if mem_gb is None else f"{mem_gb:g} GB per GPU"
    span = "" if job.may_span_nodes else f" on one node (largest node: {spec.max_node_gpus} GPUs)"
    biggest = max(n.gpu.mem_gb for n in spec.nodes)
    fix = "Fix the job or use a larger --cluster"
    if not job.may_span_nodes and job.gpus <= spec.total_gpus and (mem_gb is None or mem_gb <= biggest):
        fix += ", or allow it to span nodes (may_span_nodes)"
    return (
        f"job {job.id!r} asks for {job.gpus} GPU(s) with {mem_txt}{span}; cluster {spec.name!r} has "
        f"{spec.total_gpus} GPUs of at most {biggest:g} GB: it can never start. {fix}"
    )

"""A job's start-up and init phases (`Job.startup_s`, `Job.init_s`) measured from its own GPU samples.

Where a job ran under a sampler (gpuplan's agent samples each job's processes on each GPU), its phases
show in the samples: during start-up (process start, imports) the job holds no GPU memory; once it
creates its CUDA context and builds its model it holds memory but keeps the GPU (nearly) idle; its GPU
phase begins at the first sample where it is busy. The figures are as fine as the sampling interval.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["BUSY_PCT", "JobSample", "Phases", "phases_from_samples"]

BUSY_PCT = 5.0  # a sample at or above this busy % is GPU work (below it: context creation, allocations)


@dataclass(frozen=True, slots=True)
class JobSample:
    """One sample of one job on one GPU: when, the memory its processes held, their busy % (None: unknown)."""

    t_s: float
    mem_gb: float | None
    util_pct: float | None


@dataclass(frozen=True, slots=True)
class Phases:
    """Seconds from the job's start to its first GPU memory (start-up), then to its first busy sample (init).

    Either is None when the samples cannot tell: no sample with memory (start-up), or no busy % reported
    or never busy (init).
    """

    startup_s: float | None
    init_s: float | None


def phases_from_samples(start_s: float, samples: Iterable[JobSample], busy_pct: float = BUSY_PCT) -> Phases:
    """The job's start-up and init from its samples (any order; several GPUs may share a time).

    Args:
        start_s: when the job's process started (same clock as the samples).
        samples: the job's samples; those before `start_s` are ignored.
        busy_pct: the busy % at which a sample counts as GPU work.
    """
    ordered = sorted((s for s in samples if s.t_s >= start_s), key=lambda s: s.t_s)
    first_mem = next((s.t_s for s in ordered if s.mem_gb is not None and s.mem_gb > 0.0), None)
    first_busy = next((s.t_s for s in ordered if s.util_pct is not None and s.util_pct >= busy_pct), None)
    if first_mem is None:
        # never seen holding memory: start-up unknown; busy without memory means the memory was not reported
        return Phases(None, None)
    startup_s = first_mem - start_s
    if first_busy is None:
        return Phases(startup_s, None)
    if first_busy < first_mem:  # busy before its memory showed: the sampler saw both late; no init measured
        return Phases(first_busy - start_s, 0.0)
    return Phases(startup_s, first_busy - first_mem)

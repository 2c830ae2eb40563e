"""Figures of one simulated run, computed from its job records and its utilization timeline."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuplan.sim.fairness import BSLD_BOUND_S
from gpuplan.sim.result import JobRecord, Metrics

__all__ = ["BSLD_BOUND_S", "compute_metrics", "occupied_gpu_seconds"]


def occupied_gpu_seconds(timeline: Sequence[tuple[float, int]], until_s: float) -> float:
    """Integral of occupied GPUs over [0, until_s] for a step function [(time_s, gpus from then on)]."""
    total = 0.0
    steps = iter(timeline)
    prev = next(steps, None)
    if prev is None:
        return total
    for step in steps:  # no shifted copy: a million-job pass has millions of steps
        total += prev[1] * (min(step[0], until_s) - prev[0])
        prev = step
    return total + prev[1] * (until_s - prev[0])


def compute_metrics(
    records: Sequence[JobRecord],
    timeline: Sequence[tuple[float, int]],
    total_gpus: int,
    idle_wait_gpu_s: float,
    lower_bound_s: float,
) -> Metrics:
    """Metrics of a run; times are seconds from the first submit (which is time 0)."""
    submit = np.fromiter((r.submit_s for r in records), float, len(records))
    start = np.fromiter((r.start_s for r in records), float, len(records))
    end = np.fromiter((r.end_s for r in records), float, len(records))
    makespan = float(end.max()) if len(records) else 0.0
    jct, wait, run = end - submit, start - submit, end - start
    bsld = np.maximum(jct / np.maximum(run, BSLD_BOUND_S), 1.0)
    busy_s = occupied_gpu_seconds(timeline, makespan)
    util = busy_s / (total_gpus * makespan) if makespan > 0 else 0.0
    return Metrics(
        jobs=len(records),
        makespan_s=makespan,
        utilization=util,
        mean_jct_s=float(jct.mean()),
        p50_jct_s=float(np.percentile(jct, 50)),
        p95_jct_s=float(np.percentile(jct, 95)),
        mean_wait_s=float(wait.mean()),
        p50_wait_s=float(np.percentile(wait, 50)),
        p95_wait_s=float(np.percentile(wait, 95)),
        mean_bounded_slowdown=float(bsld.mean()),
        idle_gpu_hours_while_waiting=idle_wait_gpu_s / 3600.0,
        lower_bound_s=lower_bound_s,
        bound_ratio=makespan / lower_bound_s if lower_bound_s > 0 else 1.0,
        gpu_hours=busy_s / 3600.0,
    )

"""Figures of one simulated run, computed from its job records and its utilization timeline."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

import numpy as np

from gpuplan.sim.columns import RecordColumns
from gpuplan.sim.fairness import BSLD_BOUND_S
from gpuplan.sim.result import JobRecord, Metrics, Timeline

__all__ = ["BSLD_BOUND_S", "compute_metrics", "occupied_gpu_seconds"]

_TIMES = (attrgetter("submit_s"), attrgetter("start_s"), attrgetter("end_s"))


def occupied_gpu_seconds(timeline: Sequence[tuple[float, int]], until_s: float) -> float:
    """Integral of occupied GPUs over [0, until_s] for a step function [(time_s, gpus from then on)].

    By columns, with a plain loop's float operations: each step's term, summed one after the other
    (`np.cumsum`, not the pairwise `np.sum`), so the result is the loop's to the last bit."""
    if len(timeline) == 0:
        return 0.0
    if isinstance(timeline, Timeline):  # its arrays, without a copy
        times = np.frombuffer(timeline.times_s, dtype=np.float64)
        busy = np.frombuffer(timeline.busy, dtype=np.int64)
    else:
        times = np.array([t for t, _ in timeline], dtype=np.float64)
        busy = np.array([b for _, b in timeline], dtype=np.int64)
    terms = np.empty(len(times))
    terms[:-1] = busy[:-1] * (np.minimum(times[1:], until_s) - times[:-1])
    terms[-1] = busy[-1] * (until_s - times[-1])
    return 0.0 + float(np.cumsum(terms)[-1])


def compute_metrics(
    records: Sequence[JobRecord] | RecordColumns,
    timeline: Sequence[tuple[float, int]],
    total_gpus: int,
    idle_wait_gpu_s: float,
    lower_bound_s: float,
) -> Metrics:
    """Metrics of a run; times are seconds from the first submit (which is time 0). `records`: the
    run's records, or their columns (sim/columns.py: what the simulator passes, taken once)."""
    if isinstance(records, RecordColumns):
        submit, start, end = records.submit_s, records.start_s, records.end_s
    else:
        submit, start, end = (np.fromiter(map(get, records), float, len(records)) for get in _TIMES)
    makespan = float(end.max()) if len(records) else 0.0
    # three new columns beside the three read (a million-job pass peaks here, with every record
    # alive): the bounded slowdowns in the run times' array, as they are computed
    jct = end - submit
    wait = start - submit
    bsld = np.subtract(end, start)
    np.maximum(bsld, BSLD_BOUND_S, out=bsld)
    np.divide(jct, bsld, out=bsld)
    np.maximum(bsld, 1.0, out=bsld)
    del submit, start, end
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

"""Fragmentation over a simulated run: FGD's measure (core/fragmentation.py) after every start and end.

The run's placements are replayed onto an empty ClusterState in time order (ends before starts at
the same instant); after each event only the nodes it touched are evaluated again (a node state met
before is looked up). The workload that weighs the measure is the run's own jobs. `simulate` reports
the time-weighted mean, the value at the run's peak of busy GPUs and the maximum, in GPUs, and the
report plots the series.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuplan.core.fragmentation import NodeKey, Workload, node_key
from gpuplan.core.state import ClusterState, need_of
from gpuplan.model import Job
from gpuplan.sim.result import SimResult

__all__ = ["MAX_RECORDS", "FragSeries", "attach_fragmentation", "fragmentation_series"]

MAX_RECORDS = 200_000
"""Runs with more jobs are not replayed (the figures would cost more than the simulation)."""


@dataclass(slots=True)
class FragSeries:
    """Cluster fragmentation (GPUs) from each time on, and its summary figures."""

    times_s: list[float]
    frag_gpus: list[float]
    mean_gpus: float
    at_peak_gpus: float
    max_gpus: float

    def as_dict(self) -> dict[str, float]:
        return {
            "fragmentation_mean_gpus": round(self.mean_gpus, 3),
            "fragmentation_at_peak_gpus": round(self.at_peak_gpus, 3),
            "fragmentation_max_gpus": round(self.max_gpus, 3),
        }


def fragmentation_series(result: SimResult, jobs: Sequence[Job]) -> FragSeries | None:
    """The run's fragmentation over time, or None for a run without jobs or beyond MAX_RECORDS."""
    records = result.records
    if not records or len(records) > MAX_RECORDS:
        return None
    by_id = {j.id: j for j in jobs}
    spec = result.cluster
    host, sharing = spec.has_host_resources, spec.sharing
    workload = Workload.from_jobs(by_id[r.job_id] for r in records if r.job_id in by_id)
    state = ClusterState(spec)
    memo: dict[NodeKey, float] = {}

    def node_frag(n: int) -> float:
        key = node_key(state, n)
        value = memo.get(key)
        if value is None:
            value = memo[key] = workload.node_fragmentation(key)
        return value

    per_node = [node_frag(n) for n in range(len(state.node_gpus))]
    total = sum(per_node)
    events = sorted(
        [(r.end_s, 0, i) for i, r in enumerate(records)] + [(r.start_s, 1, i) for i, r in enumerate(records)]
    )
    times: list[float] = []
    values: list[float] = []
    busy: list[int] = []
    for t, starts, i in events:
        rec = records[i]
        job = by_id.get(rec.job_id)
        need = need_of(job, host, sharing) if job is not None else None
        if starts:
            state.place(rec.gpus, rec.mem_gb, need)
        else:
            state.release(rec.gpus, rec.mem_gb, need)
        for n in {state.gpu_node[g] for g in rec.gpus}:
            new = node_frag(n)
            total += new - per_node[n]
            per_node[n] = new
        if times and times[-1] == t:
            values[-1], busy[-1] = max(total, 0.0), state.busy_gpus
        else:
            times.append(t)
            values.append(max(total, 0.0))
            busy.append(state.busy_gpus)
    span = times[-1] - times[0]
    if span > 0:
        mean = sum(v * (b - a) for v, a, b in zip(values, times, times[1:], strict=False)) / span
    else:
        mean = values[0]
    peak = max(range(len(busy)), key=lambda k: (busy[k], -k))
    return FragSeries(times, values, mean, values[peak], max(values))


def attach_fragmentation(results: Sequence[SimResult], jobs: Sequence[Job]) -> None:
    """Set each run's `fragmentation` (runs beyond MAX_RECORDS keep None)."""
    for r in results:
        r.fragmentation = fragmentation_series(r, jobs)

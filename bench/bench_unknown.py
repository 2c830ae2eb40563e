"""Issue #13: scheduling when durations are unknown, on traces stripped of every estimate, user and name.

Workloads:
  alibaba: the Alibaba v2023 pods that ran (../shared/data), on an exclusive cluster sized to ~85 %
    offered load (GPU-time of all pods / (GPUs x the span of their submits));
  heavy-tail: `synth poisson` with Pareto(1.5) durations at load 0.85 on 4 x 8 GPUs.
Each job keeps only its id, submit time, GPU count and true duration (what the simulator replays).
Runs: fifo+none, fifo+easy, gpu-time+easy and sjf+easy with estimates learned online
(`--estimates history`), las, tiresias, gittins (preemptive, default cost model), and the oracle
gpu-time+easy (true durations). The floors: the best run that never sees the truth has mean JCT
<= 0.5 x fifo+none and <= 1.15 x the oracle gpu-time+easy.
"""

from __future__ import annotations

import time
from pathlib import Path

from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec

__all__ = ["RUNS", "alibaba_stripped", "bench_unknown", "compare", "heavy_tail_stripped"]

RUNS: tuple[tuple[str, str, str], ...] = (  # (policy, backfill, estimates: trace | history | oracle)
    ("fifo", "none", "trace"),
    ("fifo", "easy", "trace"),
    ("gpu-time", "easy", "history"),
    ("sjf", "easy", "history"),
    ("las", "none", "trace"),
    ("tiresias", "none", "trace"),
    ("gittins", "none", "trace"),
    ("gpu-time", "easy", "oracle"),
)
_GPU = GpuSpec("A100-80GB", 80.0)


def _strip(jobs: list[Job]) -> list[Job]:
    return [Job(j.id, j.submit_s, j.gpus, duration_s=j.duration_s) for j in jobs if j.duration_s is not None]


def alibaba_stripped(path: Path, load: float = 0.85) -> tuple[list[Job], ClusterSpec, float]:
    """The pods that ran, stripped, and an exclusive cluster of 8-GPU nodes (plus one smaller node)
    whose GPU count is the nearest to the given offered load; returns the load it gives."""
    from gpuplan.traces import read_trace

    jobs = _strip(read_trace(path).jobs)
    area = sum(j.gpus * (j.duration_s or 0.0) for j in jobs)
    span = max(j.submit_s for j in jobs) - min(j.submit_s for j in jobs)
    gpus = max(round(area / span / load), max(j.gpus for j in jobs))
    sizes = [8] * (gpus // 8) + ([gpus % 8] if gpus % 8 else [])
    spec = ClusterSpec(
        f"alibaba-exclusive-{gpus}", tuple(NodeSpec(f"n{i + 1}", g, _GPU) for i, g in enumerate(sizes))
    )
    return jobs, spec, area / span / gpus


def heavy_tail_stripped(n_jobs: int = 5000, load: float = 0.85) -> tuple[list[Job], ClusterSpec, float]:
    from gpuplan.cluster import load_cluster
    from gpuplan.synth import synth_poisson

    spec = load_cluster("4x8xA100-80GB")
    return (
        _strip(synth_poisson(n_jobs, seed=0, load=load, total_gpus=spec.total_gpus, tail_alpha=1.5)),
        spec,
        load,
    )


def compare(workload: str, jobs: list[Job], spec: ClusterSpec, load: float) -> dict[str, object]:
    """Every run of RUNS on one workload, and whether the floors hold."""
    from gpuplan.core.estimates import OnlineEstimator
    from gpuplan.sim.engine import simulate

    rows = []
    for policy, backfill, source in RUNS:
        t0 = time.perf_counter()
        est = OnlineEstimator() if source == "history" else None
        r = simulate(jobs, spec, policy, backfill, oracle=source == "oracle", estimator=est)
        m = r.metrics
        rows.append({"run": r.label + (" (history)" if est else ""), "mean_jct_h": round(m.mean_jct_s / 3600, 3),
                     "p95_jct_h": round(m.p95_jct_s / 3600, 2), "makespan_h": round(m.makespan_s / 3600, 1),
                     "utilization": round(m.utilization, 3), "preemptions": m.preemptions,
                     "wasted_gpu_h": round(m.wasted_gpu_hours, 1), "no_estimate": r.estimates.without,
                     "sees_truth": r.uses_true_durations, "wall_s": round(time.perf_counter() - t0, 2)})  # fmt: skip
    fifo = next(x["mean_jct_h"] for x in rows if x["run"] == "fifo+none")
    oracle = next(x["mean_jct_h"] for x in rows if x["sees_truth"])
    best = min((x for x in rows if not x["sees_truth"]), key=lambda x: x["mean_jct_h"])  # type: ignore[arg-type, return-value]
    return {
        "case": f"unknown-durations-{workload}",
        "jobs": len(jobs),
        "cluster": spec.describe(),
        "offered_load": round(load, 3),
        "runs": rows,
        "best_blind": best["run"],
        "best_vs_fifo_none": round(best["mean_jct_h"] / fifo, 3),  # type: ignore[operator]
        "best_vs_oracle_gputime_easy": round(best["mean_jct_h"] / oracle, 3),  # type: ignore[operator]
        "floors": {"vs_fifo_none": 0.5, "vs_oracle": 1.15},
        "within_floors": best["mean_jct_h"] <= 0.5 * fifo and best["mean_jct_h"] <= 1.15 * oracle,  # type: ignore[operator]
    }


def bench_unknown(alibaba: Path) -> list[dict[str, object]]:
    out = []
    if alibaba.is_file():
        out.append(compare("alibaba", *alibaba_stripped(alibaba)))
    else:
        out.append({"case": "unknown-durations-alibaba", "skipped": f"{alibaba} absent (../shared/data)"})
    out.append(compare("heavy-tail", *heavy_tail_stripped()))
    return out

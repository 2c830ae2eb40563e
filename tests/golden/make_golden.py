"""Freeze today's schedules: 200 random small traces x every backfill x every policy x sampled placers.

Run by hand, never by the suite (tests/test_golden_schedules.py re-simulates and compares exactly):

    .venv/bin/python tests/golden/make_golden.py            # writes tests/golden/schedules.json.gz

The traces are seeded (the same file every time): mixed GPU counts and memory, durations that tie
and that do not, estimates exact, off or missing, time limits, exclusive and sharing clusters, a few
heterogeneous clusters (nodes of different GPU memory) and spanning jobs. Each run keeps, per job in
the result's order, (job id, start_s, end_s, GPU labels), plus the preemption count. Regenerate only
when a change of schedules is intended, and say so in the commit.
"""

from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path
from typing import Any

from gpuplan.core.booking import fits_empty_cluster
from gpuplan.core.placement import get_placer
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.engine import simulate

OUT = Path(__file__).with_name("schedules.json.gz")
TRACES = 200
SEED = 20261202
BACKFILLS = ("none", "easy", "conservative")
POLICIES = (
    "fifo",
    "sjf",
    "ljf",
    "small-gpus-first",
    "large-gpus-first",
    "mem-desc",
    "gpu-time",
    "article",
)
PREEMPTIVE = ("las", "tiresias", "gittins")
PLACERS = ("first-fit", "best-fit", "spread")
GPU_MODELS = (GpuSpec("L40S-48GB", 48.0), GpuSpec("A100-80GB", 80.0), GpuSpec("H200-141GB", 141.0))


def make_cluster(rng: random.Random, k: int) -> ClusterSpec:
    """Exclusive or sharing; every 10th trace a heterogeneous one (nodes of different GPU memory)."""
    nodes_n = rng.choice([1, 1, 2, 2, 3, 4])
    hetero = k % 10 == 3 or k % 10 == 7
    gpu = rng.choice(GPU_MODELS)
    nodes = []
    for n in range(nodes_n):
        model = rng.choice(GPU_MODELS) if hetero else gpu
        nodes.append(NodeSpec(f"n{n}", rng.choice([1, 2, 4, 4, 8]), model))
    if hetero and len({n.gpu for n in nodes}) == 1:
        nodes.append(NodeSpec(f"n{nodes_n}", 2, next(g for g in GPU_MODELS if g != gpu)))
    sharing = rng.random() < 0.35
    return ClusterSpec(f"golden{k}", tuple(nodes), sharing=sharing, max_jobs_per_gpu=rng.choice([2, 3, 4]))


def make_job(rng: random.Random, i: int, cluster: ClusterSpec, clock: float) -> Job:
    big = max(n.gpus for n in cluster.nodes)
    gpus = rng.choice([1, 1, 1, 2, 2, 4, big, rng.randint(1, big)])
    duration = rng.choice(
        [10.0, 50.0, 100.0, 100.0, 300.0, float(rng.randint(1, 2000)), rng.uniform(1, 5000)]
    )
    r = rng.random()
    if r < 0.3:
        est = duration
    elif r < 0.6:
        est = duration * rng.choice([0.5, 0.8, 1.5, 3.0])
    elif r < 0.8:
        est = None
    else:
        est = float(rng.randint(1, 3000))
    requested = rng.choice([None, None, duration * 2, 3600.0])
    sharing = cluster.sharing
    mem = rng.choice([None, 5.0, 10.0, 20.0, 40.0, 45.0, 70.0]) if (sharing or rng.random() < 0.5) else None
    return Job(
        id=f"j{i}",
        submit_s=clock,
        gpus=gpus,
        mem_gb=mem,
        duration_s=duration,
        est_duration_s=est,
        est_mem_gb=rng.choice([None, None, 8.0, 30.0]) if sharing else None,
        requested_s=requested,
        user=rng.choice(["", "alice", "bob"]),
        gpu_util_pct=rng.choice([None, 20.0, 60.0, 100.0]) if sharing else None,
        may_span_nodes=len(cluster.nodes) > 1 and rng.random() < 0.15,
        duration_includes_sharing=sharing and rng.random() < 0.3,
        startup_s=rng.choice([None, 0.0, 5.0]) if sharing else None,
        init_s=rng.choice([None, 10.0, 30.0]) if sharing else None,
    )


def make_trace(k: int) -> tuple[ClusterSpec, list[Job]]:
    rng = random.Random(SEED * 1000 + k)
    cluster = make_cluster(rng, k)
    n = rng.randint(6, 28)
    clock, jobs = 0.0, []
    for i in range(n):
        clock += rng.choice([0.0, 0.0, 10.0, 50.0, rng.uniform(0, 400)])
        job = make_job(rng, i, cluster, clock)
        mem = job.est_mem_gb if job.est_mem_gb is not None else job.mem_gb
        mem = None if mem is None else max(mem, job.mem_gb or 0.0)
        if all(
            fits_empty_cluster(cluster, get_placer(p), job.gpus, mem, job.may_span_nodes) for p in PLACERS
        ):
            jobs.append(job)
    if not jobs:
        jobs = [Job("j0", 0.0, 1, duration_s=10.0, est_duration_s=10.0)]
    return cluster, jobs


def placers_for(k: int) -> tuple[str, ...]:
    """Each trace runs two of the three placers (all three on every 5th trace)."""
    if k % 5 == 0:
        return PLACERS
    return (PLACERS[k % 3], PLACERS[(k + 1) % 3])


def oracle_for(k: int) -> bool:
    return k % 8 == 5


def runs_for(k: int, cluster: ClusterSpec) -> list[tuple[str, str, str]]:
    policies = POLICIES if cluster.sharing else POLICIES + PREEMPTIVE
    return [(p, b, pl) for p in policies for b in BACKFILLS for pl in placers_for(k)]


def schedule_of(
    cluster: ClusterSpec, jobs: list[Job], policy: str, backfill: str, placer: str, oracle: bool
) -> list[Any]:
    """What the golden set keeps of one run: [[id, start_s, end_s, [labels...]], ...], preemptions."""
    res = simulate(jobs, cluster, policy, backfill, placer, oracle=oracle)
    labels = res.gpu_labels
    recs = [[r.job_id, r.start_s, r.end_s, [labels[g] for g in r.gpus]] for r in res.records]
    return [recs, res.metrics.preemptions]


def trace_to_json(cluster: ClusterSpec, jobs: list[Job]) -> dict[str, Any]:
    return {
        "cluster": {
            "name": cluster.name,
            "sharing": cluster.sharing,
            "max_jobs_per_gpu": cluster.max_jobs_per_gpu,
            "nodes": [[n.name, n.gpus, n.gpu.model, n.gpu.mem_gb] for n in cluster.nodes],
        },
        "jobs": [{k: getattr(j, k) for k in JOB_FIELDS if _kept(getattr(j, k))} for j in jobs],
    }


def _kept(value: Any) -> bool:
    """A field worth storing: not its default (0.0 is kept: `0.0 == False` in Python)."""
    return value is not None and value is not False and value != ""


JOB_FIELDS = (
    "id",
    "submit_s",
    "gpus",
    "mem_gb",
    "duration_s",
    "est_duration_s",
    "est_mem_gb",
    "requested_s",
    "user",
    "gpu_util_pct",
    "may_span_nodes",
    "duration_includes_sharing",
    "startup_s",
    "init_s",
)


def trace_from_json(d: dict[str, Any]) -> tuple[ClusterSpec, list[Job]]:
    c = d["cluster"]
    nodes = tuple(NodeSpec(name, g, GpuSpec(model, mem)) for name, g, model, mem in c["nodes"])
    cluster = ClusterSpec(c["name"], nodes, sharing=c["sharing"], max_jobs_per_gpu=c["max_jobs_per_gpu"])
    return cluster, [Job(**j) for j in d["jobs"]]


def main() -> int:
    traces = []
    for k in range(TRACES):
        cluster, jobs = make_trace(k)
        oracle = oracle_for(k)
        runs = {
            f"{p}|{b}|{pl}": schedule_of(cluster, jobs, p, b, pl, oracle) for p, b, pl in runs_for(k, cluster)
        }
        traces.append({"trace": trace_to_json(cluster, jobs), "oracle": oracle, "runs": runs})
    data = json.dumps({"seed": SEED, "traces": traces}, separators=(",", ":")).encode()
    OUT.write_bytes(gzip.compress(data, 9, mtime=0))
    n_runs = sum(len(t["runs"]) for t in traces)
    print(f"{OUT}: {len(traces)} traces, {n_runs} runs, {OUT.stat().st_size / 1e6:.2f} MB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

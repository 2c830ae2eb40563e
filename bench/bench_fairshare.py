"""What fair-share costs the simulator: the same jobs under fifo+easy and fairshare+easy, in one
process (CPU seconds, so the ratio holds on a loaded machine), and what it does for the users.

Users: 200, drawn Zipf-like (user k submits ~1/(k+1) of the jobs), so a few users flood the queue.
Every fairshare pass re-ranks the users with waiting jobs (O(R + U log U)); the jobs are never re-keyed.
"""

from __future__ import annotations

import random
import time
from dataclasses import replace
from typing import Any


def with_users(jobs: list[Any], n_users: int, seed: int = 7) -> list[Any]:
    rng = random.Random(seed)
    weights = [1.0 / (k + 1) for k in range(n_users)]
    names = [f"user{k:03d}" for k in range(n_users)]
    return [replace(j, user=rng.choices(names, weights)[0]) for j in jobs]


def bench_fairshare(n_jobs: int = 100_000, n_users: int = 200) -> dict[str, object]:
    from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec
    from gpuplan.sim.engine import simulate
    from gpuplan.sim.fairness import jain_index
    from gpuplan.synth import synth_poisson

    gpu = GpuSpec("A100-80GB", 80.0)
    cluster = ClusterSpec("128x8xA100-80GB", tuple(NodeSpec(f"node{i + 1}", 8, gpu) for i in range(128)))
    jobs = with_users(synth_poisson(n_jobs, seed=1, load=1.0, total_gpus=cluster.total_gpus), n_users)
    out: dict[str, object] = {"case": "sim-100k-fairshare", "jobs": len(jobs), "users": n_users}
    cpu: dict[str, float] = {}
    for policy in ("fifo", "fairshare"):
        t0 = time.process_time()
        result = simulate(jobs, cluster, policy, "easy")
        cpu[policy] = time.process_time() - t0
        users = result.user_figures()
        light = [u for u in users if u["jobs"] <= 200]
        out[f"{policy}_cpu_s"] = round(cpu[policy], 3)
        out[f"{policy}_mean_wait_s"] = round(result.metrics.mean_wait_s, 1)
        out[f"{policy}_light_users_mean_wait_s"] = round(
            sum(u["mean_wait_s"] for u in light) / max(len(light), 1), 1
        )
        out[f"{policy}_jain"] = round(jain_index([u["mean_bounded_slowdown"] for u in users]) or 0.0, 4)
    out["cpu_ratio"] = round(cpu["fairshare"] / cpu["fifo"], 3)
    return out

"""Forecast benchmarks (issue #21): the core's forecast (core/forecast.py) of 10,000 waiting jobs on 64
GPUs (8 nodes x 8 A100) under fifo + EASY and under las (floor: <= 200 ms each). `gpuplan queue` with
2,000 waiting jobs on a real agent is bench/bench_agent.py's `bench_queue`.

The forecast's figure is CPU time of the call (the live scheduler forked, then every pass run forward
until every job started; las: until every job ended); wall time beside it. Measured on a shared,
loaded machine: compare runs in one session, not across machines.
"""

from __future__ import annotations

import random
import time
from typing import Any


def _scheduler(policy: str, waiting: int, seed: int = 1) -> Any:
    from gpuplan.core.scheduler import Scheduler
    from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec

    spec = ClusterSpec(
        "8x8xA100-80GB", tuple(NodeSpec(f"n{i}", 8, GpuSpec("A100-80GB", 80.0)) for i in range(8))
    )
    rng = random.Random(seed)
    s = Scheduler(spec, policy, "easy", "first-fit")
    for k in range(16):  # the cluster full: 16 running 4-GPU jobs with 10 s to 8 min left
        s.adopt(
            100_000 + k,
            Job(f"r{k}", 0.0, 4, requested_s=rng.randint(10, 500)),
            tuple(range(4 * k, 4 * k + 4)),
            0.0,
        )
    for i in range(waiting):
        job = Job(str(i), float(i), rng.choice([1, 1, 2, 4, 8]), requested_s=float(rng.randint(10, 3600)))
        s.submit(i, job, now=float(i))
    return s


def bench_forecast(waiting: int = 10_000) -> list[dict[str, object]]:
    from bench_scale import core_build
    from gpuplan.core.forecast import forecast

    out = []
    for policy in ("fifo", "las"):
        s = _scheduler(policy, waiting)
        t0, c0 = time.perf_counter(), time.process_time()
        fc = forecast(s, float(waiting))
        cpu_ms, wall_ms = (time.process_time() - c0) * 1000, (time.perf_counter() - t0) * 1000
        out.append({
            "case": "forecast-10k", "policy": policy, "backfill": "easy", "waiting": waiting, "gpus": 64,
            "cpu_ms": round(cpu_ms, 1), "wall_ms": round(wall_ms, 1), "floor_ms": 200,
            "started": sum(1 for f in fc if f.start_s is not None and f.state == "waiting"),
            **core_build(),
        })  # fmt: skip
    return out

"""Forecast benchmarks (issue #21): the core's forecast (core/forecast.py) of 10,000 waiting jobs on 64
GPUs (8 nodes x 8 A100) under fifo + EASY and under las (floor: <= 200 ms each), and `gpuplan queue`
with 2,000 waiting jobs on a real agent (fake 8xA100), process start included (floor: <= 0.5 s).

The forecast's figure is CPU time of the call (the live scheduler forked, then every pass run forward
until every job started; las: until every job ended); wall time beside it. Measured on a shared,
loaded machine: compare runs in one session, not across machines.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
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
        })  # fmt: skip
    return out


def bench_queue(waiting: int = 2000, runs: int = 5) -> dict[str, object]:
    from gpuplan.agent.protocol import AgentNotRunningError, call

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        config = {"home": str(home), "gpus": "fake:8xA100-80GB", "sample_interval_s": 1.0}
        proc = subprocess.Popen([sys.executable, "-m", "gpuplan.agent.server", json.dumps(config)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        sock = home / "agent.sock"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    call(sock, {"op": "status"})
                    break
                except AgentNotRunningError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
            for _ in range(8):  # every GPU busy for 10 minutes
                call(
                    sock,
                    {"op": "submit", "command": "sleep 600", "cwd": tmp, "env": env, "time_limit_s": 600},
                )
            rng = random.Random(2)
            for _ in range(waiting):
                call(sock, {"op": "submit", "command": "true", "cwd": tmp, "env": env,
                            "gpus": rng.choice([1, 1, 2, 4, 8]), "time_limit_s": rng.randint(10, 3600)})  # fmt: skip
            cli_env = {**os.environ, "GPUPLAN_HOME": str(home)}
            walls = {}
            for args in (["queue"], ["queue", "--json"]):
                times = []
                for _ in range(runs):
                    t0 = time.perf_counter()
                    subprocess.run([sys.executable, "-m", "gpuplan.cli", *args], env=cli_env, check=True,
                                   stdout=subprocess.DEVNULL)  # fmt: skip
                    times.append(time.perf_counter() - t0)
                walls[" ".join(args)] = round(statistics.median(times), 3)
            reply = call(sock, {"op": "queue"})
            with_start = sum(
                1 for j in reply["jobs"] if j["state"] == "queued" and j["expected_start_s"] is not None
            )
            t0 = time.perf_counter()
            call(sock, {"op": "queue"})
            request_s = time.perf_counter() - t0
            call(sock, {"op": "stop", "kill_jobs": True})
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
    return {
        "case": "agent-queue-2000", "waiting": waiting, "queue_wall_s_median": walls["queue"],
        "queue_json_wall_s_median": walls["queue --json"], "queue_request_s": round(request_s, 3),
        "waiting_with_expected_start": with_start, "floor_s": 0.5,
    }  # fmt: skip

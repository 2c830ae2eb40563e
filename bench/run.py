"""Benchmarks, printed as JSON on stdout (`make bench`). Each case runs in its own process so its peak
memory (ru_maxrss) is its own.

Cases:
  sim-100k-fifo-easy, sim-100k-gputime-easy: 100,000 jobs, Poisson arrivals at offered load 0.9, on 128
    nodes x 8 A100-80GB (1,024 GPUs); issue #2 floor: each run <= 20 s on a 2-core machine, aim <= 5 s.
  demo-article: the article scenario under all 8 policies x 3 backfill modes (what `gpuplan demo` runs).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

CASES = {
    "sim-100k-fifo-easy": ("fifo", "easy"),
    "sim-100k-gputime-easy": ("gpu-time", "easy"),
}


def _cluster_128x8():  # type: ignore[no-untyped-def]
    from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec

    gpu = GpuSpec("A100-80GB", 80.0)
    return ClusterSpec("128x8xA100-80GB", tuple(NodeSpec(f"node{i + 1}", 8, gpu) for i in range(128)))


def run_case(name: str) -> dict[str, object]:
    from gpuplan.synth import synth_poisson

    if name == "demo-article":
        return _demo_case()
    from gpuplan.sim.engine import simulate

    policy, backfill = CASES[name]
    cluster = _cluster_128x8()
    t0 = time.perf_counter()
    jobs = synth_poisson(100_000, seed=1, load=0.9, total_gpus=cluster.total_gpus)
    gen_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = simulate(jobs, cluster, policy, backfill)
    sim_s = time.perf_counter() - t0
    m = result.metrics
    return {
        "case": name,
        "jobs": len(jobs),
        "gpus": cluster.total_gpus,
        "policy": policy,
        "backfill": backfill,
        "generate_s": round(gen_s, 3),
        "simulate_s": round(sim_s, 3),
        "jobs_per_s": round(len(jobs) / sim_s),
        "peak_rss_mb": _peak_rss_mb(),
        "floor_s": 20.0,
        "aim_s": 5.0,
        "within_floor": sim_s <= 20.0,
        "utilization": round(m.utilization, 4),
        "mean_wait_s": round(m.mean_wait_s, 1),
        "bound_ratio": round(m.bound_ratio, 4),
    }


def _demo_case() -> dict[str, object]:
    from gpuplan.cli import run_matrix
    from gpuplan.cluster import load_cluster
    from gpuplan.core.backfill import backfill_names
    from gpuplan.core.policies import policy_names
    from gpuplan.synth import synth_article

    jobs = synth_article(0)
    t0 = time.perf_counter()
    results = run_matrix(
        jobs, load_cluster("8xA100-80GB"), policy_names(), backfill_names(), show_progress=False
    )
    wall = time.perf_counter() - t0
    best = results[0]
    return {
        "case": "demo-article",
        "runs": len(results),
        "wall_s": round(wall, 3),
        "runs_per_s": round(len(results) / wall, 1),
        "best": best.label,
        "best_utilization": round(best.metrics.utilization, 4),
        "best_bound_ratio": round(best.metrics.bound_ratio, 4),
        "peak_rss_mb": _peak_rss_mb(),
    }


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--case":
        print(json.dumps(run_case(sys.argv[2])))
        return 0
    names = sys.argv[1:] or ["demo-article", *CASES]
    out = []
    for name in names:
        proc = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True)
        if proc.returncode != 0:
            out.append({"case": name, "error": proc.stderr.strip().splitlines()[-1:]})
            continue
        out.append(json.loads(proc.stdout))
    print(json.dumps(out, indent=2))
    return 1 if any("error" in o for o in out) else 0


if __name__ == "__main__":
    sys.exit(main())

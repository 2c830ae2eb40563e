"""Benchmarks, printed as JSON on stdout (`make bench`). Each case runs in its own process so its peak
memory (ru_maxrss) is its own.

Cases (`python bench/run.py [CASE ...]`; all by default):
  demo-article: the article scenario under all 8 policies x 3 backfill modes (what `gpuplan demo` runs).
  sim-100k-preemptive: the same 100,000 jobs under tiresias (preemptive) and fifo+easy in one process;
    issue #13 floor: the preemptive run within 2x the fifo+easy run.
  unknown-durations: issue #13's comparison on traces stripped of estimates, users and names (Alibaba
    pods at ~85 % load on an exclusive cluster, a heavy-tailed synth poisson); docs/preemption.md.
  sim-100k-fairshare: 100,000 Poisson jobs at offered load 1.0 with 200 Zipf-drawn users under fifo+easy and
    fairshare+easy in one process: CPU seconds and their ratio, mean waits of the light users, Jain.
  sim-100k-fifo-easy, sim-100k-gputime-easy: 100,000 jobs, Poisson arrivals at offered load 0.9, on 128
    nodes x 8 A100-80GB (1,024 GPUs); issue #2 floor: each run <= 20 s on a 2-core machine, aim <= 5 s.
  read-own-csv-1m, read-sacct-1m: reading a 1,000,000-row trace (own CSV; sacct -P with step rows);
    issue #3 floor <= 10 s each, aim >= 500,000 rows/s.
  audit-nasa, audit-alibaba: `gpuplan audit` on the real traces in ../shared/data (issue #3: <= 10 s).
  plan: `gpuplan plan` quality vs time on the article scenario and 500 jobs / 64 GPUs (issue #4; ~4 min).
  predict: fit / predict time of the predictors on 100,000 jobs (issue #5).
  agent-submit-latency, agent-pass-10k: the local agent's submit -> start latency on a free GPU and one
    scheduling pass with 10,000 queued jobs (issue #10: p95 <= 200 ms, pass <= 100 ms; aim p95 <= 50 ms).
  forecast-10k: the core's forecast of 10,000 waiting jobs on 64 GPUs, fifo+easy and las (issue #21:
    <= 200 ms each); agent-queue-2000: `gpuplan queue` (and --json, `show ID`) with 2,000 waiting jobs
    on a real agent, process start included: wall and the client's CPU (issue #21: <= 0.5 s).
  web-queue-10k, web-whatif-10k: the dashboard's queue API with 10,000 queued jobs, and a what-if on a
    10,000-job trace (issue #12; the browser's first render is printed by tests/web).
  web-slurm-queue-5k, web-slurm-queue-10k: `gpuplan serve --slurm`'s queue API with 5,000 and 10,000
    pending jobs (stand-in squeue output; every pending job planned, "best" chosen on the first 1,000).
  replay-alibaba, replay-nasa: the default replay (fifo+easy on the trace's own cluster) against the
    trace's own span (issue #15: within 5 % when no job waits).
  report-nasa-all: `gpuplan simulate NASA -p all -b all --out DIR`: report.html size and the command's
    peak memory (issue #15 floor: <= 25 MB and <= 600 MB).
  all-policy-alibaba: `gpuplan simulate openb_pod_list_default.csv -p all -b all --json`, wall time
    (issue #15 floor: <= 30 s).
  frag-alibaba: `gpuplan frag` on the Alibaba trace and cluster (10 seeds, every placer): wall time and
    each placer's CPU cost per placement (issue #24 floor: <= 60 s, best placer >= FGD's 95.39 %).
  conservative-sharing: fifo+conservative vs fifo+easy simulated on sharing clusters: the Alibaba pods
    on their own cluster (6,212 GPUs) and 800 synthetic jobs queueing on 16 x 8 shared A100s.
  conservative-exclusive-10k: the same comparison for 10,000 Poisson jobs on 128 x 8 exclusive A100s.
  slurm-plan-apply-1000: `gpuplan slurm plan` + `apply` for 1,000 pending jobs on a real Slurm started
    by the test harness (issue #11 floor <= 5 s, aim <= 2 s; needs root and Slurm's Debian packages).
  The first row, "machine", says where the figures come from (CPU model, cores, a fixed Python loop's
    time, the load): figures compare only between like machines.
  scale-1m-pass, scale-ratios, scale-conservative, scale-readers, scale-startup, scale-sweep: issue #25's figures
    (bench/bench_scale.py: the 1M-job pass, preemptive and conservative ratios to fifo+EASY, readers'
    rows/s, start-up, the 4-worker sweep's speed-up; docs/benchmarks.md).
  slurm-article: the article's experiment on that real Slurm for seeds 0-4 (fixed in advance): per seed
    Slurm's order and the order `gpuplan slurm apply --predict` sets, real vs simulated makespans and
    gains, and the mean (docs/slurm.md; ~13 min).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

CASES = {
    "sim-100k-fifo-easy": ("fifo", "easy"),
    "sim-100k-gputime-easy": ("gpu-time", "easy"),
}


def _cluster_128x8():  # type: ignore[no-untyped-def]
    from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec

    gpu = GpuSpec("A100-80GB", 80.0)
    return ClusterSpec("128x8xA100-80GB", tuple(NodeSpec(f"node{i + 1}", 8, gpu) for i in range(128)))


def run_case(name: str) -> object:
    from gpuplan.synth import synth_poisson

    if name == "demo-article":
        return _demo_case()
    if name in _OTHER:
        return _OTHER[name]()
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


def _read_own_csv_case() -> dict[str, object]:
    import tempfile

    from gpuplan.traces import read_trace

    rows = 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "own.csv"
        write_own_csv(path, rows)
        t0 = time.perf_counter()
        result = read_trace(path)
        took = time.perf_counter() - t0
        assert len(result.jobs) == rows
    return {"case": "read-own-csv-1m", "rows": rows, "seconds": round(took, 3),
            "rows_per_s": round(rows / took), "peak_rss_mb": _peak_rss_mb(), "floor_s": 10.0,
            "aim_rows_per_s": 500_000, "within_floor": took <= 10.0}  # fmt: skip


def write_own_csv(path: Path, rows: int) -> None:
    """A million-row trace in gpuplan's CSV, written directly (not through Job objects: fast)."""
    import numpy as np

    rng = np.random.default_rng(7)
    submit = np.cumsum(rng.exponential(3.0, rows))
    gpus = rng.choice([1, 2, 4, 8], rows, p=[0.6, 0.2, 0.1, 0.1])
    dur = np.round(rng.lognormal(7.5, 1.2, rows))
    mem = np.round(rng.uniform(4, 78, rows), 1)
    with path.open("w") as f:
        f.write("id,submit_s,gpus,mem_gb,duration_s,est_duration_s,requested_s,user,name\n")
        for i in range(rows):
            d = dur[i]
            f.write(
                f"j{i},{submit[i]:.3f},{gpus[i]},{mem[i]},{d},{d * 1.1:.1f},{d * 3:.0f},u{i % 97},train-{i % 13}\n"
            )


def _read_sacct_case() -> dict[str, object]:
    import tempfile

    from bench_traces import bench_sacct

    with tempfile.TemporaryDirectory() as tmp:
        return {"case": "read-sacct-1m", **bench_sacct(1_000_000, tmp), "floor_s": 10.0}


def _audit_case(name: str, path: Path) -> dict[str, object]:
    if not path.is_file():
        return {"case": name, "skipped": f"{path} absent (real traces live in ../shared/data)"}
    proc_t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gpuplan.cli", "audit", str(path), "--json"],
                          capture_output=True, text=True)  # fmt: skip
    took = time.perf_counter() - proc_t0
    if proc.returncode != 0:
        return {"case": name, "error": proc.stderr.strip().splitlines()[-1:]}
    data = json.loads(proc.stdout)
    return {"case": name, "jobs": data.get("jobs"), "wall_s": round(took, 2), "floor_s": 10.0,
            "within_floor": took <= 10.0}  # fmt: skip


def _replay_case(name: str, path: Path) -> dict[str, object]:
    if not path.is_file():
        return {"case": name, "skipped": f"{path} absent (real traces live in ../shared/data)"}
    from gpuplan.sim.engine import simulate
    from gpuplan.traces import read_trace

    trace = read_trace(path)
    ran = [j for j in trace.jobs if j.duration_s is not None]
    ends = [j.meta.get("end_s", j.meta.get("start_s", j.submit_s) + (j.duration_s or 0.0)) for j in ran]
    own_s = max(ends) - min(j.submit_s for j in ran)
    assert trace.cluster is not None
    t0 = time.perf_counter()
    m = simulate(ran, trace.cluster, "fifo", "easy").metrics
    took = time.perf_counter() - t0
    off = m.makespan_s / own_s - 1
    return {"case": name, "jobs": len(ran), "replay_span_h": round(m.makespan_s / 3600, 2),
            "trace_span_h": round(own_s / 3600, 2), "off_pct": round(100 * off, 2),
            "mean_wait_s": round(m.mean_wait_s, 1), "simulate_s": round(took, 2),
            "within_floor": abs(off) <= 0.05}  # fmt: skip


def _cli_child(args: list[str]) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run `gpuplan ARGS` in a child; (process, wall seconds, the child's peak memory in MB)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gpuplan.cli", *args], capture_output=True, text=True)
    took = time.perf_counter() - t0
    return proc, took, round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)


def _report_nasa_case() -> dict[str, object]:
    import tempfile

    path = _SHARED / "pwa-nasa-ipsc-1993" / "NASA-iPSC-1993-3.1-cln.swf"
    if not path.is_file():
        return {"case": "report-nasa-all", "skipped": f"{path} absent"}
    with tempfile.TemporaryDirectory() as tmp:
        proc, took, peak = _cli_child(["simulate", str(path), "-p", "all", "-b", "all", "--out", tmp])
        if proc.returncode != 0:
            return {"case": "report-nasa-all", "error": proc.stderr.strip().splitlines()[-1:]}
        size_mb = round((Path(tmp) / "report.html").stat().st_size / 1e6, 2)
    return {"case": "report-nasa-all", "runs": 24, "wall_s": round(took, 1), "report_mb": size_mb,
            "peak_rss_mb": peak, "floor_report_mb": 25, "floor_rss_mb": 600,
            "within_floor": size_mb <= 25 and peak <= 600}  # fmt: skip


def _all_policy_alibaba_case() -> dict[str, object]:
    path = _SHARED / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"
    if not path.is_file():
        return {"case": "all-policy-alibaba", "skipped": f"{path} absent"}
    proc, took, peak = _cli_child(["simulate", str(path), "-p", "all", "-b", "all", "--json"])
    if proc.returncode != 0:
        return {"case": "all-policy-alibaba", "error": proc.stderr.strip().splitlines()[-1:]}
    runs = json.loads(proc.stdout)
    return {"case": "all-policy-alibaba", "runs": len(runs), "wall_s": round(took, 1), "peak_rss_mb": peak,
            "no_winner": runs[0].get("no_winner"), "floor_s": 30.0, "within_floor": took <= 30.0}  # fmt: skip


def _predict_case() -> list[dict[str, object]]:
    from bench_predict import bench_predict

    return bench_predict()


def _agent_latency_case() -> dict[str, object]:
    from bench_agent import bench_latency

    return bench_latency()


def _agent_pass_case() -> list[dict[str, object]]:
    from bench_agent import bench_pass

    return [bench_pass(policy="sjf", backfill="easy"), bench_pass(policy="fifo", backfill="conservative")]


def _forecast_case() -> list[dict[str, object]]:
    from bench_forecast import bench_forecast

    return bench_forecast()


def _agent_queue_case() -> dict[str, object]:
    from bench_agent import bench_queue

    return bench_queue()


def _web_queue_case() -> dict[str, object]:
    from bench_web import bench_queue

    return bench_queue()


def _web_whatif_case() -> dict[str, object]:
    from bench_web import bench_whatif

    return bench_whatif()


def _web_slurm_queue_case(n: int) -> dict[str, object]:
    from bench_web import bench_slurm_queue

    return bench_slurm_queue(n)


def _plan_case() -> list[dict[str, object]]:
    from bench_plan import bench_plan

    return bench_plan()


def _slurm_case() -> dict[str, object]:
    from bench_slurm import bench_slurm

    return bench_slurm()


def _slurm_article_case() -> dict[str, object]:
    from bench_slurm_article import bench_slurm_article

    return bench_slurm_article()


_SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces"
_OTHER = {
    "read-own-csv-1m": _read_own_csv_case,
    "read-sacct-1m": _read_sacct_case,
    "audit-nasa": lambda: _audit_case(
        "audit-nasa", _SHARED / "pwa-nasa-ipsc-1993" / "NASA-iPSC-1993-3.1-cln.swf"
    ),
    "audit-alibaba": lambda: _audit_case(
        "audit-alibaba", _SHARED / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"
    ),
    "plan": _plan_case,
    "predict": _predict_case,
    "agent-submit-latency": _agent_latency_case,
    "agent-pass-10k": _agent_pass_case,
    "forecast-10k": _forecast_case,
    "agent-queue-2000": _agent_queue_case,
    "web-queue-10k": _web_queue_case,
    "web-whatif-10k": _web_whatif_case,
    "web-slurm-queue-5k": lambda: _web_slurm_queue_case(5_000),
    "web-slurm-queue-10k": lambda: _web_slurm_queue_case(10_000),
    "replay-alibaba": lambda: _replay_case(
        "replay-alibaba", _SHARED / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"
    ),
    "replay-nasa": lambda: _replay_case(
        "replay-nasa", _SHARED / "pwa-nasa-ipsc-1993" / "NASA-iPSC-1993-3.1-cln.swf"
    ),
    "report-nasa-all": _report_nasa_case,
    "all-policy-alibaba": _all_policy_alibaba_case,
    "slurm-plan-apply-1000": _slurm_case,
    "slurm-article": _slurm_article_case,
}


def _preemptive_case() -> dict[str, object]:
    from gpuplan.sim.engine import simulate
    from gpuplan.synth import synth_poisson

    cluster = _cluster_128x8()
    jobs = synth_poisson(100_000, seed=1, load=0.9, total_gpus=cluster.total_gpus)
    took = {}
    for policy, backfill in (("fifo", "easy"), ("tiresias", "none")):
        t0 = time.perf_counter()
        result = simulate(jobs, cluster, policy, backfill)
        took[policy] = time.perf_counter() - t0
    ratio = took["tiresias"] / took["fifo"]
    return {"case": "sim-100k-preemptive", "jobs": len(jobs), "fifo_easy_s": round(took["fifo"], 3),
            "tiresias_s": round(took["tiresias"], 3), "ratio": round(ratio, 3), "floor_ratio": 2.0,
            "within_floor": ratio <= 2.0, "preemptions": result.metrics.preemptions,
            "wasted_gpu_hours": round(result.metrics.wasted_gpu_hours, 1), "peak_rss_mb": _peak_rss_mb()}  # fmt: skip


def _conservative_sharing_case() -> list[dict[str, object]]:
    """fifo+conservative against fifo+easy on sharing clusters: the Alibaba pods on their own cluster
    (nobody waits: one pass per arrival over 6,212 GPUs) and a synthetic queue (800 Poisson jobs at
    offered load 1.2 on 16 x 8 A100-80GB shared by up to 4 jobs: long queues, many reservations)."""
    from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec
    from gpuplan.sim.engine import simulate
    from gpuplan.synth import synth_poisson
    from gpuplan.traces import read_trace

    runs: list[tuple[str, list, ClusterSpec]] = []  # type: ignore[type-arg]
    path = _SHARED / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"
    out: list[dict[str, object]] = []
    if path.is_file():
        trace = read_trace(path)
        assert trace.cluster is not None
        runs.append(("alibaba", [j for j in trace.jobs if j.duration_s is not None], trace.cluster))
    else:
        out.append({"case": "conservative-sharing-alibaba", "skipped": f"{path} absent"})
    gpu = GpuSpec("A100-80GB", 80.0)
    shared = ClusterSpec("16x8-shared", tuple(NodeSpec(f"n{i}", 8, gpu) for i in range(16)), sharing=True,
                         max_jobs_per_gpu=4)  # fmt: skip
    runs.append(("synth-800", synth_poisson(800, seed=1, load=1.2, total_gpus=shared.total_gpus), shared))
    for name, jobs, cluster in runs:
        took = {}
        for backfill in ("easy", "conservative"):
            t0 = time.perf_counter()
            result = simulate(jobs, cluster, "fifo", backfill)
            took[backfill] = time.perf_counter() - t0
        out.append({"case": f"conservative-sharing-{name}", "jobs": len(jobs), "gpus": cluster.total_gpus,
                    "easy_s": round(took["easy"], 2), "conservative_s": round(took["conservative"], 2),
                    "conservative_mean_wait_s": round(result.metrics.mean_wait_s, 1)})  # fmt: skip
    return out


def _conservative_exclusive_case() -> dict[str, object]:
    """fifo+conservative against fifo+easy on the 128 x 8 exclusive cluster, 10,000 Poisson jobs at
    offered load 0.9 (the first tenth of sim-100k's workload)."""
    from gpuplan.sim.engine import simulate
    from gpuplan.synth import synth_poisson

    cluster = _cluster_128x8()
    jobs = synth_poisson(10_000, seed=1, load=0.9, total_gpus=cluster.total_gpus)
    took = {}
    for backfill in ("easy", "conservative"):
        t0 = time.perf_counter()
        result = simulate(jobs, cluster, "fifo", backfill)
        took[backfill] = time.perf_counter() - t0
    return {"case": "conservative-exclusive-10k", "jobs": len(jobs), "gpus": cluster.total_gpus,
            "easy_s": round(took["easy"], 2), "conservative_s": round(took["conservative"], 2),
            "conservative_mean_wait_s": round(result.metrics.mean_wait_s, 1)}  # fmt: skip


def _unknown_case() -> list[dict[str, object]]:
    from bench_unknown import bench_unknown

    return bench_unknown(_SHARED / "alibaba-gpu-v2023" / "openb_pod_list_default.csv")


def _frag_case() -> list[dict[str, object]]:
    from bench_frag import bench_frag

    return bench_frag(_SHARED / "alibaba-gpu-v2023" / "openb_pod_list_default.csv")


def _fairshare_case() -> dict[str, object]:
    from bench_fairshare import bench_fairshare

    return bench_fairshare()


_OTHER["frag-alibaba"] = _frag_case
_OTHER["sim-100k-fairshare"] = _fairshare_case
_OTHER["sim-100k-preemptive"] = _preemptive_case
_OTHER["unknown-durations"] = _unknown_case
_OTHER["conservative-sharing"] = _conservative_sharing_case
_OTHER["conservative-exclusive-10k"] = _conservative_exclusive_case


def _scale_case(name: str) -> object:
    from bench_scale import CASES as SCALE_CASES  # issue #25's figures (bench/bench_scale.py)

    return SCALE_CASES[name]()


for _name in (
    "scale-1m-pass",
    "scale-ratios",
    "scale-conservative",
    "scale-readers",
    "scale-startup",
    "scale-sweep",
):
    _OTHER[_name] = lambda name=_name: _scale_case(name)


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def machine() -> dict[str, object]:
    """The first row of every run: what machine the figures come from. The project's 2-core machines
    differ: the same build ran the 1M-job pass in 48.9 s on one and 15.5 s on another, so a figure is
    only comparable with another from the same CPU model and a like `python_loop_s` (a fixed pure-Python
    loop's CPU seconds, bench_traces.python_loop_s) at a like load."""
    import os
    import platform

    from bench_traces import python_loop_s

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        model = platform.processor()
    return {
        "case": "machine",
        "cpu_model": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "python_loop_s": python_loop_s(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--case":
        print(json.dumps(run_case(sys.argv[2])))
        return 0
    names = sys.argv[1:] or ["demo-article", *CASES, *_OTHER]
    out: list[object] = [machine()]
    for name in names:
        proc = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True)
        if proc.returncode != 0:
            out.append({"case": name, "error": proc.stderr.strip().splitlines()[-1:]})
            continue
        got = json.loads(proc.stdout)
        out.extend(got if isinstance(got, list) else [got])
    print(json.dumps(out, indent=2))
    return 1 if any("error" in o for o in out) else 0


if __name__ == "__main__":
    sys.exit(main())

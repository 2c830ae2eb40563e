"""The article's experiment on a real Slurm, on seeds fixed in advance: Slurm's order vs gpuplan's.

Workload per seed: the first 40 jobs of `gpuplan synth article --seed S` (1-8 GPUs, fine-tunes and
batch inference in a mixed order), durations divided by 120 and clipped to 5-60 s, each a `sleep` on
the test harness's cluster (tests/slurm/harness.py: 4 slurmd x 8 fake GPUs, sched/builtin +
priority/multifactor with the harness's non-zero Age and JobSize weights; sched/builtin starts
jobs strictly in priority order).

Per seed, run A: Slurm's own order (submission order). Its sacct history becomes a gpuplan trace
(`gpuplan slurm history`), a rolling-median model is fit on it (`gpuplan predict fit`), and run B
submits the same jobs again and runs `gpuplan slurm apply --predict MODEL` before the partition
opens. A makespan is measured from opening the partition to the last End in sacct. Simulated: run A
is Slurm's order simulated with the true sleeps; run B is the plan's own forecast (model durations),
and the simulated gain is the plan's (its order vs Slurm's, both on the model's durations).

SEEDS are fixed here before any run and every one is reported, gain or none; the mean is over all.
`python bench/run.py slurm-article` (~2.5 min per seed; needs root and Slurm's Debian packages).
tests/slurm/test_slurm_article.py runs `run_experiment` on a smaller workload.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_TESTS = Path(__file__).resolve().parents[1] / "tests" / "slurm"

SEEDS = (0, 1, 2, 3, 4)
"""Chosen before running anything (the first five); never filtered by outcome."""
JOBS = 40
SCALE = 1 / 120
MIN_S = 5
MAX_S = 60


def article_sleep_jobs(
    seed: int, n: int = JOBS, scale: float = SCALE, min_s: int = MIN_S, max_s: int = MAX_S
) -> list[tuple[str, int, int]]:
    """(name, GPUs, sleep seconds) in the mixed submission order of the article's scenario.

    Names carry the seed, so the duration model of one seed never sees another seed's runs."""
    from gpuplan.synth import synth_article

    jobs = synth_article(seed)[:n]
    return [(f"art{seed}-{k:02d}", j.gpus, int(min(max_s, max(min_s, round((j.duration_s or 0) * scale)))))
            for k, j in enumerate(jobs)]  # fmt: skip


@dataclass
class ArticleRun:
    """One seed's two runs: ids in submission order, the applied order, sacct Start/End, figures."""

    seed: int
    work: list[tuple[str, int, int]]
    ids_a: list[str] = field(default_factory=list)
    ids_b: list[str] = field(default_factory=list)
    order_b: list[str] = field(default_factory=list)
    times_a: dict[str, tuple[float, float]] = field(default_factory=dict)
    times_b: dict[str, tuple[float, float]] = field(default_factory=dict)
    real_a_s: float = 0.0
    real_b_s: float = 0.0
    sim_a_s: float | None = None
    sim_b_s: float | None = None
    sim_b_slurm_order_s: float | None = None
    policy: str = ""
    changed: int = 0

    def starts_follow(self, order: list[str], times: dict[str, tuple[float, float]]) -> bool:
        """Every job of `order` started (sacct Start, whole seconds) no earlier than the one before it."""
        starts = [times[j][0] for j in order]
        return all(a <= b for a, b in itertools.pairwise(starts))

    def figures(self) -> dict[str, Any]:
        sim_gain = _gain(self.sim_b_slurm_order_s, self.sim_b_s)
        return {
            "seed": self.seed,
            "jobs": len(self.work),
            "gpu_s": sum(g * s for _, g, s in self.work),
            "slurm_order": {
                "real_makespan_s": round(self.real_a_s, 1),
                "simulated_makespan_s": self.sim_a_s,
                "real_vs_simulated": _off(self.real_a_s, self.sim_a_s),
                "starts_in_submission_order": self.starts_follow(self.ids_a, self.times_a),
            },
            "gpuplan_order": {
                "real_makespan_s": round(self.real_b_s, 1),
                "simulated_makespan_s": self.sim_b_s,
                "real_vs_simulated": _off(self.real_b_s, self.sim_b_s),
                "policy": self.policy,
                "changed": self.changed,
                "starts_in_applied_order": self.starts_follow(self.order_b, self.times_b),
            },
            "slurm_order_simulated_from_model_s": self.sim_b_slurm_order_s,
            "gain": {"real": _gain(self.real_a_s, self.real_b_s), "simulated": sim_gain},
        }


def _gain(before: float | None, after: float | None) -> float | None:
    return None if not before or after is None else round(1 - after / before, 3)


def _off(real: float, sim: float | None) -> float | None:
    return None if not sim else round(real / sim - 1, 3)


def run_experiment(cluster, work: list[tuple[str, int, int]], seed: int, workdir: Path) -> ArticleRun:  # type: ignore[no-untyped-def]
    """Run A (Slurm's order), history -> model, run B (`gpuplan slurm apply --predict`) on `cluster`,
    whose queue must be empty. Leaves the partition UP and the queue empty."""
    from gpuplan.slurm import SlurmClient, SlurmRunner, live_state, plan_queue

    run = ArticleRun(seed, work)
    sleep_s = {name: s for name, _, s in work}
    cluster.set_partition(up=False)
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    run.ids_a = _submit(cluster, work)
    state = live_state(SlurmClient(SlurmRunner(env=cluster.env)))
    names = {q.job_id: q.name for q in state.jobs}
    run.sim_a_s = plan_queue(
        state, predictions={j: float(sleep_s[names[j]]) for j in run.ids_a}
    ).slurm.makespan_s
    run.real_a_s, run.times_a = _open_and_wait(cluster, run.ids_a)

    hist, model, applied_state = workdir / "hist.jsonl", workdir / "model.gpm", workdir / "applied.json"
    got = _cli(cluster, "slurm", "history", "--since", since, "--out", str(hist), "--json")
    if got["jobs"] < len(work):
        raise RuntimeError(f"sacct history has {got['jobs']} jobs, expected {len(work)}")
    _cli(cluster, "predict", "fit", str(hist), "--model", "rolling-median", "--out", str(model), "--json")
    cluster.set_partition(up=False)
    run.ids_b = _submit(cluster, work)
    applied = _cli(
        cluster, "slurm", "apply", "--predict", str(model), "--state", str(applied_state), "--json"
    )
    plan = applied["plan"]
    run.order_b, run.policy, run.changed = plan["order"], plan["policy"], len(applied["apply"]["changed"])
    run.sim_b_s = plan["expected"]["makespan_s"]
    run.sim_b_slurm_order_s = plan["slurm_order_expected"]["makespan_s"]
    run.real_b_s, run.times_b = _open_and_wait(cluster, run.ids_b)
    return run


def _submit(cluster, work: list[tuple[str, int, int]]) -> list[str]:  # type: ignore[no-untyped-def]
    return [cluster.sbatch(f"--job-name={name}", f"--gres=gpu:{g}", "--time=2", script=f"sleep {s}")
            for name, g, s in work]  # fmt: skip


def _open_and_wait(cluster, ids: list[str]) -> tuple[float, dict[str, tuple[float, float]]]:  # type: ignore[no-untyped-def]
    """Open the partition, wait for every job; (seconds from opening to the last End, sacct times)."""
    opened = time.time()
    cluster.set_partition(up=True)
    cluster.wait_done(ids, 300)
    times = cluster.sacct_times(ids)
    return max(end for _, end in times.values()) - opened, times


def _cli(cluster, *args: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """`gpuplan ARGS` in a child process against `cluster`, as a user runs it; its JSON."""
    proc = subprocess.run([sys.executable, "-m", "gpuplan.cli", *args], env=cluster.env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"gpuplan {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def bench_slurm_article(seeds: tuple[int, ...] = SEEDS) -> dict[str, object]:
    sys.path.insert(0, str(_TESTS))
    from harness import SlurmCluster, install_hint, missing_binaries

    case = "slurm-article"
    missing = missing_binaries()
    if missing or os.geteuid() != 0:
        why = f"{', '.join(missing)} missing; {install_hint()}" if missing else "needs root (slurmd, munged)"
        return {"case": case, "skipped": why}
    cluster = SlurmCluster.start("builtin")
    rows = []
    t0 = time.perf_counter()
    try:
        for seed in seeds:
            with tempfile.TemporaryDirectory() as tmp:
                rows.append(run_experiment(cluster, article_sleep_jobs(seed), seed, Path(tmp)).figures())
            cluster.cancel_all()
    finally:
        cluster.stop()
    return {"case": case, "seeds": list(seeds), "jobs": JOBS, "scale": "duration/120, clipped to 5-60 s",
            "per_seed": rows, "mean": _means(rows), "wall_s": round(time.perf_counter() - t0, 1)}  # fmt: skip


def _means(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    def mean(values: list[Any]) -> float | None:
        vals = [v for v in values if v is not None]
        return round(sum(vals) / len(vals), 3) if vals and len(vals) == len(values) else None

    return {
        "slurm_order_real_s": mean([r["slurm_order"]["real_makespan_s"] for r in rows]),
        "slurm_order_simulated_s": mean([r["slurm_order"]["simulated_makespan_s"] for r in rows]),
        "gpuplan_order_real_s": mean([r["gpuplan_order"]["real_makespan_s"] for r in rows]),
        "gpuplan_order_simulated_s": mean([r["gpuplan_order"]["simulated_makespan_s"] for r in rows]),
        "gain_real": mean([r["gain"]["real"] for r in rows]),
        "gain_simulated": mean([r["gain"]["simulated"] for r in rows]),
    }


if __name__ == "__main__":
    chosen = tuple(int(a) for a in sys.argv[1:]) or SEEDS
    print(json.dumps(bench_slurm_article(chosen), indent=2))

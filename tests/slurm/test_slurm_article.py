"""The article's experiment on a real Slurm: 40 sleep jobs shaped like its mix, Slurm's order vs gpuplan's.

Workload: the first 40 jobs of `gpuplan synth article` (seed below: 1-8 GPUs, fine-tunes and batch
inference in a mixed order), durations divided by 120 and clipped to 5-60 s, each `sleep` on the
4 x 8-GPU test cluster (sched/builtin + priority/multifactor, so Slurm follows priorities strictly).

Run A: Slurm's own order (submission order). Its sacct history becomes a gpuplan trace (`slurm
history`), a rolling-median duration model is fit on it (`predict fit`), and run B submits the same
jobs again and runs `gpuplan slurm apply --predict MODEL` before the partition opens: the way a site
with recurring jobs would use it. Makespans are measured from the moment the partition opens to the
last End in sacct. Floor (issue 11): B at least 10 % shorter than A, and each within 15 % of the
simulator's prediction (A: Slurm's order simulated with the sleep durations; B: the plan's own forecast).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from harness import SlurmCluster
from typer.testing import CliRunner

from gpuplan.cli import app
from gpuplan.slurm import SlurmClient, live_state, plan_queue
from gpuplan.synth import synth_article

SEED = 1
JOBS = 40
SCALE = 1 / 120
runner = CliRunner()


def article_sleep_jobs(seed: int = SEED, n: int = JOBS) -> list[tuple[str, int, int]]:
    """(name, GPUs, sleep seconds) in the mixed submission order of the article's scenario."""
    jobs = synth_article(seed)[:n]
    return [(f"art-{k:02d}", j.gpus, int(min(60, max(5, round((j.duration_s or 0) * SCALE)))))
            for k, j in enumerate(jobs)]  # fmt: skip


def _submit(c: SlurmCluster, work: list[tuple[str, int, int]]) -> list[str]:
    return [c.sbatch(f"--job-name={name}", f"--gres=gpu:{g}", "--time=2", script=f"sleep {s}")
            for name, g, s in work]  # fmt: skip


def _run(c: SlurmCluster, ids: list[str]) -> float:
    """Open the partition, wait for every job; seconds from opening to the last End (sacct)."""
    opened = time.time()
    c.set_partition(up=True)
    c.wait_done(ids, 240)
    times = c.sacct_times(ids)
    return max(end for _, end in times.values()) - opened


def _cli_json(*args: str) -> dict:
    r = runner.invoke(app, list(args))
    assert r.exit_code == 0, (args, r.stdout, r.stderr)
    return json.loads(r.stdout)


def test_article_experiment_on_real_slurm(slurm: SlurmCluster, tmp_path: Path) -> None:
    work = article_sleep_jobs()
    sleep_s = {name: s for name, _, s in work}
    assert (
        {g for _, g, _ in work} <= {1, 2, 4, 8} and min(sleep_s.values()) >= 5 and max(sleep_s.values()) <= 60
    )

    # Run A: Slurm's own order; the simulator's forecast of it, knowing the sleeps
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    ids_a = _submit(slurm, work)
    state = live_state(SlurmClient())
    names = {q.job_id: q.name for q in state.jobs}
    forecast_a = plan_queue(state, predictions={j: float(sleep_s[names[j]]) for j in ids_a}).slurm.makespan_s
    real_a = _run(slurm, ids_a)

    # History of run A -> duration model -> run B with gpuplan's order
    hist, model = tmp_path / "hist.jsonl", tmp_path / "model.gpm"
    assert _cli_json("slurm", "history", "--since", since, "--out", str(hist), "--json")["jobs"] >= JOBS
    _cli_json("predict", "fit", str(hist), "--model", "rolling-median", "--out", str(model), "--json")
    slurm.set_partition(up=False)
    ids_b = _submit(slurm, work)
    applied = _cli_json("slurm", "apply", "--predict", str(model), "--json")
    plan = applied["plan"]
    assert sorted(plan["order"]) == sorted(ids_b) and len(applied["apply"]["changed"]) == JOBS
    forecast_b, forecast_b_slurm = plan["expected"]["makespan_s"], plan["slurm_order_expected"]["makespan_s"]
    real_b = _run(slurm, ids_b)

    figures = {
        "jobs": JOBS, "seed": SEED, "gpu_s": sum(g * s for _, g, s in work),
        "slurm_order": {"real_makespan_s": round(real_a, 1), "simulated_makespan_s": forecast_a,
                        "simulated_from_model_s": forecast_b_slurm},
        "gpuplan_order": {"real_makespan_s": round(real_b, 1), "simulated_makespan_s": forecast_b,
                          "policy": plan["policy"]},
        "real_gain": round(1 - real_b / real_a, 3),
    }  # fmt: skip
    print("\nARTICLE EXPERIMENT", json.dumps(figures))
    assert forecast_a is not None and forecast_b is not None
    assert real_b <= 0.9 * real_a, figures
    assert abs(real_a - forecast_a) <= 0.15 * forecast_a, figures
    assert abs(real_b - forecast_b) <= 0.15 * forecast_b, figures

"""The article's experiment on a real Slurm, small: the code of bench/bench_slurm_article.py on 24 jobs.

Workload: the first 24 jobs of `gpuplan synth article --seed 0` (1-8 GPUs, mixed order), durations
divided by 320 and clipped to 3-18 s, each a `sleep` on the 4 x 8-GPU test cluster (sched/builtin +
priority/multifactor). It was picked as a fixture whose simulated gain is clear (25 s -> 18 s), so that
the real gain can be checked; the honest figures over seeds fixed in advance, on the full 40-job
workload, come from `make bench` (case slurm-article, docs/slurm.md).

Run A: Slurm's own order. Its sacct history becomes a trace (`slurm history`), a rolling-median model
is fit on it (`predict fit`), and run B submits the same jobs again and runs `gpuplan slurm apply
--predict MODEL` before the partition opens. Checked on sacct: each run's jobs start in the order it
was given (submission order, then the applied order), B at least 10 % shorter than A, each makespan
within 15 % of the simulator's forecast (A: Slurm's order with the sleep durations; B: the plan's).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness import SlurmCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_slurm_article import article_sleep_jobs, run_experiment

SEED, JOBS, SCALE, MIN_S, MAX_S = 0, 24, 1 / 320, 3, 18


def _starts_in(order: list[str], times: dict[str, tuple[float, float]]) -> list[float]:
    return [times[j][0] for j in order]


def test_article_experiment_on_real_slurm(slurm: SlurmCluster, tmp_path: Path) -> None:
    work = article_sleep_jobs(SEED, JOBS, SCALE, MIN_S, MAX_S)
    sleeps = [s for _, _, s in work]
    assert {g for _, g, _ in work} <= {1, 2, 4, 8} and min(sleeps) >= MIN_S and max(sleeps) <= MAX_S

    run = run_experiment(slurm, work, SEED, tmp_path)
    figures = run.figures()
    print("\nARTICLE EXPERIMENT (test size)", json.dumps(figures))

    # Slurm started run A in submission order and run B in the order gpuplan applied (sacct Start)
    starts_a = _starts_in(run.ids_a, run.times_a)
    assert starts_a == sorted(starts_a), figures
    assert sorted(run.order_b) == sorted(run.ids_b) and JOBS - 1 <= run.changed <= JOBS  # the last may stay
    assert run.order_b != run.ids_b  # gpuplan did reorder
    starts_b = _starts_in(run.order_b, run.times_b)
    assert starts_b == sorted(starts_b), (run.order_b, starts_b)
    # the real gain, and each real makespan close to its simulation
    assert run.sim_a_s is not None and run.sim_b_s is not None
    assert run.real_b_s <= 0.9 * run.real_a_s, figures
    assert abs(run.real_a_s - run.sim_a_s) <= 0.15 * run.sim_a_s, figures
    assert abs(run.real_b_s - run.sim_b_s) <= 0.15 * run.sim_b_s, figures

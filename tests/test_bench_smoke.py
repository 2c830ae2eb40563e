"""`make bench` must not rot: each benchmark's code runs here on a tiny size and prints its figures.

No timing is asserted (performance lives in bench/, not in tests): only that the cases run and report
the keys docs/benchmarks.md reads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(autouse=True)
def _bench_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))


def test_run_py_prints_json_for_a_case() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "demo-article"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    first, row = json.loads(proc.stdout)
    assert first["case"] == "machine" and first["cores"] >= 1 and first["python_loop_s"] > 0
    assert row["case"] == "demo-article" and row["runs"] == 24
    assert {"wall_s", "runs_per_s", "best", "best_utilization", "best_bound_ratio", "peak_rss_mb"} <= set(row)


def test_sacct_bench_reads_what_it_wrote(tmp_path: Path) -> None:
    from bench_traces import bench_sacct

    row = bench_sacct(2_000, tmp_path)
    assert row["rows"] >= 2_000 and row["jobs"] > 0
    assert {"seconds", "rows_per_s", "peak_rss_mb", "within_floor"} <= set(row)


def test_own_csv_writer_of_the_bench_is_readable(tmp_path: Path) -> None:
    from gpuplan.traces import read_trace
    from run import write_own_csv

    path = tmp_path / "own.csv"
    write_own_csv(path, 500)
    jobs = read_trace(path).jobs
    assert len(jobs) == 500 and all(j.duration_s is not None for j in jobs)


def test_plan_bench_rows() -> None:
    from bench_plan import bench_plan

    rows = bench_plan(budgets_s=(0.5,), backfills=("none",), cases=("article",))
    assert len(rows) == 1 and rows[0]["case"] == "article"
    assert rows[0]["ratio"] >= 1.0 - 1e-9 and rows[0]["fifo_ratio"] >= rows[0]["ratio"] - 1e-9


def test_predict_bench_rows() -> None:
    from bench_predict import bench_predict

    rows = bench_predict(n_jobs=1_500, names=("rolling-median",))
    assert rows and all({"fit_s", "predict_s", "peak_rss_mb"} <= set(r) for r in rows)


def test_agent_bench_runs_on_tiny_sizes() -> None:
    from bench_agent import bench_latency, bench_pass

    lat = bench_latency(jobs=5)
    assert lat["jobs"] == 5 and {"agent_p95_ms", "client_p50_ms", "client_p95_ms", "within_floor"} <= set(lat)
    row = bench_pass(queued=50)
    assert 45 <= row["queued"] < 50, "a freed GPU started a queued job"
    assert {"free_step_ms_median", "blocked_pass_ms_median", "queue_call_ms", "within_floor"} <= set(row)
    row = bench_pass(queued=50, policy="fifo", backfill="conservative")
    assert {"blocked_pass_ms_median", "blocked_pass_ms_max", "unchanged_pass_ms_median"} <= set(row)


def test_web_bench_rows() -> None:
    from bench_web import bench_queue, bench_whatif

    queue = bench_queue(300)
    assert queue["rows_in_first_page"] == 100 and queue["gantt_jobs"] == 300
    assert {"first_page_s", "gantt_s", "next_page_s"} <= set(queue)
    whatif = bench_whatif(200)
    assert whatif["runs"] == 3 and whatif["gantt_kb"] > 0
    from bench_web import bench_slurm_queue

    slurm = bench_slurm_queue(40)
    assert slurm["planned_jobs"] == 40 and slurm["backfill"] == "conservative"
    assert {"first_page_s", "cached_page_s", "reread_unchanged_s"} <= set(slurm)


def test_slurm_article_bench_reports_every_seed_and_their_mean() -> None:
    """bench_slurm_article's figures and means (its Slurm runs: tests/slurm/test_slurm_article.py)."""
    from bench_slurm_article import SEEDS, ArticleRun, _means, article_sleep_jobs

    assert SEEDS == (0, 1, 2, 3, 4)
    work = article_sleep_jobs(0)
    assert len(work) == 40 and all(5 <= s <= 60 for _, _, s in work)
    # names carry the seed: one seed's duration model never sees another seed's runs
    assert not {n for n, _, _ in work} & {n for n, _, _ in article_sleep_jobs(1)}
    run = ArticleRun(0, work[:2], ids_a=["1", "2"], ids_b=["3", "4"], order_b=["4", "3"],
                     times_a={"1": (0.0, 5.0), "2": (5.0, 9.0)}, times_b={"3": (2.0, 4.0), "4": (2.0, 3.0)},
                     real_a_s=9.0, real_b_s=4.5, sim_a_s=8.0, sim_b_s=4.0, sim_b_slurm_order_s=8.0)  # fmt: skip
    fig = run.figures()
    assert fig["gain"] == {"real": 0.5, "simulated": 0.5}
    assert (
        fig["slurm_order"]["real_vs_simulated"] == 0.125
        and fig["gpuplan_order"]["real_vs_simulated"] == 0.125
    )
    assert (
        fig["slurm_order"]["starts_in_submission_order"] and fig["gpuplan_order"]["starts_in_applied_order"]
    )
    late = ArticleRun(1, work[:2], ids_a=["1", "2"], times_a={"1": (3.0, 5.0), "2": (1.0, 9.0)}, real_a_s=9.0)
    assert not late.figures()["slurm_order"]["starts_in_submission_order"]
    means = _means([fig, {**fig, "gain": {"real": 0.3, "simulated": None}}])
    assert means["gain_real"] == 0.4 and means["gain_simulated"] is None  # a seed without a forecast
    assert means["slurm_order_real_s"] == 9.0


def test_gpu_check_script_runs_dry() -> None:
    """bench/gpu_check.sh waits for a GPU machine; its dry run (fake device set, sleep jobs) keeps it
    from rotting: both parts run, the suspend check sees a suspension, the newcomer running meanwhile,
    and the stopped job's memory as booked (the fake GPU reports its declared memory)."""
    import os
    import shutil
    import tempfile

    short = tempfile.mkdtemp(prefix="gc", dir="/tmp")  # the agent's socket path must stay short
    env = {**os.environ, "GPU_CHECK_DRY": "1", "PYTHON": sys.executable, "TMPDIR": short}
    try:
        proc = subprocess.run(["bash", str(BENCH / "gpu_check.sh")], capture_output=True, text=True, env=env,
                              timeout=240, check=False)  # fmt: skip
    finally:
        shutil.rmtree(short, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "makespan:" in proc.stdout and "suspend check: job suspended and resumed" in proc.stdout
    check = json.loads(proc.stdout[proc.stdout.rindex('{\n "suspend_check"') :])["suspend_check"]
    assert check["newcomer_started_while_suspended"] is True and check["preemptions"] == 1
    assert check["while_suspended"]["max_mem_gb"] == check["booked_gb"]
    assert check["while_suspended"]["mean_util_pct"] == 0.0 and check["final_state"] == "done"


def test_frag_bench_rows() -> None:
    from bench_frag import bench_frag

    fixture = Path(__file__).parent / "fixtures" / "alibaba_frag" / "openb_pod_list_small.csv"
    rows = bench_frag(fixture, ("--seeds", "1-2", "--placer", "best-fit,fgd", "--workers", "1"))
    assert rows[0]["case"] == "frag-alibaba" and rows[0]["seeds"] == 2, rows
    assert {r["case"] for r in rows[1:]} == {"frag-alibaba/best-fit", "frag-alibaba/fgd"}
    assert all(r["us_per_placement"] > 0 for r in rows[1:])  # type: ignore[operator]


def test_fairshare_bench_reports_both_runs() -> None:
    from bench_fairshare import bench_fairshare

    row = bench_fairshare(n_jobs=1_500, n_users=20)
    assert row["jobs"] == 1_500 and row["users"] == 20
    for policy in ("fifo", "fairshare"):
        assert {
            f"{policy}_cpu_s",
            f"{policy}_mean_wait_s",
            f"{policy}_light_users_mean_wait_s",
            f"{policy}_jain",
        } <= set(row)
    assert row["cpu_ratio"] > 0

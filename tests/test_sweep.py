"""Runs on local processes and on a real Dask cluster give the table of the runs in this process."""

from __future__ import annotations

import json
import warnings

import pytest
from typer.testing import CliRunner

from gpuplan.cli import app
from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec
from gpuplan.sim.matrix import run_matrix
from gpuplan.sim.sweep import Run, run_all
from gpuplan.synth import synth_poisson

CLUSTER = ClusterSpec("2x8", tuple(NodeSpec(f"n{i}", 8, GpuSpec("A100-80GB", 80.0)) for i in range(2)))
POLICIES = ["fifo", "sjf", "gpu-time", "las"]
BACKFILLS = ["none", "easy", "conservative"]


def _table(results):  # type: ignore[no-untyped-def]
    return [r.summary() for r in results]


@pytest.fixture(scope="module")
def jobs():  # type: ignore[no-untyped-def]
    return synth_poisson(300, seed=4, load=0.95, total_gpus=CLUSTER.total_gpus)


@pytest.fixture(scope="module")
def local_table(jobs):  # type: ignore[no-untyped-def]
    return _table(run_matrix(jobs, CLUSTER, POLICIES, BACKFILLS, show_progress=False))


@pytest.fixture(scope="module")
def dask_address():  # type: ignore[no-untyped-def]
    import distributed  # a dependency of gpuplan (dask[distributed]): missing, the test fails

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cluster's own start-up notes (ports, versions)
        cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        )
    try:
        yield cluster.scheduler_address
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cluster.close()


def test_local_processes_give_the_same_table(jobs, local_table) -> None:  # type: ignore[no-untyped-def]
    parallel = run_matrix(jobs, CLUSTER, POLICIES, BACKFILLS, show_progress=False, workers=2)
    assert _table(parallel) == local_table
    assert len(local_table) == 3 * 3 + 1  # las runs once, as +none


def test_a_real_dask_cluster_gives_the_same_table(jobs, local_table, dask_address) -> None:  # type: ignore[no-untyped-def]
    on_dask = run_matrix(jobs, CLUSTER, POLICIES, BACKFILLS, show_progress=False, dask=dask_address)
    assert _table(on_dask) == local_table


def test_run_all_keeps_the_order_of_the_runs(jobs, dask_address) -> None:  # type: ignore[no-untyped-def]
    runs = [Run("t", p, "easy", placer) for p in ("fifo", "sjf") for placer in ("first-fit", "spread")]
    here = run_all({"t": (jobs, CLUSTER)}, runs)
    there = run_all({"t": (jobs, CLUSTER)}, runs, dask=dask_address)
    assert [(r.policy, r.placer) for r in there] == [(r.policy, r.placer) for r in runs]
    assert [r.summary() for r in there] == [r.summary() for r in here]


def test_cli_simulate_on_dask_prints_the_same_json(tmp_path, dask_address) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "t.csv"
    runner = CliRunner()
    assert (
        runner.invoke(app, ["synth", "poisson", "-n", "200", "--load", "0.9", "--out", str(trace)]).exit_code
        == 0
    )
    base = [
        "simulate",
        str(trace),
        "-c",
        "4x8xA100-80GB",
        "-p",
        "fifo,sjf",
        "-b",
        "easy,conservative",
        "--json",
    ]
    here = runner.invoke(app, base)
    there = runner.invoke(app, [*base, "--dask", dask_address])
    two = runner.invoke(app, [*base, "--workers", "2"])
    assert here.exit_code == there.exit_code == two.exit_code == 0, there.output
    assert json.loads(there.stdout) == json.loads(here.stdout) == json.loads(two.stdout)


def test_bad_workers_and_unreachable_dask_are_one_line_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "t.csv"
    runner = CliRunner()
    runner.invoke(app, ["synth", "poisson", "-n", "20", "--out", str(trace)])
    bad = runner.invoke(app, ["simulate", str(trace), "-p", "fifo,sjf", "--workers", "0"])
    assert bad.exit_code == 2 and "--workers 0" in bad.output and "Traceback" not in bad.output


GRID = """
cluster = "4x8xA100-80GB"
policies = ["fifo", "sjf", "las"]
backfills = ["easy", "conservative"]
placers = ["first-fit", "spread"]
predictors = ["trace", "oracle"]
seeds = [0, 1]
[[synth]]
kind = "poisson"
jobs = 120
load = 0.9
"""


def test_sweep_grid_writes_one_table_and_one_report_the_same_on_dask(tmp_path, dask_address) -> None:  # type: ignore[no-untyped-def]
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    runner = CliRunner()
    here = runner.invoke(app, ["sweep", str(grid), "--out", str(tmp_path / "a"), "--json"])
    there = runner.invoke(app, ["sweep", str(grid), "--out", str(tmp_path / "b"), "--dask", dask_address])
    assert here.exit_code == 0 and there.exit_code == 0, here.output + there.output
    rows = json.loads(here.stdout)
    # 2 seeds x 2 predictors x 2 placers x (2 policies x 2 backfills + las once)
    assert len(rows) == 2 * 2 * 2 * 5
    assert {(r["seed"], r["predictor"], r["placer"]) for r in rows} == {
        (s, p, pl) for s in (0, 1) for p in ("trace", "oracle") for pl in ("first-fit", "spread")
    }
    assert (tmp_path / "a" / "sweep.csv").read_text() == (tmp_path / "b" / "sweep.csv").read_text()
    assert (tmp_path / "b" / "report.html").stat().st_size > 10_000


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("polices = ['fifo']\n[[synth]]\njobs = 10", "polices: unknown key"),
        ("seeds = 'x'\n[[synth]]\njobs = 10", "seeds: give a list of integers"),
        ("policies = ['fifo']", "traces: no trace"),
        ("policies = ['nope']\n[[synth]]\njobs = 10", "nope"),
        ("[[synth]]\nkind = 'uniform'", "synth: kind 'uniform'"),
        ("policies = [", "not valid TOML"),
    ],
)
def test_bad_grid_files_are_one_line_errors(tmp_path, text, says) -> None:  # type: ignore[no-untyped-def]
    grid = tmp_path / "grid.toml"
    grid.write_text(text)
    res = CliRunner().invoke(app, ["sweep", str(grid), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2, res.output
    assert (says in res.output and str(grid) in res.output) or (says == "nope" and "nope" in res.output)
    assert "Traceback" not in res.output

"""Rules every command shares: the cluster a run uses, jobs that never fit, runs with no winner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from gpuplan.cli import app
from gpuplan.cluster import cluster_from_toml, cluster_to_toml, load_cluster
from gpuplan.model import Job
from gpuplan.report.html import report_data
from gpuplan.sim.compare import best_run, no_winner_reason
from gpuplan.sim.engine import simulate
from gpuplan.traces import cluster_file_for, read_trace, write_trace

FIXTURES = Path(__file__).parent / "fixtures"
SWF = FIXTURES / "swf" / "small.swf"
HETERO = FIXTURES / "clusters" / "hetero-exclusive.toml"
runner = CliRunner()


def _run(*args: str | Path) -> Result:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result


def _trace(tmp_path: Path, jobs: list[Job], name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    write_trace(jobs, path)
    return path


def _quiet_jobs() -> list[Job]:
    """Jobs that never queue on 8 GPUs: one GPU each, one at a time."""
    return [Job(f"q{i}", 100.0 * i, 1, duration_s=50.0, est_duration_s=50.0) for i in range(6)]


def _busy_jobs() -> list[Job]:
    """Jobs that queue on 8 GPUs and whose order matters."""
    return [
        Job(f"b{i}", 0.0, 8 if i % 3 == 0 else 1, duration_s=100.0 + 300 * (i % 4), est_duration_s=100.0)
        for i in range(12)
    ]


# ---- identical runs, nobody waited: no winner ------------------------------------------------------


def test_nobody_waited_no_best_in_the_table_nor_in_json(tmp_path: Path) -> None:
    trace = _trace(tmp_path, _quiet_jobs())
    table = _run("simulate", trace, "-p", "all", "-b", "all", "--cluster", "8xA100-80GB")
    assert "← best" not in table.stdout
    assert "no best run: identical runs: no job waited in any of the 24 runs" in " ".join(
        table.stdout.split()
    )
    runs = json.loads(_run("simulate", trace, "-p", "all", "-b", "all", "-c", "8xA100-80GB", "--json").stdout)
    assert len(runs) == 24
    assert not any(r["best"] for r in runs)
    assert {r["no_winner"] for r in runs} == {runs[0]["no_winner"]}
    assert "no job waited" in runs[0]["no_winner"]


def test_runs_that_differ_have_one_best(tmp_path: Path) -> None:
    trace = _trace(tmp_path, _busy_jobs())
    runs = json.loads(
        _run("simulate", trace, "-p", "fifo,sjf,ljf", "-b", "none", "-c", "8xA100-80GB", "--json").stdout
    )
    assert sum(r["best"] for r in runs) == 1 and runs[0]["best"]
    assert all(r["no_winner"] is None for r in runs)
    table = _run("simulate", trace, "-p", "fifo,sjf,ljf", "-b", "none", "-c", "8xA100-80GB")
    assert table.stdout.count("← best") == 1


def test_identical_runs_with_waits_say_identical() -> None:
    jobs = [Job(f"j{i}", 0.0, 8, duration_s=100.0) for i in range(3)]  # one order whatever the policy
    cluster = load_cluster("8xA100-80GB")
    results = [simulate(jobs, cluster, p, "none") for p in ("fifo", "small-gpus-first")]
    why = no_winner_reason(results)
    assert why is not None and why.startswith("identical runs: all 2 runs give the same figures")
    assert best_run(results) is None
    data = report_data(results)
    assert data["best"] is None and data["no_winner"] == why
    assert not any(e["is_best"] for e in data["runs"])


def test_report_of_runs_with_no_winner_has_no_best_badge(tmp_path: Path) -> None:
    trace = _trace(tmp_path, _quiet_jobs())
    _run("simulate", trace, "-p", "fifo,sjf", "-b", "none", "-c", "8xA100-80GB", "--out", tmp_path / "r")
    page = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    assert 'class="badge best"' not in page.split('<p class="legend">')[0]
    assert "No best run: identical runs: no job waited" in page


# ---- one rule for the cluster ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [["simulate"], ["plan", "--max-evals", "5", "--time-limit", "5"], ["audit", "--sim-budget", "5"]],
    ids=["simulate", "plan", "audit"],
)
def test_every_command_uses_the_default_cluster_and_says_so(tmp_path: Path, command: list[str]) -> None:
    trace = _trace(tmp_path, _busy_jobs())
    result = _run(command[0], trace, *command[1:], "--json")
    assert f"{trace} does not describe its cluster: using the default 8xA100-80GB" in result.stderr
    assert _cluster_of(command[0], json.loads(result.stdout))["origin"] == "default"
    given = _run(command[0], trace, *command[1:], "--cluster", "4x8xA100-80GB", "--json")
    assert "does not describe" not in given.stderr
    cluster = _cluster_of(command[0], json.loads(given.stdout))
    assert (cluster["name"], cluster["gpus"], cluster["origin"]) == ("4x8xA100-80GB", 32, "option")


def _cluster_of(command: str, data: Any) -> dict[str, Any]:
    if command == "simulate":
        assert len({json.dumps(r["cluster"]) for r in data}) == 1
        return data[0]["cluster"]  # type: ignore[no-any-return]
    if command == "plan":
        assert all(r["cluster"] == data["cluster"] for r in data["runs"])
    return data["cluster"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_convert_keeps_the_trace_s_cluster(tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"nasa{suffix}"
    said = _run("convert", SWF, out).stdout
    own = read_trace(SWF).cluster
    assert own is not None
    beside = cluster_file_for(out)
    assert beside.is_file() == (suffix != ".parquet")
    assert ("Parquet metadata" in said) == (suffix == ".parquet")
    assert read_trace(out).cluster == own
    result = _run("simulate", out, "--json")
    assert "does not describe" not in result.stderr
    cluster = json.loads(result.stdout)[0]["cluster"]
    assert (cluster["gpus"], cluster["origin"]) == (own.total_gpus, "trace")


def test_convert_of_a_trace_without_cluster_writes_no_cluster_file(tmp_path: Path) -> None:
    src = _trace(tmp_path, _busy_jobs(), "src.jsonl")
    _run("convert", src, tmp_path / "out.csv")
    assert not cluster_file_for(tmp_path / "out.csv").exists()


@pytest.mark.parametrize("name", ["8xA100-80GB", "1xH200-141GB", str(HETERO)])
def test_cluster_file_round_trip(name: str) -> None:
    spec = load_cluster(name)
    again = cluster_from_toml(cluster_to_toml(spec), "round trip")
    assert again == spec and [n.name for n in again.nodes] == [n.name for n in spec.nodes]


# ---- one rule for jobs that never fit --------------------------------------------------------------


def _with_misfits() -> list[Job]:
    return [
        *_busy_jobs(),
        Job("wide", 5.0, 16, duration_s=10.0),  # 16 GPUs on one 8-GPU node
        Job("fat", 6.0, 1, mem_gb=500.0, duration_s=10.0),  # 500 GB on 80 GB GPUs
    ]


@pytest.mark.parametrize(
    "command",
    [["simulate"], ["plan", "--max-evals", "5", "--time-limit", "5"], ["audit", "--sim-budget", "5"]],
    ids=["simulate", "plan", "audit"],
)
def test_jobs_that_never_fit_are_left_out_with_one_warning(tmp_path: Path, command: list[str]) -> None:
    trace = _trace(tmp_path, _with_misfits())
    result = _run(command[0], trace, *command[1:], "--cluster", "8xA100-80GB")
    warning = (
        "gpuplan: warning: 2 of 14 jobs can never start on '8xA100-80GB' (8 GPUs on 1 node(s) "
        "(8x A100-80GB), exclusive; largest node 8 GPUs, GPUs of at most 80 GB): left out (first: 'wide', "
        "16 GPU(s)); pass a larger --cluster to include them"
    )
    assert warning in result.stderr.splitlines()
    assert "never start" not in result.stdout


def test_simulate_runs_the_jobs_that_fit(tmp_path: Path) -> None:
    trace = _trace(tmp_path, _with_misfits())
    runs = json.loads(_run("simulate", trace, "-c", "8xA100-80GB", "--json").stdout)
    assert runs[0]["jobs"] == 12


def test_no_job_fits_is_one_line_error(tmp_path: Path) -> None:
    trace = _trace(tmp_path, [Job("wide", 0.0, 16, duration_s=10.0)])
    result = runner.invoke(app, ["simulate", str(trace), "-c", "8xA100-80GB"])
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuplan: error: no job can ever start: 1 of 1 jobs")

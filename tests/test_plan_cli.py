"""`gpuplan plan` through Typer's CliRunner, on a small app that registers the command by itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from gpuplan.cluster import load_cluster
from gpuplan.commands.plan import plan, plan_demo_results
from gpuplan.model import Job
from gpuplan.optimize import read_plan
from gpuplan.synth import synth_article
from gpuplan.traces import write_trace

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command(name="plan")(plan)


@app.command()
def _other() -> None:  # a second command, so `plan` is a subcommand as in gpuplan's own app
    """Nothing."""


runner = CliRunner()
FAST = ["--time-limit", "4", "--max-evals", "40"]


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plan") / "day.jsonl"
    write_trace(synth_article(0)[:16], path)
    return path


def _invoke(*args: str | Path) -> Result:
    return runner.invoke(app, ["plan", *(str(a) for a in args)])


def _ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result


def test_plan_prints_the_runs_side_by_side_with_the_bound(trace: Path) -> None:
    out = _ok(_invoke(trace, *FAST)).stdout
    for needle in (
        "plan+easy",
        "fifo+none",
        "article",
        "best policy",
        "lower bound",
        "vs bound",
        "what-if on history",
    ):
        assert needle in out


def test_plan_json_writes_plan_file_and_report(trace: Path, tmp_path: Path) -> None:
    result = _ok(
        _invoke(trace, *FAST, "--backfill", "none", "--json", "--out", tmp_path, "--report", tmp_path)
    )
    data = json.loads(result.stdout)
    assert data["plan"]["backfill"] == "none" and data["plan"]["uses_true_outcome"] is True
    assert {r["role"] for r in data["runs"]} >= {"plan", "FIFO", "best policy"}
    assert data["plan"]["value_s"] <= min(r["objective_s"] for r in data["runs"] if r["role"] == "FIFO")
    saved = read_plan(tmp_path / "plan.json")
    assert saved["order"] == data["order"] and len(saved["jobs"]) == 16
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "plan+none" in html and "fifo+none" in html


def test_plan_objective_and_file_names(trace: Path, tmp_path: Path) -> None:
    target = tmp_path / "my-plan.json"
    result = _ok(_invoke(trace, *FAST, "--objective", "weighted", "--out", target))
    assert "GPU-weighted JCT h" in result.stdout and read_plan(target)["objective"] == "weighted"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--objective", "fastest"],
            "unknown objective 'fastest'; valid names: makespan, mean-jct, weighted",
        ),
        (["--backfill", "eager"], "unknown backfill mode 'eager'"),
        (["--cluster", "nope"], "unknown cluster preset 'nope'"),
    ],
)
def test_plan_errors_are_one_line(trace: Path, args: list[str], needle: str) -> None:
    result = _invoke(trace, *args)
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuplan: error:") and needle in lines[0]


def test_plan_needs_true_durations_unless_forecast(tmp_path: Path) -> None:
    path = tmp_path / "queue.jsonl"
    write_trace([Job("a", 0.0, 2, est_duration_s=600.0), Job("b", 0.0, 8, est_duration_s=300.0)], path)
    result = _invoke(path, *FAST)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1  # one line
    assert "no job has a true duration (duration_s)" in result.stderr and "--forecast" in result.stderr
    data = json.loads(_ok(_invoke(path, *FAST, "--forecast", "--json")).stdout)
    assert data["plan"]["uses_true_outcome"] is False and data["plan"]["value_s"] == 900.0


def test_plan_demo_results_gives_the_planned_run() -> None:
    runs = plan_demo_results(synth_article(0)[:12], load_cluster("8xA100-80GB"), time_limit_s=1.0)
    assert len(runs) == 1 and runs[0].policy == "plan" and runs[0].metrics.jobs == 12


def test_plan_leaves_out_jobs_that_never_ran(tmp_path: Path) -> None:
    """As simulate does: a job without a duration (pending, cancelled) is left out with one line on
    stderr, not an error for the whole trace (the Alibaba pods that never started)."""
    path = tmp_path / "history.jsonl"
    jobs = synth_article(0)[:10]
    write_trace([*jobs, Job("never", 5.0, 1, meta={"state": "Pending"})], path)
    result = _ok(_invoke(path, *FAST, "--json"))
    assert "1 of 11 jobs have no duration (never ran): left out of the plan" in result.stderr
    data = json.loads(result.stdout)
    assert sorted(data["order"]) == sorted(j.id for j in jobs)


def test_plan_says_when_no_builtin_policy_is_best(tmp_path: Path) -> None:
    path = tmp_path / "quiet.jsonl"
    write_trace([Job(f"j{i}", 1000.0 * i, 1, duration_s=10.0) for i in range(6)], path)  # nobody waits
    out = " ".join(_ok(_invoke(path, *FAST, "-c", "8xA100-80GB")).stdout.split())
    assert "start (no best)" in out and "│ best policy" not in out
    assert "no best policy among the built-in runs: identical runs: no job waited" in out

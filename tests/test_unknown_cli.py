"""Issue #13 through the CLI: online estimates, preemptive policies, honesty marks, spanning by default,
heavy-tailed synthetic durations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner, Result

from gpuplan.cli import app
from gpuplan.model import Job
from gpuplan.synth import synth_poisson
from gpuplan.traces import write_trace

runner = CliRunner()


def _invoke(*args: str | Path) -> Result:
    return runner.invoke(app, [str(a) for a in args])


def _ok(*args: str | Path) -> Result:
    result = _invoke(*args)
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result


def _stripped(tmp_path: Path) -> Path:
    """A Philly-style log: id, submit, duration, GPUs only; a queue that ordering could shorten."""
    jobs = [
        Job(f"j{i}", 30.0 * i, 2 + 2 * (i % 3 == 0), duration_s=300.0 if i % 4 else 5_000.0)
        for i in range(40)
    ]
    path = tmp_path / "philly.csv"
    with path.open("w") as f:
        f.write("job_id,submission_time,duration,num_gpu\n")
        f.writelines(f"{j.id},{j.submit_s},{j.duration_s},{j.gpus}\n" for j in jobs)
    return path


def _runs(result: Result) -> dict[str, dict[str, Any]]:
    return {f"{r['policy']}+{r['backfill']}": r for r in json.loads(result.stdout)}


def test_without_estimates_duration_policies_are_marked_as_the_fifo_run(tmp_path: Path) -> None:
    args = ("simulate", _stripped(tmp_path), "-c", "8xA100-80GB", "-p", "fifo,sjf,gpu-time", "-b", "easy")
    runs = _runs(_ok(*args, "--json"))
    assert runs["sjf+easy"]["same_run_as"] == runs["gpu-time+easy"]["same_run_as"] == "fifo+easy"
    assert runs["fifo+easy"]["same_run_as"] is None
    assert runs["sjf+easy"]["estimates"]["jobs_without_estimate"] == 40
    assert "ranks them as endless" in runs["sjf+easy"]["estimates"]["fallback"]
    table = " ".join(_ok(*args).stdout.split())
    assert "sjf+easy = fifo+easy" in table
    assert (
        "same run: sjf+easy, gpu-time+easy = fifo+easy" in table
        or "same run: gpu-time+easy, sjf+easy = fifo+easy" in table
    )
    assert "40 job(s) had none" in table


def test_history_estimates_change_the_run_and_say_where_they_came_from(tmp_path: Path) -> None:
    args = ("simulate", _stripped(tmp_path), "-c", "8xA100-80GB", "-p", "fifo,sjf", "-b", "easy", "--json")
    runs = _runs(_ok(*args, "--estimates", "history"))
    est = runs["sjf+easy"]["estimates"]
    assert est["source"] == "history" and 0 < est["jobs_without_estimate"] < 40
    assert sum(est["by_level"].values()) == 40 and est["by_level"]["gpus"] > 0
    assert runs["sjf+easy"]["same_run_as"] is None  # learned estimates make it another run
    assert runs["sjf+easy"]["mean_jct_s"] < runs["fifo+easy"]["mean_jct_s"]


def test_preemptive_policies_run_once_and_count_their_preemptions(tmp_path: Path) -> None:
    args = (
        "simulate",
        _stripped(tmp_path),
        "-c",
        "8xA100-80GB",
        "-p",
        "fifo,las,tiresias",
        "-b",
        "none,easy",
    )
    runs = _runs(_ok(*args, "--json", "--restart-overhead", "30"))
    assert set(runs) == {"fifo+none", "fifo+easy", "las+none", "tiresias+none"}
    assert runs["las+none"]["preemptions"] > 0 and runs["las+none"]["wasted_gpu_hours"] > 0
    assert runs["las+none"]["mean_jct_s"] < runs["fifo+none"]["mean_jct_s"]
    assert all(r["uses_true_durations"] is False for r in runs.values())
    assert "preemptions" in _ok(*args).stdout


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--estimates", "crystal-ball"), "unknown estimate source 'crystal-ball'"),
        (("--restart-overhead", "-5"), "--restart-overhead -5.0: give seconds >= 0"),
        (("-p", "las", "--sharing"), "exclusive clusters only"),
    ],
)
def test_bad_preemption_options_are_one_line_errors(
    tmp_path: Path, extra: tuple[str, ...], message: str
) -> None:
    result = _invoke("simulate", _stripped(tmp_path), "-c", "8xA100-80GB", *extra)
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("gpuplan: error:") and message in lines[-1]


def test_demo_plan_row_says_it_used_the_true_durations() -> None:
    runs = json.loads(_ok("demo", "--json", "--plan-seconds", "1").stdout)
    flags = {f"{r['policy']}+{r['backfill']}": r["uses_true_durations"] for r in runs}
    assert flags["plan+easy"] is True
    assert flags["fifo+none"] is False and not any(v for k, v in flags.items() if k != "plan+easy")


def test_jobs_wider_than_a_node_span_by_default(tmp_path: Path) -> None:
    jobs = [Job("wide", 0.0, 12, duration_s=100.0), Job("small", 0.0, 2, duration_s=50.0)]
    trace = tmp_path / "wide.jsonl"
    write_trace(jobs, trace)
    spanned = _ok("simulate", trace, "-c", "4x8xA100-80GB", "--json")
    assert "1 job(s) ask for more GPUs than the largest node has (8): they may span nodes" in spanned.stderr
    run = json.loads(spanned.stdout)[0]
    assert run["jobs"] == 2 and run["spanned_jobs"] == 1
    kept_out = _ok("simulate", trace, "-c", "4x8xA100-80GB", "--no-span", "--json")
    assert json.loads(kept_out.stdout)[0]["jobs"] == 1 and "left out" in kept_out.stderr


def test_heavy_tail_durations() -> None:
    plain = np.array([j.duration_s for j in synth_poisson(3000, seed=3, load=0.8, total_gpus=32)])
    tail = np.array(
        [j.duration_s for j in synth_poisson(3000, seed=3, load=0.8, total_gpus=32, tail_alpha=1.5)]
    )
    assert plain.var() / plain.mean() ** 2 < 2.0 < 4.0 < tail.var() / tail.mean() ** 2
    again = [j.duration_s for j in synth_poisson(3000, seed=3, load=0.8, total_gpus=32, tail_alpha=1.5)]
    assert again == tail.tolist()
    result = _invoke("synth", "poisson", "--out", "x.jsonl", "--tail", "0")
    assert result.exit_code == 2 and "Pareto shape must be > 0" in result.stderr


def test_the_agent_refuses_a_preemptive_policy_on_shared_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPLAN_HOME", str(tmp_path / "home"))
    result = _invoke("agent", "start", "--gpus", "fake:8xA100-80GB", "--policy", "tiresias", "--sharing")
    assert result.exit_code == 2 and "needs --exclusive" in result.stderr
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").iterdir())

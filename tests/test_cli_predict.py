"""`--predict MODEL` on simulate / plan / audit: the policies see the model's predictions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuplan.cli import app, apply_predictions
from gpuplan.predict import synth_history
from gpuplan.traces import read_trace, write_trace

runner = CliRunner()


@pytest.fixture(scope="module")
def model_and_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("predict")
    history = synth_history(600, seed=2)
    write_trace(history[:500], tmp / "history.jsonl")
    write_trace(history[500:], tmp / "new.jsonl")
    result = runner.invoke(
        app,
        ["predict", "fit", str(tmp / "history.jsonl"), "--target", "duration", "--model", "rolling-median",
         "--out", str(tmp / "dur.model")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return tmp / "dur.model", tmp / "new.jsonl"


def test_apply_predictions_replaces_estimates(model_and_trace: tuple[Path, Path]) -> None:
    model, trace = model_and_trace
    jobs = read_trace(trace).jobs
    predicted = apply_predictions(jobs, [model])
    assert [j.id for j in predicted] == [j.id for j in jobs]
    changed = sum(1 for a, b in zip(jobs, predicted) if a.est_duration_s != b.est_duration_s)
    assert changed > len(jobs) // 2  # the model filled the estimates, not the trace
    assert all(j.duration_s == p.duration_s for j, p in zip(jobs, predicted))  # truth untouched
    assert apply_predictions(jobs, None) is jobs


@pytest.mark.parametrize("command", ["simulate", "plan", "audit"])
def test_predict_option_runs(model_and_trace: tuple[Path, Path], command: str) -> None:
    model, trace = model_and_trace
    extra = {"simulate": ["-p", "sjf", "-b", "easy"], "plan": ["--time-limit", "1", "--max-evals", "50"],
             "audit": ["--sim-budget", "2"]}[command]  # fmt: skip
    args = [command, str(trace), "--cluster", "4x8xA100-80GB", *extra, "--predict", str(model), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)


def test_predict_option_with_a_foreign_file_is_one_line_error(
    tmp_path: Path, model_and_trace: tuple[Path, Path]
) -> None:
    _, trace = model_and_trace
    bogus = tmp_path / "not-a-model.bin"
    bogus.write_bytes(b"hello")
    result = runner.invoke(app, ["simulate", str(trace), "--predict", str(bogus), "--json"])
    assert result.exit_code == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "not-a-model.bin" in lines[0]

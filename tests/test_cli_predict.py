"""`--predict MODEL` on simulate / plan / audit: the policies see the model's predictions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuplan.cli import app, apply_predictions
from gpuplan.cluster import load_cluster
from gpuplan.predict import synth_history
from gpuplan.sim.engine import simulate
from gpuplan.traces import read_trace, write_trace

runner = CliRunner()
CLUSTER = "4x8xA100-80GB"


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


def _json_of(*args: str | Path) -> Any:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_predict_option_changes_what_is_simulated(model_and_trace: tuple[Path, Path]) -> None:
    model, trace = model_and_trace
    args = ("simulate", trace, "--cluster", CLUSTER, "-p", "sjf", "-b", "easy", "--json")
    (with_model,) = _json_of(*args, "--predict", model)
    (without,) = _json_of(*args)
    jobs = read_trace(trace).jobs
    spec = load_cluster(CLUSTER)
    # the run is the simulation of the jobs with the model's estimates, which differs from the trace's
    predicted = simulate(apply_predictions(jobs, [model]), spec, "sjf", "easy")
    plain = simulate(jobs, spec, "sjf", "easy")
    assert [(r["job_id"], r["start_s"]) for r in with_model["schedule"]] == [
        (r.job_id, r.start_s) for r in predicted.records
    ]
    assert [(r["job_id"], r["start_s"]) for r in without["schedule"]] == [
        (r.job_id, r.start_s) for r in plain.records
    ]
    assert with_model["schedule"] != without["schedule"]
    assert with_model["mean_jct_s"] == pytest.approx(predicted.metrics.mean_jct_s)


def test_predict_option_changes_what_is_planned(model_and_trace: tuple[Path, Path]) -> None:
    model, trace = model_and_trace
    # --time-limit leaves room for every baseline under load (the baselines stop at half of it, and the
    # article's order is the 9th); --max-evals keeps the search itself short
    args = ("plan", trace, "--cluster", CLUSTER, "--time-limit", "10", "--max-evals", "50", "--json")
    runs_with = {r["role"]: r for r in _json_of(*args, "--predict", model)["runs"]}
    runs_without = {r["role"]: r for r in _json_of(*args)["runs"]}
    # the article's order ranks by estimated duration: the model's estimates change its run ...
    article = simulate(
        apply_predictions(read_trace(trace).jobs, [model]), load_cluster(CLUSTER), "article", "easy"
    )
    assert runs_with["article order"]["mean_jct_s"] == pytest.approx(article.metrics.mean_jct_s)
    assert runs_with["article order"]["mean_jct_s"] != pytest.approx(
        runs_without["article order"]["mean_jct_s"]
    )
    # ... while strict FIFO, which reads no estimate, is the same run
    assert runs_with["FIFO"] == runs_without["FIFO"]


def test_predict_option_changes_what_is_audited(model_and_trace: tuple[Path, Path]) -> None:
    model, trace = model_and_trace
    args = ("audit", trace, "--cluster", CLUSTER, "--sim-budget", "0", "--json")
    with_model = {r["policy"]: r for r in _json_of(*args, "--predict", model)["what_if"]["runs"]}
    without = {r["policy"]: r for r in _json_of(*args)["what_if"]["runs"]}
    assert with_model.keys() == without.keys() and {r["jobs"] for r in with_model.values()} == {100}
    # the what-if replays with EASY: its reservations and the duration policies read the estimates
    changed = [
        p
        for p in ("fifo", "sjf", "gpu-time", "article")
        if with_model[p]["mean_jct_s"] != without[p]["mean_jct_s"]
    ]
    assert changed == ["fifo", "sjf", "gpu-time", "article"], changed


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

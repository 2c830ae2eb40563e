"""`gpuplan predict fit|eval|apply|show` through Typer's CliRunner, on a small app that mounts
`predict_app` the way cli.py does; plus the captured sacct output when ../shared has it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from gpuplan.commands.predict import predict_app
from gpuplan.predict import synth_history
from gpuplan.traces import read_trace, write_trace

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
SACCT = SHARED / "slurm" / "captured" / "sacct_P.txt"

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.add_typer(predict_app, name="predict")


@app.command()
def other() -> None:
    """A second command, so `predict` is a sub-app as in cli.py."""


runner = CliRunner()


def _invoke(*args: str | Path) -> Result:
    return runner.invoke(app, ["predict", *(str(a) for a in args)])


def _ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def _error(result: Result, *parts: str) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("gpuplan: error:")]
    assert len(lines) == 1, result.stderr
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("predict") / "history.jsonl"
    write_trace(synth_history(400, seed=3), path)
    return path


def test_fit_show_and_apply(trace: Path, tmp_path: Path) -> None:
    model = tmp_path / "dur.model"
    out = _ok(_invoke("fit", trace, "--out", model, "--model", "rolling-median")).stdout
    assert f"{model}: rolling-median duration model, trained on 400 of 400 jobs" in out
    header = json.loads(_ok(_invoke("show", model, "--json")).stdout)
    assert header["format"] == "gpuplan-predict-model" and header["training_size"] == 400
    assert "target: duration" in _ok(_invoke("show", model)).stdout
    applied = tmp_path / "applied.jsonl"
    _ok(_invoke("apply", trace, "--model", model, "--out", applied))
    jobs = read_trace(applied).jobs
    assert len(jobs) == 400 and all(j.est_duration_s is not None for j in jobs)


def test_fit_json_and_params(trace: Path, tmp_path: Path) -> None:
    model = tmp_path / "mem.model"
    data = json.loads(
        _ok(_invoke("fit", trace, "-o", model, "-t", "memory", "--param", "k=3", "--json")).stdout
    )
    assert data["target"] == "memory" and data["model"] == "gbm" and data["params"] == {"k": 3}
    assert model.is_file()


def test_eval_json_compares_predictors_and_schedules(trace: Path) -> None:
    result = _ok(_invoke("eval", trace, "--target", "all", "--chunks", "4", "--schedule", "--cluster",
                         "8xA100-80GB", "--policy", "fifo,sjf", "--load-factor", "2", "--json"))  # fmt: skip
    data = json.loads(result.stdout)
    assert [e["target"] for e in data["evaluations"]] == ["duration", "memory"]
    scores = data["evaluations"][0]["scores"]
    assert [s["predictor"] for s in scores] == ["limit", "global-median", "rolling-median", "gbm"]
    sched = data["schedule"]
    assert sched["load_factor"] == 2.0 and sched["baseline"]["backfill"] == "none"
    assert set(sched["best_recovered"]) == {"predicted", "limit"}
    assert len(sched["runs"]) == 6


def test_eval_prints_tables(trace: Path) -> None:
    out = _ok(_invoke("eval", trace, "--chunks", "3", "--predictors", "global-median,rolling-median",
                      "--schedule", "--policy", "fifo,sjf", "-c", "8xA100-80GB")).stdout  # fmt: skip
    assert "duration predictions, 267 jobs scored after 133 warm-up" in out
    assert "← best MAE" in out and "fifo+none (baseline)" in out
    assert "of the oracle's mean-JCT gain over FIFO" in out


@pytest.mark.parametrize(
    ("args", "parts"),
    [
        (["eval", "{trace}", "--predictors", "lgbm"], ["unknown predictor 'lgbm'", "rolling-median"]),
        (["eval", "{trace}", "--target", "gpu"], ["unknown prediction target 'gpu'", "duration, memory"]),
        (
            ["eval", "{trace}", "--target", "memory", "--schedule"],
            ["--schedule plans with predicted durations"],
        ),
        (["eval", "{trace}", "--schedule", "--policy", "lifo"], ["unknown policy 'lifo'"]),
        (
            ["eval", "{trace}", "--param", "alpha=1"],
            ["--param: no evaluated predictor has alpha", "quantile"],
        ),
        (["eval", "{trace}", "--param", "quantile"], ["--param: bad item 'quantile'"]),
        (["fit", "{trace}", "--out", "{tmp}/m", "--model", "gbm", "--param", "quantile=2"], ["quantile 2"]),
        (["fit", "{tmp}/none.jsonl", "--out", "{tmp}/m"], ["none.jsonl: no such trace file"]),
    ],
)
def test_errors_are_one_line(trace: Path, tmp_path: Path, args: list[str], parts: list[str]) -> None:
    _error(_invoke(*(a.format(trace=trace, tmp=tmp_path) for a in args)), *parts)


def test_foreign_and_stale_model_files(trace: Path, tmp_path: Path) -> None:
    foreign = tmp_path / "weights.bin"
    foreign.write_bytes(b"\x80\x04K\x01.")
    line = _error(_invoke("apply", trace, "--model", foreign, "--out", tmp_path / "o.jsonl"), str(foreign))
    assert "not a gpuplan model file" in line and "gpuplan predict fit HISTORY" in line
    model = tmp_path / "m.model"
    _ok(_invoke("fit", trace, "--out", model, "--model", "global-median"))
    magic, header, rest = model.read_bytes().split(b"\n", 2)
    model.write_bytes(
        magic + b"\n" + header.replace(b'"gpuplan_version": "', b'"gpuplan_version": "0.') + b"\n" + rest
    )
    _error(_invoke("show", model), str(model), "stale model file", "--model global-median")


def test_history_without_durations(tmp_path: Path) -> None:
    path = tmp_path / "queued.jsonl"
    path.write_text('{"id": "a", "submit_s": 0, "gpus": 1}\n{"id": "b", "submit_s": 5, "gpus": 2}\n')
    _error(_invoke("fit", path, "--out", tmp_path / "m"), "has a known duration_s")
    _error(_invoke("eval", path), "no job has a known duration_s")


def test_importing_the_commands_imports_no_heavy_library() -> None:
    code = "import sys, gpuplan.commands.predict; print(sorted({'sklearn', 'numpy'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.skipif(not SACCT.exists(), reason=f"{SACCT} is absent (the captured Slurm output in ../shared)")
def test_captured_sacct_history(tmp_path: Path) -> None:
    data = json.loads(_ok(_invoke("eval", SACCT, "--chunks", "2", "--json")).stdout)
    ev = data["evaluations"][0]
    assert data["format"] == "sacct" and ev["jobs"] == 37
    assert {s["predictor"]: s["coverage"] for s in ev["scores"]}["limit"] > 0.9
    _ok(_invoke("fit", SACCT, "--out", tmp_path / "s.model"))

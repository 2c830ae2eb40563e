"""`simulate` with fairshare on a two-user trace where one user floods the queue; per-user figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuplan.cli import app
from gpuplan.sim.fairness import jain_index, user_figures
from gpuplan.sim.result import JobRecord

runner = CliRunner()


def _flood_trace(path: Path) -> Path:
    """alice submits 400 one-GPU jobs of 10 min in the first 100 s; bob one such job every 1,000 s."""
    rows = [
        {"id": f"a{i}", "submit_s": i * 0.25, "gpus": 1, "duration_s": 600.0, "user": "alice"}
        for i in range(400)
    ]
    rows += [
        {"id": f"b{i}", "submit_s": 1000.0 * (i + 1), "gpus": 1, "duration_s": 600.0, "user": "bob"}
        for i in range(20)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_fairshare_cuts_the_light_users_wait_at_least_five_fold(tmp_path: Path) -> None:
    trace = _flood_trace(tmp_path / "flood.jsonl")
    res = runner.invoke(
        app,
        ["simulate", str(trace), "--cluster", "8xA100-80GB", "-p", "fifo,fairshare", "-b", "easy", "--json"],
    )
    assert res.exit_code == 0, res.stderr
    runs = {r["policy"]: r for r in json.loads(res.stdout)}
    users = {p: {u["user"]: u for u in r["users"]} for p, r in runs.items()}
    bob_fifo, bob_fair = users["fifo"]["bob"]["mean_wait_s"], users["fairshare"]["bob"]["mean_wait_s"]
    assert bob_fifo > 5 * bob_fair, (bob_fifo, bob_fair)
    assert users["fifo"]["bob"]["jobs"] == users["fairshare"]["bob"]["jobs"] == 20
    assert users["fairshare"]["alice"]["gpu_hours"] == pytest.approx(400 * 600 / 3600)
    for r in runs.values():
        assert r["jain_index"] == pytest.approx(jain_index([u["mean_bounded_slowdown"] for u in r["users"]]))
    # over slowdowns, FIFO looks even (both users wait behind the flood), fairshare slows alice alone
    assert runs["fifo"]["jain_index"] > 0.9 > runs["fairshare"]["jain_index"]
    print({p: (round(r["jain_index"], 3), users[p]["bob"]["mean_wait_s"]) for p, r in runs.items()})
    text = runner.invoke(
        app,
        ["simulate", str(trace), "--cluster", "8xA100-80GB", "-p", "fifo,fairshare", "--out", str(tmp_path)],
    )
    assert text.exit_code == 0, text.stderr
    lines = [ln for ln in text.stdout.splitlines() if "Jain's index" in ln]
    assert len(lines) == 2 and any(ln.startswith("fairshare+easy") for ln in lines)
    many = runner.invoke(
        app, ["simulate", str(trace), "--cluster", "8xA100-80GB", "-p", "fifo,fairshare,sjf", "-b", "all"]
    )
    assert many.exit_code == 0, many.stderr
    lines = [ln for ln in many.stdout.splitlines() if "Jain's index" in ln]
    assert len(lines) == 1 and "fairshare+easy 0." in lines[0], "more runs: one line of indexes"
    page = (tmp_path / "report.html").read_text()
    assert "Per user" in page and "Jain&#x27;s index" not in page and "Jain's index" in page


def test_jain_and_user_figures_by_hand() -> None:
    assert jain_index([1.0, 1.0]) == 1.0
    assert jain_index([1.0, 3.0]) == 16 / 20  # (1 + 3)^2 / (2 * (1 + 9))
    assert jain_index([]) is None
    recs = [
        JobRecord("a", 0.0, 10.0, 30.0, (0, 1), user="alice"),  # wait 10, run 20: bsld 30/20
        JobRecord("b", 0.0, 0.0, 5.0, (2,), user="bob"),  # run 5 s < 10 s bound: bsld max(5/10, 1)
    ]
    figs = {u["user"]: u for u in user_figures(recs)}
    assert figs["alice"] == {
        "user": "alice",
        "jobs": 1,
        "gpu_hours": 40 / 3600,
        "mean_wait_s": 10.0,
        "mean_bounded_slowdown": 1.5,
    }
    assert figs["bob"]["mean_bounded_slowdown"] == 1.0
    assert user_figures([JobRecord("x", 0.0, 0.0, 1.0, (0,))]) == []


def test_fairshare_takes_its_parameters_as_a_spec(tmp_path: Path) -> None:
    trace = _flood_trace(tmp_path / "flood.jsonl")
    spec = "fairshare:then=sjf,half_life=1d"
    res = runner.invoke(app, ["simulate", str(trace), "--cluster", "8xA100-80GB", "-p", spec, "--json"])
    assert res.exit_code == 0, res.stderr
    (run,) = json.loads(res.stdout)
    assert run["policy"] == "fairshare:half_life=1d,then=sjf"
    bob = next(u for u in run["users"] if u["user"] == "bob")
    assert bob["mean_wait_s"] < 1000.0  # as with the defaults: the light user never waits behind the flood
    bad = runner.invoke(app, ["simulate", str(trace), "-p", "fairshare:then=las", "--json"])
    assert bad.exit_code == 2 and "then=las is not valid" in bad.stderr and "Traceback" not in bad.stderr

"""`gpuplan plan` is bounded by simulations, not seconds: the same plan twice, and beside a CPU hog.

The time limit is only a cap; when it cuts the search the result says so (`time_cut`, stop reason
"time") and the CLI prints a note.
"""

from __future__ import annotations

import json
import subprocess
import sys

from typer.testing import CliRunner

from gpuplan.cli import app
from gpuplan.cluster import load_cluster
from gpuplan.optimize.search import DEFAULT_MAX_EVALS, plan_order
from gpuplan.synth import synth_article

SPEC = load_cluster("8xA100-80GB")


def _plan(**kw):  # type: ignore[no-untyped-def]
    # the demo's search (CP-SAT in its deterministic mode, every baseline) with a smaller budget
    return plan_order(synth_article(0), SPEC, "makespan", "easy", max_evals=400, cpsat_time_s=0.2, **kw)


def test_the_demo_plan_is_the_same_twice_and_beside_a_cpu_heavy_process() -> None:
    first, second = _plan(), _plan()
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        loaded = _plan()
    finally:
        hog.kill()
        hog.wait()
    for p in (first, second, loaded):
        assert (p.stop_reason, p.time_cut, p.evaluations) == ("evaluations", False, 400)
        assert len(p.baselines) == len(first.baselines) == 8 * 3  # every policy x backfill, fifo+none first
    assert first.order == second.order == loaded.order
    assert first.value_s == second.value_s == loaded.value_s
    assert first.exact is not None and first.exact.value_s == loaded.exact.value_s  # type: ignore[union-attr]


def test_a_time_limit_that_cuts_the_search_is_reported() -> None:
    cut = plan_order(synth_article(0), SPEC, "makespan", "easy", 0.05, max_evals=10**6, cpsat_time_s=0)
    assert cut.time_cut and cut.stop_reason == "time" and cut.evaluations < 10**6
    assert cut.summary()["time_cut"] is True


def test_cli_plan_defaults_to_the_budget_of_simulations(tmp_path) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "a.csv"
    runner = CliRunner()
    assert runner.invoke(app, ["synth", "article", "--seed", "0", "--out", str(trace)]).exit_code == 0
    help_text = runner.invoke(app, ["plan", "--help"]).output
    assert f"default {DEFAULT_MAX_EVALS}" in " ".join(help_text.split())
    res = runner.invoke(app, ["plan", str(trace), "--time-limit", "0.05", "--max-evals", "100000"])
    assert res.exit_code == 0, res.output
    assert "the time limit cut the search" in res.output
    ok = runner.invoke(app, ["plan", str(trace), "--max-evals", "50", "--json"])
    plan = json.loads(ok.stdout)["plan"]
    assert (plan["evaluations"], plan["stop_reason"], plan["time_cut"]) == (50, "evaluations", False)

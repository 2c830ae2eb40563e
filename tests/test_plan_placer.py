"""`gpuplan plan --placer`: every simulation of the search uses it, the plan file records it, and a
replay of the file with its placer is the plan's own run (a small sharing cluster, GPU-share jobs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuplan.cli import app
from gpuplan.cluster import load_cluster
from gpuplan.errors import InputError
from gpuplan.optimize import read_plan
from gpuplan.optimize.evaluate import Evaluator
from gpuplan.optimize.planfile import replay_plan
from gpuplan.optimize.search import plan_order
from gpuplan.traces import read_trace

FIX = Path(__file__).parent / "fixtures"
TRACE = FIX / "traces" / "share_small.jsonl"
CLUSTER = FIX / "clusters" / "share-small.toml"
runner = CliRunner()


def _jobs():  # type: ignore[no-untyped-def]
    return read_trace(TRACE).jobs


def _plan_cli(tmp_path: Path, *args: str):  # type: ignore[no-untyped-def]
    out = tmp_path / "plan.json"
    res = runner.invoke(
        app, ["plan", str(TRACE), "--cluster", str(CLUSTER), "--max-evals", "60", "--out", str(out), *args]
    )
    assert res.exit_code == 0, (res.stdout, res.stderr)
    return res, out


def test_plan_with_fgd_records_it_and_its_replay_is_its_evaluation(tmp_path: Path) -> None:
    res, out = _plan_cli(tmp_path, "--placer", "fgd", "--json")
    shown = json.loads(res.stdout)["plan"]
    saved = read_plan(out)
    assert shown["placer"] == saved["placer"] == "fgd"
    jobs, spec = _jobs(), load_cluster(str(CLUSTER))
    replay = replay_plan(saved, jobs, spec)
    assert replay.placer == "fgd"
    by_id = {r.job_id: r for r in replay.records}
    for j in saved["jobs"]:
        r = by_id[j["id"]]
        assert (r.start_s, r.end_s, list(r.gpus)) == (j["start_s"], j["end_s"], j["gpus"])
    # the search's evaluator scores that order as the replay runs it (fgd learns its workload afresh)
    index = {j.id: i for i, j in enumerate(jobs)}
    ev = Evaluator(jobs, spec, saved["backfill"], "fgd")
    ends = ev.ends([index[x] for x in saved["order"]])
    assert ends == [by_id[j.id].end_s for j in jobs]
    assert max(ends) == saved["value_s"]
    # the placer is the plan's: the same order under first-fit puts the jobs elsewhere
    first_fit = replay_plan({**saved, "placer": "first-fit"}, jobs, spec)
    assert [r.gpus for r in first_fit.records] != [r.gpus for r in replay.records]


def test_plan_text_says_the_placer_and_first_fit_stays_the_default(tmp_path: Path) -> None:
    res, out = _plan_cli(tmp_path)
    assert "placer first-fit" in res.stdout and read_plan(out)["placer"] == "first-fit"
    res, _ = _plan_cli(tmp_path, "--placer", "fgd")
    assert "placer fgd" in res.stdout


def test_an_old_plan_file_reads_as_first_fit_and_a_bad_placer_is_one_line(tmp_path: Path) -> None:
    _, out = _plan_cli(tmp_path, "--placer", "best-fit")
    data = json.loads(out.read_text())
    assert data["placer"] == "best-fit"
    del data["placer"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    assert read_plan(old)["placer"] == "first-fit"
    data["placer"] = "nope"
    old.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"old\.json: column placer: value 'nope'.*fgd"):
        read_plan(old)


def test_an_unknown_placer_is_one_line_with_the_valid_names() -> None:
    res = runner.invoke(app, ["plan", str(TRACE), "--cluster", str(CLUSTER), "--placer", "nope"])
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and res.stdout == "" and len(lines) == 1
    assert "unknown placer 'nope'" in lines[0] and "fgd" in lines[0] and "first-fit" in lines[0]


def test_a_plan_with_fgd_is_the_same_twice() -> None:
    jobs, spec = _jobs(), load_cluster(str(CLUSTER))
    a, b = (plan_order(jobs, spec, max_evals=80, cpsat_time_s=0.1, placer="fgd") for _ in range(2))
    assert a.placer == "fgd" and a.order == b.order and a.value_s == b.value_s
    assert [j.gpus for j in a.jobs] == [j.gpus for j in b.jobs]
    assert all(r.placer == "fgd" for r in a.baselines)
    assert a.bound.value_s <= a.value_s  # the bounds hold for every placer (GPU shares included)

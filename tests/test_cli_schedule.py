"""Per-job schedules in `gpuplan simulate --json` / `gpuplan plan --json` and `--schedule-out` JSONL,
through Typer's CliRunner, checked against the simulator run in this process."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from gpuplan.cli import app
from gpuplan.cluster import load_cluster
from gpuplan.optimize.order import FixedOrder
from gpuplan.sim import schedule_io
from gpuplan.sim.engine import simulate
from gpuplan.synth import synth_article
from gpuplan.traces import read_trace

runner = CliRunner()
ROW_KEYS = {"job_id", "submit_s", "start_s", "end_s", "gpus"}


def _ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result


def _invoke(*args: str | Path) -> Result:
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sched") / "a.jsonl"
    _ok(_invoke("synth", "article", "--seed", "4", "--out", path))
    return path


def _expected(jobs: list[Any], result: Any) -> list[dict[str, Any]]:
    labels = result.gpu_labels
    return [
        {"job_id": r.job_id, "submit_s": r.submit_s, "start_s": r.start_s, "end_s": r.end_s,
         "gpus": [labels[g] for g in r.gpus]}
        for r in result.records
    ]  # fmt: skip


def _no_gpu_holds_two_jobs(rows: list[dict[str, Any]]) -> None:
    by_gpu: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        for g in r["gpus"]:
            by_gpu[g].append((r["start_s"], r["end_s"]))
    for spans in by_gpu.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end, spans


def test_simulate_json_has_every_jobs_start_end_and_gpus(trace: Path) -> None:
    runs = json.loads(_ok(_invoke("simulate", trace, "-p", "fifo,sjf", "-b", "none,easy", "--json")).stdout)
    jobs = read_trace(trace).jobs
    spec = load_cluster("8xA100-80GB")
    by_id = {j.id: j for j in jobs}
    assert len(runs) == 4
    for run in runs:
        rows = run["schedule"]
        assert [set(r) for r in rows] == [ROW_KEYS] * len(jobs)
        assert sorted(r["job_id"] for r in rows) == sorted(by_id)
        for r in rows:
            job = by_id[r["job_id"]]
            assert r["start_s"] >= r["submit_s"] == job.submit_s
            assert r["end_s"] - r["start_s"] == pytest.approx(job.duration_s)  # exclusive: no slowdown
            assert len(r["gpus"]) == job.gpus and len({g.split("/")[0] for g in r["gpus"]}) == 1
        assert max(r["end_s"] for r in rows) == pytest.approx(run["makespan_s"])
        _no_gpu_holds_two_jobs(rows)
        # exactly what the simulator gives in this process
        res = simulate(jobs, spec, run["policy"], run["backfill"], run["placer"])
        assert rows == _expected(jobs, res)
    # the runs differ: the schedule is each run's own, not one copied into all
    assert len({json.dumps(r["schedule"]) for r in runs}) > 1


def test_schedule_out_writes_jsonl_rows_per_job_per_run(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "deep" / "sched.jsonl"
    result = _ok(_invoke("simulate", trace, "-p", "fifo", "-b", "all", "--schedule-out", out, "--json"))
    runs = json.loads(result.stdout)
    assert [(r["schedule"], r["schedule_file"]) for r in runs] == [(None, str(out))] * 3
    lines = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 3 * 80
    assert f"240 job rows written to {out}" in result.stderr
    for run in runs:
        mine = [x for x in lines if (x["policy"], x["backfill"]) == (run["policy"], run["backfill"])]
        assert len(mine) == 80
        assert all(x["placer"] == "first-fit" and x["oracle"] is False for x in mine)
        assert max(x["end_s"] for x in mine) == pytest.approx(run["makespan_s"])
    # without --json the file is still written and stdout is the table
    out2 = tmp_path / "s2.jsonl"
    table = _ok(_invoke("simulate", trace, "-p", "fifo", "-b", "easy", "--schedule-out", out2))
    assert "fifo" in table.stdout and len(out2.read_text(encoding="utf-8").splitlines()) == 80


def test_large_schedules_are_left_out_of_json_with_a_pointer(
    trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schedule_io, "INLINE_MAX_ROWS", 100)  # 2 runs x 80 jobs = 160 rows > 100
    result = _ok(_invoke("simulate", trace, "-p", "fifo", "-b", "none,easy", "--json"))
    runs = json.loads(result.stdout)
    assert [r["schedule"] for r in runs] == [None, None]
    assert "160 job rows > 100" in result.stderr and "--schedule-out" in result.stderr
    one = json.loads(_ok(_invoke("simulate", trace, "-p", "fifo", "-b", "easy", "--json")).stdout)
    assert len(one[0]["schedule"]) == 80  # 80 rows fit under 100


def test_schedule_out_unwritable_is_one_line_error(trace: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    result = _invoke(
        "simulate", trace, "-p", "fifo", "-c", "8xA100-80GB", "--schedule-out", blocker / "s.jsonl", "--json"
    )
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "s.jsonl" in lines[0] and "--schedule-out" in lines[0]


def test_plan_json_has_the_chosen_plans_schedule(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    jobs = synth_article(2)[:30]
    from gpuplan.traces import write_trace

    write_trace(jobs, path)
    out = tmp_path / "plan.jsonl"
    args = ("plan", path, "--time-limit", "2", "--max-evals", "40", "--json")
    data = json.loads(_ok(_invoke(*args)).stdout)
    rows = data["schedule"]
    assert [set(r) for r in rows] == [ROW_KEYS] * 30
    assert max(r["end_s"] for r in rows) == pytest.approx(data["plan"]["metrics"]["makespan_s"])
    # the rows are the plan's order run through the simulator
    res = simulate(jobs, load_cluster("8xA100-80GB"), FixedOrder(data["order"]), data["plan"]["backfill"])
    assert rows == _expected(jobs, res)
    _no_gpu_holds_two_jobs(rows)
    data2 = json.loads(_ok(_invoke(*args, "--schedule-out", out)).stdout)
    assert data2["schedule"] is None and data2["schedule_file"] == str(out)
    res2 = simulate(jobs, load_cluster("8xA100-80GB"), FixedOrder(data2["order"]), "easy")
    assert [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()] == [
        {"policy": "plan", "backfill": "easy", "placer": "first-fit", "oracle": False, **r}
        for r in _expected(jobs, res2)
    ]


def test_streamed_jsonl_lines_are_the_text_of_json_dumps() -> None:

    from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec
    from gpuplan.sim.schedule_io import jsonl_lines, schedule_rows
    from gpuplan.synth import synth_poisson

    nodes = (NodeSpec("a", 4, GpuSpec("A100-80GB", 80.0)), NodeSpec("b", 8, GpuSpec("H200-141GB", 141.0)))
    cluster = ClusterSpec("mixed", nodes)
    jobs = synth_poisson(300, seed=9, load=1.1, total_gpus=12)
    for policy, backfill in (("fifo", "easy"), ("las", "none"), ("sjf", "conservative")):
        result = simulate(jobs, cluster, policy, backfill, oracle=policy == "sjf")
        run = {
            "policy": result.policy,
            "backfill": result.backfill,
            "placer": result.placer,
            "oracle": result.oracle,
        }
        want = [json.dumps({**run, **row}) + "\n" for row in schedule_rows(result)]
        assert list(jsonl_lines(result)) == want


def test_streamed_jsonl_lines_of_odd_values_are_json_dumps_text() -> None:
    from dataclasses import replace

    from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec
    from gpuplan.sim.schedule_io import jsonl_lines, schedule_rows
    from gpuplan.synth import synth_poisson

    cluster = ClusterSpec("c", (NodeSpec("n/ä", 8, GpuSpec("A100-80GB", 80.0)),))
    result = simulate(synth_poisson(200, seed=4, load=0.9, total_gpus=8), cluster, "fifo", "easy")
    recs = result.records
    recs[0] = replace(recs[0], job_id='é"\\x\n', submit_s=3)  # non-ASCII, quote, escapes; an int time
    recs[1] = replace(recs[1], end_s=float("inf"), start_s=-0.0)
    recs[2] = replace(recs[2], job_id=7)  # type: ignore[arg-type]  # a library caller's non-str id
    run = {"policy": result.policy, "backfill": result.backfill, "placer": result.placer, "oracle": False}
    want = [json.dumps({**run, **row}) + "\n" for row in schedule_rows(result)]
    assert list(jsonl_lines(result)) == want
    assert '"job_id": 7,' in want[2] and '"end_s": Infinity' in want[1] and "\\u00e9" in want[0]


def test_streamed_jsonl_times_of_every_magnitude_are_json_dumps_text() -> None:
    """The streamed rows format times in Arrow: its text must be repr's at every magnitude, where the
    two forms part (whole numbers, exponents below 1e-4 and from 1e10 and 1e16 on, -0.0, inf, nan)."""
    import random
    from dataclasses import replace

    from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec
    from gpuplan.sim.schedule_io import jsonl_lines, schedule_rows
    from gpuplan.synth import synth_poisson

    cluster = ClusterSpec("c", (NodeSpec("n", 8, GpuSpec("A100-80GB", 80.0)),))
    result = simulate(synth_poisson(3000, seed=5, load=0.9, total_gpus=8), cluster, "fifo", "easy")
    rng = random.Random(3)
    edges = [0.0, -0.0, 1e-4, 9.999999999999999e-05, 1e10, 9999999999.5, 1e16, 9999999999999998.0, 5e-324,
             float("inf"), float("-inf"), float("nan"), 3742.0, -12.0, 123456789.125]  # fmt: skip

    def value(k: int) -> float:
        if k < len(edges):
            return edges[k]
        x = 10.0 ** rng.uniform(-8, 20) * rng.choice((-1, 1))
        return [x, round(x), round(x, rng.randrange(0, 8))][k % 3]

    result.records = [
        replace(r, submit_s=value(3 * k), start_s=value(3 * k + 1), end_s=value(3 * k + 2))
        for k, r in enumerate(result.records)
    ]
    run = {"policy": result.policy, "backfill": result.backfill, "placer": result.placer, "oracle": False}
    want = [json.dumps({**run, **row}) + "\n" for row in schedule_rows(result)]
    assert list(jsonl_lines(result)) == want
    assert any('"start_s": 1e-05' in w or "e-0" in w for w in want) and '"submit_s": 0.0,' in want[0]

"""The `gpuplan` command through Typer's CliRunner, plus one real subprocess `--help`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from gpuplan import cli
from gpuplan.cli import app
from gpuplan.synth import synth_article
from gpuplan.traces import read_trace

FIXTURES = Path(__file__).parent / "fixtures"
CLI_FIX = FIXTURES / "cli"
HETERO = FIXTURES / "clusters" / "hetero-exclusive.toml"

POLICIES = ["fifo", "sjf", "ljf", "small-gpus-first", "large-gpus-first", "mem-desc", "gpu-time", "article"]
PREEMPTIVE = ["las", "tiresias", "gittins"]
BACKFILLS = ["none", "easy", "conservative"]
PLACERS = ["first-fit", "best-fit", "spread"]
PRESETS = ["1xH200-141GB", "4x8xA100-80GB", "8xA100-80GB"]
SUMMARY_KEYS = {
    "policy",
    "backfill",
    "oracle",
    "makespan_s",
    "utilization",
    "mean_jct_s",
    "p95_jct_s",
    "mean_wait_s",
    "mean_bounded_slowdown",
    "lower_bound_s",
    "bound_ratio",
}

runner = CliRunner()


def _invoke(*args: str | Path) -> Result:
    return runner.invoke(app, [str(a) for a in args])


def _ok(result: Result) -> Result:
    assert result.exit_code == 0, (
        f"exit {result.exit_code}\nstdout: {result.stdout}\nstderr: {result.stderr}\n"
        f"exception: {result.exception!r}"
    )
    return result


def _one_line_error(result: Result, *needles: str) -> str:
    """Exit 2, nothing on stdout, exactly one line on stderr that contains every needle."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def _runs(result: Result) -> list[dict[str, Any]]:
    runs = json.loads(_ok(result).stdout)
    assert isinstance(runs, list)
    for r in runs:
        assert set(r) >= SUMMARY_KEYS, SUMMARY_KEYS - set(r)
    return runs


def _assert_sane(runs: list[dict[str, Any]], oracle: bool) -> None:
    spans = [r["makespan_s"] for r in runs]
    assert spans == sorted(spans)
    for r in runs:
        assert r["oracle"] is oracle
        assert r["bound_ratio"] >= 1 - 1e-9, r
        assert 0 < r["utilization"] <= 1 + 1e-9, r


# --- demo -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Path]:
    out = tmp_path_factory.mktemp("demo")
    return _runs(_invoke("demo", "--json", "--plan-seconds", "2", "--out", out)), out


@pytest.fixture(scope="module")
def article_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "a.jsonl"
    result = _ok(_invoke("synth", "article", "--seed", "3", "--out", path))
    assert "80 jobs" in result.stdout
    return path


def test_demo_json_runs_every_policy_and_backfill(demo_run: tuple[list[dict[str, Any]], Path]) -> None:
    all_runs, out = demo_run
    runs = [r for r in all_runs if r["policy"] != "plan"]
    assert len(runs) == 24
    assert {(r["policy"], r["backfill"]) for r in runs} == {(p, b) for p in POLICIES for b in BACKFILLS}
    # the searched order (gpuplan plan) is shown too; how good it gets in a time budget is
    # tests/test_optimize.py's business (machine speed decides it), here: a valid, labelled schedule
    (plan,) = [r for r in all_runs if r["policy"] == "plan"]
    assert plan["jobs"] == 80 and plan["backfill"] == "easy"
    assert plan["makespan_s"] >= plan["lower_bound_s"] - 1e-6
    assert all(r["jobs"] == 80 for r in runs)
    _assert_sane(runs, oracle=False)
    _assert_report_shows(out / "report.html", all_runs)


def _assert_report_shows(report: Path, runs: list[dict[str, Any]]) -> None:
    """The report carries every run the JSON printed, with the same makespan, and Plotly inline."""
    page = report.read_text(encoding="utf-8")
    block = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert block is not None, "no report-data block"
    data = json.loads(block.group(1))
    shown = {(r["policy"], r["backfill"]): r["metrics"]["makespan_s"] for r in data["runs"]}
    assert shown == pytest.approx({(r["policy"], r["backfill"]): r["makespan_s"] for r in runs})
    assert [r["is_best"] for r in data["runs"]].count(True) == 1
    assert "Plotly" in page and "<script src=" not in page  # self-contained: nothing fetched


def test_demo_quality_claims(demo_run: tuple[list[dict[str, Any]], Path]) -> None:
    all_runs, _ = demo_run
    runs = [r for r in all_runs if r["policy"] != "plan"]  # the claim is about policies a queue can run
    best = runs[0]
    assert best["utilization"] >= 0.95, best
    assert best["bound_ratio"] <= 1.05, best
    fifo = next(r for r in runs if (r["policy"], r["backfill"]) == ("fifo", "none"))
    assert best["utilization"] - fifo["utilization"] >= 0.10, (best, fifo)
    # The same lower bound for every run: it depends on the jobs and the cluster only.
    assert len({round(r["lower_bound_s"], 6) for r in all_runs}) == 1


def test_demo_oracle_json_says_oracle(tmp_path: Path) -> None:
    runs = _runs(_invoke("demo", "--oracle", "--json", "--plan-seconds", "0", "--out", tmp_path))
    assert len(runs) == 24
    _assert_sane(runs, oracle=True)


def test_demo_oracle_table_mentions_oracle(tmp_path: Path) -> None:
    result = _ok(_invoke("demo", "--oracle", "--plan-seconds", "0", "--out", tmp_path))
    assert "ORACLE" in result.stdout
    assert "lower bound" in result.stdout
    assert (tmp_path / "report.html").is_file()


# --- simulate ---------------------------------------------------------------------------------------


def test_simulate_all_policies_and_backfills(article_trace: Path) -> None:
    runs = _runs(_invoke("simulate", article_trace, "--policy", "all", "--backfill", "all", "--json"))
    assert len(runs) == 24
    assert {(r["policy"], r["backfill"]) for r in runs} == {(p, b) for p in POLICIES for b in BACKFILLS}
    _assert_sane(runs, oracle=False)


def test_simulate_policy_list(article_trace: Path) -> None:
    runs = _runs(_invoke("simulate", article_trace, "--policy", "fifo,sjf", "--backfill", "easy", "--json"))
    assert sorted((r["policy"], r["backfill"]) for r in runs) == [("fifo", "easy"), ("sjf", "easy")]
    assert all(r["jobs"] == 80 for r in runs)


@pytest.mark.parametrize(
    ("option", "value", "valid"),
    [
        ("--policy", "fifo,bogus-policy", POLICIES),
        ("--backfill", "bogus-backfill", BACKFILLS),
        ("--placer", "bogus-placer", PLACERS),
        ("--cluster", "bogus-cluster", PRESETS),
    ],
)
def test_simulate_unknown_name(article_trace: Path, option: str, value: str, valid: list[str]) -> None:
    result = _invoke("simulate", article_trace, option, value, "--json")
    line = _one_line_error(result, value.split(",")[-1], *valid)
    assert "Traceback" not in line


def test_simulate_missing_trace(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    _one_line_error(_invoke("simulate", missing), "nope.jsonl")


def test_simulate_bad_csv_row_names_file_and_line() -> None:
    _one_line_error(_invoke("simulate", CLI_FIX / "bad_row.csv"), "bad_row.csv:3", "'two'")


def test_simulate_skip_bad_reports_skipped_count() -> None:
    result = _invoke("simulate", CLI_FIX / "bad_row.csv", "--skip-bad", "-p", "fifo", "-b", "easy", "--json")
    runs = _runs(result)
    assert [r["jobs"] for r in runs] == [3]
    assert "skipped 1 bad row" in result.stderr
    assert "bad_row.csv:3" in result.stderr


def test_simulate_foreign_csv_with_map() -> None:
    args = ("simulate", CLI_FIX / "foreign_tln.csv", "--map", "submit=t,duration=len,gpus=n", "--json")
    runs = _runs(_invoke(*args))
    assert len(runs) == 1
    assert runs[0]["jobs"] == 5
    # The 8-GPU job alone takes 300 s and the 4-GPU one 1800 s from t=90, so the span is >= 1890 s.
    assert runs[0]["makespan_s"] >= 1890 - 1e-9


def test_simulate_foreign_csv_without_map_fails() -> None:
    result = _invoke("simulate", CLI_FIX / "foreign_tln.csv")
    assert result.exit_code == 2
    assert "gpus" in result.stderr


def test_simulate_heterogeneous_cluster_file(article_trace: Path) -> None:
    result = _ok(_invoke("simulate", article_trace, "--cluster", HETERO, "-p", "fifo,article", "-b", "easy"))
    assert "20 GPUs on 3 node(s) (4x L40S-48GB, 2x8x A100-80GB), exclusive" in result.stdout
    runs = _runs(_invoke("simulate", article_trace, "--cluster", HETERO, "-p", "article", "--json"))
    assert runs[0]["jobs"] == 80
    # The bound is on the file's 20 GPUs, not the default preset's 8: the work over 20 GPUs.
    work_s = runs[0]["gpu_hours"] * 3600
    assert work_s / 20 - 1e-6 <= runs[0]["lower_bound_s"] < work_s / 8


def test_simulate_bad_cluster_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[[nodes]]\ngpus = 0\ngpu_mem_gb = 80\n", encoding="utf-8")
    _one_line_error(_invoke("simulate", CLI_FIX / "bad_row.csv", "--cluster", bad), "bad.toml", "gpus")


def _gpu_overlaps(schedule: list[dict[str, Any]]) -> int:
    """Pairs of jobs that held one GPU at the same time."""
    by_gpu: dict[str, list[tuple[float, float]]] = {}
    for r in schedule:
        for g in r["gpus"]:
            by_gpu.setdefault(g, []).append((r["start_s"], r["end_s"]))
    return sum(
        1
        for spans in by_gpu.values()
        for i, a in enumerate(spans)
        for b in spans[i + 1 :]
        if a[0] < b[1] and b[0] < a[1]
    )


def test_simulate_sharing_with_memory(article_trace: Path) -> None:
    args = ("simulate", article_trace, "-p", "article", "-b", "easy", "--json")
    (shared,) = _runs(_invoke(*args, "--sharing"))
    (exclusive,) = _runs(_invoke(*args))
    assert shared["jobs"] == exclusive["jobs"] == 80
    _assert_sane([shared], oracle=False)
    # the option took effect: jobs share GPUs (and run slower next to a neighbour), which exclusive never does
    assert _gpu_overlaps(shared["schedule"]) > 0
    assert _gpu_overlaps(exclusive["schedule"]) == 0
    duration = {j.id: j.duration_s for j in read_trace(article_trace).jobs}
    assert all(
        r["end_s"] - r["start_s"] == pytest.approx(duration[r["job_id"]]) for r in exclusive["schedule"]
    )
    assert any(r["end_s"] - r["start_s"] > duration[r["job_id"]] + 1e-6 for r in shared["schedule"])
    assert shared["makespan_s"] != exclusive["makespan_s"]


def test_simulate_oracle_flag(article_trace: Path) -> None:
    # sjf + strict order: jobs start in the order of the durations the policy sees
    args = ("simulate", article_trace, "-p", "sjf", "-b", "none", "--json")
    (oracle,) = _runs(_invoke(*args, "--oracle"))
    (plain,) = _runs(_invoke(*args))
    _assert_sane([oracle], oracle=True)
    assert plain["oracle"] is False
    jobs = {j.id: j for j in read_trace(article_trace).jobs}

    def starts_in_order_of(schedule: list[dict[str, Any]], attr: str) -> bool:
        ranked = sorted(schedule, key=lambda r: (getattr(jobs[r["job_id"]], attr), r["job_id"]))
        starts = [r["start_s"] for r in ranked]
        return starts == sorted(starts)

    assert starts_in_order_of(oracle["schedule"], "duration_s")
    assert not starts_in_order_of(plain["schedule"], "duration_s")  # the estimates are not the truth
    assert starts_in_order_of(plain["schedule"], "est_duration_s")


# --- listings ---------------------------------------------------------------------------------------


def test_policies_one_line_each() -> None:
    text = _ok(_invoke("policies")).stdout
    lines = text.splitlines()
    for name in [*POLICIES, *BACKFILLS, *PLACERS]:
        hits = [ln for ln in lines if ln.split() and ln.split()[0] == name]
        assert len(hits) == 1, (name, hits)
        assert len(hits[0].split()) > 1, f"{name} has no description"


def test_policies_json() -> None:
    data = json.loads(_ok(_invoke("policies", "--json")).stdout)
    assert [p["name"] for p in data["policies"]] == [*POLICIES, *PREEMPTIVE, "fairshare"]
    assert [p["name"] for p in data["policies"] if p["preemptive"]] == PREEMPTIVE
    assert [b["name"] for b in data["backfill"]] == BACKFILLS
    assert set(PLACERS) <= {p["name"] for p in data["placers"]}
    for section in data.values():
        assert all(item["description"] for item in section)
    assert {p["name"]: p["needs_duration"] for p in data["policies"]}["fifo"] is False


def test_clusters_lists_presets() -> None:
    text = _ok(_invoke("clusters")).stdout
    lines = [ln.split()[0] for ln in text.splitlines() if ln.strip()]
    assert lines == PRESETS
    data = json.loads(_ok(_invoke("clusters", "--json")).stdout)
    assert {n: (d["gpus"], d["nodes"], d["sharing"]) for n, d in data.items()} == {
        "1xH200-141GB": (1, 1, True),
        "4x8xA100-80GB": (32, 4, False),
        "8xA100-80GB": (8, 1, False),
    }


# --- synth ------------------------------------------------------------------------------------------


def test_synth_article_csv_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "x.csv"
    _ok(_invoke("synth", "article", "--seed", "1", "--out", out))
    jobs = read_trace(out).jobs
    assert len(jobs) == 80
    assert jobs == synth_article(1)


def test_synth_poisson(tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    args = ("synth", "poisson", "--jobs", "200", "--load", "0.8", "--cluster", "4x8xA100-80GB")
    result = _ok(_invoke(*args, "--out", out))
    assert "200 jobs" in result.stdout
    jobs = read_trace(out).jobs
    assert len(jobs) == 200
    submits = [j.submit_s for j in jobs]
    assert submits[0] == 0
    assert submits == sorted(submits)
    assert {j.gpus for j in jobs} <= {1, 2, 4, 8}
    assert len({j.gpus for j in jobs}) > 1


def test_synth_poisson_keeps_its_cluster(tmp_path: Path) -> None:
    """The load is relative to --cluster: the trace carries that cluster, and simulate uses it."""
    out = tmp_path / "x.jsonl"
    _ok(_invoke("synth", "poisson", "--jobs", "50", "--cluster", "1xH200-141GB", "--out", out))
    assert (tmp_path / "x.cluster.toml").is_file()
    assert read_trace(out).cluster is not None and read_trace(out).cluster.total_gpus == 1
    (run,) = json.loads(_ok(_invoke("simulate", out, "--json")).stdout)
    assert run["cluster"]["origin"] == "trace"
    assert run["cluster"]["gpus"] == 1
    assert run["cluster"]["describe"].startswith("1 GPU on 1 node(s) (1x H200-141GB)")


def test_synth_poisson_gpu_mix(tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    _ok(_invoke("synth", "poisson", "--jobs", "100", "--rate", "30", "--gpu-mix", "1=1", "--out", out))
    jobs = read_trace(out).jobs
    assert len(jobs) == 100
    assert {j.gpus for j in jobs} == {1}


def test_synth_poisson_class_mix(tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    _ok(_invoke("synth", "poisson", "--jobs", "100", "--class-mix", "0,0,0,1", "--out", out))
    jobs = read_trace(out).jobs
    assert {j.meta["class"] for j in jobs} == {"very-long-low-mem"}


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--gpu-mix", "1=x"),
        ("--gpu-mix", "one=1"),
        ("--gpu-mix", "0=1"),
        ("--gpu-mix", "1=-1"),
        ("--gpu-mix", "1=0,2=0"),
        ("--class-mix", "1,2"),
        ("--class-mix", "a,b,c,d"),
        ("--class-mix", "0,0,0,0"),
        ("--class-mix", "1,1,1,-1"),
    ],
)
def test_synth_poisson_bad_mix(tmp_path: Path, option: str, value: str) -> None:
    out = tmp_path / "x.jsonl"
    _one_line_error(_invoke("synth", "poisson", "--jobs", "10", option, value, "--out", out), option)
    assert not out.exists()


def test_synth_poisson_rate_and_load_conflict(tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    args = ("synth", "poisson", "--jobs", "10", "--rate", "5", "--load", "0.5", "--out", out)
    _one_line_error(_invoke(*args), "--rate", "--load")


# --- main() and the real entry point ----------------------------------------------------------------


def _main(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["gpuplan", *args])
    return cli.main()


def test_main_help_returns_zero(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(monkeypatch, "--help") == 0
    assert "simulate" in capsys.readouterr().out


def test_main_command_returns_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _main(monkeypatch, "clusters") == 0
    assert "8xA100-80GB" in capsys.readouterr().out


def test_main_gpuplan_error_is_nonzero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert _main(monkeypatch, "simulate", str(tmp_path / "missing.jsonl")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "missing.jsonl" in err[0]


def test_main_usage_error_is_nonzero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _main(monkeypatch, "simulate", "--no-such-option") != 0
    assert "--no-such-option" in capsys.readouterr().err


def test_main_unknown_command_is_nonzero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _main(monkeypatch, "no-such-command") != 0
    assert "no-such-command" in capsys.readouterr().err


def test_help_in_a_real_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpuplan.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    for command in ("simulate", "demo", "policies", "clusters", "synth"):
        assert command in proc.stdout, command
    assert proc.stderr == ""


def test_estimate_notes_name_the_runs_once(tmp_path: Path) -> None:
    """Without estimates, one line per clause names the runs it holds for, not one line per run."""
    trace = tmp_path / "t.jsonl"
    rows = [
        {"id": f"j{i}", "submit_s": i, "gpus": 1 + 3 * (i % 2), "duration_s": 100 + 10 * i} for i in range(12)
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = _ok(_invoke("simulate", trace, "-c", "8xA100-80GB", "-p", "fifo,sjf", "-b", "none,easy")).stdout
    notes = " ".join(out.split())  # rich wraps long lines
    assert "every run that uses estimates: estimates from the trace: 12 job(s) had none." in notes
    assert "every run with easy backfill: the backfill mode plans them as endless" in notes
    assert "sjf (every backfill mode): the policy ranks them as endless" in notes
    assert "sjf+easy: estimates" not in notes and "fifo+none: estimates" not in notes  # no per-run lines


def test_best_with_the_same_makespan_says_so(tmp_path: Path) -> None:
    """A best that only wins on mean JCT is not reported as '0.00 h sooner, 0 % shorter'."""
    trace = tmp_path / "t.jsonl"
    rows = [
        {"id": "x", "submit_s": 0, "gpus": 1, "duration_s": 5000},
        {"id": "y", "submit_s": 0, "gpus": 1, "duration_s": 50},
        {"id": "b", "submit_s": 1, "gpus": 7, "duration_s": 100},  # waits for y
    ]
    rows += [{"id": f"s{i}", "submit_s": 2, "gpus": 1, "duration_s": 100} for i in range(7)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = _ok(
        _invoke("simulate", trace, "-c", "8xA100-80GB", "-p", "fifo,small-gpus-first", "-b", "none")
    ).stdout
    notes = " ".join(out.split())
    assert "best policy small-gpus-first+none: the same makespan as fifo+none (1.39 h), mean JCT" in notes
    assert "% shorter" not in notes

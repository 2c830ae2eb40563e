"""`gpuplan audit` through Typer's CliRunner, on a small app that registers the command the way cli.py
does, plus the real public traces when ../shared/data has them and their readers are registered."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from plotly.offline import get_plotlyjs
from typer.testing import CliRunner, Result

from gpuplan.commands.audit import audit
from gpuplan.model import Job
from gpuplan.synth import synth_article
from gpuplan.traces import reader_names, write_trace

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
NASA = DATA / "pwa-nasa-ipsc-1993" / "NASA-iPSC-1993-3.1-cln.swf"
ALIBABA = DATA / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"

TOP_KEYS = {
    "trace", "jobs", "censored_jobs", "cluster", "states", "distributions", "histograms", "matrix",
    "article_classes", "top_users", "top_queues", "achieved", "what_if", "notes",
}  # fmt: skip
TRACE_KEYS = {
    "path", "format", "jobs", "skipped", "skipped_total", "warnings", "censored", "missing_fields", "cluster_source",
}  # fmt: skip
WHAT_IF_KEYS = {
    "jobs", "excluded_no_duration", "excluded_never_fit", "backfill", "oracle", "policies_simulated",
    "policies_skipped", "same_schedule_as", "budget_s", "elapsed_s", "runs", "fifo", "best", "time_saved_s",
    "gpu_hours_freed", "error", "notes", "no_winner",
}  # fmt: skip
ACHIEVED_KEYS = {
    "jobs_started", "jobs_never_started", "window_s", "makespan_s", "allocated_gpu_hours", "utilization",
    "peak_allocated_gpus", "queue_delay_s", "timeline", "idle_while_waiting", "notes",
}  # fmt: skip

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command(name="audit")(audit)


@app.command()
def other() -> None:
    """A second command, so `audit` is a subcommand as in cli.py."""


runner = CliRunner()


def _invoke(*args: str | Path) -> Result:
    return runner.invoke(app, ["audit", *(str(a) for a in args)])


def _ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result


def _one_line_error(result: Result, *needles: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("gpuplan: error: ")
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def article_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("audit") / "article.jsonl"
    write_trace(synth_article(0), path)
    return path


@pytest.fixture(scope="module")
def history_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small history with states, start/end times, a censored running job and a pending one."""
    jobs = [
        Job("a", 0, 4, mem_gb=30, duration_s=3600, user="ann", meta={"state": "COMPLETED", "start_s": 0, "end_s": 3600, "partition": "long"}),
        Job("b", 10, 8, mem_gb=70, duration_s=600, user="bob", meta={"state": "COMPLETED", "start_s": 3600, "end_s": 4200, "partition": "short"}),
        Job("c", 20, 2, mem_gb=10, duration_s=7200, user="ann", meta={"state": "FAILED", "start_s": 20, "end_s": 7220, "partition": "long"}),
        Job("d", 30, 1, mem_gb=5, user="cy", meta={"state": "RUNNING", "start_s": 4200, "censored": True}),
        Job("e", 40, 8, user="cy", meta={"state": "PENDING"}),
    ]  # fmt: skip
    path = tmp_path_factory.mktemp("audit") / "history.jsonl"
    write_trace(jobs, path)
    return path


def _json(result: Result) -> dict[str, Any]:
    data = json.loads(_ok(result).stdout)
    assert set(data) == TOP_KEYS, set(data) ^ TOP_KEYS
    assert set(data["trace"]) == TRACE_KEYS
    return data


# --------------------------------------------------------------------------- synthetic traces


def test_terminal_tables(article_trace: Path) -> None:
    out = _ok(_invoke(article_trace, "--cluster", "8xA100-80GB")).stdout
    for needle in ("jobs by state", "distributions", "profile matrix", "the article's classes",
                   "top users by GPU-hours", "what-if: 80 jobs replayed", "← best", "← FIFO", "GPU-hours freed"):  # fmt: skip
        assert needle in out, needle
    assert "no start times" in out  # a synthetic trace has no history of starts: said, not hidden


def test_json_keys_and_numbers(article_trace: Path) -> None:
    d = _json(_invoke(article_trace, "--cluster", "8xA100-80GB", "--json"))
    assert d["trace"]["format"] == "jsonl" and d["trace"]["cluster_source"] == "option"
    assert d["jobs"] == 80 and d["cluster"]["gpus"] == 8
    assert d["achieved"] is None
    w = d["what_if"]
    assert set(w) == WHAT_IF_KEYS
    assert w["jobs"] == 80 and w["error"] is None and w["oracle"] is False and w["backfill"] == "easy"
    assert len(w["runs"]) == 8
    fifo = next(r for r in w["runs"] if f"{r['policy']}+{r['backfill']}" == w["fifo"])
    best = w["runs"][0]
    assert f"{best['policy']}+{best['backfill']}" == w["best"]
    assert w["time_saved_s"] == pytest.approx(fifo["makespan_s"] - best["makespan_s"])
    assert w["gpu_hours_freed"] == pytest.approx(w["time_saved_s"] * 8 / 3600)
    shares = [c["gpu_hour_share"] for c in d["article_classes"]]
    assert sum(shares) == pytest.approx(1.0)
    assert sum(c["jobs"] for c in d["matrix"]["cells"]) == 80


def test_oracle_flag_is_carried(article_trace: Path) -> None:
    w = _json(_invoke(article_trace, "-c", "8xA100-80GB", "--json", "--oracle"))["what_if"]
    assert w["oracle"] is True and all(r["oracle"] for r in w["runs"])
    assert any("ORACLE" in n for n in w["notes"])


def test_out_writes_a_self_contained_page_and_the_json(article_trace: Path, tmp_path: Path) -> None:
    result = _ok(_invoke(article_trace, "--cluster", "8xA100-80GB", "--json", "--out", tmp_path / "rep"))
    page = (tmp_path / "rep" / "audit.html").read_text(encoding="utf-8")
    saved = json.loads((tmp_path / "rep" / "audit.json").read_text(encoding="utf-8"))
    assert saved == json.loads(result.stdout)
    assert page.count(get_plotlyjs()) == 1
    ours = page.replace(get_plotlyjs(), "")
    assert "<script src" not in ours.lower() and "<link" not in ours.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", ours)
    for fig in ("fig-hist", "fig-matrix", "fig-whatif"):
        assert f'id="{fig}"' in ours, fig
    embedded = re.search(r'<script type="application/json" id="audit-data">(.*?)</script>', ours, re.S)
    assert embedded is not None and json.loads(embedded.group(1))["jobs"] == 80


def test_history_with_starts_censoring_and_states(history_trace: Path, tmp_path: Path) -> None:
    result = _invoke(history_trace, "--cluster", "4x8xA100-80GB", "--json", "--out", tmp_path)
    d = _json(result)
    assert d["states"] == {"COMPLETED": 2, "FAILED": 1, "PENDING": 1, "RUNNING": 1}
    assert d["censored_jobs"] == 1
    a = d["achieved"]
    assert set(a) == ACHIEVED_KEYS
    assert (a["jobs_started"], a["jobs_never_started"]) == (4, 1)
    assert a["queue_delay_s"]["max"] == pytest.approx(4170.0)
    assert a["idle_while_waiting"]["total_gpu_h"] > 0
    w = d["what_if"]
    assert (w["jobs"], w["excluded_no_duration"]) == (3, 2)
    assert [q["name"] for q in d["top_queues"]["top"]] == ["long", "short", "(no queue)"]
    assert d["top_users"]["top"][0]["name"] == "ann"
    page = (tmp_path / "audit.html").read_text(encoding="utf-8")
    assert 'id="fig-util"' in page and 'id="fig-delay"' in page


def test_missing_cluster_is_the_default_with_a_warning(article_trace: Path) -> None:
    """The rule of every command (tests/test_cli_rules.py): the default cluster, said on stderr."""
    result = _invoke(article_trace, "--json")
    assert result.exit_code == 0, result.stderr
    assert "does not describe its cluster: using the default 8xA100-80GB" in result.stderr
    data = json.loads(result.stdout)
    assert data["trace"]["cluster_source"] == "default"
    assert data["cluster"]["name"] == "8xA100-80GB" and data["cluster"]["origin"] == "default"


def test_unknown_cluster_is_one_line(article_trace: Path) -> None:
    _one_line_error(
        _invoke(article_trace, "--cluster", "nope"), "unknown cluster preset 'nope'", "8xA100-80GB"
    )


def test_missing_trace_is_one_line(tmp_path: Path) -> None:
    _one_line_error(_invoke(tmp_path / "none.jsonl", "-c", "8xA100-80GB"), "no such trace file")


def test_unwritable_out_is_one_line(article_trace: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder", encoding="utf-8")
    _one_line_error(
        _invoke(article_trace, "-c", "8xA100-80GB", "--json", "--out", blocker), "cannot write the report"
    )


def test_skip_bad_reports_skipped_rows(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("id,submit_s,gpus,duration_s\na,0,1,60\nb,0,0,60\nc,5,2,30\n", encoding="utf-8")
    strict = _invoke(path, "-c", "8xA100-80GB")
    _one_line_error(strict, "bad.csv:3")
    result = _invoke(path, "-c", "8xA100-80GB", "--skip-bad", "--json")
    d = _json(result)
    assert d["trace"]["skipped_total"] == 1 and d["jobs"] == 2
    assert "skipped 1 bad row(s)" in result.stderr


# --------------------------------------------------------------------------- the real traces


def _real(path: Path, reader: str) -> None:
    if not path.is_file():
        pytest.skip(f"{path} is absent (the public traces live in ../shared/data)")
    assert reader in reader_names(), f"trace reader {reader!r} is not registered"


def test_real_nasa_swf_audit() -> None:
    _real(NASA, "swf")
    result = _invoke(NASA, "--json", "--sim-budget", "0")
    d = _json(result)
    assert d["trace"]["format"] == "swf" and d["trace"]["cluster_source"] == "trace"
    assert d["cluster"]["gpus"] == 128
    w = d["what_if"]
    assert w["error"] is None and w["jobs"] == d["jobs"] > 18000
    assert w["fifo"] is not None and w["best"] is not None
    assert "gpuplan: censored:" in result.stderr  # its submit times are start times: said on stderr


def test_real_alibaba_audit() -> None:
    _real(ALIBABA, "alibaba-gpu-v2023")
    result = _invoke(ALIBABA, "--json", "--sim-budget", "0")
    d = _json(result)
    assert d["trace"]["format"] == "alibaba-gpu-v2023" and d["cluster"]["gpus"] == 6212
    w = d["what_if"]
    assert w["error"] is None and w["fifo"] is not None
    assert w["excluded_no_duration"] > 0  # pending pods never ran: excluded and counted
    assert d["achieved"] is not None and d["achieved"]["jobs_started"] > 0
    assert d["states"].get("Running", 0) > 0
    assert "gpuplan: censored:" in result.stderr

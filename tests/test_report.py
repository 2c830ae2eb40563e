"""The HTML report: self-contained, one Gantt per run, numbers readable back from the page."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from plotly.offline import get_plotlyjs

from gpuplan.errors import GpuplanError
from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec
from gpuplan.report.html import (
    GANTT_MAX_RECORDS,
    UTIL_MAX_POINTS,
    render_report,
    report_data,
    write_report,
)
from gpuplan.sim.result import JobRecord, Metrics, SimResult

A100 = GpuSpec("A100-80GB", 80.0)
CLUSTER = ClusterSpec("2x2", (NodeSpec("node0", 2, A100), NodeSpec("node1", 2, A100)))
SHARED = ClusterSpec("1x2-shared", (NodeSpec("node0", 2, A100),), sharing=True, max_jobs_per_gpu=3)
_JSON_BLOCK = re.compile(r'<script type="application/json" id="([^"]+)">(.*?)</script>', re.S)


def _labels(cluster: ClusterSpec) -> list[str]:
    return [f"{n.name}/gpu{g}" for n in cluster.nodes for g in range(n.gpus)]


def _metrics(makespan_s: float, **over: float) -> Metrics:
    base: dict[str, Any] = {
        "jobs": 3,
        "makespan_s": makespan_s,
        "utilization": 0.75,
        "mean_jct_s": 3000.0,
        "p50_jct_s": 2800.0,
        "p95_jct_s": 5000.0,
        "mean_wait_s": 600.0,
        "p50_wait_s": 400.0,
        "p95_wait_s": 1200.0,
        "mean_bounded_slowdown": 1.4,
        "idle_gpu_hours_while_waiting": 0.5,
        "lower_bound_s": 6000.0,
        "bound_ratio": makespan_s / 6000.0,
        "gpu_hours": 6.0,
    }
    base.update(over)
    return Metrics(**base)


def _records() -> list[JobRecord]:
    return [
        JobRecord("j1", 0.0, 0.0, 3600.0, (0, 1), 40.0, "train"),
        JobRecord("j2", 0.0, 0.0, 7200.0, (2,), 20.0, "eval"),
        JobRecord("j3", 600.0, 3600.0, 7200.0, (0, 1, 3), None, "train"),
    ]


def _result(policy: str, backfill: str, makespan_s: float, **kw: Any) -> SimResult:
    cluster = kw.pop("cluster", CLUSTER)
    return SimResult(
        policy=policy,
        backfill=backfill,
        placer=kw.pop("placer", "pack"),
        oracle=kw.pop("oracle", False),
        cluster=cluster,
        metrics=kw.pop("metrics", _metrics(makespan_s)),
        records=kw.pop("records", _records()),
        util_timeline=kw.pop("util_timeline", [(0.0, 3), (3600.0, 4), (7200.0, 0)]),
        gpu_labels=_labels(cluster),
        **kw,
    )


def _runs() -> list[SimResult]:
    return [
        _result("fifo", "none", 9000.0),
        _result("sjf", "easy", 7000.0),
        _result("fifo", "easy", 8000.0),
        _result("sjf", "easy", 6500.0, oracle=True),
    ]


def _blocks(page: str) -> dict[str, str]:
    return dict(_JSON_BLOCK.findall(page))


def _table_rows(page: str) -> list[list[str]]:
    table = page.split('<table class="summary">')[1].split("</table>")[0]
    body = table.split("<tbody>")[1]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in body.split("</tr>")[:-1]]


def _strict_json(text: str) -> Any:
    def refuse(const: str) -> None:
        raise ValueError(f"{const} is not JSON a browser can parse")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def page() -> str:
    return render_report(_runs(), title="Demo <report>", subtitle=CLUSTER.describe(), notes=["oracle note"])


# --------------------------------------------------------------------------- self-contained


def test_plotly_js_is_inline_exactly_once(page: str) -> None:
    assert page.count(get_plotlyjs()) == 1


def test_page_requests_nothing_external(page: str) -> None:
    assert "<script src" not in page.lower()
    assert "<link" not in page.lower()
    assert "@import" not in page
    ours = page.replace(get_plotlyjs(), "")
    assert "http://" not in ours
    assert "https://" not in ours
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", ours)
    # plotly.js itself links to plotly.com only from its modebar logo, which the page turns off
    assert '"displaylogo": false' in ours


def test_title_and_job_names_are_escaped() -> None:
    records = [JobRecord("x1", 0.0, 0.0, 60.0, (0,), None, "</script><b>evil</b>")]
    out = render_report([_result("fifo", "none", 60.0, records=records)], title="a </script> b")
    assert "a &lt;/script&gt; b" in out
    ours = out.replace(get_plotlyjs(), "")
    assert "</script><b>" not in ours
    assert ours.count("<script") == ours.count("</script>")


# --------------------------------------------------------------------------- structure


def test_structure(page: str) -> None:
    headings = re.findall(r"<h2>(.*?)</h2>", page)
    assert headings == ["Summary", "Makespan and utilization", "Utilization over time", "Gantt per run"]
    assert "<h1>Demo &lt;report&gt;</h1>" in page
    assert CLUSTER.describe() in page
    assert "<li>oracle note</li>" in page
    for element_id in ("fig-compare", "fig-util", "gantt-select"):
        assert f'id="{element_id}"' in page
    assert set(_blocks(page)) == {
        "fig-compare-data",
        "fig-util-data",
        "report-data",
        *(f"gantt-{i}-data" for i in (1, 3)),  # the best run and the FIFO baseline only
    }
    assert "Plotly.Plots.resize" in page
    assert page.rstrip().endswith("</html>")


def test_gantt_for_the_runs_that_matter_one_bar_per_block_of_gpus(page: str) -> None:
    blocks = _blocks(page)
    assert len(re.findall(r'class="gantt-panel"', page)) == 2
    data = _strict_json(blocks["report-data"])
    assert [(r["label"], r["gantt_drawn"]) for r in data["runs"]] == [
        ("sjf+easy (oracle)", False),
        ("sjf+easy", True),
        ("fifo+easy", False),
        ("fifo+none", True),
    ]
    assert "not for 2 other run(s): sjf+easy (oracle), fifo+easy" in page
    for i in (1, 3):
        fig = _strict_json(blocks[f"gantt-{i}-data"])
        assert {t["type"] for t in fig["data"]} == {"bar"}
        assert {t["orientation"] for t in fig["data"]} == {"h"}
        assert sum(len(t["x"]) for t in fig["data"]) == 1 + 1 + 2  # j1 on GPUs 0-1, j2, j3 on 0-1 and 3
        assert {t["name"] for t in fig["data"]} == {"train", "eval"}
        assert fig["layout"]["yaxis"]["ticktext"] == _labels(CLUSTER)


def test_gantt_bar_spans_start_to_end_in_hours(page: str) -> None:
    fig = _strict_json(_blocks(page)["gantt-1-data"])
    train = next(t for t in fig["data"] if t["name"] == "train")
    rows = sorted(zip(train["base"], train["x"], (c[0] for c in train["customdata"]), strict=True))
    assert rows[0] == (0.0, 1.0, "j1")
    assert rows[-1] == (1.0, 1.0, "j3")
    blocks = sorted(
        (y, w)
        for y, w, c in zip(train["y"], train["width"], train["customdata"], strict=True)
        if c[0] == "j3"
    )
    assert blocks == [(0.5, pytest.approx(1 + 0.8 * 0.92)), (3.0, pytest.approx(0.8 * 0.92))]
    j3 = next(c for c in train["customdata"] if c[0] == "j3")
    assert j3[5] == pytest.approx((3600 - 600) / 3600, abs=1e-4)  # wait = start - submit
    assert "node1/gpu1" in j3[2]


def test_best_run_gantt_is_the_visible_one(page: str) -> None:
    data = _strict_json(_blocks(page)["report-data"])
    best = next(i for i, run in enumerate(data["runs"]) if run["is_best"])
    assert re.search(rf'<option value="{best}" selected>', page)
    visible = re.findall(r'<div class="gantt-panel" data-run="(\d+)">', page)
    assert visible == [str(best)]


# --------------------------------------------------------------------------- numbers


def test_report_data_round_trips_metrics(page: str) -> None:
    data = _strict_json(_blocks(page)["report-data"])
    given = {r.label: r.metrics.as_dict() for r in _runs()}
    assert {run["label"]: run["metrics"] for run in data["runs"]} == given
    assert data == report_data(_runs())


def test_summary_sorted_by_makespan(page: str) -> None:
    data = _strict_json(_blocks(page)["report-data"])
    makespans = [run["metrics"]["makespan_s"] for run in data["runs"]]
    assert makespans == sorted(makespans)
    makespan_cells = [cells[3] for cells in _table_rows(page)]
    assert [float(h) for h in makespan_cells] == [round(s / 3600, 2) for s in (6000, 6500, 7000, 8000, 9000)]


def test_fifo_best_oracle_and_bound_are_marked(page: str) -> None:
    data = _strict_json(_blocks(page)["report-data"])
    by_label = {run["label"]: run for run in data["runs"]}
    # only the FIFO baseline (fifo+none, as the CLI marks it) carries the badge, not every fifo run
    assert [label for label, run in by_label.items() if run["is_fifo"]] == ["fifo+none"]
    assert data["best"] == "sjf+easy"  # the oracle run is faster but not a real schedule
    assert by_label["sjf+easy (oracle)"]["oracle"] is True
    assert data["lower_bounds_s"] == [6000.0]
    table = page.split('<table class="summary">')[1].split("</table>")[0]
    row_classes = re.findall(r'<tr(?: class="([^"]*)")?>', table)[1:]  # skip the header row
    assert row_classes == ["bound", "", "best", "", "fifo"]  # fifo+easy unmarked, fifo+none (slowest) marked


def test_compare_figure_has_lower_bound_line(page: str) -> None:
    fig = _strict_json(_blocks(page)["fig-compare-data"])
    assert [s["y0"] for s in fig["layout"]["shapes"]] == [pytest.approx(6000 / 3600)]
    assert fig["data"][0]["x"] == [run["label"] for run in report_data(_runs())["runs"]]


def test_non_finite_metrics_become_null() -> None:
    run = _result("fifo", "none", 100.0, metrics=_metrics(100.0, lower_bound_s=0.0, bound_ratio=math.inf))
    out = render_report([run], title="t")
    data = _strict_json(_blocks(out)["report-data"])
    assert data["runs"][0]["metrics"]["bound_ratio"] is None
    assert "n/a" in out


def test_duplicate_labels_get_the_placer() -> None:
    runs = [_result("sjf", "easy", 10.0, placer="pack"), _result("sjf", "easy", 20.0, placer="spread")]
    labels = [run["label"] for run in report_data(runs)["runs"]]
    assert labels == ["sjf+easy [pack]", "sjf+easy [spread]"]


def test_empty_results_raise() -> None:
    with pytest.raises(GpuplanError, match="no runs"):
        render_report([], title="t")


# --------------------------------------------------------------------------- big runs and sharing


def _many_records(n: int) -> list[JobRecord]:
    return [
        JobRecord(f"j{k}", 0.0, float(k), float(k) + 50.0, (k % 4,), None, f"c{k % 13}") for k in range(n)
    ]


def test_truncates_gantt_of_big_runs_and_says_so() -> None:
    n = GANTT_MAX_RECORDS + 1
    runs = [_result("fifo", "none", 9000.0, records=_many_records(n)), _result("sjf", "easy", 8000.0)]
    out = render_report(runs, title="t")
    assert f"Gantt shows the first 5,000 of {n:,} jobs by start time." in out
    assert out.count('class="truncated"') == 1
    data = _strict_json(_blocks(out)["report-data"])
    big = next(run for run in data["runs"] if run["records"] == n)
    assert (big["gantt_records"], big["gantt_truncated"]) == (GANTT_MAX_RECORDS, True)
    fig = _strict_json(_blocks(out)[f"gantt-{data['runs'].index(big)}-data"])
    assert sum(len(t["x"]) for t in fig["data"]) == GANTT_MAX_RECORDS
    assert max(max(t["base"]) for t in fig["data"]) == pytest.approx((GANTT_MAX_RECORDS - 1) / 3600, abs=1e-4)
    assert len(fig["data"]) == 10  # nine most common names and "other", not one trace per job


def test_small_runs_are_not_truncated(page: str) -> None:
    assert "Gantt shows the first" not in page


def test_shared_gpu_jobs_get_separate_lanes() -> None:
    records = [
        JobRecord("a", 0.0, 0.0, 7200.0, (0,), 30.0, "x"),
        JobRecord("b", 0.0, 600.0, 3600.0, (0,), 30.0, "x"),
        JobRecord("c", 0.0, 3600.0, 7200.0, (0,), 30.0, "x"),  # starts as b ends: reuses b's lane
        JobRecord("d", 0.0, 0.0, 3600.0, (1,), 30.0, "x"),
    ]
    run = _result("fifo", "none", 7200.0, cluster=SHARED, records=records, util_timeline=[(0.0, 2)])
    fig = _strict_json(_blocks(render_report([run], title="t"))["gantt-0-data"])
    bars = fig["data"][0]
    by_job = {c[0]: (y, w) for c, y, w in zip(bars["customdata"], bars["y"], bars["width"], strict=True)}
    assert by_job["a"][0] < 0 < by_job["b"][0] < 0.5  # two lanes around row 0
    assert by_job["b"] == by_job["c"]
    assert by_job["a"][1] < 0.45
    assert by_job["d"][0] == pytest.approx(1.0)  # alone on GPU 1: full-height, centred
    assert by_job["d"][1] > 0.7
    assert fig["layout"]["barmode"] == "overlay"


# --------------------------------------------------------------------------- utilization


def test_util_timeline_in_percent_and_hours(page: str) -> None:
    fig = _strict_json(_blocks(page)["fig-util-data"])
    assert len(fig["data"]) == 4
    line = fig["data"][0]
    assert line["line"]["shape"] == "hv"
    assert line["x"][:3] == [0.0, 1.0, 2.0]
    assert line["y"][:3] == [75.0, 100.0, 0.0]


def test_long_util_timeline_is_resampled() -> None:
    timeline = [(float(t), t % 5) for t in range(3 * UTIL_MAX_POINTS)]
    run = _result("fifo", "none", 3.0 * UTIL_MAX_POINTS, util_timeline=timeline)
    out = render_report([run], title="t")
    line = _strict_json(_blocks(out)["fig-util-data"])["data"][0]
    assert len(line["x"]) <= UTIL_MAX_POINTS + 1
    assert sum(line["y"][:-1]) / (len(line["y"]) - 1) == pytest.approx(100 * 2 / 4, rel=0.01)
    assert "resampled" in out


# --------------------------------------------------------------------------- files and browsers


def test_write_report_creates_folders(tmp_path: Path) -> None:
    out = write_report(_runs(), tmp_path / "a" / "b" / "report.html", title="t", subtitle="s")
    assert out == tmp_path / "a" / "b" / "report.html"
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def _inline_script(page: str) -> str:
    return page.rsplit("<script>", 1)[1].split("</script>", 1)[0]


def _require_tool(path: str | None, why: str) -> None:
    """A missing tool is a skip on a developer machine and a failure in CI (these machines have both)."""
    if path is not None and Path(path).exists():
        return
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


def test_inline_script_is_valid_javascript(page: str, tmp_path: Path) -> None:
    _require_tool(shutil.which("node"), "node is not installed; cannot syntax-check the report's JS")
    script = tmp_path / "report.js"
    script.write_text(_inline_script(page), encoding="utf-8")
    done = subprocess.run(["node", "--check", str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_chromium_renders_page(tmp_path: Path) -> None:
    _require_tool(
        "/usr/bin/chromium", "/usr/bin/chromium is missing: apt-get install chromium (.ci/run does)"
    )
    html_path = write_report(_runs(), tmp_path / "report.html", title="t")
    png = tmp_path / "shot.png"
    cmd = [
        "/usr/bin/chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        f"--screenshot={png}",
        "--window-size=1400,1000",
        html_path.resolve().as_uri(),
    ]
    subprocess.run(cmd, capture_output=True, timeout=120, check=False)
    assert png.exists() and png.stat().st_size > 10_000


def test_several_lower_bounds_are_shown_per_run() -> None:
    runs = [_result("fifo", "none", 9000.0), _result("sjf", "easy", 8000.0)]
    runs[1].metrics.lower_bound_s = 5000.0
    out = render_report(runs, title="t")
    assert "2 different lower bounds" in out
    assert [cells[1] for cells in _table_rows(out) if "lower bound" in cells[1]] == []
    fig = _strict_json(_blocks(out)["fig-compare-data"])
    ticks = next(t for t in fig["data"] if t.get("name") == "lower bound")
    assert ticks["y"] == [pytest.approx(5000 / 3600), pytest.approx(6000 / 3600)]
    assert "shapes" not in fig["layout"]

"""Each dashboard view in headless Chromium: charts with the right GPUs and jobs, live updates,
a what-if submitted and its table read, bad input shown, 10,000 jobs paged. Screenshots go to
out/browser/. A page error, a console error or a failed request fails the test."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from dashboard_support import BUSY_JOBS, LiveServer

from browser_support import Watch, shot
from gpuplan.core.policies import policy_names
from gpuplan.synth import synth_article
from gpuplan.traces import write_trace
from gpuplan.web.app import QUEUE_GANTT_JOBS

BAD_ROWS = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "bad_row.csv"
TIMEOUT_MS = 20_000


def _count(page: Any, selector: str) -> int:
    return int(page.locator(selector).count())


def _traces(page: Any, div: str) -> int:
    return int(page.evaluate(f"document.getElementById('{div}')._fullData.length"))


def _bars(page: Any, div: str) -> int:
    """Bars drawn in a bar chart: the sum of its traces' point counts."""
    return int(
        page.evaluate(f"document.getElementById('{div}')._fullData.reduce((n, t) => n + t.x.length, 0)")
    )


def test_node_view_live(page: Any, served: dict[str, LiveServer], watch: Watch, artifacts: Path) -> None:
    live = served["busy"]
    home = live.home
    page.goto(live.url + "/node")
    page.wait_for_function(
        "document.querySelectorAll('#node-util .scatterlayer g.trace').length === 8", timeout=TIMEOUT_MS
    )
    assert _traces(page, "node-util") == _traces(page, "node-mem") == 8
    assert _count(page, "#gpu-table tbody tr") == 8
    assert _count(page, "#proc-table tbody tr") == sum(len(g) for g, *_ in BUSY_JOBS) == 4
    assert "FAKE device set fake:8xA100-80GB" in page.locator("#source").inner_text()
    assert page.locator("#gpu-table tr[data-gpu='2'] .mem").inner_text() == "24.0 / 80"
    page.wait_for_function(
        "document.getElementById('live-status').textContent === 'connected'", timeout=TIMEOUT_MS
    )
    points = page.evaluate("document.getElementById('node-util')._fullData[6].x.length")
    jid = home.run((6,), 33.0, 55.0, name="late", user="alice")  # a job starts: the page sees it, no reload
    try:
        page.wait_for_function(
            "document.querySelector('#gpu-table tr[data-gpu=\"6\"] .mem').textContent === '33.0 / 80'",
            timeout=TIMEOUT_MS,
        )
        # the process shows up first, its job once the store row (written after the launch) is read
        page.wait_for_function(
            "[...document.querySelectorAll('#proc-table tr[data-gpu=\"6\"]')].some(r => r.textContent.includes('alice'))",
            timeout=TIMEOUT_MS,
        )
        assert _count(page, "#proc-table tbody tr") == 5
        row = page.locator("#proc-table tr[data-gpu='6']").inner_text()
        assert "alice" in row and str(jid) in row and "late" in row, row
        assert page.locator("#origin").inner_text() == "the GPUs directly (no agent sampling)"
        page.wait_for_function(
            f"document.getElementById('node-util')._fullData[6].x.length > {points}", timeout=TIMEOUT_MS
        )
        assert 55.0 in page.evaluate("document.getElementById('node-util')._fullData[6].y")
        shot(page, artifacts, "node")
    finally:
        home.stop(jid)
    page.wait_for_function(
        "document.querySelectorAll('#proc-table tbody tr').length === 4", timeout=TIMEOUT_MS
    )
    watch.check()


def test_queue_view(page: Any, served: dict[str, LiveServer], watch: Watch, artifacts: Path) -> None:
    live = served["busy"]
    rows = live.home.source().queue()
    page.goto(live.url + "/queue")
    page.wait_for_selector("body[data-rendered='table'][data-gantt='drawn']", timeout=TIMEOUT_MS)
    assert _count(page, "#queue-table tbody tr") == len(rows) == 15
    states = page.locator("#queue-table tbody tr td:nth-child(3)").all_inner_texts()
    assert states == ["running"] * 3 + ["waiting"] * 12  # running first, then the planned order
    starts = page.locator("#queue-table tbody tr td:nth-child(9)").all_inner_texts()
    assert all(s.strip() not in ("", "—") for s in starts), starts
    # one bar per job and GPU: every job of the queue is planned on this 8-GPU node
    assert _bars(page, "queue-gantt") == sum(r.gpus for r in rows)
    assert page.locator("#page-info").inner_text() == f"jobs 1–15 of {len(rows)}"
    shot(page, artifacts, "queue")
    watch.check()


def test_queue_with_10000_jobs_pages(
    page: Any,
    served: dict[str, LiveServer],
    watch: Watch,
    artifacts: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    live = served["big"]
    started = time.perf_counter()
    page.goto(live.url + "/queue")
    page.wait_for_selector("body[data-rendered='table']", timeout=TIMEOUT_MS)
    wall_ms = (time.perf_counter() - started) * 1000
    table_ms = page.evaluate("window.gpuplanFirstRenderMs")
    nav_ms = page.evaluate("window.gpuplanTableAtMs")  # the page's own clock, when the rows were drawn
    line = (
        f"10,000-job queue: table drawn {nav_ms:.0f} ms after navigation start "
        f"({table_ms:.0f} ms fetch+render; {wall_ms:.0f} ms wall from goto, with Playwright's round trips)"
    )
    with capsys.disabled():  # printed, never asserted (performance lives in bench/)
        print(f"\n{line}")
    (artifacts / "first-render.txt").write_text(line + "\n")
    assert page.locator("#page-info").inner_text() == "jobs 1–100 of 10000"
    assert _count(page, "#queue-table tbody tr") == 100
    page.click("#page-next")
    page.wait_for_function(
        "document.getElementById('page-info').textContent.startsWith('jobs 101–200')", timeout=TIMEOUT_MS
    )
    assert page.locator("#queue-table tbody tr td:nth-child(1)").first.inner_text() == "101"
    page.wait_for_selector("body[data-gantt='drawn']", timeout=TIMEOUT_MS)
    assert f"first {QUEUE_GANTT_JOBS} planned jobs" in page.locator("#queue-gantt-note").inner_text()
    shot(page, artifacts, "queue-10000")
    watch.check()


def test_empty_node_and_queue(
    page: Any, served: dict[str, LiveServer], watch: Watch, artifacts: Path
) -> None:
    live = served["empty"]
    page.goto(live.url + "/node")
    page.wait_for_function(
        "document.querySelectorAll('#node-util .scatterlayer g.trace').length === 8", timeout=TIMEOUT_MS
    )
    assert _count(page, "#proc-table tbody tr") == 0
    assert page.locator("#proc-empty").is_visible()
    shot(page, artifacts, "node-empty")
    page.goto(live.url + "/queue")
    page.wait_for_selector("body[data-rendered='table'][data-gantt='empty']", timeout=TIMEOUT_MS)
    assert page.locator("#queue-empty").is_visible()
    assert page.locator("#page-info").inner_text() == "no jobs"
    shot(page, artifacts, "queue-empty")
    watch.check()


def test_whatif_table_charts_and_bad_rows(
    page: Any, served: dict[str, LiveServer], watch: Watch, artifacts: Path, tmp_path: Path
) -> None:
    trace = tmp_path / "article.csv"
    jobs = synth_article(0)
    write_trace(jobs, trace)
    live = served["busy"]
    assert live.token is not None
    page.goto(live.url + "/whatif")
    policies = page.locator("input[name='policy']").count()
    assert policies == len(policy_names())
    watch.allowed.add(("/api/whatif", 403))
    page.set_input_files("#wf-file", str(trace))
    page.click("#wf-run")  # an upload without the token is refused, and the page says what it needs
    page.wait_for_selector("body[data-whatif='error']", timeout=TIMEOUT_MS)
    assert "need the server's token" in page.locator("#whatif-error").inner_text()
    page.fill("#wf-token", live.token)
    page.click("#wf-run")
    page.wait_for_selector("body[data-whatif='done']", timeout=60_000)
    runs = policies + 1  # every policy with EASY backfill, and FIFO without backfill as the baseline
    assert _count(page, "#whatif-table table.summary tbody tr") == runs + 1  # + the lower-bound row
    assert _count(page, "#savings-table tbody tr") == runs
    assert "article.csv" in page.locator("#whatif-caption").inner_text()
    fifo_row = page.locator("#savings-table tbody tr", has_text="fifo+none").inner_text()
    assert "\t0.0\t" in fifo_row  # the baseline saves nothing against itself
    assert _traces(page, "whatif-util") == runs
    assert _bars(page, "whatif-compare") == 2 * runs  # makespan and utilization bars per run
    page.wait_for_function(
        "document.getElementById('whatif-gantt-note').textContent.endsWith('80 jobs')", timeout=TIMEOUT_MS
    )
    assert _bars(page, "whatif-gantt") == sum(j.gpus for j in jobs)
    shot(page, artifacts, "whatif")

    watch.allowed.add(("/api/whatif", 400))
    page.set_input_files("#wf-file", str(BAD_ROWS))
    page.click("#wf-run")
    page.wait_for_selector("body[data-whatif='error']", timeout=TIMEOUT_MS)
    error = page.locator("#whatif-error").inner_text()
    assert "bad_row.csv:3" in error and "gpus" in error and "'two'" in error, error
    assert not page.locator("#whatif-result").is_visible()
    shot(page, artifacts, "whatif-bad-rows")
    watch.check()

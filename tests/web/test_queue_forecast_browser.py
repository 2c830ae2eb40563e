"""The dashboard's queue page on a real agent (fifo + EASY, fake 8xA100) in headless Chromium: every
row's expected start and end are the core's forecast, the end after the start, the very values
`gpuplan queue --json` prints at the same moment (the page and the CLI ask the same agent)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from browser_support import Watch, require_chromium, serve_in_thread, shot

TIMEOUT_MS = 20_000


def _queue_json(home: Path) -> dict[str, Any]:
    env = {**os.environ, "GPUPLAN_HOME": str(home)}
    out = subprocess.run([sys.executable, "-m", "gpuplan.cli", "queue", "--json"], env=env,
                         capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    return dict(json.loads(out.stdout))


def test_queue_page_shows_the_forecast(page: Any, watch: Watch, artifacts: Path, tmp_path: Path) -> None:
    require_chromium()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the agent tests' daemon helper
    from agent_helpers import Daemon
    from gpuplan.agent.gpus import open_backend
    from gpuplan.web.app import ServeConfig, create_app
    from gpuplan.web.live import NodeSource

    daemon = Daemon(tmp_path / "home", policy="fifo", backfill="easy").start()
    served = None
    try:
        a = daemon.submit("sleep 300", gpus=4, time_limit_s=300.0, name="A")
        b = daemon.submit("sleep 120", gpus=4, time_limit_s=120.0, name="B")
        daemon.wait_state(a, "running")
        daemon.wait_state(b, "running")
        for name, gpus, limit in (("W1", 8, 60.0), ("W2", 4, 30.0), ("W3", 1, 600.0), ("W4", 2, 90.0)):
            daemon.submit("sleep 1", gpus=gpus, time_limit_s=limit, name=name)
        source = NodeSource(open_backend("fake:8xA100-80GB", set_id=str(daemon.paths.home)), daemon.paths,
                            "fake:8xA100-80GB", "fifo", "easy")  # fmt: skip
        served = serve_in_thread(create_app(ServeConfig(source, trace_root=tmp_path, sample_s=0.25)))
        page.goto(served.url + "/queue")
        page.wait_for_selector("body[data-rendered='table']", timeout=TIMEOUT_MS)
        cli = _queue_json(daemon.home)
        rows = page.eval_on_selector_all(
            "#queue-table tbody tr",
            "trs => trs.map(t => [t.dataset.job, +t.dataset.start, +t.dataset.end, t.dataset.reason])",
        )
        want = []
        for j in cli["jobs"]:
            start = j["start_s"] if j["state"] == "running" else j["expected_start_s"]
            want.append(
                [str(j["id"]), start, j["expected_end_s"], j["reason"] if j["state"] != "running" else ""]
            )
        assert rows == want, (rows, want)
        assert all(end > start for _, start, end, _ in rows), rows
        shown = page.locator("#queue-table tbody tr td:nth-child(11)").all_inner_texts()
        assert shown == [r[3] for r in rows], "the Reason column shows each row's reason"
        reasons = {r[0]: r[3] for r in rows}
        assert [reasons[str(j["id"])] for j in cli["jobs"][2:]] == [
            "Resources",
            "Priority",
            "Priority",
            "Priority",
        ]
        shot(page, artifacts, "queue-forecast")
        watch.check()
    finally:
        if served is not None:
            served.stop()
        daemon.stop()

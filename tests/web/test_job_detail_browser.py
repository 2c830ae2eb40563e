"""The dashboard's job detail on a real agent (fifo + EASY, fake 8xA100) in headless Chromium: the page of
a waiting job shows the reason, expected start and explanation that `gpuplan show ID --json` prints at the
same moment (the page and the CLI ask the same agent, whose forecast is the core's), the queue view's
rows and the node view's processes link to it, and its command shows only with the token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from browser_support import Watch, require_chromium, serve_in_thread, shot

TIMEOUT_MS = 20_000


def _show_json(home: Path, jid: int) -> dict[str, Any]:
    env = {**os.environ, "GPUPLAN_HOME": str(home)}
    out = subprocess.run([sys.executable, "-m", "gpuplan.cli", "show", str(jid), "--json"], env=env,
                         capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    return dict(json.loads(out.stdout))


def _shown(page: Any) -> dict[str, Any]:
    return {
        "reason": page.inner_text("#job-reason"),
        "expected_start_s": float(page.get_attribute("#job-expected-start", "data-t") or "nan"),
        "expected_end_s": float(page.get_attribute("#job-expected-end", "data-t") or "nan"),
        "explanation": page.inner_text("#job-explanation"),
        "gpus": page.inner_text("#job-gpus"),
    }


def _want(show: dict[str, Any]) -> dict[str, Any]:
    f = show["forecast"]
    return {
        "reason": f["reason"],
        "expected_start_s": f["expected_start_s"],
        "expected_end_s": f["expected_end_s"],
        "explanation": f["explanation"],
        "gpus": ", ".join(map(str, f["gpu_ids"])),
    }


def test_job_page_shows_what_gpuplan_show_says(
    page: Any, watch: Watch, artifacts: Path, tmp_path: Path
) -> None:
    require_chromium()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the agent tests' daemon helper
    from agent_helpers import Daemon, wait_until
    from gpuplan.agent.gpus import open_backend
    from gpuplan.agent.paths import read_token
    from gpuplan.web.app import ServeConfig, create_app
    from gpuplan.web.live import NodeSource

    daemon = Daemon(tmp_path / "home", policy="fifo", backfill="easy").start()
    served = None
    try:
        a = daemon.submit("sleep 300", gpus=4, time_limit_s=300.0, name="A")
        b = daemon.submit("sleep 120", gpus=4, time_limit_s=120.0, name="B")
        daemon.wait_state(a, "running")
        daemon.wait_state(b, "running")
        w1 = daemon.submit("sleep 1 # W1", gpus=8, time_limit_s=60.0, name="W1")
        w2 = daemon.submit("sleep 1", gpus=4, time_limit_s=30.0, name="W2")
        source = NodeSource(open_backend("fake:8xA100-80GB", set_id=str(daemon.paths.home)), daemon.paths,
                            "fake:8xA100-80GB", "fifo", "easy")  # fmt: skip
        token = read_token(daemon.paths)
        served = serve_in_thread(
            create_app(ServeConfig(source, token=token, trace_root=tmp_path, sample_s=0.25))
        )
        # the queue view links every row to its job page
        page.goto(served.url + "/queue")
        page.wait_for_selector("body[data-rendered='table']", timeout=TIMEOUT_MS)
        links = page.eval_on_selector_all("#queue-table tbody tr a.job-link", "as => as.map(a => a.pathname)")
        assert links == [f"/jobs/{j}" for j in (a, b, w1, w2)], links
        before = _show_json(daemon.home, w1)
        page.click(f"#queue-table tbody tr[data-job='{w1}'] a.job-link")
        page.wait_for_selector("body[data-rendered='job']", timeout=TIMEOUT_MS)
        assert page.url == f"{served.url}/jobs/{w1}"
        shown = _shown(page)
        after = _show_json(daemon.home, w1)
        assert before["forecast"] == after["forecast"], "the forecast held still while the page was read"
        assert shown == _want(after), (shown, after["forecast"])
        why = shown["explanation"]
        assert shown["reason"] == "Resources" and why.startswith("Resources; 8 GPUs; job "), why
        assert f"backfill starts 1 job(s) ranked after it ahead of it ({w2})" in why, why
        waits = page.eval_on_selector_all("#job-waiting-for a", "as => as.map(a => a.textContent)")
        assert waits == [str(w["job_id"]) for w in after["forecast"]["waiting_for"]] and waits, waits
        assert page.inner_text("#job-ahead") == str(w2)
        # the command: hidden without the token, the agent's own with it
        assert page.locator("#job-command").is_hidden()
        assert "token" in page.inner_text("#job-command-note")
        shot(page, artifacts, "job-detail-waiting")
        page.fill("#job-token", token or "")
        page.click("#job-token-form button")
        page.wait_for_function("!document.getElementById('job-command').hidden", timeout=TIMEOUT_MS)
        assert page.inner_text("#job-command").startswith("sleep 1 # W1")
        # a running job: its state, start and GPUs
        page.goto(f"{served.url}/jobs/{a}")
        page.wait_for_selector("body[data-rendered='job'][data-state='running']", timeout=TIMEOUT_MS)
        shown_a = _show_json(daemon.home, a)
        assert (
            float(page.get_attribute("#job-expected-start", "data-t") or "nan") == shown_a["job"]["start_s"]
        )
        assert page.inner_text("#job-fields tr[data-field='gpu_ids'] td") == ", ".join(
            map(str, shown_a["job"]["gpu_ids"])
        )
        # the node view's processes link to their job
        page.goto(served.url + "/node")
        wait_until(
            lambda: page.locator(f"#proc-table a.job-link[href='/jobs/{a}']").count() > 0,
            "the node view to list job A's process with a link",
        )
        watch.check()
    finally:
        if served is not None:
            served.stop()
        daemon.stop()

"""Headless Chromium (Debian's) driven by Playwright against `gpuplan serve`'s app in a thread.

The browser and the servers start once per session and stop by themselves at the end, also when a
test fails (../shared/browser/NOTES.md has the facts behind every setting here). Without
/usr/bin/chromium the tests fail under CI=true (CI installs it) and skip elsewhere, saying why.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpuplan.cluster import load_cluster
from gpuplan.web.live import FakeNode, QueueRow, demo_jobs

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "out" / "browser"


def _require_chromium() -> None:
    if Path(CHROMIUM).exists():
        return
    why = f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium); .ci/run does"
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    _require_chromium()
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def base_url() -> str | None:
    # pytest-base-url's own fixture is an instance method, which pytest 9 warns about (an error here)
    return None


@dataclass
class LiveServer:
    """One app served by uvicorn in a daemon thread."""

    url: str
    node: FakeNode
    server: Any
    thread: threading.Thread


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start(node: FakeNode, trace_root: Path, token: str | None = None) -> LiveServer:
    import uvicorn

    from gpuplan.web.app import ServeConfig, create_app

    app = create_app(ServeConfig(node, token=token, trace_root=trace_root, sample_s=0.25, window_s=120.0))
    port = _free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:  # integration wait with a deadline, not a sleep for time to pass
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on port {port}")
        time.sleep(0.02)
    return LiveServer(f"http://127.0.0.1:{port}", node, server, thread)


def _stop(live: LiveServer) -> None:
    live.server.should_exit = True
    live.thread.join(timeout=10)


def waiting_rows(n: int, now: float, gpus_cycle: tuple[int, ...] = (1, 2, 1, 4, 8)) -> list[QueueRow]:
    """`n` waiting jobs with estimates, submitted over the last hour."""
    return [
        QueueRow(
            job_id=f"w{i:05d}",
            state="waiting",
            gpus=gpus_cycle[i % len(gpus_cycle)],
            submit_s=now - 3600 + i * (3600 / max(n, 1)),
            name=("train", "eval", "infer")[i % 3],
            user=f"user{i % 4}",
            mem_gb=20.0 + (i % 5) * 10,
            est_duration_s=600.0 + (i % 7) * 300.0,
        )
        for i in range(n)
    ]


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LiveServer]]:
    """Three servers: a busy fake node, an empty one, and one with 10,000 waiting jobs."""
    _require_chromium()
    root = tmp_path_factory.mktemp("traces")
    cluster = load_cluster("8xA100-80GB")
    busy = FakeNode(cluster)
    for job in demo_jobs(cluster):
        busy.run(job)
    busy.enqueue(waiting_rows(12, time.time()))
    big = FakeNode(cluster)
    big.enqueue(waiting_rows(10_000, time.time()))
    servers: dict[str, LiveServer] = {}
    try:
        servers["busy"] = _start(busy, root)
        servers["empty"] = _start(FakeNode(cluster), root)
        servers["big"] = _start(big, root)
        yield servers
    finally:
        for live in servers.values():
            _stop(live)


@dataclass
class Watch:
    """Everything that went wrong on a page: errors, console errors, failed or >= 400 requests."""

    problems: list[str] = field(default_factory=list)
    allowed: set[tuple[str, int]] = field(default_factory=set)  # (path, status) a test expects

    def check(self) -> None:
        assert not self.problems, "the page reported problems:\n" + "\n".join(self.problems)


@pytest.fixture
def watch(page: Any) -> Watch:
    w = Watch()

    def on_response(resp: Any) -> None:
        path = "/" + resp.url.split("/", 3)[-1].split("?")[0]
        if resp.status >= 400 and (path, resp.status) not in w.allowed:
            w.problems.append(f"HTTP {resp.status} {resp.url}")

    def on_console(msg: Any) -> None:
        if msg.type == "error" and not any(f" {s} " in msg.text for _, s in w.allowed):
            w.problems.append(f"console error: {msg.text}")

    def on_failed(req: Any) -> None:
        # an EventSource closed by the test's own navigation or teardown aborts; nothing else may fail
        if not ("/api/node/stream" in req.url and "ERR_ABORTED" in (req.failure or "")):
            w.problems.append(f"request failed: {req.url} {req.failure}")

    page.on("pageerror", lambda exc: w.problems.append(f"page error: {exc}"))
    page.on("console", on_console)
    page.on("requestfailed", on_failed)
    page.on("response", on_response)
    return w


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


def shot(page: Any, artifacts: Path, name: str) -> Path:
    path = artifacts / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000, f"{path} is suspiciously small"
    return path


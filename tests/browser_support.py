"""Headless Chromium for the browser tests of tests/web and tests/slurm: one browser per session
(pytest-playwright's `browser`, launched on Debian's /usr/bin/chromium), a `watch` that fails a test
on any page error, console error or failed request, and screenshots saved under out/browser/.

The fixtures are registered once, in tests/conftest.py, so a test in either directory gets the same
session browser (../shared/browser/NOTES.md has the facts behind every browser setting). Without
/usr/bin/chromium the browser tests fail under CI=true (CI installs it) and skip elsewhere, saying why.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "ARTIFACTS",
    "CHROMIUM",
    "CHROMIUM_ARGS",
    "ServedApp",
    "Watch",
    "artifacts",
    "base_url",
    "browser_type_launch_args",
    "free_port",
    "require_chromium",
    "serve_in_thread",
    "shot",
    "watch",
]

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
ARTIFACTS = Path(__file__).resolve().parents[1] / "out" / "browser"


def require_chromium() -> None:
    if Path(CHROMIUM).exists():
        return
    why = f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium); .ci/run does"
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    require_chromium()
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def base_url() -> str | None:
    # pytest-base-url's own fixture is an instance method, which pytest 9 warns about (an error here)
    return None


@dataclass
class Watch:
    """Everything that went wrong on a page: errors, console errors, failed or >= 400 requests."""

    problems: list[str] = field(default_factory=list)
    allowed: set[tuple[str, int]] = field(default_factory=set)  # (path, status) a test expects

    def check(self) -> None:
        assert not self.problems, "the page reported problems:\n" + "\n".join(self.problems)


def _is_stream(url: str) -> bool:
    return url.split("?")[0].endswith("/stream")


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
        if not (_is_stream(req.url) and "ERR_ABORTED" in (req.failure or "")):
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


@dataclass
class ServedApp:
    """One ASGI app served by uvicorn on a free loopback port, in a daemon thread."""

    url: str
    server: Any
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def serve_in_thread(app: Any) -> ServedApp:
    """Start uvicorn on `app` and return once it listens (stop it with `.stop()`)."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:  # integration wait with a deadline, not a sleep for time to pass
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on port {port}")
        time.sleep(0.02)
    return ServedApp(f"http://127.0.0.1:{port}", server, thread)

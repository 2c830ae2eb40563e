"""Fixtures of the dashboard tests: agent homes on the agent's fake device set, with real `sleep`
processes as jobs, and headless Chromium (Debian's) driven by Playwright against the app in a thread.

The browser and the servers start once per session and stop at the end, also when a test fails;
job processes are killed by their pid (../shared/browser/NOTES.md has the facts behind every browser
setting). Without /usr/bin/chromium the browser tests fail under CI=true (CI installs it) and skip
elsewhere, saying why. The only fake is the GPU: the agent's fake device set reports the memory
that the running `sleep` processes declare.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpuplan.agent.gpus import open_backend
from gpuplan.agent.paths import AgentPaths
from gpuplan.agent.store import Store
from gpuplan.web.live import NodeSource

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


class FakeAgentHome:
    """An agent home whose store and fake GPUs a test fills: jobs are real `sleep` process groups.

    Nothing here runs the agent's daemon: the store rows are what the agent would write for jobs it
    started, and the fake device set sees the processes through their environment, as it does the
    agent's own jobs.
    """

    def __init__(self, home: Path, spec: str = "fake:8xA100-80GB", token: bool = False) -> None:
        self.paths = AgentPaths.from_env(home)
        self.paths.home.mkdir(parents=True, exist_ok=True)
        if token:
            self.paths.create()
        self.store = Store(self.paths.db)
        self.spec = spec
        self.backend = open_backend(spec, set_id=str(self.paths.home))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def source(self, policy: str = "fifo", backfill: str = "easy") -> NodeSource:
        return NodeSource(self.backend, self.paths, self.spec, policy, backfill, host="testnode")

    def run(self, gpus: tuple[int, ...], mem_gb: float, util_pct: float = 90.0, **job: Any) -> int:
        """Start a job: a `sleep` in its own process group holding `mem_gb` on each of `gpus`."""
        env = {
            **os.environ,
            **self.backend.job_env(mem_gb, util_pct),
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)),
        }
        proc = subprocess.Popen(["sleep", "600"], env=env, start_new_session=True)
        now = time.time()
        jid = self.store.add_job(
            command="sleep 600", gpus=len(gpus), mem_gb=mem_gb, declared_mem_gb=mem_gb, state="running",
            submit_s=job.pop("submit_s", now - 50), start_s=now, gpu_ids=",".join(map(str, gpus)),
            pid=proc.pid, pgid=proc.pid, **job,
        )  # fmt: skip
        self.procs[jid] = proc
        # exec closes Popen's error pipe before the kernel has laid out the new environment, so the
        # fake set can miss the process for a moment: wait (deadline) until it sees it (a process on
        # lost GPUs only is never shown)
        deadline = time.monotonic() + 20
        lost = getattr(getattr(self.backend, "scenario", None), "lost", set())
        while not set(gpus) <= lost and not any(p.pid == proc.pid for p in self.backend.snapshot().procs):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the fake device set never saw job {jid} (pid {proc.pid})")
            time.sleep(0.005)
        return jid

    def stop(self, jid: int) -> None:
        """The job's process group is killed (by its pid) and the job recorded as done."""
        proc = self.procs.pop(jid)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        self.store.update_job(jid, state="done", end_s=time.time(), exit_code=0)

    def enqueue(self, n: int, gpus_cycle: tuple[int, ...] = (1, 2, 1, 4, 8)) -> None:
        """`n` queued jobs with estimates, submitted over the last hour, in one transaction."""
        now = time.time()
        self.store.conn.execute("BEGIN")
        for i in range(n):
            self.store.add_job(
                command="true", gpus=gpus_cycle[i % len(gpus_cycle)], mem_gb=20.0 + (i % 5) * 10,
                state="queued", submit_s=now - 3600 + i * (3600 / max(n, 1)), name=("train", "eval", "infer")[i % 3],
                user=f"user{i % 4}", est_duration_s=600.0 + (i % 7) * 300.0,
            )  # fmt: skip
        self.store.conn.execute("COMMIT")

    def close(self) -> None:
        for jid in list(self.procs):
            self.stop(jid)
        self.store.close()


@pytest.fixture
def agent_home(tmp_path: Path) -> Iterator[FakeAgentHome]:
    home = FakeAgentHome(tmp_path / "home")
    try:
        yield home
    finally:
        home.close()


@dataclass
class LiveServer:
    """One app served by uvicorn in a daemon thread."""

    url: str
    home: FakeAgentHome
    server: Any
    thread: threading.Thread


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start(home: FakeAgentHome, trace_root: Path) -> LiveServer:
    import uvicorn

    from gpuplan.web.app import ServeConfig, create_app

    app = create_app(ServeConfig(home.source(), trace_root=trace_root, sample_s=0.25, window_s=120.0))
    port = _free_port()
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
    return LiveServer(f"http://127.0.0.1:{port}", home, server, thread)


def _stop(live: LiveServer) -> None:
    live.server.should_exit = True
    live.thread.join(timeout=10)


BUSY_JOBS = (((0, 1), 56.0, 85.0, "finetune"), ((2,), 24.0, 40.0, "infer"), ((3,), 40.0, 65.0, "eval"))


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LiveServer]]:
    """Three servers: a busy node (3 running jobs, 12 queued), an empty agent, and 10,000 queued jobs."""
    _require_chromium()
    root = tmp_path_factory.mktemp("traces")
    homes = {name: FakeAgentHome(tmp_path_factory.mktemp(name) / "home") for name in ("busy", "empty", "big")}
    for gpus, mem, util, name in BUSY_JOBS:
        homes["busy"].run(gpus, mem, util, name=name, user="demo")
    homes["busy"].enqueue(12)
    homes["big"].enqueue(10_000)
    servers: dict[str, LiveServer] = {}
    try:
        for name, home in homes.items():
            servers[name] = _start(home, root)
        yield servers
    finally:
        for live in servers.values():
            _stop(live)
        for home in homes.values():
            home.close()


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

"""What the dashboard tests share (a plain module: test files import it by this unique name, never
`conftest`, which names a different file in every test directory): agent homes on the agent's fake
device set with real `sleep` processes as jobs, the app served in a thread on such a home, and
`gpuplan serve` run as a real process. The only fake is the GPU: the agent's fake device set reports
the memory that the running `sleep` processes declare."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from browser_support import ServedApp, free_port, serve_in_thread
from gpuplan.agent.gpus import open_backend
from gpuplan.agent.paths import AgentPaths
from gpuplan.agent.store import Store
from gpuplan.web.live import NodeSource

__all__ = ["BUSY_JOBS", "FakeAgentHome", "LiveServer", "serve_process", "start_server", "stop_server"]


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


@dataclass
class LiveServer:
    """One app served by uvicorn in a daemon thread, on an agent home."""

    url: str
    home: FakeAgentHome
    served: ServedApp
    token: str | None = None


def start_server(home: FakeAgentHome, trace_root: Path) -> LiveServer:
    """The app on `home`, with the home's token when it has one (what-if uploads need it)."""
    from gpuplan.web.app import ServeConfig, create_app

    token = home.paths.token.read_text().strip() if home.paths.token.exists() else None
    config = ServeConfig(home.source(), token=token, trace_root=trace_root, sample_s=0.25, window_s=120.0)
    served = serve_in_thread(create_app(config))
    return LiveServer(served.url, home, served, token)


def stop_server(live: LiveServer) -> None:
    live.served.stop()


BUSY_JOBS = (((0, 1), 56.0, 85.0, "finetune"), ((2,), 24.0, 40.0, "infer"), ((3,), 40.0, 65.0, "eval"))


@contextmanager
def serve_process(args: list[str], env: dict[str, str]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """`gpuplan serve ARGS --json` as a real process on a free port: yields its JSON line and its
    /healthz answer, then stops it with SIGTERM (by its pid) and checks it stopped without a traceback."""
    import json
    import sys
    import urllib.request

    port = free_port()
    cmd = [sys.executable, "-m", "gpuplan.cli", "serve", *args, "--port", str(port), "--json"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        announced = json.loads(proc.stdout.readline())
        assert announced["url"] == f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 30
        while True:  # integration wait with a deadline for the server to listen
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
                    health = json.loads(resp.read())
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        yield announced, health
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=15)  # also closes the pipes
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    # uvicorn shuts down gracefully, then re-raises the signal it caught: the exit is SIGTERM's
    assert proc.returncode in (0, -signal.SIGTERM), err
    assert "Traceback" not in err, err

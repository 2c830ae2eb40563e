"""Real agent daemons for tests: started as processes on the fake device set, stopped by pid (and their
jobs killed by process group) even when a test fails. Waiting is polling with a deadline."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gpuplan.agent.daemon import Agent, AgentConfig
from gpuplan.agent.launcher import live_jobs
from gpuplan.agent.paths import AgentPaths
from gpuplan.agent.protocol import AgentNotRunningError, call

DEADLINE_S = 30.0


def wait_until(pred: Callable[[], Any], what: str, timeout_s: float = DEADLINE_S) -> Any:
    """Poll `pred` until it returns something true; fail naming `what` after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.005)


class Clock:
    """An injected clock: tests set `now` (Unix seconds); nothing sleeps."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Daemon:
    """One agent process for one GPUPLAN_HOME."""

    def __init__(self, home: Path, **config: Any) -> None:
        self.home = home.resolve()
        self.paths = AgentPaths(self.home)
        self.config = {"home": str(self.home), "gpus": "fake:8xA100-80GB", "sample_interval_s": 0.05,
                       "grace_s": 2.0, **config}  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Daemon:
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / "daemon.out", "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpuplan.agent.server", json.dumps(self.config)],
                stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        wait_until(self._answers, f"the agent in {self.home} to answer")
        return self

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            out = (self.home / "daemon.out").read_text(errors="replace")
            raise AssertionError(f"agent exited with {self.proc.returncode}: {out[-2000:]}")
        try:
            call(self.paths.socket, {"op": "status"}, timeout_s=5.0)
        except AgentNotRunningError:
            return False
        return True

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        return call(self.paths.socket, {"op": op, **fields})

    def submit(self, command: str, **fields: Any) -> int:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        return int(self.call("submit", command=command, cwd=str(self.home), env=env, **fields)["id"])

    def job(self, jid: int) -> dict[str, Any]:
        return dict(self.call("show", id=jid)["job"])

    def wait_state(self, jid: int, *states: str, timeout_s: float = DEADLINE_S) -> dict[str, Any]:
        return dict(
            wait_until(
                lambda: (j := self.job(jid))["state"] in states and j, f"job {jid} to be {states}", timeout_s
            )
        )

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        """Stop the agent and every job it started, by pid and process group."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.call("stop", kill_jobs=True)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.kill_jobs()

    def stop_by_pidfile(self) -> None:
        """Stop an agent started by the CLI (not by this object): SIGKILL the pid in agent.pid, then
        its jobs."""
        try:
            pid = int(self.paths.pidfile.read_text().strip())
        except (OSError, ValueError):
            pid = 0
        if (
            pid
            and Path(f"/proc/{pid}/cmdline").exists()
            and b"gpuplan" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.kill_jobs()

    def kill_jobs(self) -> None:
        """SIGKILL the groups of every live process that carries this home's job markers."""
        pgids = set()
        for pids in live_jobs(self.home).values():
            for pid in pids:
                with contextlib.suppress(OSError):
                    pgids.add(os.getpgid(pid))
        for pgid in pgids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)


@contextlib.contextmanager
def in_process_agents(home: Path, clock: Clock, **defaults: Any) -> Iterator[Callable[..., Agent]]:
    """A maker of agents run in this process on `clock` (the test drives `step`), on fake 8xA100 by
    default; `defaults` and each call's keywords are AgentConfig fields. On exit every job process
    group they started is killed and each agent closed."""
    agents: list[Agent] = []

    def make(**kw: Any) -> Agent:
        config = AgentConfig(home=home, **{"gpus": "fake:8xA100-80GB", "grace_s": 5.0, **defaults, **kw})
        agent = Agent(config, clock=clock)
        agents.append(agent)
        return agent

    try:
        yield make
    finally:
        for agent in agents:
            for run in list(agent.runs.values()):
                if run.pgid:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(run.pgid, signal.SIGKILL)
            agent.close()

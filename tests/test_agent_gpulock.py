"""One agent per node's GPUs (agent/gpulock.py) and the client's connection errors, as any user."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_helpers import Daemon
from gpuplan.agent.gpulock import GpuLock, GpuLockError, lock_path
from gpuplan.agent.protocol import AgentError, AgentNotRunningError, call


def test_lock_paths() -> None:
    env = {"GPUPLAN_LOCK_DIR": "/x"}
    assert lock_path("nvml", env) == Path("/x/gpus.lock")
    assert lock_path("fake:8xA100-80GB,set=lab one", env) == Path("/x/gpus-fake-lab_one.lock")
    assert lock_path("fake:8xA100-80GB", env) is None  # a set of its own home: nobody else drives it
    assert lock_path("nvml", {}) == Path("/run/gpuplan/gpus.lock")


def test_a_second_holder_is_refused_and_told_who_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "gpus.lock"
    first = GpuLock.acquire(path, Path("/home/a"))
    assert first is not None
    assert path.stat().st_mode & 0o777 == 0o666, "any user's agent that holds it writes its details there"
    with pytest.raises(
        GpuLockError, match=r"already drives these GPUs: pid \d+ of user \S+ \(uid \d+\), home /home/a"
    ):
        GpuLock.acquire(path, Path("/home/b"))
    first.close()
    again = GpuLock.acquire(path, Path("/home/b"))  # released: the next one takes it
    assert again is not None
    again.close()


@pytest.fixture
def first_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    monkeypatch.setenv("GPUPLAN_LOCK_DIR", str(tmp_path / "locks"))
    d = Daemon(tmp_path / "one", gpus="fake:8xA100-80GB,set=shared")
    d.start()
    yield d
    d.stop()


def test_a_second_agent_on_the_same_gpus_refuses_and_names_the_first(
    first_agent: Daemon, tmp_path: Path
) -> None:
    env = {**os.environ, "GPUPLAN_HOME": str(tmp_path / "two")}

    def start(gpus: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "gpuplan.cli", "agent", "start", "--gpus", gpus]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)

    res = start("fake:8xA100-80GB,set=shared")
    pid = first_agent.call("status")["pid"]
    assert res.returncode == 2, (res.stdout, res.stderr)
    (line,) = res.stderr.strip().splitlines()
    assert f"another gpuplan agent already drives these GPUs: pid {pid}" in line
    assert str(first_agent.home) in line
    try:
        other = start("fake:8xA100-80GB,set=elsewhere")
        assert other.returncode == 0, other.stderr  # other GPUs: no conflict
    finally:
        Daemon(tmp_path / "two").stop_by_pidfile()


def test_a_stale_socket_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "agent.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()  # the file stays, nobody listens: what a killed agent leaves
    with pytest.raises(AgentNotRunningError, match="a stale socket file"):
        call(path, {"op": "status"})
    with pytest.raises(AgentNotRunningError, match="no agent is running"):
        call(tmp_path / "none.sock", {"op": "status"})
    assert issubclass(AgentNotRunningError, AgentError)


def test_a_shared_home_lets_users_pass_but_not_list(tmp_path: Path) -> None:
    from gpuplan.agent.paths import AgentPaths, HomeError

    paths = AgentPaths(tmp_path / "shared", tmp_path / "run")
    paths.create(shared=True)
    assert {p.name: p.stat().st_mode & 0o7777 for p in (paths.home, paths.jobs_dir, tmp_path / "run")} == {
        "shared": 0o711,
        "jobs": 0o711,
        "run": 0o1777,
    }
    assert paths.socket == tmp_path / "run" / "agent.sock"
    closed = AgentPaths(tmp_path / "closed")
    closed.create()  # a private home (0700) cannot serve other users
    with pytest.raises(HomeError, match=r"keeps other users out \(mode 0700\).*chmod o\+x"):
        closed.create(shared=True)


def test_clients_find_the_system_agent_when_they_run_none(tmp_path: Path) -> None:
    from gpuplan.agent.paths import AgentPaths, client_paths

    system = AgentPaths(tmp_path / "var", tmp_path / "run")
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    own = AgentPaths(tmp_path / "state" / "gpuplan")
    assert client_paths(env, system) == own  # no system agent: the user's own home (and its error)
    (tmp_path / "run").mkdir()
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(str(system.socket))
    listening.listen(1)
    try:
        assert client_paths(env, system) == system  # the user runs no agent: the system one
        own.home.mkdir(parents=True)
        mine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        mine.bind(str(own.socket))
        mine.listen(1)
        try:
            assert client_paths(env, system) == own  # their own agent answers: theirs
        finally:
            mine.close()
        assert client_paths(env, system) == system  # a stale socket of their own does not hide it
        assert client_paths({**env, "GPUPLAN_HOME": str(tmp_path / "h")}, system).home == tmp_path / "h"
    finally:
        listening.close()


def _answer_once(listening: socket.socket, got: list[bytes]) -> None:
    conn, _ = listening.accept()
    with conn:
        conn.settimeout(10)
        data = b""
        while chunk := conn.recv(4096):
            data += chunk
            if data.endswith(b"\n"):
                conn.sendall(b'{"ok": true, "pid": 1}\n')
        got.append(data)


def test_a_socket_in_a_world_writable_folder_is_trusted_only_from_root_or_oneself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/run/gpuplan is 1777: another user could bind agent.sock there while the shared agent is down."""
    import threading

    import gpuplan.agent.protocol as protocol
    from gpuplan.agent.protocol import Caller

    shared = tmp_path / "run"
    shared.mkdir()
    shared.chmod(0o1777)
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(str(shared / "agent.sock"))
    listening.listen(2)
    got: list[bytes] = []
    try:
        server = threading.Thread(target=_answer_once, args=(listening, got), daemon=True)
        server.start()
        assert call(shared / "agent.sock", {"op": "status"})["ok"]  # our own (or root's) agent: fine
        server.join(10)
        assert got == [b'{"op": "status"}\n']
        server = threading.Thread(target=_answer_once, args=(listening, got), daemon=True)
        server.start()
        monkeypatch.setattr(protocol, "peer_caller", lambda conn: Caller(54321))  # as if a user bound it
        with pytest.raises(
            AgentError, match=r"refusing the agent at .*: it runs as uid 54321, not root"
        ) as e:
            call(shared / "agent.sock", {"op": "submit", "command": "true", "env": {"TOKEN": "s3cret"}})
        assert "\n" not in str(e.value) and not isinstance(e.value, AgentNotRunningError)
        server.join(10)
        assert got[1] == b"", "nothing was sent to the impostor"
        shared.chmod(0o755)  # a folder only its owner writes: the owner's agent is whoever they let in
        server = threading.Thread(target=_answer_once, args=(listening, got), daemon=True)
        server.start()
        assert call(shared / "agent.sock", {"op": "status"})["ok"]
        server.join(10)
    finally:
        listening.close()


def test_the_shared_agents_default_paths_and_gpuplan_home() -> None:
    from gpuplan.agent.paths import AgentPaths

    system = AgentPaths.system({})
    assert (system.home, system.socket, system.db) == (
        Path("/var/lib/gpuplan"),
        Path("/run/gpuplan/agent.sock"),
        Path("/var/lib/gpuplan/agent.db"),
    )
    there = AgentPaths.system({"GPUPLAN_HOME": "/srv/gp"})
    assert (there.home, there.socket) == (
        Path("/srv/gp"),
        Path("/srv/gp/agent.sock"),
    )  # agent and clients alike
    assert AgentPaths.from_env("/srv/gp").socket == there.socket

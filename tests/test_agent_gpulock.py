"""One agent per node's GPUs (agent/gpulock.py) and the client's connection errors, as any user."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_helpers import Daemon
from gpuplan.agent.gpulock import GpuLock, GpuLockError, fallback_lock_path, lock_path
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


def test_the_fallback_lock_paths() -> None:
    env = {"GPUPLAN_LOCK_FALLBACK_DIR": "/y"}
    assert fallback_lock_path("nvml", env) == Path("/y/gpuplan-gpus.lock")
    assert fallback_lock_path("fake:8xA100-80GB,set=lab one", env) == Path(
        "/y/gpuplan-gpus-fake-lab_one.lock"
    )
    assert fallback_lock_path("fake:8xA100-80GB", env) is None
    assert fallback_lock_path("nvml", {}) == Path("/tmp/gpuplan-gpus.lock")


def _shared_folder(path: Path) -> Path:
    path.mkdir()
    path.chmod(0o1777)  # as /tmp
    return path


def test_with_no_lock_folder_the_fallback_still_refuses_the_next_agent(tmp_path: Path) -> None:
    """The gap of #23: an agent that cannot make /run/gpuplan ran unlocked, and the next was let in."""
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")  # its lock folder cannot be made, even by root
    fallback = _shared_folder(tmp_path / "tmp") / "gpuplan-gpus.lock"
    old = os.umask(0o077)  # the agent's own umask
    try:
        first = GpuLock.acquire(blocked / "run" / "gpus.lock", Path("/home/a"), fallback=fallback)
    finally:
        os.umask(old)
    assert first is not None
    assert fallback.stat().st_mode & 0o777 == 0o666, "every user's agent writes its details there"
    run = tmp_path / "run" / "gpus.lock"  # later, /run/gpuplan can be made (root's agent)
    with pytest.raises(
        GpuLockError, match=rf"pid {os.getpid()} .*home /home/a \(lock {re.escape(str(fallback))}\)"
    ):
        GpuLock.acquire(run, Path("/home/b"), fallback=fallback)
    first.close()
    both = GpuLock.acquire(run, Path("/home/b"), fallback=fallback)
    assert both is not None
    try:
        with pytest.raises(GpuLockError, match=r"home /home/b \(lock .*/run/gpus.lock\)"):
            GpuLock.acquire(run, Path("/home/c"))  # an older agent, which takes /run/gpuplan's alone
        with pytest.raises(GpuLockError, match="home /home/b"):
            GpuLock.acquire(blocked / "run" / "gpus.lock", Path("/home/c"), fallback=fallback)
    finally:
        both.close()


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "fifo", "folder"])
def test_an_unusable_fallback_file_stops_the_agent_naming_it(tmp_path: Path, kind: str) -> None:
    """The fallback lies in a folder every user may write: another user may have put anything there."""
    precious = tmp_path / "precious"
    precious.write_text("keep me\n")
    fallback = _shared_folder(tmp_path / "tmp") / "gpuplan-gpus.lock"
    make = {"symlink": lambda: fallback.symlink_to(precious), "hardlink": lambda: os.link(precious, fallback),
            "fifo": lambda: os.mkfifo(fallback), "folder": fallback.mkdir}  # fmt: skip
    make[kind]()
    with pytest.raises(GpuLockError) as e:
        GpuLock.acquire(tmp_path / "run" / "gpus.lock", Path("/home/a"), fallback=fallback)
    msg = str(e.value)
    assert f"the GPU lock file {fallback} cannot be used" in msg and f"sudo rm {fallback}" in msg, msg
    assert "\n" not in msg
    assert precious.read_text() == "keep me\n" and precious.stat().st_mode & 0o777 != 0o666
    assert not (tmp_path / "run" / "gpus.lock").exists(), "refused before it took anything"


def test_a_missing_fallback_folder_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(
        GpuLockError, match=r"the GPU lock folder .*/gone does not exist: make it \(mode 1777"
    ):
        GpuLock.acquire(
            tmp_path / "run" / "gpus.lock", Path("/home/a"), fallback=tmp_path / "gone" / "x.lock"
        )


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_another_users_fallback_file_is_used_only_when_every_agent_may_write_it(tmp_path: Path) -> None:
    fallback = _shared_folder(tmp_path / "tmp") / "gpuplan-gpus.lock"
    fallback.write_text("")
    os.chown(fallback, 65534, 65534)
    fallback.chmod(0o644)
    with pytest.raises(GpuLockError, match=r"cannot be used \(uid 65534's, mode 0644, not 0666\)"):
        GpuLock.acquire(tmp_path / "run" / "gpus.lock", Path("/home/a"), fallback=fallback)
    fallback.chmod(0o666)
    lock = GpuLock.acquire(tmp_path / "run" / "gpus.lock", Path("/home/a"), fallback=fallback)
    assert lock is not None
    lock.close()
    assert fallback.stat().st_uid == 65534 and "/home/a" in fallback.read_text()


def test_an_agent_with_no_lock_folder_still_refuses_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the CLI: the first agent cannot make its lock folder; the second can, and is refused."""
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("GPUPLAN_LOCK_DIR", str(blocked / "run"))
    gpus = "fake:8xA100-80GB,set=early"
    first = Daemon(tmp_path / "one", gpus=gpus).start()
    env = {**os.environ, "GPUPLAN_HOME": str(tmp_path / "two"), "GPUPLAN_LOCK_DIR": str(tmp_path / "run")}
    try:
        pid = first.call("status")["pid"]
        cmd = [sys.executable, "-m", "gpuplan.cli", "agent", "start", "--gpus", gpus]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert res.returncode == 2, (res.stdout, res.stderr)
        (line,) = res.stderr.strip().splitlines()
        assert f"already drives these GPUs: pid {pid}" in line and str(first.home) in line, line
        assert str(fallback_lock_path(gpus)) in line
    finally:
        first.stop()
        Daemon(tmp_path / "two").stop_by_pidfile()


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


def _answer_with(listening: socket.socket, reply: bytes) -> None:
    conn, _ = listening.accept()
    with conn:
        conn.settimeout(10)
        data = b""
        while not data.endswith(b"\n"):
            data += conn.recv(4096)
        conn.sendall(reply)


def test_a_reply_missing_a_key_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A broken agent (or another program on the socket) answers ok without the keys `queue` reads."""
    import threading

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(str(home / "agent.sock"))
    listening.listen(2)
    try:
        server = threading.Thread(
            target=_answer_with, args=(listening, b'{"ok": true, "jobs": []}\n'), daemon=True
        )
        server.start()
        env = {**os.environ, "GPUPLAN_HOME": str(home)}
        cmd = [sys.executable, "-m", "gpuplan.cli", "queue"]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)
        server.join(10)
        assert res.returncode == 2, (res.stdout, res.stderr)
        (line,) = res.stderr.strip().splitlines()
        assert f"the agent at {home / 'agent.sock'} sent a reply without 'now_s'" in line, line
        server = threading.Thread(
            target=_answer_with, args=(listening, b'{"ok": true, "job": {"id": 1}}\n'), daemon=True
        )
        server.start()
        reply = call(home / "agent.sock", {"op": "show", "id": 1})
        server.join(10)
        with pytest.raises(AgentError, match="sent a reply without 'state'"):
            reply["job"]["state"]  # nested objects too
        assert reply["job"] == {"id": 1} and reply.get("none") is None
    finally:
        listening.close()

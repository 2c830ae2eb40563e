"""The multi-user root agent on fake devices, driven by two throw-away Unix users (run as root).

Each user runs the real client (`/usr/bin/python3 -m gpuplan.cli`) against a real root agent
(`--multi-user`, state and socket in GPUPLAN_HOME): jobs run as their submitter; another user can
neither steer nor read a job; root can; a per-user GPU quota holds a third job while GPUs are free;
and the kill -9 cycle holds with two users. Skipped with the reason when not root (CI=true: fails).
"""

from __future__ import annotations

import grp
import os
import pwd
import secrets
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_helpers import Daemon, wait_until
from multiuser_support import (
    User,
    World,
    owner_comment,
    require_users,
    stale_users,
    sweep_stale_users,
    throwaway_world,
)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    require_users()
    with throwaway_world(2) as w:
        yield w


@pytest.fixture
def agent(world: World) -> Iterator[Daemon]:
    home = Path(world.root) / f"agent-{os.urandom(3).hex()}"
    d = Daemon(home, multi_user=True, max_gpus_per_user=4, gpus="fake:8xA100-80GB")
    d.start()
    yield d
    d.stop()


def _submit(world: World, user: User, agent: Daemon, command: str, *opts: str) -> int:
    res = world.run(user, "submit", *opts, "--", "sh", "-c", command, home=agent.home)
    assert res.returncode == 0, (res.stdout, res.stderr)
    return int(res.stdout.strip().splitlines()[-1])


def _job(agent: Daemon, jid: int) -> dict[str, object]:
    return agent.job(jid)


def _one_line_refusal(res: object, *needles: str) -> str:
    rc, err = res.returncode, res.stderr.strip()  # type: ignore[attr-defined]
    assert rc != 0 and len(err.splitlines()) == 1, (rc, res.stdout, err)  # type: ignore[attr-defined]
    assert "Traceback" not in err and all(n in err for n in needles), err
    return str(err)


def test_jobs_run_as_their_submitter_and_others_cannot_touch_them(world: World, agent: Daemon) -> None:
    u1, u2 = world.users
    jid = _submit(world, u1, agent, 'echo "$USER $LOGNAME $HOME $LANG" > env.txt; id -u > uid.txt; '
                  "id -G > groups.txt; echo secret-output; sleep 300")  # fmt: skip
    agent.wait_state(jid, "running")
    wait_until(
        lambda: (u1.home / "groups.txt").exists() and (u1.home / "groups.txt").read_text().strip(),
        "the job's files",
    )
    assert int((u1.home / "uid.txt").read_text()) == u1.uid  # written in its submitter's working directory
    assert (u1.home / "env.txt").read_text().split() == [
        u1.name,
        u1.name,
        str(u1.home),
        "C.UTF-8",
    ]  # their env
    assert world.group_gid in {
        int(g) for g in (u1.home / "groups.txt").read_text().split()
    }  # supplementary group
    out = agent.home / "jobs" / str(jid) / "stdout"
    st = out.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (u1.uid, 0o600)
    wait_until(lambda: "secret-output" in out.read_text(), "the job's output")
    # user 2 sees the job and its user, but not its command; cannot cancel, hold or read it
    q = world.run(u2, "queue", "--json", home=agent.home)
    assert q.returncode == 0, q.stderr
    import json

    (seen,) = [j for j in json.loads(q.stdout)["jobs"] if j["id"] == jid]
    assert seen["user"] == u1.name and "secret" not in json.dumps(seen) and "id -u" not in json.dumps(seen)
    for op in ("cancel", "hold"):
        _one_line_refusal(
            world.run(u2, op, str(jid), home=agent.home), f"job {jid} belongs to {u1.name}", u2.name
        )
    _one_line_refusal(world.run(u2, "logs", str(jid), home=agent.home), f"job {jid} belongs to {u1.name}")
    assert _job(agent, jid)["state"] == "running"
    assert (u1.home / "uid.txt").exists()
    from gpuplan.agent.store import connect, events_since

    conn = connect(agent.paths.db)
    refusals = {(e["action"], e["uid"], e["job_id"]) for e in events_since(conn, 0.0)}
    conn.close()
    assert {
        ("refused:cancel", u2.uid, jid),
        ("refused:hold", u2.uid, jid),
    } <= refusals  # logged with the caller
    # the owner reads their logs; a client-supplied user is refused
    mine = world.run(u1, "logs", str(jid), home=agent.home)
    assert mine.returncode == 0 and "secret-output" in mine.stdout, mine.stderr
    forged = world.raw(
        u2, agent.home, {"op": "submit", "command": "true", "user": u1.name, "cwd": str(u2.home)}
    )
    assert not forged["ok"] and "unknown field(s) 'user'" in str(forged["error"])  # the caller is its uid
    sneaky = world.raw(
        u2, agent.home, {"op": "submit", "command": "cat secret > stolen", "cwd": str(u1.home)}
    )
    assert sneaky["ok"]  # accepted, but it never runs in a folder its submitter may not enter
    failed = agent.wait_state(int(sneaky["id"]), "failed")  # type: ignore[call-overload]
    assert f"{u2.name} may not enter the working directory {u1.home}" in str(failed["reason"])
    assert not (u1.home / "stolen").exists()
    events = agent.call("show", id=jid)  # root sees everything
    assert "id -u" in str(events["job"]["command"])
    # root can cancel it
    res = world.run(None, "cancel", str(jid), home=agent.home)
    assert res.returncode == 0, res.stderr
    agent.wait_state(jid, "cancelled")


def test_a_third_two_gpu_job_waits_on_the_quota_and_starts_when_the_first_ends(
    world: World, agent: Daemon
) -> None:
    u1, u2 = world.users
    ids = [_submit(world, u1, agent, "sleep 300", "--gpus", "2") for _ in range(3)]
    for jid in ids[:2]:
        agent.wait_state(jid, "running")
    other = _submit(world, u2, agent, "sleep 300", "--gpus", "2")
    agent.wait_state(other, "running")  # behind u1's third job in FIFO order, yet not blocked by it
    import json

    q = json.loads(world.run(u1, "queue", "--json", home=agent.home).stdout)
    third = next(j for j in q["jobs"] if j["id"] == ids[2])
    assert third["state"] == "queued" and third["reason"] == "QOSMaxGRESPerUser"  # Slurm's word, as squeue
    assert third["reason_detail"] == f"quota: {u1.name} uses 4 of 4 GPUs"
    assert agent.call("status")["running"] == 3  # 6 of 8 GPUs busy: 2 free, and still it waits
    assert world.run(u1, "cancel", str(ids[0]), home=agent.home).returncode == 0
    agent.wait_state(ids[2], "running")


def test_kill_9_cycle_with_two_users_keeps_state_and_runs_nothing_twice(world: World, agent: Daemon) -> None:
    u1, u2 = world.users
    a = _submit(world, u1, agent, "echo started >> runs-a.txt; sleep 300")
    b = _submit(world, u2, agent, "echo started >> runs-b.txt; sleep 300")
    held = _submit(world, u2, agent, "echo started >> runs-c.txt; sleep 300", "--hold")
    for jid in (a, b):
        agent.wait_state(jid, "running")
    pids = {jid: _job(agent, jid)["pid"] for jid in (a, b)}
    agent.kill9()
    agent.start()
    for jid in (a, b):
        job = agent.wait_state(jid, "running")
        assert job["pid"] == pids[jid] and job["attempt"] == 1
    assert world.run(u2, "release", str(held), home=agent.home).returncode == 0
    agent.wait_state(held, "running")
    wait_until(lambda: (u2.home / "runs-c.txt").exists(), "the released job to start")
    for user, name in ((u1, "runs-a.txt"), (u2, "runs-b.txt"), (u2, "runs-c.txt")):
        assert (user.home / name).read_text() == "started\n"
    refused = world.run(u1, "cancel", str(b), home=agent.home)
    _one_line_refusal(refused, f"job {b} belongs to {u2.name}")


def test_multi_user_needs_root_and_a_shared_socket_says_who_may(world: World, agent: Daemon) -> None:
    u1, _ = world.users
    res = world.run(u1, "agent", "start", "--multi-user", "--gpus", "fake:8xA100-80GB", home=u1.home / "own")
    _one_line_refusal(res, "--multi-user runs as root")
    sock = agent.home / "agent.sock"
    assert stat.S_IMODE(sock.stat().st_mode) == 0o666
    assert stat.S_IMODE((agent.home / "jobs").stat().st_mode) == 0o711  # made by the agent: pass, not list
    assert agent.home.stat().st_mode & 0o001  # the test made the home (0755): kept, as it lets users pass
    stop = world.run(u1, "agent", "stop", home=agent.home)
    _one_line_refusal(stop, "only root and the agent's admins may stop the agent")
    assert agent.call("status")["pid"]


def test_another_users_private_agent_is_one_clear_line(world: World) -> None:
    _, u2 = world.users
    private = Daemon(Path(world.root) / f"private-{os.urandom(3).hex()}")  # root's own agent: home 0700
    private.start()
    try:
        res = world.run(u2, "queue", home=private.home)
        _one_line_refusal(res, "permission denied", "belongs to another user")
    finally:
        private.stop()


def test_an_admin_group_member_may_steer_every_job(world: World) -> None:
    u1, u2 = world.users  # u1 is in world.group
    d = Daemon(Path(world.root) / f"admins-{os.urandom(3).hex()}", multi_user=True, admin_group=world.group)
    d.start()
    try:
        theirs = _submit(world, u2, d, "sleep 300")
        d.wait_state(theirs, "running")
        _one_line_refusal(world.run(u2, "hold", str(_submit(world, u1, d, "sleep 300", "--hold")), home=d.home),
                          f"only root and the members of group {world.group}")  # fmt: skip
        res = world.run(u1, "cancel", str(theirs), home=d.home)
        assert res.returncode == 0, res.stderr
        d.wait_state(theirs, "cancelled")
    finally:
        d.stop()


def test_one_agent_per_gpus_across_users_names_the_first(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root's shared agent holds the GPUs: a user's own agent on them refuses and names it; once root's
    is gone, the user's agent takes them and root's shared agent is refused in turn."""
    u1, _ = world.users
    locks = Path(world.root) / f"locks-{os.urandom(3).hex()}"
    locks.mkdir()
    locks.chmod(0o1777)  # what systemd's RuntimeDirectoryMode (or the first agent) makes of /run/gpuplan
    gpus = f"fake:8xA100-80GB,set=lab-{os.urandom(3).hex()}"
    monkeypatch.setenv("GPUPLAN_LOCK_DIR", str(locks))
    lock_env = {
        "GPUPLAN_LOCK_DIR": str(locks),
        "GPUPLAN_LOCK_FALLBACK_DIR": os.environ["GPUPLAN_LOCK_FALLBACK_DIR"],
    }
    root_agent = Daemon(Path(world.root) / f"sys-{os.urandom(3).hex()}", multi_user=True, gpus=gpus).start()
    own = u1.home / "own"
    try:
        pid = root_agent.call("status")["pid"]
        res = world.run(u1, "agent", "start", "--gpus", gpus, home=own, env=lock_env)
        line = _one_line_refusal(
            res, "another gpuplan agent already drives these GPUs", f"pid {pid} of user root"
        )
        assert str(root_agent.home) in line
    finally:
        root_agent.stop()
    res = world.run(u1, "agent", "start", "--gpus", gpus, home=own, env=lock_env)
    assert res.returncode == 0, (res.stdout, res.stderr)
    try:
        res = world.run(
            None, "agent", "start", "--multi-user", "--gpus", gpus, home=root_agent.home, env=lock_env
        )
        _one_line_refusal(
            res, "another gpuplan agent already drives these GPUs", f"of user {u1.name} (uid {u1.uid})"
        )
    finally:
        world.run(u1, "agent", "stop", home=own)


def test_a_users_agent_started_before_the_lock_folder_exists_refuses_roots(world: World) -> None:
    """The gap of #23: a user's agent on the GPUs before /run/gpuplan exists (no shared agent since
    boot) could not make the lock folder and ran unlocked; root's agent, started later, was let in."""
    u1, _ = world.users
    tag = os.urandom(3).hex()
    locks = Path(world.root) / f"run-{tag}"  # missing, in root's 0755 folder: the user cannot make it
    tmp = Path(world.root) / f"tmp-{tag}"
    tmp.mkdir()
    tmp.chmod(0o1777)  # as /tmp
    gpus = f"fake:8xA100-80GB,set=early-{tag}"
    lock_env = {"GPUPLAN_LOCK_DIR": str(locks), "GPUPLAN_LOCK_FALLBACK_DIR": str(tmp)}
    own, system = u1.home / "own", Path(world.root) / f"sys-{tag}"
    res = world.run(u1, "agent", "start", "--gpus", gpus, home=own, env=lock_env)
    assert res.returncode == 0, (res.stdout, res.stderr)
    try:
        spare = tmp / f"gpuplan-gpus-fake-early-{tag}.lock"
        assert not locks.exists()
        res = world.run(None, "agent", "start", "--multi-user", "--gpus", gpus, home=system, env=lock_env)
        line = _one_line_refusal(
            res, "another gpuplan agent already drives these GPUs", f"of user {u1.name} (uid {u1.uid})"
        )
        assert f"home {own} (lock {spare})" in line
        assert (spare.stat().st_uid, stat.S_IMODE(spare.stat().st_mode)) == (u1.uid, 0o666)
    finally:
        world.run(u1, "agent", "stop", home=own)
        Daemon(system).stop_by_pidfile()  # the old code let it start
    res = world.run(None, "agent", "start", "--multi-user", "--gpus", gpus, home=system, env=lock_env)
    assert res.returncode == 0, (res.stdout, res.stderr)  # the user's agent gone: root's takes both locks
    try:
        res = world.run(u1, "agent", "start", "--gpus", gpus, home=own, env=lock_env)
        _one_line_refusal(res, "another gpuplan agent already drives these GPUs", "of user root (uid 0)")
    finally:
        Daemon(system).stop_by_pidfile()


def test_a_fallback_lock_file_another_user_planted_stops_roots_agent(world: World) -> None:
    """The fallback folder is every user's: a symlink or a private file planted there is refused
    with the fix, and root's agent writes nothing through it."""
    _, u2 = world.users
    tag = os.urandom(3).hex()
    tmp = Path(world.root) / f"tmp-{tag}"
    tmp.mkdir()
    tmp.chmod(0o1777)
    precious = Path(world.root) / f"precious-{tag}"
    precious.write_text("root's\n")
    gpus = f"fake:8xA100-80GB,set=planted-{tag}"
    spare = tmp / f"gpuplan-gpus-fake-planted-{tag}.lock"
    lock_env = {
        "GPUPLAN_LOCK_DIR": str(Path(world.root) / f"run-{tag}"),
        "GPUPLAN_LOCK_FALLBACK_DIR": str(tmp),
    }
    system = Path(world.root) / f"sys-{tag}"
    for plant in (f"import os; os.symlink({str(precious)!r}, {str(spare)!r})",
                  f"import os; os.remove({str(spare)!r}); os.close(os.open({str(spare)!r}, os.O_CREAT | os.O_WRONLY, 0o600))"):  # fmt: skip
        subprocess.run(
            ["/usr/bin/python3", "-c", plant], check=True, user=u2.uid, group=u2.gid, cwd=str(u2.home)
        )
        try:
            res = world.run(None, "agent", "start", "--multi-user", "--gpus", gpus, home=system, env=lock_env)
            _one_line_refusal(res, f"the GPU lock file {spare} cannot be used", f"sudo rm {spare}")
        finally:
            Daemon(system).stop_by_pidfile()
        assert precious.read_text() == "root's\n"


IMPOSTOR = """import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1] + "/agent.sock")
__import__("os").chmod(sys.argv[1] + "/agent.sock", 0o666)  # as the shared agent's socket
s.listen(4)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.settimeout(5)
    data = b""
    try:
        while chunk := c.recv(65536):
            data += chunk
            c.sendall(b'{"ok": true, "id": 1, "jobs": []}\\n')
    except OSError:
        pass
    open(sys.argv[1] + "/heard", "ab").write(data)
    c.close()
"""


def test_a_user_posing_as_the_shared_agent_is_refused_before_anything_is_sent(world: World) -> None:
    """The shared agent's folder is 1777: while root's agent is down, another user can bind its socket."""

    u1, u2 = world.users
    run = Path(world.root) / f"run-{os.urandom(3).hex()}"
    run.mkdir()
    run.chmod(0o1777)
    fake = subprocess.Popen(["/usr/bin/python3", "-c", IMPOSTOR, str(run)], stdout=subprocess.PIPE, text=True,
                            user=u2.uid, group=u2.gid, cwd=str(u2.home))  # fmt: skip
    try:
        assert fake.stdout is not None and fake.stdout.readline().strip() == "ready"
        res = world.run(u1, "submit", "--", "echo", "$SECRET", home=run, env={"SECRET": "s3cret"})
        _one_line_refusal(
            res, f"refusing the agent at {run / 'agent.sock'}: it runs as uid {u2.uid}, not root"
        )
        assert not (run / "heard").exists() or b"s3cret" not in (run / "heard").read_bytes()
        assert world.raw(u2, run, {"op": "status"})["ok"] is True, "its own user may talk to it"
    finally:
        fake.kill()
        fake.communicate()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_stale_users_are_those_whose_creating_run_is_gone() -> None:
    def entry(name: str, comment: str) -> pwd.struct_passwd:
        return pwd.struct_passwd((name, "x", 60001, 60001, comment, f"/tmp/{name[:9]}-x/{name}", "/bin/sh"))

    me = owner_comment()
    this_pid = me.split()[1]  # "pid=N"
    entries = [
        entry("gpt0a1b2c-1", f"gpuplan-test pid={_dead_pid()} start=123"),  # its run is gone
        entry("gpt0a1b2c-2", f"gpuplan-test {this_pid} start=1"),  # this pid, another process (reused pid)
        entry("gpt0d0d0d-1", me),  # a live run's (this one)
        entry("gpt0e0e0e-1", ""),  # made by something else: not ours to remove
        entry("alice", f"gpuplan-test pid={_dead_pid()} start=1"),  # not a throw-away name
    ]
    assert stale_users(entries) == ["gpt0a1b2c-1", "gpt0a1b2c-2"]


def test_a_killed_runs_users_are_swept_and_a_live_runs_kept(world: World) -> None:
    tag = f"gpt{secrets.token_hex(3)}"
    root = Path(f"/tmp/{tag}-left")
    root.mkdir()
    try:
        subprocess.run(["groupadd", f"{tag}g"], check=True, capture_output=True)
        name = f"{tag}-1"
        comment = f"gpuplan-test pid={_dead_pid()} start=1"
        subprocess.run(["useradd", "-m", "-d", str(root / name), "-c", comment, "-G", f"{tag}g", name],
                       check=True, capture_output=True)  # fmt: skip
        assert sweep_stale_users() == [name]
        with pytest.raises(KeyError):
            pwd.getpwnam(name)
        with pytest.raises(KeyError):
            grp.getgrnam(f"{tag}g")
        assert not root.exists()
        for user in world.users:  # this live run's users stay
            assert pwd.getpwnam(user.name).pw_uid == user.uid
    finally:
        subprocess.run(["userdel", "-r", f"{tag}-1"], capture_output=True, check=False)
        subprocess.run(["groupdel", f"{tag}g"], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)

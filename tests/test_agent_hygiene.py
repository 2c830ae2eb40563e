"""The agent's state hygiene and its time limits while it is down (issue #20, items 3 and 4).

A `--time` limit holds with the agent killed (the job's own wrapper stops it; the restarted agent
records `timeout`); an existing home keeps its mode and a too-open one is refused; the submitter's
environment leaves the store once no attempt needs it and never shows in a reply; `--retention`
prunes finished jobs, their logs and directories; logs are private; every event names its job; a
requeued attempt is `REQUEUED` in the history, which the trace reader and `gpuplan audit` accept.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_helpers import Clock, Daemon, in_process_agents, wait_until
from gpuplan.agent.daemon import Agent
from gpuplan.agent.launcher import live_jobs
from gpuplan.agent.paths import AgentPaths, HomeError
from gpuplan.agent.protocol import Caller
from gpuplan.agent.requests import handle
from gpuplan.agent.store import Store, connect, events_since, get_job


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUPLAN_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "gpuplan.cli", *args], env=env, capture_output=True,
                          text=True, timeout=60, cwd=home.parent)  # fmt: skip


def test_time_limit_holds_while_the_agent_is_down(tmp_path: Path) -> None:
    d = Daemon(tmp_path / "home", grace_s=1.0).start()
    try:
        jid = d.submit("sleep 60", time_limit_s=3.0)
        start_s = d.wait_state(jid, "running")["start_s"]
        d.kill9()
        killed_after_s = time.time() - start_s
        # under heavy load the agent may reach the limit itself before it dies: then it proves nothing
        assert killed_after_s < 3.0, (
            f"the agent was killed {killed_after_s:.1f} s after the start (limit 3 s)"
        )
        wait_until(lambda: not live_jobs(d.home), "the job's launcher to stop it", timeout_s=15)
        stopped_after_s = time.time() - start_s
        assert stopped_after_s < 3.0 + 4.0, f"stopped {stopped_after_s:.1f} s after its start (limit 3 s)"
        d.start()
        job = d.wait_state(jid, "timeout", "failed", "done")
        assert job["state"] == "timeout" and "while the agent was down" in job["reason"], job
        assert 2.9 <= job["end_s"] - job["start_s"] < 7.0, "its end is when it stopped, not the restart"
        history = [json.loads(line) for line in d.paths.history.read_text().splitlines()]
        assert [h["meta"]["state"] for h in history] == ["TIMEOUT"]
    finally:
        d.stop()


def test_time_limit_while_running_is_the_agents(tmp_path: Path) -> None:
    """With the agent up, a TERM-ignoring job is still killed after the grace period, once."""
    d = Daemon(tmp_path / "home", grace_s=0.5).start()
    try:
        jid = d.submit("trap '' TERM; sleep 60", time_limit_s=1.0)
        job = d.wait_state(jid, "timeout", "failed", "done", timeout_s=15)
        assert job["state"] == "timeout", job
        assert not live_jobs(d.home)
    finally:
        d.stop()


def test_an_existing_1777_home_is_refused_and_left_1777(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    os.chmod(scratch, 0o1777)
    proc = _cli(scratch, "agent", "start", "--gpus", "fake:8xA100-80GB")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "writable by others (mode 1777)" in proc.stderr and "private subdirectory" in proc.stderr
    assert "chmod" not in proc.stderr, "never advise making a shared scratch directory private"
    assert stat.S_IMODE(scratch.stat().st_mode) == 0o1777
    assert not (scratch / "agent.db").exists() and not (scratch / "jobs").exists()


def test_an_existing_private_home_keeps_its_mode(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    os.chmod(home, 0o750)
    AgentPaths(home).create()
    assert stat.S_IMODE(home.stat().st_mode) == 0o750, (
        "gpuplan never changes the mode of a directory it did not create"
    )
    assert stat.S_IMODE((home / "jobs").stat().st_mode) == 0o700, "what it creates is private"
    made = tmp_path / "new" / "home"
    AgentPaths(made).create()
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    os.chmod(home, 0o770)
    with pytest.raises(HomeError, match=r"writable by others \(mode 0770\).*chmod go-w"):
        AgentPaths(home).create()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_agent(tmp_path: Path, clock: Clock) -> Iterator[object]:
    with in_process_agents(tmp_path / "home", clock) as make:
        yield make


def _submit(agent: Agent, command: str, **kw: object) -> int:
    env = {"PATH": os.environ["PATH"], "API_TOKEN": "s3cret", "LANG": "C.UTF-8"}
    reply = handle(agent, {"op": "submit", "command": command, "cwd": str(agent.paths.home), "env": env, **kw},
                   os.getuid())  # fmt: skip
    assert reply["ok"], reply
    return int(reply["id"])


def _until(agent: Agent, jid: int, state: str) -> None:
    wait_until(lambda: (agent.step(), agent.store.job(jid).state == state)[1], f"job {jid} {state}")  # type: ignore[union-attr]


def test_environment_leaves_the_store_once_no_attempt_needs_it(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(oom_retries=0)
    jid = _submit(agent, "sleep 60")
    row = agent.store.job(jid)
    assert row is not None and row.env["API_TOKEN"] == "s3cret", "kept until the job starts"
    for op in ({"op": "queue"}, {"op": "show", "id": jid}):  # while the store holds it
        for uid in (os.getuid(), 0, 4242):
            assert "s3cret" not in json.dumps(handle(agent, op, uid)), "no reply carries the environment"
    _until(agent, jid, "running")
    row = agent.store.job(jid)
    assert row is not None and row.env == {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}, row.env
    for op in ({"op": "queue"}, {"op": "show", "id": jid}):
        assert "s3cret" not in json.dumps(handle(agent, op, 0)), "no reply carries the environment"


def test_environment_stays_while_an_oom_retry_may_need_it(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent()  # oom_retries 1: attempt 1 may start again on its own
    jid = _submit(agent, "sleep 0.1")
    _until(agent, jid, "running")
    assert agent.store.job(jid).env["API_TOKEN"] == "s3cret"  # type: ignore[union-attr]
    _until(agent, jid, "done")
    assert "API_TOKEN" not in agent.store.job(jid).env, "gone once the job ended for good"  # type: ignore[union-attr]


def test_retention_prunes_finished_jobs_logs_and_directories(make_agent, clock: Clock) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(retention_s=3600.0)
    old, dep = _submit(agent, "echo old"), _submit(agent, "true")
    _until(agent, old, "done")
    _until(agent, dep, "done")
    waiting = _submit(agent, "true", after_id=dep, hold=True)  # a held job still depends on `dep`
    assert agent.paths.job_dir(old).is_dir()
    orphan = agent.paths.job_dir(9999)  # left by a store that was deleted: no row
    orphan.mkdir()
    os.utime(orphan, (clock.now - 7200.0, clock.now - 7200.0))
    clock.now += 1800.0
    fresh = _submit(agent, "true")
    _until(agent, fresh, "done")
    clock.now += 2000.0  # `old` and `dep` ended 3800 s ago, `fresh` 2000 s ago; the hourly prune is due
    agent.step()
    assert agent.store.job(old) is None and not agent.paths.job_dir(old).exists()
    assert agent.store.job(dep) is not None, "a job a waiting job depends on is kept"
    assert agent.store.job(waiting) is not None and agent.store.job(fresh) is not None
    assert agent.paths.job_dir(fresh).is_dir()
    assert not orphan.exists(), "an old directory without a job row goes too"
    assert all(e["job_id"] != old for e in events_since(agent.store.conn, 0))
    assert agent.store.get_meta(f"history:{old}.1") is None


def test_every_event_names_its_job_and_logs_are_private(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent()
    a, b = _submit(agent, "sleep 60", hold=True), _submit(agent, "sleep 60", hold=True)
    uid = os.getuid()
    for op in ("release", "hold", "cancel"):
        assert handle(agent, {"op": op, "ids": [a, b, a]}, uid)["ids"] == [a, b]
    c = _submit(agent, "sleep 60")
    _until(agent, c, "running")
    waiting = _submit(agent, "true", hold=True)
    assert handle(agent, {"op": "apply", "order": [str(waiting)]}, uid)["matched"] == [waiting]
    assert handle(agent, {"op": "requeue", "ids": [c]}, uid)["ok"]
    events = [(e["action"], e["job_id"]) for e in events_since(agent.store.conn, 0) if e["uid"] == uid]
    for op in ("release", "hold", "cancel"):
        assert (op, a) in events and (op, b) in events, (op, events)
    assert ("requeue", c) in events and ("apply", waiting) in events
    assert all(jid is not None for _, jid in events), events
    assert stat.S_IMODE((agent.paths.job_dir(c) / "stdout").stat().st_mode) == 0o600
    assert stat.S_IMODE(agent.paths.job_dir(c).stat().st_mode) == 0o700


def test_a_requeued_attempt_is_requeued_in_the_history(make_agent, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent()
    jid = _submit(agent, "sleep 60")
    _until(agent, jid, "running")
    assert handle(agent, {"op": "requeue", "ids": [jid]}, 0)["ok"]
    wait_until(lambda: (agent.step(), agent.store.job(jid).attempt == 2)[1], "attempt 2")  # type: ignore[union-attr]
    lines = [json.loads(x) for x in agent.paths.history.read_text().splitlines()]
    assert [(x["id"], x["meta"]["state"]) for x in lines] == [(str(jid), "REQUEUED")]
    assert stat.S_IMODE(agent.paths.history.stat().st_mode) == 0o600
    from gpuplan.traces import read_trace

    (job,) = read_trace(agent.paths.history).jobs
    assert job.meta["state"] == "REQUEUED"
    proc = subprocess.run([sys.executable, "-m", "gpuplan.cli", "audit", str(agent.paths.history),
                           "--cluster", str(agent.paths.node_toml), "--json"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "REQUEUED" in proc.stdout


def test_agent_log_is_private(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "agent.log").write_text("old\n")
    os.chmod(home / "agent.log", 0o644)
    try:
        proc = _cli(home, "agent", "start", "--gpus", "fake:8xA100-80GB")
        assert proc.returncode == 0, proc.stderr
        assert stat.S_IMODE((home / "agent.log").stat().st_mode) == 0o600
        conn = connect(home / "agent.db", readonly=True)
        assert get_job(conn, 1) is None
        conn.close()
    finally:
        Daemon(home).stop_by_pidfile()


def test_an_error_inside_a_handler_is_an_error_reply_and_the_agent_goes_on(make_agent, caplog) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent()
    jid = _submit(agent, "sleep 60")
    agent.store.conn.close()  # every store call now raises sqlite3.ProgrammingError
    with caplog.at_level("ERROR", logger="gpuplan.agent"):
        reply = handle(agent, {"op": "show", "id": jid}, Caller(os.getuid(), os.getgid(), 4242))
    assert reply["ok"] is False and "show failed in the agent (ProgrammingError" in reply["error"]
    assert any("pid 4242" in r.getMessage() and "show failed" in r.getMessage() for r in caplog.records)
    agent.store = Store(agent.paths.db)  # the next request and round work again
    assert handle(agent, {"op": "show", "id": jid}, 0)["ok"]
    _until(agent, jid, "running")


def test_a_repeated_request_id_returns_the_same_job(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent()
    req = {
        "op": "submit",
        "command": "true",
        "cwd": "/",
        "request_id": "0b6f1c1e-5c1a-4c0e-9f1e-1d2c3b4a5f60",
    }
    first, again = handle(agent, req, os.getuid()), handle(agent, req, os.getuid())
    assert first["ok"] and again == {"ok": True, "id": first["id"], "duplicate": True}
    assert [r.id for r in agent.store.jobs()] == [first["id"]]
    other = handle(agent, req, os.getuid() + 1)
    assert other["ok"] is False and "used by another caller" in other["error"]

"""The agent's protocol boundary against a real agent process (issue #20, items 1 and 2).

A fuzz run of 10,000+ random requests over a few connections (every op; integers to 2^100,
negatives, floats, NaN, strings, lists, nested objects, missing and extra fields, truncated JSON,
bytes that are no UTF-8, over-long strings and lines): every request gets an answer, the agent lives
after each, and afterwards the store holds exactly the accepted jobs, each attempt started once.
Then each class of bad input on its own, and the lost-reply fault: the client still prints the
job's id and the job runs once.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_helpers import Daemon, wait_until
from gpuplan.agent.gpus import open_backend
from gpuplan.agent.launcher import live_jobs
from gpuplan.agent.protocol import (
    AgentConnection,
    AgentConnectionLost,
    AgentError,
    AgentNotRunningError,
    call,
)
from gpuplan.agent.schema import INT_MAX, OPS
from gpuplan.agent.server import TEST_FAULT_ENV
from gpuplan.agent.store import connect, events_since, jobs_by_state

FUZZ_REQUESTS = 10_000


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path / "home", sample_interval_s=5.0).start()  # the fuzz run's cost is its requests
    yield d
    d.stop()


@pytest.fixture(scope="module")
def shared_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One agent for the tests that only send refused requests."""
    d = Daemon(tmp_path_factory.mktemp("shared") / "home").start()
    yield d
    d.stop()


def _nasty(rng: random.Random, depth: int = 0) -> Any:
    k = rng.randrange(13 if depth < 2 else 11)
    if k == 0:
        return rng.randint(-(2**100), 2**100)
    if k == 1:
        return rng.randint(-3, 5)
    if k == 2:
        return rng.choice([2**53, INT_MAX, 2**63, 2**63 - 1, -(2**63) - 1, 2**64, -INT_MAX - 1])
    if k == 3:
        return rng.uniform(-1e20, 1e20)
    if k == 4:
        return rng.choice([float("nan"), float("inf"), float("-inf"), -0.0, 1e308, 5e-324, 1.5])
    if k == 5:
        return "".join(rng.choice('ab \0\n"\\é😀/..') for _ in range(rng.randrange(12)))
    if k == 6:
        return "x" * rng.choice([257, 4097, 70_000])
    if k == 7:
        return None
    if k == 8:
        return rng.random() < 0.5
    if k == 9:
        return rng.choice(["true", "/", "1", "", "suspend", "fz"])
    if k == 10:
        return [[[[[[1]]]]]]
    if k == 11:
        return [_nasty(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {str(_nasty(rng, depth + 1)): _nasty(rng, depth + 1) for _ in range(rng.randrange(3))}


def _good(field: str, rng: random.Random, home: Path) -> Any:
    """A value the agent accepts for `field` (job ids are small: they hit real jobs)."""
    small_id = rng.randint(1, 40)
    return {
        "command": "true", "gpus": rng.choice([1, 2, 8]), "mem_gb": rng.choice([None, 10.0]),
        "time_limit_s": rng.choice([None, 60.0]), "name": rng.choice(["", "fz"]), "priority": rng.randint(-5, 5),
        "after_id": None, "hold": rng.random() < 0.5, "cwd": str(home), "env": {"PATH": os.environ["PATH"]},
        "preempt": rng.choice(["suspend", "never"]), "ids": [small_id], "id": small_id, "order": [str(small_id)],
        "kill_jobs": False, "request_id": None,
    }[field]  # fmt: skip


def _request(rng: random.Random, home: Path) -> dict[str, Any]:
    op = rng.choice([*OPS, "explode", 7])
    fields = list(OPS.get(op, {})) if isinstance(op, str) else []
    obj: dict[str, Any] = {"op": op}
    # a submit has 11 fields: enough of them must pass; a requeue or a started job costs a real process
    good = {"submit": 0.85, "requeue": 0.4}.get(op, 0.7) if isinstance(op, str) else 0.7
    for f in fields:
        r = rng.random()
        if r < good:
            obj[f] = _good(f, rng, home)
        elif r < good + (1 - good) * 0.8:
            obj[f] = _nasty(rng)
    if obj.get("ids") is not None and obj.get("id") is not None and rng.random() < 0.9:
        del obj[rng.choice(["ids", "id"])]
    if rng.random() < 0.05 or op == "stop":  # a valid stop would end the run: always an extra field
        obj[rng.choice(["x", "user", "env2", "OP"])] = _nasty(rng)
    if rng.random() < 0.05:
        del obj["op"]
    return obj


def _line(rng: random.Random, home: Path) -> tuple[bytes, dict[str, Any] | None]:
    """One request line (newline included) and the request it encodes (None: not a request object)."""
    r = rng.random()
    if r < 0.04:
        raw = json.dumps(_request(rng, home)).encode()
        return raw[: rng.randrange(len(raw))] + b"\n", None  # truncated JSON
    if r < 0.06:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))).replace(
            b"\n", b""
        ) + b"\n", None
    if r < 0.07:
        return json.dumps(_nasty(rng)).encode() + b"\n", None  # JSON, but not a request object
    obj = _request(rng, home)
    return json.dumps(obj).encode() + b"\n", obj  # allow_nan: NaN and Infinity tokens too


def test_fuzz_agent_answers_everything_and_loses_no_job(agent: Daemon) -> None:
    rng = random.Random(20)
    accepted: set[int] = set()
    answered = 0
    conn = AgentConnection(agent.paths.socket)
    try:
        while answered < FUZZ_REQUESTS:
            batch = _batch(rng, agent.home, FUZZ_REQUESTS - answered)
            conn.send_raw(b"".join(line for line, _ in batch))  # pipelined: answered in order
            for line, obj in batch:
                reply = conn.read_reply()
                answered += 1
                assert isinstance(reply.get("ok"), bool), (line[:200], reply)
                if not reply["ok"]:
                    assert isinstance(reply.get("error"), str) and reply["error"], (line[:200], reply)
                    assert "\n" not in reply["error"]
                elif obj is not None and obj.get("op") == "submit":
                    accepted.add(int(reply["id"]))
            assert agent.proc is not None and agent.proc.poll() is None, (
                f"the agent died by request {answered}"
            )
    finally:
        conn.close()
    assert answered == FUZZ_REQUESTS
    _deep_and_long_lines(agent)
    assert agent.proc is not None and agent.proc.poll() is None
    assert len(accepted) > 50, f"too few valid submits to check anything: {len(accepted)}"
    _check_jobs(agent, accepted)


def _batch(rng: random.Random, home: Path, most: int) -> list[tuple[bytes, dict[str, Any] | None]]:
    """Up to 50 lines and 64 KiB: small enough that the agent's replies never wait for our sends."""
    batch: list[tuple[bytes, dict[str, Any] | None]] = []
    size = 0
    while len(batch) < min(50, most) and size < 65536:
        line, obj = _line(rng, home)
        batch.append((line, obj))
        size += len(line)
    return batch


def _deep_and_long_lines(agent: Daemon) -> None:
    """The lines that need a connection of their own: nesting past the parser's stack, a line over
    the 16 MiB limit (the agent answers and closes), a request without its newline before EOF."""
    for raw in (b"[" * 200_000 + b"\n", b'{"op": "show", "id": "' + b"9" * (17 * 1024 * 1024) + b'"}\n'):
        with AgentConnection(agent.paths.socket) as conn:
            with contextlib.suppress(AgentConnectionLost):  # the agent answers and closes mid-line
                conn.send_raw(raw)
            reply = conn.read_reply()
            assert reply["ok"] is False and ("not JSON" in reply["error"] or "over" in reply["error"]), reply
    with AgentConnection(agent.paths.socket) as conn:
        conn.send_raw(b'{"op": "status"}')
        conn.finish_sending()
        assert conn.read_reply()["ok"] is True


def _check_jobs(agent: Daemon, accepted: set[int]) -> None:
    for job in agent.call("queue")["jobs"]:  # held and queued ones; a running `true` may end meanwhile
        with AgentConnection(agent.paths.socket) as conn:
            conn.request({"op": "cancel", "id": job["id"]})
    wait_until(lambda: not agent.call("queue")["jobs"], "every fuzzed job to end", 60)
    conn = connect(agent.paths.db, readonly=True)
    try:
        ids = {r.id for r in jobs_by_state(conn)}
        assert ids == accepted, "a job is lost, or one was made that no reply announced"
        starts = [
            (e["job_id"], json.loads(e["detail"])["attempt"])
            for e in events_since(conn, 0)
            if e["action"] == "start"
        ]
        assert len(starts) == len(set(starts)), "an attempt of a job was started twice"
        assert starts, "no fuzzed job ever started"
    finally:
        conn.close()
    assert not live_jobs(agent.home), "a job process outlived its job"
    backend = open_backend(agent.config["gpus"], set_id=str(agent.home))
    try:
        assert not backend.snapshot().procs, "the fake device set still shows a job's memory"
    finally:
        backend.close()


@pytest.mark.parametrize(
    ("request_obj", "needle"),
    [
        ({"op": "show", "id": 2**63}, "out of range (valid: 1..9007199254740991)"),
        ({"op": "show", "id": 2**100}, "out of range"),
        ({"op": "show", "id": -1}, "out of range"),
        ({"op": "show", "id": 1.0}, "expected an integer"),
        ({"op": "show", "id": True}, "expected an integer"),
        ({"op": "show", "id": "1"}, "expected an integer"),
        ({"op": "show"}, "missing field 'id'"),
        ({"op": "cancel", "ids": [1, 2**64]}, "ids[1]"),
        ({"op": "cancel", "ids": []}, "list of 1..10000 job ids"),
        ({"op": "cancel", "ids": list(range(1, 10_002))}, "list of 1..10000 job ids"),
        ({"op": "cancel"}, "give at least one job id"),
        ({"op": "hold", "ids": [1], "id": 1}, "not both"),
        ({"op": "submit", "command": "true", "priority": 2**70}, "priority"),
        ({"op": "submit", "command": "true", "after_id": 2**63}, "after_id"),
        ({"op": "submit", "command": "true", "gpus": 0}, "gpus"),
        ({"op": "submit", "command": "true", "mem_gb": float("nan")}, "mem_gb"),
        ({"op": "submit", "command": "true", "time_limit_s": -5}, "time_limit_s"),
        ({"op": "submit", "command": "x" * 70_000}, "command: 70000 characters"),
        ({"op": "submit", "command": "true", "name": "n" * 300}, "name: 300 characters"),
        ({"op": "submit", "command": "a\0b"}, "NUL"),
        ({"op": "submit", "command": "true", "cwd": "relative"}, "absolute"),
        ({"op": "submit", "command": "true", "env": {"A": 1}}, "env"),
        ({"op": "submit", "command": "true", "env": [["A", "b"]]}, "env"),
        ({"op": "submit", "command": "true", "env": {"A=B": "c"}}, "contains '='"),
        ({"op": "submit", "command": "true", "hold": "yes"}, "true or false"),
        ({"op": "submit", "command": "true", "preempt": {"a": 1}}, "--preempt"),
        ({"op": "submit", "command": ["true"]}, "expected a string"),
        ({"op": "submit", "command": "true", "user": "root"}, "unknown field(s) 'user'"),
        ({"op": "submit", "command": "true", "request_id": "../x"}, "request_id"),
        ({"op": "apply", "order": "1,2"}, "order"),
        ({"op": "apply", "order": [{"id": 1}]}, "order[0]"),
        ({"op": "stop", "kill_jobs": 1}, "true or false"),
        ({"op": "queue", "verbose": True}, "unknown field"),
        ({"op": "explode"}, "unknown op 'explode'"),
        ({"op": 5}, "unknown op 5"),
        ({"id": 1}, "unknown op None"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_each_bad_input_class_is_refused_with_its_field(
    shared_agent: Daemon, request_obj: Any, needle: str
) -> None:
    agent = shared_agent
    with AgentConnection(agent.paths.socket) as conn:
        conn.send_raw(json.dumps(request_obj).encode() + b"\n")
        reply = conn.read_reply()
        assert reply["ok"] is False and needle in reply["error"], reply
        assert conn.request({"op": "status"})["ok"], "the same connection is served after a refusal"
    log = (agent.home / "daemon.out").read_text()
    assert f"uid {os.getuid()} pid " in log and "refused" in log, "the refusal is logged with the caller"


def test_undecodable_lines_are_answered_and_the_connection_goes_on(shared_agent: Daemon) -> None:
    agent = shared_agent
    with AgentConnection(agent.paths.socket) as conn:
        for raw in (
            b'{"op": "sub\n',
            b"\xff\xfe\n",
            b"NaN\n",
            b'{"op": "show", "id": 1e999}\n',
            b"[" * 5000 + b"\n",
        ):
            conn.send_raw(raw)
            reply = conn.read_reply()
            assert reply["ok"] is False, (raw[:40], reply)
        assert conn.request({"op": "queue"})["ok"]


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUPLAN_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "gpuplan.cli", *args], env=env, capture_output=True,
                          text=True, timeout=60, cwd=home)  # fmt: skip


@pytest.mark.parametrize("resets", [1, 99])
def test_lost_reply_after_commit_client_prints_the_id_job_runs_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resets: int
) -> None:
    """1 reset: the retry gets the committed job from the agent; 99: every reply is lost and the
    client finds its job in the store by its request id."""
    monkeypatch.setenv(TEST_FAULT_ENV, f"reset-after-commit:submit:{resets}")
    d = Daemon(tmp_path / "home").start()
    try:
        out = tmp_path / "ran"
        proc = _cli(d.home, "submit", "--", f"echo once >> {out}")
        assert proc.returncode == 0, proc.stderr
        jid = int(proc.stdout.strip())
        assert "Traceback" not in proc.stderr and ("lost" in proc.stderr or "did not answer" in proc.stderr)
        d.wait_state(jid, "done")
        assert out.read_text() == "once\n", "the job ran exactly once"
        conn = connect(d.paths.db, readonly=True)
        try:
            assert [r.id for r in jobs_by_state(conn)] == [jid], "no phantom second job"
        finally:
            conn.close()
    finally:
        d.stop()


def test_connection_problems_are_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    proc = _cli(home, "queue")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no agent is running" in proc.stderr
    import socket as socketlib

    stale = socketlib.socket(socketlib.AF_UNIX)
    stale.bind(str(home / "agent.sock"))  # bound, never listening: a stale socket file
    stale.close()
    proc = _cli(home, "submit", "--", "true")
    assert proc.returncode == 2 and "stale socket" in proc.stderr and "Traceback" not in proc.stderr
    (home / "agent.sock").unlink()


def test_permission_denied_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user's socket (mode 0600): connect() fails with EACCES. Faked: root passes file modes."""
    import socket as socketlib

    def refuse(self: socketlib.socket, address: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(socketlib.socket, "connect", refuse)
    with pytest.raises(AgentError, match=r"permission denied on .*belongs to another user") as e:
        call(tmp_path / "agent.sock", {"op": "status"})
    assert not isinstance(e.value, AgentNotRunningError)


def test_queue_show_logs_read_the_store_while_the_agent_is_down(tmp_path: Path) -> None:
    d = Daemon(tmp_path / "home").start()
    try:
        jid = d.submit("echo hello; sleep 60")
        d.wait_state(jid, "running")
        wait_until(lambda: (d.paths.job_dir(jid) / "stdout").read_text() == "hello\n", "the job's output")
        d.kill9()
        for args in (("queue",), ("show", str(jid)), ("logs", str(jid))):
            proc = _cli(d.home, *args, "--json")
            assert proc.returncode == 0, proc.stderr
            assert "the agent is not running" in proc.stderr and "read-only" in proc.stderr
            assert json.loads(proc.stdout)["agent_running"] is False
        assert json.loads(_cli(d.home, "logs", str(jid), "--json").stdout)["text"] == "hello\n"
        assert [j["id"] for j in json.loads(_cli(d.home, "queue", "--json").stdout)["jobs"]] == [jid]
        proc = _cli(d.home, "show", "99999999999999999999")
        assert (
            proc.returncode == 2
            and "valid: 1..9007199254740991" in proc.stderr
            and proc.stderr.count("\n") == 1
        )
    finally:
        d.kill_jobs()


BIG = "99999999999999999999"


@pytest.mark.parametrize(
    "args",
    [
        ["show", BIG], ["logs", BIG], ["cancel", BIG], ["hold", "1", BIG], ["release", BIG], ["requeue", BIG],
        ["submit", "--after", BIG, "--", "true"], ["submit", "--priority", BIG, "--", "true"],
        ["submit", "--priority", f"-{BIG}", "--", "true"],
    ],
)  # fmt: skip
def test_cli_out_of_range_ids_are_one_line_with_the_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """Checked by the client before it connects: the same line with or without an agent."""
    from typer.testing import CliRunner

    from gpuplan.cli import app

    monkeypatch.setenv("GPUPLAN_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(app, args)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, (result.exit_code, result.stderr)
    assert "out of range (valid: " in lines[0] and "9007199254740991" in lines[0], lines[0]
    assert not (tmp_path / "home").exists(), "nothing was created for a refused request"

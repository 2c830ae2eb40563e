"""The agent's commands end to end: `gpuplan agent start|status|stop`, `submit`, `queue`, `show`,
`logs`, `hold`, `release`, `requeue`, `cancel`, `apply`, each with --json, as real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_helpers import Daemon
from gpuplan.commands.agent import parse_duration_s, parse_mem_gb
from gpuplan.errors import GpuplanError


def _gp(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUPLAN_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "gpuplan.cli", *args], env=env, capture_output=True, text=True,
                          cwd=home.parent, timeout=60)  # fmt: skip


def _ok(home: Path, *args: str) -> object:
    """Run with --json (before a `--`, after which words belong to the job's command)."""
    cut = args.index("--") if "--" in args else len(args)
    proc = _gp(home, *args[:cut], "--json", *args[cut:])
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    h = tmp_path / "home"
    yield h
    Daemon(h).stop_by_pidfile()


def test_cli_round_trip(home: Path, tmp_path: Path) -> None:
    started = _ok(
        home, "agent", "start", "--gpus", "fake:8xA100-80GB", "--policy", "sjf", "--sample-interval", "0.05"
    )
    assert isinstance(started, dict) and started["pid"] > 0 and len(started["gpus"]) == 8
    again = _gp(home, "agent", "start", "--gpus", "fake:8xA100-80GB")
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "already runs" in again.stderr
    status = _ok(home, "agent", "status")
    assert isinstance(status, dict) and status["pid"] == started["pid"] and status["policy"] == "sjf"
    held = _ok(
        home,
        "submit",
        "--hold",
        "--gpus",
        "2",
        "--mem",
        "20G",
        "--time",
        "1m",
        "--name",
        "hi",
        "--",
        "echo",
        "hello world",
    )
    assert isinstance(held, dict)
    jid = held["id"]
    queue = _ok(home, "queue")
    assert isinstance(queue, dict) and [(j["id"], j["state"]) for j in queue["jobs"]] == [(jid, "held")]
    assert _ok(home, "release", str(jid)) == {"ok": True, "ids": [jid]}
    follow = _gp(home, "logs", "-f", str(jid))
    assert follow.returncode == 0 and follow.stdout == "hello world\n"
    shown = _ok(home, "show", str(jid))
    assert isinstance(shown, dict) and shown["job"]["state"] == "done" and shown["job"]["mem_gb"] == 20.0
    assert shown["job"]["time_limit_s"] == 60.0 and shown["job"]["cwd"] == str(home.parent)
    logs = _ok(home, "logs", str(jid))
    assert isinstance(logs, dict) and logs["text"] == "hello world\n"
    long = _ok(home, "submit", "--", "sleep 300")
    assert isinstance(long, dict)
    assert _ok(home, "requeue", str(long["id"]))["ids"] == [long["id"]]  # type: ignore[index]
    assert _ok(home, "cancel", str(long["id"]))["ids"] == [long["id"]]  # type: ignore[index]
    bad = _gp(home, "cancel", "999")
    assert bad.returncode == 2 and bad.stderr == "gpuplan: error: no job 999 (see `gpuplan queue`)\n"
    stopped = _ok(home, "agent", "stop", "--kill-jobs")
    assert stopped == {"pid": started["pid"], "stopped": True}
    gone = _gp(home, "agent", "status")
    assert gone.returncode == 2 and "no agent is running" in gone.stderr


def test_cli_apply_plan_and_other_home_is_separate(home: Path, tmp_path: Path) -> None:
    _ok(home, "agent", "start", "--gpus", "fake:1xH200-141GB")
    blocker = _ok(home, "submit", "--time", "1h", "--", "sleep 300")
    ids = [_ok(home, "submit", "--name", n, "--time", "10m", "--", "true")["id"] for n in ("a", "b")]  # type: ignore[index]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({
        "schema": "gpuplan.plan/1", "objective": "makespan", "backfill": "easy", "oracle": False,
        "uses_true_outcome": False, "cluster": {}, "order": ["b", "a"],
        "jobs": [{"id": "b", "position": 0, "submit_s": 0, "start_s": 0, "end_s": 1, "gpus": 1, "gpu_labels": [], "node": "n"},
                 {"id": "a", "position": 1, "submit_s": 0, "start_s": 1, "end_s": 2, "gpus": 1, "gpu_labels": [], "node": "n"}],
    }))  # fmt: skip
    applied = _gp(home, "apply", str(plan), "--json")  # a file without a placer: first-fit, the agent's
    assert applied.returncode == 0 and applied.stderr == "", applied.stderr
    assert json.loads(applied.stdout) == {"ok": True, "matched": [ids[1], ids[0]], "unmatched": []}
    plan.write_text(plan.read_text().replace('"backfill": "easy"', '"backfill": "easy", "placer": "fgd"'))
    other_placer = _gp(home, "apply", str(plan))
    assert other_placer.returncode == 0 and other_placer.stderr.count("\n") == 1
    assert "planned with placer fgd; this agent places with first-fit" in other_placer.stderr
    queue = _ok(home, "queue")
    assert [j["id"] for j in queue["jobs"]] == [blocker["id"], ids[1], ids[0]]  # type: ignore[index]
    other = tmp_path / "other"
    assert _gp(other, "agent", "status").returncode == 2, "another GPUPLAN_HOME sees no agent"
    table = _gp(home, "queue")
    assert table.returncode == 0 and "sleep 300" in table.stdout


def test_cli_bad_input_is_one_line(home: Path) -> None:
    for args, needle in [
        (("agent", "start", "--gpus", "cuda"), "expected nvml or fake:PRESET_OR_TOML"),
        (("agent", "start", "--gpus", "fake:8xA100-80GB", "--policy", "random"), "unknown policy 'random'"),
        (("submit", "--mem", "lots", "--", "true"), "--mem 'lots'"),
        (("submit", "--", "true"), "no agent is running"),
    ]:
        proc = _gp(home, *args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("text", "gb"), [("20G", 20.0), ("20GB", 20.0), ("512M", 0.5), ("1.5T", 1536.0), ("8", 8.0)]
)
def test_parse_mem(text: str, gb: float) -> None:
    assert parse_mem_gb(text) == gb


@pytest.mark.parametrize(
    ("text", "s"),
    [("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("1:30:00", 5400), ("1d", 86400)],
)
def test_parse_duration(text: str, s: float) -> None:
    assert parse_duration_s(text) == s


@pytest.mark.parametrize("text", ["90", "2x", "-1h", "1:xx", "0s", "h"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(GpuplanError, match="expected a duration"):
        parse_duration_s(text)


def test_no_agent_hint_names_the_home(tmp_path: Path) -> None:
    proc = _gp(tmp_path / "nothing", "queue")
    assert (
        proc.returncode == 2
        and str(tmp_path / "nothing") in proc.stderr
        and "gpuplan agent start" in proc.stderr
    )


def test_cli_preemptive_agent(home: Path) -> None:
    started = _ok(home, "agent", "start", "--gpus", "fake:1xH200-141GB", "--policy", "las")
    assert isinstance(started, dict) and started["preemptive"] is True and started["suspended"] == 0
    job = _ok(home, "submit", "--preempt", "checkpoint", "--mem", "20G", "--", "sleep 300")
    assert isinstance(job, dict)
    shown = _ok(home, "show", str(job["id"]))
    assert shown["job"]["preempt"] == "checkpoint" and "attained_gpu_s" in shown["job"]  # type: ignore[index]
    bad = _gp(home, "submit", "--preempt", "maybe", "--", "true")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "valid: suspend, checkpoint" in bad.stderr
    text = _gp(home, "agent", "status")
    assert text.returncode == 0 and "suspended 0 · preemptions 0" in text.stdout

"""The `gpuplan` entry point (gpuplan/entry.py): `queue` and `show ID` run without the command tree
(commands/jobview.py), print exactly what the full CLI prints, and load nothing heavy; anything else
goes to the full CLI."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_helpers import Daemon
from gpuplan.agent.protocol import AgentError
from gpuplan.cli import app
from gpuplan.commands import jobview

_JOB = {"id": 5, "name": "train", "user": "ann", "command": "python train.py", "gpus": 2, "mem_gb": None,
        "gpu_ids": [], "state": "queued", "start_s": None, "reason": "Priority", "expected_start_s": 1060.0,
        "expected_end_s": 1660.0}  # fmt: skip
_RUNNING = {**_JOB, "id": 4, "name": "", "state": "running", "start_s": 900.0, "gpu_ids": [0, 1], "reason": "",
            "expected_start_s": None, "mem_gb": 20.0}  # fmt: skip
_SHOW = {"ok": True, "job": _JOB, "profile": {"attempt": 1, "samples": 0},
         "forecast": {"explanation": "Priority; 2 GPUs; job 4 frees 2 at 00:17:40"},
         "stdout": "/h/jobs/5/stdout", "stderr": "/h/jobs/5/stderr"}  # fmt: skip
_REPLIES = {"queue": {"ok": True, "now_s": 1000.0, "jobs": [_RUNNING, _JOB]}, "show": _SHOW}


@pytest.fixture
def fake_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    def answer(op: str, **fields: Any) -> dict[str, Any]:
        if op == "show" and fields["id"] != 5:
            raise AgentError(f"no job {fields['id']} (see `gpuplan queue`)")
        return _REPLIES[op]

    monkeypatch.setattr(jobview, "agent_call", answer)


@pytest.mark.parametrize(
    "args", [["queue"], ["queue", "--json"], ["show", "5"], ["show", "--json", "5"], ["show", "6"]]
)
def test_the_entry_prints_what_the_full_cli_prints(
    fake_agent: None, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    status = jobview.fast_main(args)
    fast = capsys.readouterr()
    full = CliRunner().invoke(app, args)
    assert status == full.exit_code and status == (2 if args == ["show", "6"] else 0)
    assert fast.out == full.stdout and fast.err == full.stderr
    if status == 0 and "--json" in args:
        assert json.loads(fast.out) == {**_REPLIES[args[0]], "agent_running": True}
    if args == ["queue"]:
        assert fast.out.splitlines()[2].split()[:8] == [
            "5",
            "queued",
            "train",
            "2",
            "whole",
            "-",
            "in",
            "60s",
        ]


@pytest.mark.parametrize(
    "args",
    [[], ["queue", "--help"], ["queue", "extra"], ["show"], ["show", "x"], ["show", "1", "2"],
     ["show", "-1"], ["show", "٣"], ["queue", "--json", "--json"], ["submit", "--", "true"]],
)  # fmt: skip
def test_anything_else_goes_to_the_full_cli(args: list[str]) -> None:
    assert jobview.fast_main(args) is None


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path / "home").start()
    try:
        yield d
    finally:
        d.stop()


_PROBE = """
import sys
from gpuplan.entry import main
sys.argv = ["gpuplan", *sys.argv[1:]]
status = main()
heavy = ("typer", "click", "rich", "pydantic", "numpy", "pyarrow", "plotly", "sklearn", "fastapi",
         "gpuplan.cli", "gpuplan.core.forecast", "gpuplan.core.scheduler")
sys.stderr.write("LOADED " + ",".join(m for m in heavy if m in sys.modules) + "\\n")
sys.exit(status)
"""


def test_queue_and_show_on_a_real_agent_load_nothing_heavy(agent: Daemon) -> None:
    env = {**os.environ, "GPUPLAN_HOME": str(agent.home)}
    run = agent.submit("sleep 300", gpus=8, time_limit_s=300.0)
    waiting = [agent.submit("true", gpus=g, time_limit_s=60.0) for g in (4, 8, 1)]
    agent.wait_state(run, "running")

    def gp(*args: str, module: str = "gpuplan") -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-c", _PROBE] if module == "probe" else [sys.executable, "-m", module]
        return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=60)

    for args in (
        ["queue"],
        ["queue", "--json"],
        ["show", str(waiting[1])],
        ["show", str(waiting[1]), "--json"],
    ):
        probe = gp(*args, module="probe")
        assert probe.returncode == 0, probe.stderr
        assert probe.stderr.splitlines()[-1] == "LOADED ", probe.stderr
    fast, full = gp("queue", "--json"), gp("queue", "--json", module="gpuplan.cli")
    ids = [[j["id"] for j in json.loads(p.stdout)["jobs"]] for p in (fast, full)]
    assert ids[0] == ids[1] == [run, *waiting]
    shown = json.loads(gp("show", str(waiting[1]), "--json").stdout)
    assert shown["job"]["id"] == waiting[1] and shown["forecast"]["expected_start_s"] is not None
    missing = gp("show", "999")
    assert missing.returncode == 2 and missing.stderr == "gpuplan: error: no job 999 (see `gpuplan queue`)\n"


class _LeftReader(io.TextIOBase):
    """A stdout whose reader has gone (`gpuplan queue | head -1` once head exited)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self) -> int:
        return self.fd


def test_a_reader_that_leaves_early_gets_no_traceback(
    fake_agent: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Status 1 and nothing on stderr, as the full CLI (click) does; stdout then points at /dev/null so
    the interpreter's last flush cannot fail either."""
    r, w = os.pipe()
    err = io.StringIO()
    monkeypatch.setattr(sys, "stdout", _LeftReader(w))
    monkeypatch.setattr(sys, "stderr", err)
    try:
        assert jobview.fast_main(["queue"]) == 1
        assert err.getvalue() == ""
        assert os.write(w, b"x") == 1 and os.fstat(w).st_ino == os.stat(os.devnull).st_ino
    finally:
        os.close(r)
        os.close(w)

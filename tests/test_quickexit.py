"""A batch command's process ends without freeing its objects one by one (gpuplan/quickexit.py): the
same output and status as ever, every buffered byte written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from gpuplan import quickexit
from gpuplan.cli import app


def test_simulate_in_a_real_process_prints_what_the_runner_prints(tmp_path: Path) -> None:
    trace, rows = tmp_path / "t.csv", tmp_path / "rows.jsonl"
    made = CliRunner().invoke(app, ["synth", "poisson", "--jobs", "300", "--out", str(trace)])
    assert made.exit_code == 0, made.output
    args = ["simulate", str(trace), "-p", "fifo,sjf", "--json", "--schedule-out", str(rows)]
    proc = subprocess.run(
        [sys.executable, "-m", "gpuplan", *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    in_process = CliRunner().invoke(app, args)
    assert in_process.exit_code == 0 and json.loads(proc.stdout) == json.loads(in_process.stdout)
    assert proc.stdout.endswith("]\n") and len(rows.read_text().splitlines()) == 2 * 300
    bad = subprocess.run(
        [sys.executable, "-m", "gpuplan", "simulate", str(tmp_path / "missing.csv")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "missing.csv" in bad.stderr


def test_a_handed_over_process_ends_with_its_status_and_its_buffered_output() -> None:
    probe = (
        "import sys\nfrom gpuplan import quickexit\nquickexit.opt_in()\nquickexit.hand_over([0] * 10)\n"
        "sys.stdout.write('no newline, still buffered')\nsys.stderr.write('err')\n"
        "quickexit.end_if_handed(3)\nprint('never printed')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "no newline, still buffered", "err")


def test_without_opting_in_nothing_is_kept_and_the_process_goes_on() -> None:
    quickexit.hand_over(object())  # a test process (and any library caller) never opted in
    quickexit.end_if_handed(0)  # returns: nothing was handed over

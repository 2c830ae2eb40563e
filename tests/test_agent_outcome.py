"""The final state and reason of an ended attempt (agent/outcome.py), case by case."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.agent.outcome import end_reason, final_state


@pytest.mark.parametrize(
    ("stop_state", "exit_code", "marker", "state"),
    [
        ("cancelled", 143, False, "cancelled"),
        ("timeout", 143, False, "timeout"),
        ("requeue", 143, False, "requeued"),
        ("preempt", 143, False, "preempted"),
        ("", 143, True, "timeout"),  # its launcher enforced the limit
        ("", 0, False, "done"),
        ("", 1, False, "failed"),
        ("", None, False, "failed"),
    ],
)
def test_final_state(
    tmp_path: Path, stop_state: str, exit_code: int | None, marker: bool, state: str
) -> None:
    if marker:
        (tmp_path / "timeout").write_text("timeout\n")
    assert final_state(stop_state, exit_code, tmp_path) == state


@pytest.mark.parametrize(
    ("stop_state", "exit_code", "state", "vanished", "oom", "reason"),
    [
        ("", 1, "failed", False, True, "CUDA out of memory"),
        ("preempt", 143, "preempted", False, False, "preempted"),
        (
            "",
            143,
            "timeout",
            True,
            False,
            "time limit reached while the agent was down: stopped by its launcher",
        ),
        ("", 143, "timeout", False, False, "time limit reached: stopped by its launcher"),
        ("timeout", 143, "timeout", False, False, "time limit reached: stopped by the agent"),
        ("", None, "failed", True, False, "ended while the agent was down; exit status unknown (killed?)"),
        ("", 137, "failed", False, False, "killed by SIGKILL"),
        ("", 2, "failed", False, False, "exit status 2"),
        ("", 0, "done", True, False, "ended while the agent was down"),
        ("", 0, "done", False, False, ""),
    ],
)
def test_end_reason(
    stop_state: str, exit_code: int | None, state: str, vanished: bool, oom: bool, reason: str
) -> None:
    assert end_reason(stop_state, exit_code, state, vanished, oom) == reason

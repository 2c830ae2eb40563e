"""How an attempt ended: its final state and the reason shown to the user, from why the agent stopped
it (if it did), its exit status and the markers its launcher left in its job folder. Pure: the agent
records what these return."""

from __future__ import annotations

from pathlib import Path

from gpuplan.agent import launcher

__all__ = ["end_reason", "final_state"]


def final_state(stop_state: str, exit_code: int | None, job_dir: Path) -> str:
    """`cancelled`, `timeout`, `requeued`, `preempted`, `done` or `failed`.

    `stop_state` is why the agent stopped the attempt ("" when it did not): cancelled, timeout,
    requeue or preempt. A `timeout` marker in `job_dir` means its launcher enforced the time limit
    (the agent was down, or late)."""
    if stop_state in ("cancelled", "timeout"):
        return stop_state
    if stop_state == "requeue":
        return "requeued"
    if stop_state == "preempt":
        return "preempted"
    if launcher.hit_time_limit(job_dir):
        return "timeout"
    return "done" if exit_code == 0 else "failed"


def end_reason(stop_state: str, exit_code: int | None, state: str, vanished: bool, oom: bool) -> str:
    """The reason recorded with the final `state` ("" for a plain success); `vanished`: the attempt
    ended while the agent was down."""
    if oom:
        return "CUDA out of memory"
    if state == "preempted":
        return "preempted"
    if state == "timeout" and not stop_state:
        down = " while the agent was down" if vanished else ""
        return f"time limit reached{down}: stopped by its launcher"
    if state == "timeout":
        return "time limit reached: stopped by the agent"
    if state == "failed" and exit_code is None:
        return "ended while the agent was down; exit status unknown (killed?)"
    if state == "failed" and exit_code is not None and exit_code > 128:
        return f"killed by {launcher.signal_name(exit_code - 128)}"
    if state == "failed":
        return f"exit status {exit_code}"
    if vanished:
        return "ended while the agent was down"
    return ""

"""Slurm integration: read the live queue and history, plan the pending jobs' order, apply and undo it.

`runner` is the only module that runs Slurm's commands; `parse` holds the pure parsers; `client`
asks Slurm (one batched command per question); `planner` simulates the live queue with gpuplan's
Scheduler; `apply` sets and restores priorities; `preempt` carries out a preemptive policy by `scontrol requeue`;
`setup` says whether an order can take effect.
"""

from gpuplan.slurm.apply import ApplyResult, apply_order, default_state_path, reset_order
from gpuplan.slurm.client import SlurmClient, live_state
from gpuplan.slurm.planner import LiveState, QueuePlan, plan_queue, simulate_queue
from gpuplan.slurm.runner import SlurmCommandError, SlurmError, SlurmPermissionError, SlurmRunner
from gpuplan.slurm.setup import setup_warnings

__all__ = [
    "ApplyResult",
    "LiveState",
    "QueuePlan",
    "SlurmClient",
    "SlurmCommandError",
    "SlurmError",
    "SlurmPermissionError",
    "SlurmRunner",
    "apply_order",
    "default_state_path",
    "live_state",
    "plan_queue",
    "reset_order",
    "setup_warnings",
    "simulate_queue",
]

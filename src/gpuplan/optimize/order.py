"""A policy that follows a given order of job ids: how a plan is applied by the simulator or an agent."""

from __future__ import annotations

from collections.abc import Sequence

from gpuplan.core.policies import Policy
from gpuplan.errors import GpuplanError
from gpuplan.model import Job

__all__ = ["FixedOrder"]


class FixedOrder(Policy):
    """Ranks jobs by their position in `order`; jobs not in it come after, first come first served.

    Not in the policy registry (it needs its order): pass the object, e.g.
    `simulate(jobs, cluster, policy=FixedOrder(plan.order), backfill="easy")`.

    Raises:
        GpuplanError: `order` names a job twice.
    """

    name = "fixed-order"
    description = "a given order of job ids (a plan); unlisted jobs after, FIFO"

    def __init__(self, order: Sequence[str], name: str = "fixed-order") -> None:
        self.order = list(order)
        self.position = {jid: i for i, jid in enumerate(self.order)}
        if len(self.position) != len(self.order):
            twice = next(j for i, j in enumerate(self.order) if self.position[j] != i)
            raise GpuplanError(f"FixedOrder: job id {twice!r} appears twice in the order; give each job once")
        self.name = name

    def key(self, job: Job, seq: int, oracle: bool) -> tuple[float, ...]:
        pos = self.position.get(job.id)
        if pos is None:
            return (float(len(self.order)), job.submit_s, seq)
        return (float(pos), 0.0, seq)

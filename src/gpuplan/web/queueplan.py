"""The queue view's plan: the order the policy will start the waiting jobs in, and when.

It asks the simulator, not a copy of its rules: running jobs go first with their remaining time,
then the waiting jobs sorted by the policy's own key; FIFO over that list under the same backfill
mode is exactly the policy's order (the scheduler's queue is that sort), so the simulated starts
are the expected start times if every job runs as long as its estimate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpuplan.model import ClusterSpec, Job
from gpuplan.sim.result import SimResult
from gpuplan.web.live import QueueRow

__all__ = ["DEFAULT_ESTIMATE_S", "PLAN_MAX_WAITING", "QueuePlan", "plan_queue"]

PLAN_MAX_WAITING = 1000
"""Expected times are simulated for this many waiting jobs at most, in planned order; the rest keep
their rank only. A backfill pass scans the waiting queue, so planning a long queue at one instant
grows with its square (10,000 jobs under EASY: about 20 s on this machine's cores)."""

DEFAULT_ESTIMATE_S = 3600.0
"""Planning duration of a job with neither an estimate nor a limit (the view marks it)."""


@dataclass(slots=True)
class QueuePlan:
    """Rows in planned order (running first), their expected start/end, and the simulated run."""

    rows: list[QueueRow]
    expected_start_s: dict[str, float]
    expected_end_s: dict[str, float]
    guessed: set[str]  # jobs planned with DEFAULT_ESTIMATE_S
    result: SimResult | None
    error: str | None = None
    note: str | None = None

    def page(self, offset: int, limit: int) -> dict[str, Any]:
        """One page of rows as JSON, with their planned rank."""
        chunk = self.rows[offset : offset + limit]
        return {
            "total": len(self.rows),
            "offset": offset,
            "limit": limit,
            "running": sum(1 for r in self.rows if r.state == "running"),
            "waiting": sum(1 for r in self.rows if r.state != "running"),
            "suspended": sum(1 for r in self.rows if r.state == "suspended"),
            "error": self.error,
            "note": self.note,
            "rows": [self._row(offset + i, r) for i, r in enumerate(chunk)],
        }

    def _row(self, rank: int, r: QueueRow) -> dict[str, Any]:
        return {
            "rank": rank + 1,
            "job_id": r.job_id,
            "state": r.state,
            "name": r.name,
            "user": r.user,
            "gpus": r.gpus,
            "mem_gb": r.mem_gb,
            "submit_s": r.submit_s,
            "start_s": r.start_s,
            "expected_start_s": self.expected_start_s.get(r.job_id),
            "expected_end_s": self.expected_end_s.get(r.job_id),
            "estimate_guessed": r.job_id in self.guessed,
        }


def _estimate(r: QueueRow) -> float | None:
    return r.est_duration_s if r.est_duration_s is not None and r.est_duration_s > 0 else None


def _as_job(r: QueueRow, now: float, guessed: set[str]) -> Job:
    est = _estimate(r)
    if est is None:
        guessed.add(r.job_id)
        est = DEFAULT_ESTIMATE_S
    if r.state == "running" and r.start_s is not None:
        est = max(1.0, r.start_s + est - now)  # what is left of it
    return Job(r.job_id, 0.0, max(1, r.gpus), r.mem_gb, est, est_duration_s=est, user=r.user, name=r.name)


def plan_queue(
    rows: Sequence[QueueRow], cluster: ClusterSpec, policy: str, backfill: str, now: float
) -> QueuePlan:
    """Plan `rows` (running and waiting) on `cluster` under `policy` + `backfill`, from `now`."""
    from gpuplan.core.policies import get_policy
    from gpuplan.errors import GpuplanError
    from gpuplan.sim.engine import simulate

    guessed: set[str] = set()
    running = [r for r in rows if r.state == "running"]
    waiting = [r for r in rows if r.state != "running"]
    jobs = {r.job_id: _as_job(r, now, guessed) for r in rows}
    if waiting and all(r.planned for r in waiting):
        planned = running + waiting  # the agent's own order
    else:
        key = get_policy(policy).key
        # the policy sees each job's real submit time; the simulation starts every job from `now`
        keyed = [replace(jobs[r.job_id], submit_s=r.submit_s) for r in waiting]
        order = sorted(range(len(waiting)), key=lambda i: (*key(keyed[i], i, False), i))
        planned = running + [waiting[i] for i in order]
    empty = QueuePlan(planned, {}, {}, guessed, None)
    if len(waiting) > PLAN_MAX_WAITING:
        empty.note = f"expected times for the first {PLAN_MAX_WAITING:,} of {len(waiting):,} waiting jobs"
    if not planned:
        return empty
    try:
        horizon = planned[: len(running) + PLAN_MAX_WAITING]
        result = simulate([jobs[r.job_id] for r in horizon], cluster, "fifo", backfill)
    except GpuplanError as e:
        empty.error = f"cannot plan the queue: {e}"
        return empty
    start = {rec.job_id: now + rec.start_s for rec in result.records}
    end = {rec.job_id: now + rec.end_s for rec in result.records if math.isfinite(rec.end_s)}
    for r in running:  # a running job started when it started
        if r.start_s is not None:
            start[r.job_id] = r.start_s
    for r in waiting:  # the agent's own projection, where it gave one, wins over ours
        if r.expected_start_s is not None:
            start[r.job_id] = r.expected_start_s
    return QueuePlan(planned, start, end, guessed, result, note=empty.note)

"""The queue view's plan: the order the waiting jobs will start in, and when: the core's forecast.

While the agent answers, its `queue` reply carries its own forecast (agent/outlook.py: its live
Scheduler run forward by core/forecast.py): the view shows it as it is, so the page and `gpuplan queue
--json` agree. When only the store can be read (the agent is stopping or down), the same forecast runs
on a Scheduler seeded from the store's rows: running jobs adopted on their GPUs until start + estimate,
waiting jobs queued under the policy, held ones kept out. Nothing here re-implements a rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuplan.model import ClusterSpec, Job
from gpuplan.sim.result import Metrics, SimResult
from gpuplan.web.live import QueueRow

if TYPE_CHECKING:
    from gpuplan.core.forecast import Forecast

__all__ = ["DEFAULT_ESTIMATE_S", "QueuePlan", "plan_queue", "store_forecast"]

DEFAULT_ESTIMATE_S = 3600.0
"""Planning duration of a job with neither an estimate nor a limit (the view marks it)."""


@dataclass(slots=True)
class QueuePlan:
    """Rows in planned order (running first), their expected start/end, and the forecast's Gantt."""

    rows: list[QueueRow]
    expected_start_s: dict[str, float]
    expected_end_s: dict[str, float]
    guessed: set[str]  # jobs planned with DEFAULT_ESTIMATE_S
    result: SimResult | None  # the forecast as a run (times from now), for the Gantt
    error: str | None = None
    note: str | None = None
    reasons: dict[str, str] | None = None

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

    def gantt(self, jobs: int) -> dict[str, Any] | None:
        """The Gantt of the first `jobs` planned jobs, x = hours from now (None: nothing planned)."""
        from gpuplan.report.gantt import gantt_figure_of

        if self.result is None:
            return None
        fig = gantt_figure_of(self.result, self.result.records[:jobs])
        fig["layout"]["xaxis"]["title"] = {"text": "hours from now"}
        return fig

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
            "reason": (self.reasons or {}).get(r.job_id, ""),
            "estimate_guessed": r.job_id in self.guessed,
        }


def plan_queue(
    rows: Sequence[QueueRow], cluster: ClusterSpec, policy: str, backfill: str, now: float
) -> QueuePlan:
    """The plan of `rows` (running and waiting) on `cluster` under `policy` + `backfill`, from `now`."""
    running = [r for r in rows if r.state == "running"]
    waiting = [r for r in rows if r.state != "running"]
    if rows and all(r.planned for r in (waiting or running)):
        return _agents_plan(running, waiting, cluster, now)
    return _forecast_plan(running, waiting, cluster, policy, backfill, now)


def _agents_plan(
    running: list[QueueRow], waiting: list[QueueRow], cluster: ClusterSpec, now: float
) -> QueuePlan:
    """The agent's own forecast, as its queue reply gave it (its order, starts, ends, reasons)."""
    start = {r.job_id: s for r in running if (s := r.start_s) is not None}
    start.update({r.job_id: s for r in waiting if (s := r.expected_start_s) is not None})
    end = {r.job_id: e for r in (*running, *waiting) if (e := r.expected_end_s) is not None}
    guessed = {r.job_id for r in (*running, *waiting) if _estimate(r) is None}
    planned = running + waiting
    gpus = {r.job_id: r.gpu_ids for r in planned}
    reasons = {r.job_id: r.reason for r in waiting}
    return QueuePlan(
        planned, start, end, guessed, _as_run(planned, start, end, gpus, cluster, now), reasons=reasons
    )


def store_forecast(
    rows: Sequence[QueueRow], cluster: ClusterSpec, policy: str, backfill: str, now: float
) -> tuple[Forecast, dict[str, int], set[str]]:
    """The core's forecast of a Scheduler seeded from `rows` (the store's, while the agent does not
    answer): running jobs adopted on their GPUs until start + estimate, waiting jobs queued under the
    policy, held ones kept out. Returns it, each job id's handle in it (the id itself when every id is
    a number, as the agent's are) and the jobs planned with DEFAULT_ESTIMATE_S.

    Raises:
        GpuplanError: the rows cannot be scheduled on `cluster` (a job larger than the node, ...).
    """
    from gpuplan.core.forecast import forecast
    from gpuplan.core.scheduler import Scheduler

    running = [r for r in rows if r.state == "running"]
    waiting = [r for r in rows if r.state != "running"]
    ordered = (*running, *waiting)
    numbers = all(r.job_id.isdigit() for r in ordered) and len({r.job_id for r in ordered}) == len(ordered)
    handle = {r.job_id: int(r.job_id) if numbers else k for k, r in enumerate(ordered)}
    guessed: set[str] = set()
    held = {handle[r.job_id]: "JobHeldUser" for r in waiting if r.state == "held"}
    sched = Scheduler(cluster, policy, backfill, "first-fit")
    for r in running:
        job = _as_job(r, guessed)
        began = now if r.start_s is None else r.start_s
        sched.adopt(handle[r.job_id], job, r.gpu_ids, began, began + (job.planning_duration_s() or 0.0))
    for r in waiting:
        if r.state != "held":
            sched.submit(handle[r.job_id], _as_job(r, guessed), now=r.submit_s)
    return forecast(sched, now, held=held), handle, guessed


def _forecast_plan(
    running: list[QueueRow],
    waiting: list[QueueRow],
    cluster: ClusterSpec,
    policy: str,
    backfill: str,
    now: float,
) -> QueuePlan:
    """The forecast of a Scheduler seeded from the rows (`store_forecast`), as the view's plan."""
    from gpuplan.errors import GpuplanError

    try:
        fc, handle, guessed = store_forecast([*running, *waiting], cluster, policy, backfill, now)
    except GpuplanError as e:
        return QueuePlan([*running, *waiting], {}, {}, set(), None, error=f"cannot plan the queue: {e}")
    row_of = {handle[r.job_id]: r for r in (*running, *waiting)}
    order = sorted(waiting, key=lambda r: (_rank(fc[handle[r.job_id]].rank), handle[r.job_id]))
    start: dict[str, float] = {}
    end: dict[str, float] = {}
    gpus: dict[str, tuple[int, ...]] = {}
    reasons: dict[str, str] = {}
    for k, f in fc.jobs.items():
        jid = row_of[k].job_id
        if f.start_s is not None:
            start[jid] = f.start_s
        if f.end_s is not None:
            end[jid] = f.end_s
        gpus[jid], reasons[jid] = f.gpu_ids, f.reason
    planned = running + order
    return QueuePlan(
        planned, start, end, guessed, _as_run(planned, start, end, gpus, cluster, now), reasons=reasons
    )


def _rank(rank: int | None) -> float:
    return math.inf if rank is None else rank


def _positive(value: float | None) -> float | None:
    return value if value is not None and value > 0 else None


def _estimate(r: QueueRow) -> float | None:
    """What the row's job is planned to run: its estimate, else its time limit (None: neither)."""
    est = _positive(r.est_duration_s)
    return est if est is not None else _positive(r.time_limit_s)


def _as_job(r: QueueRow, guessed: set[str]) -> Job:
    """The row as the core's Job: planned on its estimate, else on its time limit (which the forecast
    then names as such: "its time limit"), else on DEFAULT_ESTIMATE_S (in `guessed`)."""
    est, limit = _positive(r.est_duration_s), _positive(r.time_limit_s)
    if est is None and limit is None:
        guessed.add(r.job_id)
        est = DEFAULT_ESTIMATE_S
    planned = est if est is not None else limit
    return Job(
        r.job_id, r.submit_s, max(1, r.gpus), r.mem_gb, planned, est_duration_s=est, requested_s=limit,
        user=r.user, name=r.name,
    )  # fmt: skip


def _as_run(
    rows: list[QueueRow],
    start: dict[str, float],
    end: dict[str, float],
    gpus: dict[str, tuple[int, ...]],
    cluster: ClusterSpec,
    now: float,
) -> SimResult | None:
    """The forecast as a run whose times count from now (what the Gantt draws), jobs by start."""
    from gpuplan.sim.result import JobRecord

    records = [
        JobRecord(r.job_id, r.submit_s - now, start[r.job_id] - now, end[r.job_id] - now, gpus[r.job_id],
                  r.mem_gb, r.name, r.user)
        for r in rows
        if r.job_id in start and r.job_id in end and gpus.get(r.job_id)
    ]  # fmt: skip
    if not records:
        return None
    records.sort(key=lambda rec: (rec.start_s, rec.job_id))
    metrics = Metrics(len(records), max(rec.end_s for rec in records), 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0)
    labels = [f"{n.name}/{g}" for n in cluster.nodes for g in range(n.gpus)]
    return SimResult("forecast", "", "", False, cluster, metrics, records, [], labels)

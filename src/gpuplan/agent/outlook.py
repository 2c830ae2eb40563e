"""What `gpuplan queue` and `gpuplan show` say will happen: the core's forecast (core/forecast.py) of the
agent's live Scheduler, with the jobs the store keeps out of it (held, waiting on a dependency).

Every waiting job gets an expected start, end and GPUs, and a reason in Slurm's vocabulary; a held job
is `JobHeldUser`; a job whose dependency runs or waits enters the forecast's queue when that job ends
(as `Agent._release_dependents` queues it), and one whose dependency failed never starts
(`DependencyNeverSatisfied`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gpuplan.agent.store import JobRow
from gpuplan.core.forecast import Deferred, Forecast

if TYPE_CHECKING:
    from gpuplan.agent.daemon import Agent

__all__ = ["agent_forecast", "clock_text", "forecast_detail", "forecast_fields"]

_WAITING = ("queued", "suspended", "held")


def agent_forecast(agent: Agent, rows: list[JobRow], now: float) -> Forecast:
    """The forecast of every active job in `rows` (running, suspended, queued, held) from `now`."""
    deferred: list[Deferred] = []
    held: dict[int, str] = {}
    kept: dict[int, float] = {}
    for r in rows:
        if r.state == "held":
            held[r.id] = "JobHeldUser"
        elif r.state == "suspended":
            kept[r.id] = r.run_s
        elif r.state == "queued" and not agent.engine.is_waiting(r.id):
            ok = agent.deps_ok(r)
            if isinstance(ok, str):
                held[r.id] = "DependencyNeverSatisfied"
            else:  # its dependency has not ended (or, preempted, its processes are still leaving)
                after = () if ok is True or r.after_id is None else (r.after_id,)
                progress = (r.service_gpu_s, r.run_since_promotion_s, r.preemptions)
                since = r.stopped_at_s or r.submit_s  # as Agent.queue_job queues it
                deferred.append(
                    Deferred(r.id, agent.core_job(r), after=after, submit_now_s=since, progress=progress)
                )
    return agent.engine.forecast(now, deferred, held, kept)


def forecast_fields(fc: Forecast, row: JobRow) -> dict[str, Any]:
    """A `queue --json` row's forecast fields: expected_start_s, expected_end_s, gpu_ids (a waiting
    job's expected GPUs), reason (Slurm's word for a waiting job), reason_detail, waiting_for."""
    f = fc.jobs.get(row.id)
    if f is None:
        return {"expected_start_s": None, "expected_end_s": None, "waiting_for": []}
    out: dict[str, Any] = {
        "expected_start_s": f.start_s if row.state in _WAITING else None,
        "expected_end_s": f.end_s,
        "rank": f.rank,
    }
    if row.state in _WAITING:
        out["gpu_ids"] = list(f.gpu_ids) if f.start_s is not None else list(row.gpu_list)
        out["reason"] = f.reason
        out["reason_detail"] = f.detail or row.reason
        out["waiting_for"] = [
            {
                "job_id": w.jid,
                "gpus": w.gpus,
                "at_s": None if w.at_s == float("inf") else w.at_s,
                "basis": w.basis,
            }
            for w in fc.waiting_for(row.id)
        ]
    else:
        out["waiting_for"] = []
    return out


def forecast_detail(fc: Forecast, row: JobRow) -> dict[str, Any]:
    """`show`'s forecast of one job: the queue fields, the jobs backfill starts ahead of it, and why
    it waits in words."""
    out = forecast_fields(fc, row)
    if row.id in fc:
        out["ahead"] = fc.ahead(row.id)
        out["explanation"] = fc.explain(row.id, str, clock_text)
    return out


def clock_text(t_s: float) -> str:
    """An instant as the local wall clock's HH:MM:SS."""
    return time.strftime("%H:%M:%S", time.localtime(t_s))

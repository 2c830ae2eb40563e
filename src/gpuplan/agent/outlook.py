"""What `gpuplan queue` and `gpuplan show` say will happen: the core's forecast (core/forecast.py) of the
agent's live Scheduler, with the jobs the store keeps out of it (held, waiting on a dependency).

Every waiting job gets an expected start, end and GPUs, and a reason in Slurm's vocabulary; a held job
is `JobHeldUser`; a job whose dependency runs or waits enters the forecast's queue when that job ends
(as `JobQueue.release_dependents` queues it), and one whose dependency failed never starts
(`DependencyNeverSatisfied`).

The agent keeps its last forecast (`ForecastCache`): a `queue` or `show` after no change costs no
forecast. It is reused while the Scheduler's version and the store's held, deferred and suspended jobs
are the same and the clock has not reached the forecast's first event (an expected end, start or level
change): until then a pass starts nothing and the copy's run forward is the same. A policy whose order
moves with time alone (preemptive, fair-share) reuses it only at the same instant.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Protocol

from gpuplan.agent.store import JobRow
from gpuplan.core.forecast import Deferred, Forecast
from gpuplan.model import Job

if TYPE_CHECKING:
    from gpuplan.agent.engine import Engine

__all__ = [
    "ForecastCache",
    "ForecastSource",
    "agent_forecast",
    "clock_text",
    "forecast_detail",
    "forecast_fields",
]

_WAITING = ("queued", "suspended", "held")


class ForecastCache:
    """The agent's last forecast, with what it was made from and until when it stands."""

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None
        self.forecast: Forecast | None = None
        self.from_s = math.inf
        self.until_s = -math.inf
        self.made = 0  # forecasts computed (the rest were reused)

    def get(self, key: tuple[Any, ...], now: float) -> Forecast | None:
        """The kept forecast when it was made from `key` and stands at `now`, else None."""
        if self.forecast is None or key != self.key or not self.from_s <= now:
            return None
        return self.forecast if now == self.from_s or now < self.until_s else None

    def put(self, key: tuple[Any, ...], fc: Forecast, now: float, until_s: float) -> None:
        self.key, self.forecast, self.from_s, self.until_s = key, fc, now, until_s
        self.made += 1


class ForecastSource(Protocol):
    """What the forecast reads of the agent (agent/daemon.py's Agent)."""

    engine: Engine
    forecasts: ForecastCache

    def deps_ok(self, row: JobRow) -> bool | str: ...

    def core_job(self, row: JobRow) -> Job: ...


def agent_forecast(agent: ForecastSource, rows: list[JobRow], now: float) -> Forecast:
    """The forecast of every active job in `rows` (running, suspended, queued, held) from `now`
    (the kept one while it stands: `ForecastCache`)."""
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
    engine = agent.engine
    key = (engine.sched.version, tuple(deferred), tuple(held.items()), tuple(kept.items()))
    fc = agent.forecasts.get(key, now)
    if fc is None:
        fc = engine.forecast(now, deferred, held, kept)
        agent.forecasts.put(key, fc, now, _stands_until(engine, fc, deferred, now))
    return fc


def _stands_until(engine: Engine, fc: Forecast, deferred: list[Deferred], now: float) -> float:
    """The first instant after `now` at which the forecast from a later clock may differ: the first
    expected start or end, begin time or level change (now itself for a policy that moves with time)."""
    policy = engine.policy
    if policy.preemptive or policy.usage_ranked:
        return now
    until = engine.next_event_s()
    for f in fc:
        for t in (f.end_s,) if f.state == "running" else (f.start_s, f.end_s):
            if t is not None and t < until:
                until = max(t, now)
    for d in deferred:
        if now < d.begin_s < until:
            until = d.begin_s
    return until


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

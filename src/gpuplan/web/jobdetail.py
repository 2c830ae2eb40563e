"""The dashboard's job detail (`/jobs/ID`, `/api/jobs/ID`): one job as `gpuplan show ID --json` gives it.

On a node, while the agent answers, the detail is the agent's own `show` reply: the job's fields as
the agent shows them to the dashboard's user (another user's command, cwd and environment hidden:
agent/access.py) and, for a running or waiting job, the forecast of its live Scheduler
(agent/outlook.py `forecast_detail`: expected start and end, GPUs, Slurm's reason, what it waits for,
the jobs backfill starts ahead of it, and `Forecast.explain`'s words). While the agent does not answer,
the same forecast runs on a Scheduler seeded from the store's rows (web/queueplan.py `store_forecast`,
as the queue view does) and `forecast_detail` words it: nothing here re-implements a rule.

On top of the agent's rule the dashboard hides every command unless the request carries the server's
token (`Authorization: Bearer TOKEN`): the page is readable by anyone who reaches the port, and the
token file is its owner's (`with_command_rule`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gpuplan.errors import GpuplanError
from gpuplan.web.live import AgentUnavailable, BadJobIdError, JobNotFoundError, LiveSource, NodeSource

if TYPE_CHECKING:
    from gpuplan.agent.store import JobRow

__all__ = ["COMMAND_FIELDS", "agent_job_number", "job_detail", "node_job_detail", "with_command_rule"]

COMMAND_FIELDS = ("command", "cwd")
"""A job's fields that only its owner (or an admin) may read."""


def job_detail(source: LiveSource, job_id: str) -> dict[str, Any]:
    """Job `job_id` of `source` as the page shows it (`node_job_detail` on a node, else `source.job`).

    Raises:
        BadJobIdError: on a node, not an agent job id (a number 1..JOB_ID_MAX).
        JobNotFoundError: no such job.
        GpuplanError: the source cannot be read.
    """
    if not isinstance(source, NodeSource):
        return source.job(job_id)
    return node_job_detail(source, agent_job_number(job_id))


def agent_job_number(text: str) -> int:
    """An agent job id from a URL's text (the detail page, its API and cancel).

    Raises:
        BadJobIdError: not a number 1..JOB_ID_MAX in ASCII digits.
    """
    from gpuplan.agent.schema import JOB_ID_MAX

    number = int(text) if text.isascii() and text.isdigit() and len(text) <= 20 else 0
    if not 1 <= number <= JOB_ID_MAX:
        raise BadJobIdError(f"{text[:40]!r} is not a job id: agent job ids are numbers 1..{JOB_ID_MAX}")
    return number


def node_job_detail(source: NodeSource, job_id: int) -> dict[str, Any]:
    """Job `job_id` of the node: the agent's `show` reply while it answers, else read from its store.

    Raises:
        JobNotFoundError: the store has no such job.
        GpuplanError: the store cannot be read.
    """
    from gpuplan.agent.store import get_job

    row = source.read_store(lambda conn: get_job(conn, job_id))
    if row is None:
        raise JobNotFoundError(
            f"no job {job_id} in {source.paths.db} (see the queue view or `gpuplan queue`)"
        )
    try:
        reply = source.ask_agent({"op": "show", "id": job_id})
    except AgentUnavailable:
        return _from_store(source, row, time.time())
    except GpuplanError as e:  # the agent refused (it lost the job between the two reads): say so
        raise JobNotFoundError(str(e)) from None
    return {
        "job_id": str(job_id),
        "source": "agent",
        "agent_running": True,
        "now_s": time.time(),
        "job": reply["job"],
        "forecast": reply.get("forecast"),
        "profile": reply.get("profile"),
    }


def _from_store(source: NodeSource, row: JobRow, now: float) -> dict[str, Any]:
    """The detail of `row` while no agent answers: the store's fields, the store-seeded forecast."""
    from gpuplan.agent.access import redact, rights_of
    from gpuplan.agent.outlook import forecast_detail
    from gpuplan.agent.requests import job_json
    from gpuplan.agent.store import ACTIVE_STATES
    from gpuplan.web.queueplan import store_forecast

    out: dict[str, Any] = {
        "job_id": str(row.id),
        "source": "store",
        "agent_running": False,
        "now_s": now,
        "job": redact(job_json(row, now), row, rights_of(source.uid, None)),
        "forecast": None,
        "profile": None,
    }
    if row.state not in ACTIVE_STATES:
        return out
    rows = source.queue()
    try:
        fc, handle, _ = store_forecast(rows, source.cluster, source.policy, source.backfill, now)
    except GpuplanError as e:
        out["forecast_error"] = f"cannot forecast the queue: {e}"
        return out
    if handle.get(str(row.id)) == row.id:  # agent ids are numbers: the forecast's handles are the ids
        out["forecast"] = forecast_detail(fc, row)
    return out


def with_command_rule(detail: dict[str, Any], token_ok: bool, why_not: str | None) -> dict[str, Any]:
    """`detail` as an HTTP caller may see it: the command and cwd only with the server's token and
    when the agent showed them (`command_visible`; `command_note` says why not)."""
    job = dict(detail["job"])
    note = ""
    if job.get("hidden"):
        note = "another user's job: its command is its owner's (and an admin's) to read"
    elif not token_ok:
        note = why_not or "the command needs the server's token"
    visible = not note
    if not visible:
        for key in (*COMMAND_FIELDS, "env"):
            job.pop(key, None)
    return {**detail, "job": job, "command_visible": visible, "command_note": note}

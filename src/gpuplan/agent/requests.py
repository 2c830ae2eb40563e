"""The agent's answers to its clients (`gpuplan submit`, `queue`, `cancel`, ...): one function per
request op, each given the Agent, the validated request and the Caller.

`answer_line` decodes one protocol line, `handle` validates it (agent/schema.py: every field, at the
boundary) and dispatches. Neither raises: a refused or failing request is answered as an error,
logged with the caller (uid and pid from SO_PEERCRED), and the agent goes on scheduling. Every
mutating op is written to the store's `events` table once per job it touched.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuplan.agent.access import OWNED_OPS, check_apply, check_owner, redact, refuse, rights_of
from gpuplan.agent.outlook import agent_forecast, forecast_detail, forecast_fields
from gpuplan.agent.protocol import AgentError, Caller, decode_request
from gpuplan.agent.schema import RequestError, validate
from gpuplan.agent.store import FINAL_STATES, JobRow, job_profile
from gpuplan.errors import GpuplanError
from gpuplan.model import Job

if TYPE_CHECKING:
    import sqlite3

    from gpuplan.agent.daemon import Agent
    from gpuplan.agent.paths import AgentPaths

__all__ = ["MUTATING_OPS", "answer_line", "handle", "job_json", "show_reply"]

log = logging.getLogger("gpuplan.agent")


def answer_line(agent: Agent, line: bytes, caller: Caller) -> tuple[str, dict[str, Any]]:
    """(op, reply) for one request line; op is "" when the line is not a request object."""
    try:
        obj = decode_request(line)
    except AgentError as e:
        log.warning("%s: refused: %s", caller, e)
        return "", {"ok": False, "error": str(e)}
    op = obj.get("op") if isinstance(obj, dict) else None
    return (op if isinstance(op, str) else ""), handle(agent, obj, caller)


def handle(agent: Agent, request: Any, caller: Caller | int) -> dict[str, Any]:
    """Answer one decoded request (`caller` may be a bare uid). Never raises."""
    who = caller if isinstance(caller, Caller) else Caller(caller)
    try:
        req = validate(request)
    except RequestError as e:
        log.warning("%s: refused: %s", who, e)
        return {"ok": False, "error": str(e)}
    op = req["op"]
    try:
        guard(agent, req, who)
        reply = _HANDLERS[op](agent, req, who)
    except GpuplanError as e:
        log.info("%s: %s refused: %s", who, op, e)
        return {"ok": False, "error": str(e)}
    except Exception as e:  # a bug in one handler never stops the agent
        log.exception("%s: %s failed; the agent goes on", who, op)
        return {"ok": False, "error": f"{op} failed in the agent ({type(e).__name__}: {e}); see agent.log"}
    if op in MUTATING_OPS:
        _log_mutation(agent, who, req, reply)
    return {"ok": True, **reply}


def _log_mutation(agent: Agent, who: Caller, req: dict[str, Any], reply: dict[str, Any]) -> None:
    """One events row per job the op touched (the op's own row when it touched none)."""
    op = req["op"]
    jobs = reply.get("ids") or reply.get("matched") or ([reply["id"]] if "id" in reply else [None])
    detail = json.dumps({**_brief(req), "pid": who.pid})
    try:
        now = agent.clock()
        for jid in jobs:
            agent.store.log_event(now, who.uid, op, jid, detail)
    except Exception:  # the op is done: a failed audit row is logged, never a failed reply
        log.exception("%s: %s: could not write the events row", who, op)
    log.info("%s: %s %s -> %s", who, op, _brief(req), jobs)


def guard(agent: Agent, req: dict[str, Any], who: Caller) -> None:
    """Refuse what the caller may not do (agent/access.py): another user's job, the agent itself.

    Raises:
        AccessError: the refusal, logged with the caller.
    """
    op = req["op"]
    rights = rights_of(who.uid, agent.config.admin_group)
    if op in OWNED_OPS:
        check_owner(agent, rights, op, _jobs_arg(agent, req))
    elif op == "apply":
        check_apply(agent, rights, req["order"], agent.store.jobs(["queued", "held"]))
    elif op in ("stop", "reload") and not rights.admin and who.uid != os.getuid():
        refuse(agent, rights, op, None, f"{op} refused: only root and the agent's admins may {op} the agent")


def op_reload(agent: Agent, req: dict[str, Any], who: Caller) -> dict[str, Any]:
    quotas = agent.reload_quotas()
    return {"quotas": None if quotas is None else {"max_gpus": quotas.max_gpus, "max_jobs": quotas.max_jobs,
            "users": sorted(quotas.per_user)}}  # fmt: skip


def op_submit(agent: Agent, req: dict[str, Any], who: Caller) -> dict[str, Any]:
    rid = req["request_id"]
    if rid is not None:
        same = agent.store.job_by_request(rid)
        if same is not None:
            if same.uid != who.uid:
                raise AgentError(f"submit: request id {rid!r} was used by another caller; send a new uuid")
            return {"id": same.id, "duplicate": True}  # a retry after a lost reply: the same job
    command, gpus, mem = req["command"], req["gpus"], req["mem_gb"]
    why = agent.engine.never_fits(gpus, mem, _user(who.uid))
    if why is not None:
        raise AgentError(f"job refused: it can never run on this node: it {why}")
    after = req["after_id"]
    if after is not None and agent.store.job(after) is None:
        raise AgentError(f"submit: --after {after}: no such job")
    now = agent.clock()
    name, limit, user = req["name"], req["time_limit_s"], _user(who.uid)
    probe = Job(id="new", submit_s=now, gpus=gpus, mem_gb=mem, requested_s=limit, user=user,
                name=name, command=command)  # fmt: skip
    est = agent.predict_s(probe).est_duration_s if agent.predictors else None
    if est is None:
        est = agent.estimate_s(name, command)
    jid = agent.store.add_job(
        name=name, user=user, uid=who.uid, command=command, cwd=req["cwd"], env_json=json.dumps(req["env"]),
        gpus=gpus, mem_gb=mem, declared_mem_gb=mem, time_limit_s=limit, est_duration_s=est,
        priority=req["priority"], after_id=after, state="held" if req["hold"] else "queued", submit_s=now,
        preempt=req["preempt"], request_id=rid,
    )  # fmt: skip
    agent.priority[jid] = req["priority"]
    row = agent.store.job(jid)
    assert row is not None
    if row.state == "queued" and agent.deps_ok(row) is True:
        agent.queue_job(row, now)
    return {"id": jid}


def _jobs_arg(agent: Agent, req: dict[str, Any]) -> list[JobRow]:
    rows = []
    for i in req["ids"] if "ids" in req else [req["id"]]:
        row = agent.store.job(i)
        if row is None:
            raise AgentError(f"no job {i} (see `gpuplan queue`)")
        rows.append(row)
    return rows


def op_cancel(agent: Agent, req: dict[str, Any], who: Caller) -> dict[str, Any]:
    now = agent.clock()
    done = []
    for row in _jobs_arg(agent, req):
        if row.state in FINAL_STATES:
            raise AgentError(f"job {row.id} already ended ({row.state})")
        if row.state in ("running", "suspended"):
            run = agent.runs.get(row.id)
            if run is not None:
                agent.stop_run(run, "cancelled", now)
        else:
            if agent.engine.is_waiting(row.id):
                agent.engine.withdraw(row.id)
            agent.store.update_job(row.id, state="cancelled", end_s=now, reason="cancelled while waiting")
            agent.store.forget_env(row.id)
        done.append(row.id)
    return {"ids": done}


def op_hold(agent: Agent, req: dict[str, Any], who: Caller) -> dict[str, Any]:
    rows = _jobs_arg(agent, req)
    for row in rows:
        if row.state not in ("queued", "held"):
            raise AgentError(f"job {row.id} is {row.state}: only waiting jobs can be held")
    for row in rows:
        if agent.engine.is_waiting(row.id):
            agent.engine.withdraw(row.id)
        agent.store.update_job(row.id, state="held")
    return {"ids": [r.id for r in rows]}


def op_release(agent: Agent, req: dict[str, Any], who: Caller) -> dict[str, Any]:
    rows = _jobs_arg(agent, req)
    for row in rows:
        if row.state != "held":
            raise AgentError(f"job {row.id} is {row.state}, not held")
    for row in rows:
        agent.store.update_job(row.id, state="queued")
        queued = agent.store.job(row.id)
        if queued is not None and agent.deps_ok(queued) is True:
            agent.queue_job(queued, agent.clock())
    return {"ids": [r.id for r in rows]}


def op_requeue(agent: Agent, req: dict[str, Any], who: Caller) -> dict[str, Any]:
    now = agent.clock()
    rows = _jobs_arg(agent, req)
    for row in rows:
        if row.state in ("queued", "held"):
            raise AgentError(f"job {row.id} is already waiting ({row.state})")
    for row in rows:
        run = agent.runs.get(row.id)
        if row.state in ("running", "suspended") and run is not None:
            agent.stop_run(run, "requeue", now)
        elif row.state in FINAL_STATES:
            agent.requeue_job(row, row.mem_gb, "requeued by request", now)
    return {"ids": [r.id for r in rows]}


def op_apply(agent: Agent, req: dict[str, Any], who: Caller) -> dict[str, Any]:
    """Waiting jobs take the plan's order (plan ids match job ids, else job names)."""
    order = req["order"]
    waiting = agent.store.jobs(["queued", "held"])
    by_id = {str(r.id): r for r in waiting}
    by_name: dict[str, list[JobRow]] = {}
    for r in waiting:
        by_name.setdefault(r.name, []).append(r)
    matched, unmatched = [], []
    for rank, pid in enumerate(order):
        row = by_id.get(pid) or (by_name[pid][0] if len(by_name.get(pid, [])) == 1 else None)
        if row is None or row.id in matched:
            unmatched.append(pid)
            continue
        matched.append(row.id)
        agent.rank[row.id] = rank
        agent.store.update_job(row.id, plan_rank=rank)
        if agent.engine.is_waiting(row.id):
            agent.engine.withdraw(row.id)
            agent.queue_job(row, agent.clock())
    return {"matched": matched, "unmatched": unmatched}


def op_queue(agent: Agent, req: dict[str, Any], who: Caller) -> dict[str, Any]:
    now = agent.clock()
    rows = agent.store.jobs(["running", "suspended", "queued", "held"])
    fc = agent_forecast(agent, rows, now)
    rights = rights_of(who.uid, agent.config.admin_group)
    jobs = [{**redact(job_json(r, now), r, rights), **forecast_fields(fc, r)} for r in rows]
    order = {jid: i for i, jid in enumerate(agent.engine.waiting_jids())}
    jobs.sort(key=lambda j: (j["state"] != "running", order.get(j["id"], 1 << 30), j["id"]))
    return {"now_s": now, "jobs": jobs}


def op_show(agent: Agent, req: dict[str, Any], who: Caller) -> dict[str, Any]:
    (row,) = _jobs_arg(agent, req)
    now = agent.clock()
    rights = rights_of(who.uid, agent.config.admin_group)
    reply = show_reply(agent.store.conn, agent.paths, row, now)
    if row.state in ("running", "suspended", "queued", "held"):
        rows = agent.store.jobs(["running", "suspended", "queued", "held"])
        reply["forecast"] = forecast_detail(agent_forecast(agent, rows, now), row)
    reply["job"] = redact(reply["job"], row, rights)
    reply["logs_readable"] = rights.admin or rights.owns(row)
    return reply


def show_reply(conn: sqlite3.Connection, paths: AgentPaths, row: JobRow, now: float) -> dict[str, Any]:
    """`show`'s answer for one job row (also what the CLI prints from the store while the agent is down)."""
    prof = job_profile(conn, row.id)
    d = paths.job_dir(row.id)
    return {
        "job": job_json(row, now),
        "profile": {
            "attempt": prof.attempt, "samples": prof.samples, "mean_util_pct": prof.mean_util_pct,
            "peak_mem_gb_per_gpu": {str(k): v for k, v in prof.peak_mem_gb.items()},
        },
        "stdout": str(d / "stdout"), "stderr": str(d / "stderr"),
    }  # fmt: skip


def op_status(agent: Agent, req: dict[str, Any], who: Caller) -> dict[str, Any]:
    c = agent.config
    return {
        "pid": os.getpid(), "home": str(agent.paths.home), "backend": c.gpus,
        "gpus": [{"index": d.index, "name": d.name, "mem_total_gb": d.mem_total_gb} for d in agent.devices],
        "offline_gpus": sorted(agent.engine.offline), "policy": c.policy, "backfill": c.backfill,
        "placer": c.placer, "sharing": c.sharing, "waiting": agent.engine.waiting,
        "held": len(agent.store.jobs(["held"])),
        "running": sum(1 for r in agent.runs.values() if not r.suspended),
        "suspended": sum(1 for r in agent.runs.values() if r.suspended),
        "preemptive": agent.engine.preemptive, "preemptions": _preemptions_total(agent),
        "external": [{"pid": p.pid, "user": p.user, "gpu": p.gpu, "mem_gb": p.mem_gb} for p in agent.external],
    }  # fmt: skip


def _preemptions_total(agent: Agent) -> int:
    row = agent.store.conn.execute("SELECT COALESCE(SUM(preemptions), 0) FROM jobs").fetchone()
    return int(row[0])


def op_stop(agent: Agent, req: dict[str, Any], who: Caller) -> dict[str, Any]:
    agent.stopping = True
    if req["kill_jobs"]:
        agent.kill_jobs_on_stop = True
        now = agent.clock()
        for run in list(agent.runs.values()):
            if not run.stop_state:
                agent.stop_run(run, "cancelled", now)
    return {"pid": os.getpid(), "running": len(agent.runs)}


_HANDLERS: dict[str, Callable[[Agent, dict[str, Any], Caller], dict[str, Any]]] = {
    "submit": op_submit,
    "cancel": op_cancel,
    "hold": op_hold,
    "release": op_release,
    "requeue": op_requeue,
    "apply": op_apply,
    "queue": op_queue,
    "show": op_show,
    "status": op_status,
    "stop": op_stop,
    "reload": op_reload,
}
MUTATING_OPS = {"submit", "cancel", "hold", "release", "requeue", "apply", "stop", "reload"}


def job_json(row: JobRow, now: float) -> dict[str, Any]:
    """A job row for clients, with its attained GPU-service and run time up to `now`."""
    out = row.to_json()
    out["attained_gpu_s"] = row.attained_gpu_s(now)
    out["run_time_s"] = row.run_time_s(now)
    return out


def _brief(request: dict[str, Any]) -> dict[str, Any]:
    """The request for the log and the events row: no environment, long values cut short."""
    out: dict[str, Any] = {}
    for k, v in request.items():
        if k in ("env", "op") or v is None:
            continue
        if isinstance(v, str) and len(v) > 200:
            v = v[:200] + "..."
        elif isinstance(v, list) and len(v) > 20:
            v = [*v[:20], f"... {len(v)} in all"]
        out[k] = v
    return out


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)

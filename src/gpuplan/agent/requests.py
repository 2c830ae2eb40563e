"""The agent's answers to its clients (`gpuplan submit`, `queue`, `cancel`, ...): one function per
request op, each given the Agent; `handle` dispatches and logs the mutating ones with the caller's uid."""

from __future__ import annotations

import json
import logging
import os
import pwd
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuplan.agent.protocol import AgentError
from gpuplan.agent.store import FINAL_STATES, JobRow, job_profile
from gpuplan.errors import GpuplanError
from gpuplan.model import PREEMPT_MODES, Job

if TYPE_CHECKING:
    from gpuplan.agent.daemon import Agent

__all__ = ["MUTATING_OPS", "handle"]

log = logging.getLogger("gpuplan.agent")


def handle(agent: Agent, request: dict[str, Any], uid: int) -> dict[str, Any]:
    """Answer one request; mutating ones are logged with the caller's uid. Never raises."""
    op = request.get("op", "")
    handler = _HANDLERS.get(op)
    if handler is None:
        return {"ok": False, "error": f"unknown op {op!r}; valid: {', '.join(sorted(_HANDLERS))}"}
    try:
        reply = handler(agent, request, uid)
    except (AgentError, GpuplanError, ValueError, KeyError, TypeError) as e:
        return {"ok": False, "error": str(e)}
    if op in MUTATING_OPS:
        agent.store.log_event(agent.clock(), uid, op, reply.get("id"), json.dumps(_brief(request)))
        log.info("uid %d: %s %s", uid, op, _brief(request))
    return {"ok": True, **reply}


def op_submit(agent: Agent, req: dict[str, Any], uid: int) -> dict[str, Any]:
    command = str(req["command"])
    gpus = int(req.get("gpus", 1))
    mem = req.get("mem_gb")
    mem = None if mem is None else float(mem)
    if not command.strip():
        raise AgentError("submit: empty command; give it after --, e.g. gpuplan submit -- python train.py")
    if gpus < 1:
        raise AgentError(f"submit: --gpus {gpus} must be at least 1")
    preempt = str(req.get("preempt") or "suspend")
    if preempt not in PREEMPT_MODES:
        raise AgentError(f"submit: --preempt {preempt!r}: valid: {', '.join(PREEMPT_MODES)}")
    why = agent.engine.never_fits(gpus, mem, _user(uid))
    if why is not None:
        raise AgentError(f"job refused: it can never run on this node: it {why}")
    after = req.get("after_id")
    if after is not None and agent.store.job(int(after)) is None:
        raise AgentError(f"submit: --after {after}: no such job")
    now = agent.clock()
    name = str(req.get("name") or "")
    limit = req.get("time_limit_s")
    probe = Job(id="new", submit_s=now, gpus=gpus, mem_gb=mem, requested_s=limit, user=_user(uid),
                name=name, command=command)  # fmt: skip
    est = agent.predict_s(probe).est_duration_s if agent.predictors else None
    if est is None:
        est = agent.estimate_s(name, command)
    jid = agent.store.add_job(
        name=name, user=str(req.get("user") or _user(uid)), uid=uid, command=command,
        cwd=str(req.get("cwd") or "/"), env_json=json.dumps(req.get("env") or {}), gpus=gpus,
        mem_gb=mem, declared_mem_gb=mem, time_limit_s=limit, est_duration_s=est,
        priority=int(req.get("priority", 0)), after_id=after,
        state="held" if req.get("hold") else "queued", submit_s=now, preempt=preempt,
    )  # fmt: skip
    agent.priority[jid] = int(req.get("priority", 0))
    row = agent.store.job(jid)
    assert row is not None
    if row.state == "queued" and agent.deps_ok(row) is True:
        agent.engine.submit(jid, agent.core_job(row), now=now)
    return {"id": jid}


def _jobs_arg(agent: Agent, req: dict[str, Any]) -> list[JobRow]:
    ids = req.get("ids") or ([req["id"]] if "id" in req else [])
    if not ids:
        raise AgentError("give at least one job id")
    rows = []
    for i in ids:
        row = agent.store.job(int(i))
        if row is None:
            raise AgentError(f"no job {i} (see `gpuplan queue`)")
        rows.append(row)
    return rows


def op_cancel(agent: Agent, req: dict[str, Any], uid: int) -> dict[str, Any]:
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
        done.append(row.id)
    return {"ids": done}


def op_hold(agent: Agent, req: dict[str, Any], uid: int) -> dict[str, Any]:
    rows = _jobs_arg(agent, req)
    for row in rows:
        if row.state not in ("queued", "held"):
            raise AgentError(f"job {row.id} is {row.state}: only waiting jobs can be held")
    for row in rows:
        if agent.engine.is_waiting(row.id):
            agent.engine.withdraw(row.id)
        agent.store.update_job(row.id, state="held")
    return {"ids": [r.id for r in rows]}


def op_release(agent: Agent, req: dict[str, Any], uid: int) -> dict[str, Any]:
    rows = _jobs_arg(agent, req)
    for row in rows:
        if row.state != "held":
            raise AgentError(f"job {row.id} is {row.state}, not held")
    for row in rows:
        agent.store.update_job(row.id, state="queued")
        if agent.deps_ok(row) is True:
            agent.engine.submit(row.id, agent.core_job(row))
    return {"ids": [r.id for r in rows]}


def op_requeue(agent: Agent, req: dict[str, Any], uid: int) -> dict[str, Any]:
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


def op_apply(agent: Agent, req: dict[str, Any], uid: int) -> dict[str, Any]:
    """Waiting jobs take the plan's order (plan ids match job ids, else job names)."""
    order = [str(x) for x in req.get("order", [])]
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
            agent.engine.submit(row.id, agent.core_job(row))
    return {"matched": matched, "unmatched": unmatched}


def op_queue(agent: Agent, req: dict[str, Any], uid: int) -> dict[str, Any]:
    now = agent.clock()
    expected = {p.jid: p.start_s for p in agent.engine.projection(now)}
    rows = agent.store.jobs(["running", "suspended", "queued", "held"])
    jobs = []
    for r in rows:
        out = _job_json(r, now)
        out["expected_start_s"] = expected.get(r.id) if r.state in ("queued", "suspended") else None
        quota = agent.engine.quota_reason(r.id) if r.state == "queued" else None
        if quota is not None:
            out["reason"] = quota  # waits on its user's quota although GPUs may be free
        jobs.append(out)
    order = {jid: i for i, jid in enumerate(agent.engine.waiting_jids())}
    jobs.sort(key=lambda j: (j["state"] != "running", order.get(j["id"], 1 << 30), j["id"]))
    return {"now_s": now, "jobs": jobs}


def op_show(agent: Agent, req: dict[str, Any], uid: int) -> dict[str, Any]:
    (row,) = _jobs_arg(agent, req)
    prof = job_profile(agent.store.conn, row.id)
    d = agent.paths.job_dir(row.id)
    return {
        "job": _job_json(row, agent.clock()),
        "profile": {
            "attempt": prof.attempt, "samples": prof.samples, "mean_util_pct": prof.mean_util_pct,
            "peak_mem_gb_per_gpu": {str(k): v for k, v in prof.peak_mem_gb.items()},
        },
        "stdout": str(d / "stdout"), "stderr": str(d / "stderr"),
    }  # fmt: skip


def op_status(agent: Agent, req: dict[str, Any], uid: int) -> dict[str, Any]:
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


def op_stop(agent: Agent, req: dict[str, Any], uid: int) -> dict[str, Any]:
    agent.stopping = True
    if req.get("kill_jobs"):
        agent.kill_jobs_on_stop = True
        now = agent.clock()
        for run in list(agent.runs.values()):
            if not run.stop_state:
                agent.stop_run(run, "cancelled", now)
    return {"pid": os.getpid(), "running": len(agent.runs)}


_HANDLERS: dict[str, Callable[[Agent, dict[str, Any], int], dict[str, Any]]] = {
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
}
MUTATING_OPS = {"submit", "cancel", "hold", "release", "requeue", "apply", "stop"}


def _job_json(row: JobRow, now: float) -> dict[str, Any]:
    """A job row for clients, with its attained GPU-service and run time up to `now`."""
    out = row.to_json()
    out["attained_gpu_s"] = row.attained_gpu_s(now)
    out["run_time_s"] = row.run_time_s(now)
    return out


def _brief(request: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if k not in ("env", "op")}


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)

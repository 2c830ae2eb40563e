"""Preemptive policies (las, tiresias, gittins) on Slurm, carried out by `scontrol requeue`.

A suspended Slurm job keeps its allocation (its GPUs stay taken), so the only way to give a running job's
GPUs to another is to requeue it: Slurm kills it and queues it again, and it starts from scratch unless
it checkpoints itself. `preempt_plan` is the pure part: from the live state it seeds gpuplan's own
`Scheduler` with the running jobs (attained service = GPUs x time run, plus what gpuplan recorded when
it requeued a job before) and the pending ones, asks the policy for one pass (`Scheduler.decide`), and
returns the running jobs to requeue (at most `max_requeues`, whole groups only: never a requeue that
alone frees too little for the job it is for) and the order of the pending jobs for their priorities.

Only jobs Slurm can requeue are candidates: squeue's Requeue column (else the config's JobRequeue).
Running jobs that are not (and jobs in other partitions, suspended or completing ones) are never
preempted; the plan lists them under `protected`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan.core import policies
from gpuplan.core.policies import (
    Policy,
    preemptive_policy,  # re-exported: slurm/apply and the CLI use it here
)
from gpuplan.core.preemption import Decisions
from gpuplan.core.preemptive import PreemptivePolicy
from gpuplan.core.scheduler import Scheduler
from gpuplan.errors import GpuplanError
from gpuplan.model import Job
from gpuplan.slurm.apply import ApplyResult, apply_order, default_state_path, load_state, save_state
from gpuplan.slurm.client import SlurmClient, live_state
from gpuplan.slurm.parse import QueueJob
from gpuplan.slurm.planner import LiveState, Seed, plan_inputs, seed_gpus
from gpuplan.slurm.runner import SlurmPermissionError

__all__ = [
    "DEFAULT_MAX_REQUEUES",
    "PreemptPlan",
    "PreemptResult",
    "Prior",
    "carry_out",
    "is_preemptive",
    "load_priors",
    "preempt_plan",
    "preemptive_policy",
]

DEFAULT_MAX_REQUEUES = 1
"""Requeues per pass by default: each one throws away the victim's work unless it checkpoints."""
LOST_WORK_NOTE = (
    "a requeued job is killed and starts again from scratch unless it checkpoints itself; Slurm keeps "
    "it pending (Reason=BeginTime) for about 2 minutes after the requeue"
)


@dataclass(frozen=True, slots=True)
class Prior:
    """What gpuplan recorded of a job it requeued: GPU-seconds attained and seconds run before, and when."""

    attained_gpu_s: float
    run_s: float
    requeued_at_s: float
    requeues: int = 1


@dataclass
class PreemptPlan:
    """One pass of a preemptive policy on the live queue.

    Attributes:
        requeue: running job ids to requeue now, in the policy's order (at most `max_requeues`).
        deferred: further running jobs the policy would preempt, left running by the cap.
        starts: pending jobs the policy would start now, given the requeues it chose.
        order: pending job ids, first to run first (the order `apply` gives as priorities).
        protected: running job id -> why it is never requeued.
        attained_gpu_s, levels: per job (running and pending) its attained GPU-seconds and policy level.
    """

    policy: str
    now_s: float
    max_requeues: int
    requeue: list[str]
    deferred: list[str]
    starts: list[str]
    order: list[str]
    protected: dict[str, str]
    unmanaged: dict[str, str]
    attained_gpu_s: dict[str, float]
    levels: dict[str, float]
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "now_s": self.now_s, "policy": self.policy, "preemptive": True, "max_requeues": self.max_requeues,
            "requeue": self.requeue, "deferred": self.deferred, "starts": self.starts, "order": self.order,
            "protected": self.protected, "unmanaged": self.unmanaged, "attained_gpu_s": self.attained_gpu_s,
            "levels": self.levels, "warnings": self.warnings, "note": LOST_WORK_NOTE,
        }  # fmt: skip


def _protected_reason(q: QueueJob, state: LiveState) -> str | None:
    """Why a running job may not be requeued (None: it may)."""
    if q.state != "RUNNING":
        return f"{q.state.lower()}: only RUNNING jobs are requeued"
    if not state.in_partitions(q):
        return f"in partition {q.partition}, outside the chosen ones"
    requeue = q.requeue
    if requeue is None:
        requeue = state.config.get("JobRequeue", "1").strip() != "0"
        if not requeue:
            return "Slurm may not requeue it (JobRequeue=0 and no --requeue)"
    if not requeue:
        return "Slurm may not requeue it (Requeue=0: submitted with --no-requeue, or JobRequeue=0)"
    return None


def _elapsed_s(q: QueueJob, now_s: float) -> float:
    return max(q.elapsed_s, now_s - q.start_s) if q.start_s is not None else q.elapsed_s


@dataclass
class _Built:
    sched: Scheduler
    ids: dict[int, str]  # handle -> Slurm job id (running and pending)
    protected: dict[str, str]
    unmanaged: dict[str, str]


def _build(state: LiveState, pol: Policy, priors: Mapping[str, Prior]) -> _Built:
    inp = plan_inputs(state, None)
    sched = Scheduler(inp.cluster, pol, "none", "best-fit")
    node_index = {n.name: i for i, n in enumerate(inp.cluster.nodes)}
    by_id = {q.job_id: q for q in state.jobs}
    ids: dict[int, str] = {}
    protected: dict[str, str] = {}
    for jid, seed in enumerate(inp.seeds):
        gpus = seed_gpus(sched, seed, node_index)
        if gpus:
            _adopt(sched, jid, seed, gpus, by_id.get(seed.job_id), state, protected)
            ids[jid] = seed.job_id
    base = len(inp.seeds)
    for i, job in enumerate(inp.pending):
        prior = priors.get(job.id)
        when = None if prior is None else prior.requeued_at_s - state.now_s
        sched.submit(base + i, job, now=when)
        ids[base + i] = job.id
        if prior is not None:
            sched.restore_progress(base + i, prior.attained_gpu_s, prior.run_s, prior.requeues, 0.0)
    return _Built(sched, ids, protected, inp.unmanaged)


def _adopt(sched: Scheduler, jid: int, seed: Seed, gpus: list[int], q: QueueJob | None, state: LiveState,
           protected: dict[str, str]) -> None:  # fmt: skip
    if q is None:  # GPUs in use that no listed job explains (other partitions' jobs)
        why: str | None = "GPUs in use by jobs outside the chosen partitions"
        elapsed, submit = 0.0, 0.0
    else:
        why = _protected_reason(q, state)
        elapsed = _elapsed_s(q, state.now_s)
        submit = (q.submit_s if q.submit_s is not None else state.now_s) - state.now_s
    if why is not None:
        protected[seed.job_id] = why
    job = Job(id=seed.job_id, submit_s=submit, gpus=len(gpus), may_span_nodes=True,
              meta={"preempt": "never" if why else "requeue"})  # fmt: skip
    end = seed.remaining_s if seed.remaining_s is not None else math.inf
    sched.adopt(jid, job, gpus, -elapsed, end)


def _groups(decided: Decisions) -> list[tuple[list[int], list[int]]]:
    """(victims, starts) per start that needs requeues, in decision order; starts on idle GPUs alone
    form groups without victims. A victim belongs to the first start that takes one of its GPUs."""
    owner: dict[int, int] = {}
    for k, st in enumerate(decided.started):
        for p in decided.preempted:
            if p.jid not in owner and set(p.gpu_ids) & set(st.gpu_ids):
                owner[p.jid] = k
    groups: list[tuple[list[int], list[int]]] = [([], [st.jid]) for st in decided.started]
    for p in decided.preempted:
        if p.jid in owner:
            groups[owner[p.jid]][0].append(p.jid)
    return groups


def preempt_plan(
    state: LiveState,
    policy: Policy | str,
    max_requeues: int = DEFAULT_MAX_REQUEUES,
    priors: Mapping[str, Prior] | None = None,
) -> PreemptPlan:
    """One pass of a preemptive policy on `state`: which running jobs to requeue, the pending order.

    `priors`: what gpuplan recorded of jobs it requeued before (their attained service counts again:
    without it, a requeued job would rank as new and could requeue its own preemptor).

    Raises:
        GpuplanError: no usable node, a non-preemptive policy, a negative cap.
    """
    if max_requeues < 0:
        raise GpuplanError(f"--max-requeues {max_requeues}: must be 0 or more")
    pol = preemptive_policy(policy) if isinstance(policy, str) else policy
    if not pol.preemptive:
        raise GpuplanError(f"policy {pol.name!r} does not preempt; use `gpuplan slurm plan` without it")
    b = _build(state, pol, priors or {})
    sched = b.sched
    slots = {jid: sched.slot(jid) for jid in b.ids}
    attained = {b.ids[j]: s.service_gpu_s + s.gpus * max(-(s.start_s or 0.0), 0.0) if s.is_running
                else s.service_gpu_s for j, s in slots.items()}  # fmt: skip
    was_running = {b.ids[j] for j, s in slots.items() if s.is_running}
    decided = sched.decide(0.0)
    requeue: list[str] = []
    deferred: list[str] = []
    starts: list[str] = []
    for victims, started in _groups(decided):
        if len(requeue) + len(victims) <= max_requeues:
            requeue += [b.ids[v] for v in victims]
            starts += [b.ids[s] for s in started]
        else:
            deferred += [b.ids[v] for v in victims]
    grouped = {v for g in _groups(decided) for v in g[0]}
    deferred += [b.ids[p.jid] for p in decided.preempted if p.jid not in grouped]
    first = [b.ids[st.jid] for st in decided.started]
    running = was_running - set(requeue)
    order = [j for j in (*first, *(b.ids[j] for j in sched.waiting_jids())) if j not in running]
    warnings = _warnings(pol, deferred, b, max_requeues)
    sched.settle_levels()
    levels = {b.ids[j]: s.level for j, s in slots.items()}
    return PreemptPlan(pol.name, state.now_s, max_requeues, requeue, deferred, starts, order, b.protected,
                       b.unmanaged, attained, levels, warnings)  # fmt: skip


def _warnings(pol: Policy, deferred: list[str], b: _Built, cap: int) -> list[str]:
    out = [LOST_WORK_NOTE]
    if deferred:
        out.append(
            f"{len(deferred)} further requeue(s) the policy wants are left for a later pass "
            f"(--max-requeues {cap}; first: {deferred[0]})"
        )
    if isinstance(pol, PreemptivePolicy) and pol.learns:
        out.append(
            "gittins has no finished-job history here: it ranks by attained service (as las) on its grid"
        )
    if b.unmanaged:
        out.append(f"{len(b.unmanaged)} pending job(s) left alone (held, dependent, requeued and not yet "
                   "eligible...): see 'unmanaged'")  # fmt: skip
    return out


def is_preemptive(name: str) -> bool:
    """Whether `name` is a registered preemptive policy ('best' is not)."""
    return name != "best" and policies.is_preemptive(name)


# -- carrying a plan out (through SlurmClient only) --------------------------------------------------
@dataclass
class PreemptResult:
    """What `carry_out` did: the jobs requeued, the requeues Slurm refused, and the priorities set."""

    plan: PreemptPlan
    requeued: list[str]
    failed: dict[str, str]
    apply: ApplyResult

    def as_dict(self) -> dict[str, Any]:
        return {"plan": self.plan.as_dict(), "requeued": self.requeued, "requeue_failed": self.failed,
                "apply": self.apply.as_dict()}  # fmt: skip


def load_priors(path: Path | None, live_ids: set[str] | None = None) -> dict[str, Prior]:
    """What gpuplan recorded of the jobs it requeued (the state file's `requeued`), those still queued.

    Raises:
        GpuplanError: the state file is not gpuplan's.
    """
    p = path or default_state_path()
    if not p.exists():
        return {}
    out: dict[str, Prior] = {}
    for jid, rec in load_state(p).get("requeued", {}).items():
        if live_ids is not None and jid not in live_ids:
            continue
        try:
            out[jid] = Prior(float(rec["attained_gpu_s"]), float(rec["run_s"]), float(rec["requeued_at_s"]),
                             int(rec.get("requeues", 1)))  # fmt: skip
        except (KeyError, TypeError, ValueError):
            raise GpuplanError(
                f"{p}: requeued job {jid}: needs numbers attained_gpu_s, run_s, requeued_at_s; "
                "fix or delete that entry"
            ) from None
    return out


def _record(path: Path, plan: PreemptPlan, state: LiveState, priors: Mapping[str, Prior]) -> None:
    """Write the victims' attained service to the state file before requeueing them (and forget jobs
    that left the queue)."""
    data = load_state(path)
    live = {q.job_id for q in state.jobs}
    kept = {j: r for j, r in data.get("requeued", {}).items() if j in live}
    by_id = {q.job_id: q for q in state.jobs}
    for jid in plan.requeue:
        prior = priors.get(jid)
        kept[jid] = {
            "attained_gpu_s": plan.attained_gpu_s.get(jid, 0.0),
            "run_s": (prior.run_s if prior else 0.0) + _elapsed_s(by_id[jid], state.now_s),
            "requeued_at_s": state.now_s,
            "requeues": (prior.requeues if prior else 0) + 1,
        }
    data["requeued"] = kept
    save_state(path, data)


def _forget(path: Path, job_ids: Sequence[str]) -> None:
    """Drop the records of jobs Slurm did not requeue after all."""
    if not job_ids:
        return
    data = load_state(path)
    for jid in job_ids:
        data.get("requeued", {}).pop(jid, None)
    save_state(path, data)


def carry_out(
    client: SlurmClient,
    policy: Policy | str,
    *,
    partitions: Sequence[str] = (),
    max_requeues: int = DEFAULT_MAX_REQUEUES,
    mode: str = "priority",
    state_path: Path | None = None,
    dry_run: bool = False,
) -> PreemptResult:
    """Read the live state, plan one pass, requeue the victims (`scontrol requeue`, after recording
    their attained service in the state file), then give the pending jobs the plan's order as
    priorities, above the victims' own (they come back pending). `dry_run`: only plan.

    Raises:
        SlurmError: Slurm unreachable, or it refused the priority changes (see `apply_order`).
    """
    path = state_path or default_state_path()
    state = live_state(client, partitions)
    priors = load_priors(path, {q.job_id for q in state.jobs})
    plan = preempt_plan(state, policy, max_requeues, priors)
    requeued: list[str] = []
    failed: dict[str, str] = {}
    if plan.requeue and not dry_run:
        _record(path, plan, state, priors)
        try:
            failed = client.requeue(plan.requeue).errors
        except SlurmPermissionError:
            _forget(path, plan.requeue)
            raise
        _forget(path, list(failed))
        requeued = [j for j in plan.requeue if j not in failed]
    prio = {q.job_id: q.priority for q in state.jobs}
    above = max((prio.get(j, 0) for j in plan.requeue), default=0)
    res = apply_order(client, plan.order, mode=mode, partitions=partitions, state_path=path, dry_run=dry_run,
                      above=above)  # fmt: skip
    return PreemptResult(plan, requeued, failed, res)

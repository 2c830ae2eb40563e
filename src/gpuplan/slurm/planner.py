"""`gpuplan slurm plan`: the order gpuplan would run a live Slurm queue in, simulated from the live state.

The live state: the usable nodes of the chosen partitions and their GPUs (sinfo), the running jobs on
them with their remaining time (start + time limit - now, or a prediction minus the time already run),
and the pending jobs that gpuplan may reorder (held, dependent, not-yet-eligible jobs, array
remainders and het components are left alone and listed). The simulation drives gpuplan's own
`Scheduler` with the running jobs seeded on their nodes; Slurm's scheduler maps to a backfill mode
(sched/builtin = none: strict order; sched/backfill = conservative) and select/cons_tres to best-fit.

Pure functions of the fetched state: tests build a `LiveState` from captured output.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan.core.forecast import Forecast, forecast
from gpuplan.core.placement import get_placer
from gpuplan.core.policies import Policy, get_policy, policy_names
from gpuplan.core.scheduler import Scheduler
from gpuplan.errors import GpuplanError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.optimize.order import FixedOrder
from gpuplan.slurm.parse import NodeInfo, QueueJob, parse_hostlist

__all__ = [
    "CONSERVATIVE_MAX_JOBS",
    "DEFAULT_PLACER",
    "SLURM_ORDER",
    "LiveState",
    "Outcome",
    "PlanInputs",
    "QueuePlan",
    "Seed",
    "backfill_for",
    "cluster_from_nodes",
    "live_scheduler",
    "plan_inputs",
    "plan_queue",
    "predicted_durations",
    "remaining_s",
    "seed_gpus",
    "simulate_queue",
    "slurm_order",
    "static_policy",
]

DEFAULT_PLACER = "best-fit"
"""How the forecast places jobs unless asked otherwise (Slurm places them itself; this only shapes the forecast)."""

CONSERVATIVE_MAX_JOBS = 300
"""Above this many pending jobs a sched/backfill cluster is simulated with EASY backfill (speed)."""
SLURM_ORDER = "slurm-order"
"""The plan's name for Slurm's own order (priority, then job id); `plan_queue(policy=SLURM_ORDER)`
keeps it (one forecast)."""
_PLACEHOLDER_GPU = GpuSpec("gpu", 80.0)  # memory is not known from Slurm; exclusive GPUs never consult it
_INF = math.inf


@dataclass(slots=True)
class Seed:
    """A running job: the GPUs it holds on each node and its expected remaining time (None: no limit)."""

    job_id: str
    gpus_by_node: dict[str, int]
    remaining_s: float | None


@dataclass
class LiveState:
    """What the plan is made from: nodes, running and pending jobs at `now_s`, and Slurm's config."""

    nodes: list[NodeInfo]
    jobs: list[QueueJob]
    now_s: float
    config: dict[str, str] = field(default_factory=dict)
    partitions: tuple[str, ...] = ()

    def in_partitions(self, job: QueueJob) -> bool:
        if not self.partitions:
            return True
        return any(p in self.partitions for p in job.partition.split(","))


@dataclass(slots=True)
class Outcome:
    """Simulated outcome of one order: per pending job its start and end (seconds from now)."""

    starts: dict[str, float | None]
    ends: dict[str, float | None]
    makespan_s: float | None  # last pending job's end, from now (None: some job never ends)
    mean_wait_s: float | None  # mean of start - submit over the pending jobs (None: some never start)
    forecast: Forecast | None = None  # the core's forecast it comes from (reasons, what each waits for)
    handles: dict[str, int] = field(default_factory=dict)  # job id -> its handle in `forecast`

    def reasons(self) -> dict[str, str]:
        """Why each pending job waits now, in Slurm's vocabulary (Resources, Priority, ...)."""
        fc = self.forecast
        return {} if fc is None else {j: fc[h].reason for j, h in self.handles.items()}

    def explanations(self) -> dict[str, str]:
        """Why each pending job waits and for what, in words (`Forecast.explain`; times from now)."""
        fc = self.forecast
        if fc is None:
            return {}
        names = {h: j for j, h in self.handles.items()}
        return {
            j: fc.explain(h, lambda k: names.get(k, "a running job"), _from_now)
            for j, h in self.handles.items()
        }

    def explain(self, job_id: str) -> dict[str, Any] | None:
        """One pending job's reason, explanation (as `explanations` words it), what it waits for and
        the jobs backfill starts ahead of it (job ids; "a running job" for Slurm's running ones);
        None when it is not in the plan."""
        fc, h = self.forecast, self.handles.get(job_id)
        if fc is None or h is None:
            return None
        names = {k: j for j, k in self.handles.items()}

        def label(k: int) -> str:
            return names.get(k, "a running job")

        waits = [
            {"job_id": label(w.jid), "gpus": w.gpus, "at_s": None if w.at_s == _INF else w.at_s,
             "basis": w.basis}
            for w in fc.waiting_for(h)
        ]  # fmt: skip
        return {
            "reason": fc[h].reason,
            "explanation": fc.explain(h, label, _from_now),
            "waiting_for": waits,
            "ahead": [label(k) for k in fc.ahead(h)],
        }

    def as_dict(self) -> dict[str, Any]:
        return {"makespan_s": self.makespan_s, "mean_wait_s": self.mean_wait_s}


@dataclass
class QueuePlan:
    """The plan: `order` lists the pending job ids, first to run first."""

    order: list[str]
    policy: str
    backfill: str
    planned: Outcome
    slurm: Outcome
    slurm_order: list[str]
    unmanaged: dict[str, str]
    warnings: list[str]
    cluster: ClusterSpec
    running: int
    now_s: float
    durations_s: dict[str, float | None] = field(default_factory=dict)
    placer: str = DEFAULT_PLACER

    def gain(self) -> dict[str, float | None]:
        """Relative improvement of the plan over Slurm's order (0.25 = 25 % shorter)."""
        return {
            k: _gain(getattr(self.slurm, k), getattr(self.planned, k)) for k in ("makespan_s", "mean_wait_s")
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "now_s": self.now_s,
            "order": self.order,
            "policy": self.policy,
            "backfill": self.backfill,
            "placer": self.placer,
            "cluster": self.cluster.describe(),
            "running_jobs": self.running,
            "pending_jobs": len(self.order),
            "expected": self.planned.as_dict(),
            "slurm_order_expected": self.slurm.as_dict(),
            "gain": self.gain(),
            "slurm_order": self.slurm_order,
            "expected_start_s": {j: self.planned.starts.get(j) for j in self.order},
            "expected_end_s": {j: self.planned.ends.get(j) for j in self.order},
            "slurm_order_expected_start_s": {j: self.slurm.starts.get(j) for j in self.order},
            "reason": self.planned.reasons(),
            "explanation": self.planned.explanations(),
            "planning_duration_s": {j: self.durations_s.get(j) for j in self.order},
            "unmanaged": self.unmanaged,
            "warnings": self.warnings,
        }


def _from_now(t_s: float) -> str:
    return f"+{t_s:.0f} s"


def _gain(before: float | None, after: float | None) -> float | None:
    if before is None or after is None or before <= 0:
        return None
    return 1.0 - after / before


def backfill_for(config: dict[str, str], n_pending: int) -> str:
    """The backfill mode that behaves like Slurm's SchedulerType."""
    if config.get("SchedulerType", "sched/backfill") == "sched/builtin":
        return "none"
    return "conservative" if n_pending <= CONSERVATIVE_MAX_JOBS else "easy"


def cluster_from_nodes(nodes: Sequence[NodeInfo], name: str = "slurm") -> ClusterSpec:
    """A ClusterSpec of the usable nodes with GPUs (GPU memory unknown: a placeholder, never consulted).

    Raises:
        GpuplanError: no usable node with GPUs (all down or drained, or no GPU gres).
    """
    usable = [NodeSpec(n.name, n.gpus, _PLACEHOLDER_GPU) for n in nodes if n.is_usable and n.gpus > 0]
    if not usable:
        states = ", ".join(f"{n.name}={n.state} gpus={n.gpus}" for n in nodes[:5]) or "none"
        raise GpuplanError(
            f"no usable Slurm node with GPUs in the chosen partitions ({states}); check `sinfo -N`, "
            "the --partition option and the nodes' Gres=gpu:N"
        )
    return ClusterSpec(name, tuple(usable), sharing=False)


def slurm_order(pending: Sequence[QueueJob]) -> list[str]:
    """The order Slurm considers pending jobs in: higher priority first, then lower job id."""
    return [j.job_id for j in sorted(pending, key=lambda j: (-j.priority, _id_key(j.job_id)))]


def _id_key(job_id: str) -> tuple[int, str]:
    head = job_id.split("_")[0].split("+")[0]
    return (int(head), job_id) if head.isdigit() else (1 << 62, job_id)


def remaining_s(job: QueueJob, now_s: float, predicted_s: float | None = None) -> float | None:
    """What is left of a running job at `now_s`: its limit (or prediction, never past the limit)
    minus the time it has run; None when it has neither (it never ends in the plan)."""
    elapsed = job.elapsed_s
    if job.start_s is not None:
        elapsed = max(elapsed, now_s - job.start_s)
    limit_left = None if job.time_limit_s is None else max(job.time_limit_s - elapsed, 0.0)
    if predicted_s is not None:
        left = max(predicted_s - elapsed, 0.0)
        return left if limit_left is None else min(left, limit_left)
    return limit_left


def _seeds(state: LiveState, cluster: ClusterSpec, preds: dict[str, float]) -> list[Seed]:
    """Running jobs on the cluster's nodes. A job without a node list (not asked for) takes GPUs that
    sinfo reports in use; GPUs in use that no job explains (other partitions' jobs) become one seed
    that ends when the last known running job does."""
    deficit = {n.name: n.gpus_used for n in state.nodes if n.name in {c.name for c in cluster.nodes}}
    seeds: list[tuple[Seed, int]] = []
    unplaced: list[tuple[Seed, int]] = []
    for q in state.jobs:
        if not q.is_running or q.gpus <= 0:
            continue
        seed = Seed(q.job_id, {}, remaining_s(q, state.now_s, preds.get(q.job_id)))
        hosts = [h for h in parse_hostlist(q.node_list) if h in deficit]
        if q.node_list and not hosts:
            continue  # runs on nodes outside the chosen partitions
        per = -(-q.gpus // max(q.num_nodes, 1))
        for h in hosts:
            seed.gpus_by_node[h] = per
            deficit[h] -= per
        (seeds if hosts else unplaced).append((seed, q.gpus))
    for seed, need in unplaced:
        for h in sorted(deficit, key=lambda h: -deficit[h]):
            take = min(need, deficit[h])
            if take > 0:
                seed.gpus_by_node[h] = take
                deficit[h] -= take
                need -= take
        seeds.append((seed, 0))
    out = [s for s, _ in seeds]
    rest = {h: d for h, d in deficit.items() if d > 0}
    if rest:
        ends = [s.remaining_s for s in out if s.remaining_s is not None]
        out.append(Seed("other-jobs", rest, max(ends, default=0.0)))
    return out


def _pending_job(q: QueueJob, now_s: float) -> Job:
    submit = (q.submit_s if q.submit_s is not None else now_s) - now_s
    return Job(
        id=q.job_id, submit_s=submit, gpus=q.gpus, requested_s=q.time_limit_s, user=q.user, name=q.name,
        may_span_nodes=q.num_nodes > 1, meta={"slurm_priority": q.priority, "partition": q.partition},
    )  # fmt: skip


def live_scheduler(
    cluster: ClusterSpec,
    seeds: Sequence[Seed],
    pending: Sequence[Job],
    policy: Policy | str,
    backfill: str = "none",
    placer: str = DEFAULT_PLACER,
) -> Scheduler:
    """gpuplan's own `Scheduler` seeded with the live queue at time 0 (now): the running `seeds` adopted
    on their nodes until their remaining time (None: endless), then the `pending` jobs (handles
    len(seeds) + index; submit_s relative to now, <= 0) queued."""
    sched = Scheduler(cluster, policy, backfill, placer)
    node_index = {n.name: i for i, n in enumerate(cluster.nodes)}
    for jid, seed in enumerate(seeds):
        gpus = seed_gpus(sched, seed, node_index)
        if not gpus:
            continue
        job = Job(id=f"running:{seed.job_id}", submit_s=-1.0, gpus=len(gpus), est_duration_s=seed.remaining_s,
                  may_span_nodes=True)  # fmt: skip
        sched.adopt(jid, job, gpus, 0.0, seed.remaining_s)
    base = len(seeds)
    for i, job in enumerate(pending):
        sched.submit(base + i, job)
    return sched


def simulate_queue(
    cluster: ClusterSpec,
    seeds: Sequence[Seed],
    pending: Sequence[Job],
    policy: Policy | str,
    backfill: str = "none",
    placer: str = DEFAULT_PLACER,
) -> Outcome:
    """The outcome of `pending` after the running `seeds` on `cluster`: the core's forecast
    (core/forecast.py) of the live scheduler (`live_scheduler`), every job running for its planning
    duration (estimate, else limit; None = endless). Exclusive GPUs."""
    fc = forecast(live_scheduler(cluster, seeds, pending, policy, backfill, placer), 0.0)
    base = len(seeds)
    starts = {j.id: fc[base + i].start_s for i, j in enumerate(pending)}
    ends = {j.id: fc[base + i].end_s for i, j in enumerate(pending)}
    out = _outcome(pending, starts, ends)
    out.forecast, out.handles = fc, {j.id: base + i for i, j in enumerate(pending)}
    return out


def seed_gpus(sched: Scheduler, seed: Seed, node_index: dict[str, int]) -> list[int]:
    """The GPUs a running job takes on the scheduler: as many of its nodes' free GPUs as it holds there."""
    state = sched.state
    out: list[int] = []
    for host, count in seed.gpus_by_node.items():
        n = node_index.get(host)
        if n is None:
            continue
        free = [g for g in state.node_gpus[n] if state.gpu_njobs[g] == 0]
        out.extend(free[:count])
    return out


def _outcome(
    pending: Sequence[Job], starts: dict[str, float | None], ends: dict[str, float | None]
) -> Outcome:
    end_values = list(ends.values())
    makespan = None if any(e is None for e in end_values) or not end_values else max(end_values)  # type: ignore[type-var]
    waits = [s - j.submit_s for j in pending if (s := starts[j.id]) is not None]
    mean_wait = sum(waits) / len(waits) if waits and len(waits) == len(pending) else None
    return Outcome(starts, ends, makespan, mean_wait)


def _rank(o: Outcome) -> tuple[float, float]:
    return (_INF if o.makespan_s is None else o.makespan_s, _INF if o.mean_wait_s is None else o.mean_wait_s)


def _start_order(out: Outcome, policy_order: Sequence[str]) -> list[str]:
    pos = {j: i for i, j in enumerate(policy_order)}
    return sorted(pos, key=lambda j: (_INF if (s := out.starts[j]) is None else s, pos[j]))


@dataclass
class PlanInputs:
    """What a plan is made from: the usable cluster, the running jobs, the pending jobs gpuplan may
    order (by submit time, then job id: never squeue's row order), those it leaves alone (job id -> why) and the backfill mode that mirrors Slurm's."""

    cluster: ClusterSpec
    seeds: list[Seed]
    pending: list[Job]
    unmanaged: dict[str, str]
    backfill: str


def plan_inputs(state: LiveState, predictions: dict[str, float] | None) -> PlanInputs:
    """The plan's inputs from the live state (`predictions`: durations by job id, else time limits)."""
    cluster = cluster_from_nodes([n for n in state.nodes if _node_in(n, state.partitions)])
    preds = predictions or {}
    seeds = _seeds(state, cluster, preds)
    pending, unmanaged = [], {}
    for q in sorted(state.jobs, key=_submit_key):  # squeue's row order follows priorities that move
        if not q.is_pending or not state.in_partitions(q):
            continue
        why = q.why_unmanaged(state.now_s) or (None if q.gpus > 0 else "no GPUs requested")
        if why is None and q.gpus > cluster.total_gpus:
            why = f"asks for {q.gpus} GPUs; the usable nodes have {cluster.total_gpus}"
        if why is not None:
            unmanaged[q.job_id] = why
            continue
        job = _pending_job(q, state.now_s)
        if q.job_id in preds:
            job.est_duration_s = preds[q.job_id]
        pending.append(job)
    return PlanInputs(cluster, seeds, pending, unmanaged, backfill_for(state.config, len(pending)))


def _submit_key(q: QueueJob) -> tuple[float, tuple[int, str]]:
    """Submit time, then job id: as Slurm breaks a tie in priority. A policy's own ties (equal keys) fall
    back to this position, so two reads of an unchanged queue plan the same order whatever the
    priorities (age, PriorityCalcPeriod) did in between."""
    return (_INF if q.submit_s is None else q.submit_s, _id_key(q.job_id))


def _node_in(node: NodeInfo, partitions: Sequence[str]) -> bool:
    return not partitions or not node.partitions or any(p in partitions for p in node.partitions)


def plan_queue(
    state: LiveState,
    policy: str = "best",
    search_s: float = 0.0,
    predictions: dict[str, float] | None = None,
    seed: int = 0,
    placer: str = DEFAULT_PLACER,
) -> QueuePlan:
    """The plan for the pending jobs of `state` and the outcome of Slurm's own order.

    `policy` is a registered policy, "best" (every policy, the best makespan then mean wait) or
    SLURM_ORDER (Slurm's own order, as "best" may choose it);
    `search_s` > 0 then improves that order by local search (swaps and moves) for that many seconds;
    `placer` is how the simulation puts jobs on GPUs (default best-fit; any registered placer, fgd
    included).

    Raises:
        GpuplanError: no usable node; UnknownNameError: an unknown policy or placer.
    """
    placer = get_placer(placer).spec  # an unknown name fails before Slurm's state is used
    inp = plan_inputs(state, predictions)
    pending = inp.pending
    ids = {j.id for j in pending}
    pending_q = [q for q in state.jobs if q.job_id in ids]
    base_order = slurm_order(pending_q)

    def run(order_or_policy: Policy | str) -> Outcome:
        return simulate_queue(inp.cluster, inp.seeds, pending, order_or_policy, inp.backfill, placer)

    slurm = run(FixedOrder(base_order, SLURM_ORDER))
    candidates = _candidates(policy)
    best_name, best_order, best = SLURM_ORDER, base_order, slurm
    for name in candidates:
        pol = get_policy(name)
        out = run(pol)
        order = _start_order(out, _policy_order(pol, pending))
        fixed = run(FixedOrder(order))
        if _rank(fixed) < _rank(best) or (best_name == SLURM_ORDER and policy != "best"):
            best_name, best_order, best = name, order, fixed
    if search_s > 0 and len(best_order) > 1:
        best_order, best = _local_search(run, best_order, best, search_s, seed)
        best_name += "+search"
    warnings = _plan_warnings(pending, inp, state)
    durations = {j.id: j.planning_duration_s() for j in pending}
    return QueuePlan(best_order, best_name, inp.backfill, best, slurm, base_order, inp.unmanaged, warnings,
                     inp.cluster, len(inp.seeds), state.now_s, durations, placer)  # fmt: skip


def _candidates(policy: str) -> list[str]:
    if policy == "best":
        return policy_names()
    return [] if policy == SLURM_ORDER else [static_policy(policy)]


def predicted_durations(state: LiveState, model: Path | None) -> dict[str, float] | None:
    """Durations a model from `gpuplan predict fit` gives the pending and running jobs of `state`
    (None without a model: the plan then uses the time limits).

    Raises:
        GpuplanError: the model file cannot be read.
    """
    if model is None:
        return None
    from gpuplan.predict import apply_model

    jobs = [
        Job(id=q.job_id, submit_s=_as_trace_time(q.submit_s or state.now_s), gpus=max(q.gpus, 1),
            requested_s=q.time_limit_s, user=q.user, name=q.name)
        for q in state.jobs if q.is_pending or q.is_running
    ]  # fmt: skip
    return {j.id: j.est_duration_s for j in apply_model(jobs, model) if j.est_duration_s is not None}


def _as_trace_time(epoch_s: float) -> float:
    """Slurm's local times as gpuplan's sacct reader stores them (the wall clock read as UTC)."""
    return epoch_s + time.localtime(epoch_s).tm_gmtoff


def static_policy(name: str) -> str:
    """`name` as registered, if Slurm priorities can express it (no preemptive policy).

    Raises:
        GpuplanError: a preemptive policy; UnknownNameError: an unknown one.
    """
    pol = get_policy(name)
    if pol.preemptive:
        raise GpuplanError(
            f"policy {name!r} preempts running jobs, which Slurm priorities alone cannot do: "
            f"`gpuplan slurm plan|apply|watch --policy {name}` carry it out by `scontrol requeue` "
            '(docs/slurm.md, "Preemptive policies"); this view orders pending jobs only; run it on '
            "`gpuplan agent` or in "
            f"`gpuplan simulate`, or choose one of {', '.join(policy_names())} or best"
        )
    return pol.spec


def _policy_order(pol: Policy, pending: Sequence[Job]) -> list[str]:
    keyed = sorted(range(len(pending)), key=lambda i: (*pol.key(pending[i], i, False), i))
    return [pending[i].id for i in keyed]


def _local_search(
    run, order: list[str], best: Outcome, budget_s: float, seed: int
) -> tuple[list[str], Outcome]:  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    deadline = time.monotonic() + budget_s
    n = len(order)
    while time.monotonic() < deadline:
        cand = list(order)
        i, j = rng.randrange(n), rng.randrange(n)
        if i == j:
            continue
        if rng.random() < 0.5:
            cand[i], cand[j] = cand[j], cand[i]
        else:
            cand.insert(j, cand.pop(i))
        out = run(FixedOrder(cand))
        if _rank(out) < _rank(best):
            order, best = cand, out
    return order, best


def _plan_warnings(pending: Sequence[Job], inp: PlanInputs, state: LiveState) -> list[str]:
    out = []
    unknown = [j.id for j in pending if j.planning_duration_s() is None]
    if unknown:
        out.append(
            f"{len(unknown)} pending job(s) have no time limit and no prediction (first: {unknown[0]}): "
            "they plan as endless; give them --time or use --predict MODEL"
        )
    endless = [s.job_id for s in inp.seeds if s.remaining_s is None]
    if endless:
        out.append(
            f"{len(endless)} running job(s) have no time limit (first: {endless[0]}): their GPUs never free up in the plan"
        )
    if inp.unmanaged:
        out.append(
            f"{len(inp.unmanaged)} pending job(s) left alone (held, dependent, arrays...): see 'unmanaged'"
        )
    return out

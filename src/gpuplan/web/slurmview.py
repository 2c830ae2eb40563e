"""`gpuplan serve --slurm`: a live Slurm cluster as the dashboard shows it (read-only).

`SlurmSource` reads the cluster with `gpuplan.slurm.client.live_state` (sinfo, squeue and
`scontrol show config`, all through `SlurmRunner`) and plans it with
`gpuplan.slurm.planner.plan_queue`: the very plan `gpuplan slurm plan` prints (with `--policy best`
on more than PLAN_MAX_PENDING pending jobs, the policy is chosen on the first of them in Slurm's order,
then every pending job is planned with it: `plan_every_pending`). One read of Slurm
serves every viewer for `cache_s` seconds; the plan is recomputed only when the queue or the nodes
changed (and once a minute, as remaining times shift). A failed read is one line on the pages and
in /healthz, never a 500; the next read after `cache_s` tries again.

The rows and summaries are pure functions of a `LiveState` and its plan (`slurm_rows`,
`node_rows`, `plan_summary`), so tests feed them captured squeue/sinfo output.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from gpuplan.errors import GpuplanError
from gpuplan.model import ClusterSpec
from gpuplan.slurm.client import SlurmClient, live_state
from gpuplan.slurm.parse import NodeInfo, QueueJob, parse_hostlist
from gpuplan.slurm.planner import (
    DEFAULT_PLACER,
    SLURM_ORDER,
    LiveState,
    QueuePlan,
    plan_queue,
    predicted_durations,
    remaining_s,
    slurm_order,
)
from gpuplan.web.live import JobNotFoundError, LiveSource, NodeStatus, QueueRow

__all__ = [
    "DEFAULT_CACHE_S",
    "NO_GPU_READINGS",
    "PLAN_MAX_PENDING",
    "REPLAN_S",
    "SlurmRow",
    "SlurmSource",
    "SlurmView",
    "node_rows",
    "plan_every_pending",
    "plan_summary",
    "slurm_rows",
]

DEFAULT_CACHE_S = 5.0
"""Seconds one read of Slurm (sinfo + squeue + scontrol show config) serves every viewer."""
REPLAN_S = 60.0
"""An unchanged queue is planned again after this long (remaining times shift as jobs run)."""
PLAN_MAX_PENDING = 1000
"""With `--policy best`, the policy is chosen on at most this many pending jobs (the first in Slurm's
order: "best" runs 17 forecasts); every pending job is then planned with the chosen one."""
NO_GPU_READINGS = (
    "No per-GPU readings: Slurm reports GPU allocation (sinfo Gres/GresUsed), not use. Utilization, "
    "memory, power and processes need NVML on each node: run `gpuplan serve --gpus nvml` there, or "
    "dcgm-exporter."
)


@dataclass(frozen=True, slots=True)
class SlurmRow:
    """One job of the queue view. Times are epoch seconds; None when unknown (or never)."""

    job_id: str
    state: str  # "running" or "pending"
    slurm_state: str
    name: str
    user: str
    partition: str
    gpus: int
    num_nodes: int
    node_list: str
    reason: str
    time_limit_s: float | None
    submit_s: float | None
    start_s: float | None
    expected_start_s: float | None = None
    expected_end_s: float | None = None
    slurm_rank: int | None = None  # 1 = the pending job Slurm considers first
    slurm_expected_start_s: float | None = None  # when it starts if Slurm keeps its own order
    planned_rank: int | None = None  # 1 = the pending job gpuplan's plan starts first
    estimate: str = "time limit"  # what its duration is planned from: "time limit", "prediction", "none"
    unmanaged: str | None = None  # why gpuplan leaves this pending job alone
    unplanned: str | None = None  # why a manageable pending job has no expected time

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _estimate(job: QueueJob, plan_s: float | None, predictions: dict[str, float] | None) -> str:
    if plan_s is None and job.time_limit_s is None and not (predictions and job.job_id in predictions):
        return "none"
    return "prediction" if predictions and job.job_id in predictions else "time limit"


def _running_rows(state: LiveState, predictions: dict[str, float] | None) -> list[SlurmRow]:
    rows = []
    for q in state.jobs:
        if not q.is_running or not state.in_partitions(q):
            continue
        left = remaining_s(q, state.now_s, (predictions or {}).get(q.job_id))
        rows.append(
            _row(q, "running", expected_start_s=q.start_s,
                 expected_end_s=None if left is None else state.now_s + left,
                 estimate=_estimate(q, left, predictions))
        )  # fmt: skip
    return sorted(rows, key=lambda r: (r.expected_end_s is None, r.expected_end_s or 0.0, _id(r.job_id)))


def _row(q: QueueJob, state: str, **extra: Any) -> SlurmRow:
    return SlurmRow(
        job_id=q.job_id, state=state, slurm_state=q.state, name=q.name, user=q.user, partition=q.partition,
        gpus=q.gpus, num_nodes=q.num_nodes, node_list=q.node_list, reason=q.reason,
        time_limit_s=q.time_limit_s, submit_s=q.submit_s, start_s=q.start_s if q.is_running else None, **extra,
    )  # fmt: skip


def _id(job_id: str) -> tuple[int, str]:
    head = job_id.split("_")[0].split("+")[0]
    return (int(head), job_id) if head.isdigit() else (1 << 62, job_id)


def _at(now_s: float, rel: float | None) -> float | None:
    return None if rel is None else now_s + rel


def slurm_rows(
    state: LiveState,
    plan: QueuePlan | None,
    predictions: dict[str, float] | None = None,
    unplanned: dict[str, str] | None = None,
) -> list[SlurmRow]:
    """The queue view's rows: running jobs by expected end, then the pending jobs in gpuplan's planned
    order with their expected start and end (the plan's own numbers, made absolute from its `now_s`),
    then pending jobs left out of the plan (`unplanned`: job id -> why) and those gpuplan leaves alone
    (held, dependent, array remainders, no GPUs), both in Slurm's order."""
    pending = [q for q in state.jobs if q.is_pending and state.in_partitions(q)]
    by_id = {q.job_id: q for q in pending}
    slurm_rank = {j: i + 1 for i, j in enumerate(slurm_order(pending))}
    rows = _running_rows(state, predictions)
    planned = plan.order if plan is not None else []
    for i, jid in enumerate(planned):
        assert plan is not None
        q, now = by_id[jid], plan.now_s
        rows.append(
            _row(q, "pending", expected_start_s=_at(now, plan.planned.starts.get(jid)),
                 expected_end_s=_at(now, plan.planned.ends.get(jid)), slurm_rank=slurm_rank[jid],
                 slurm_expected_start_s=_at(now, plan.slurm.starts.get(jid)), planned_rank=i + 1,
                 estimate=_estimate(q, plan.durations_s.get(jid), predictions))
        )  # fmt: skip
    seen = set(planned)
    unmanaged = {} if plan is None else plan.unmanaged
    rest = sorted((q for q in pending if q.job_id not in seen), key=lambda q: slurm_rank[q.job_id])
    for q in rest:
        why = unmanaged.get(q.job_id) or q.why_unmanaged(state.now_s)
        why = why or (None if q.gpus > 0 else "no GPUs requested")
        note = None if why else (unplanned or {}).get(q.job_id, "the queue could not be planned")
        rows.append(_row(q, "pending", slurm_rank=slurm_rank[q.job_id], unmanaged=why, unplanned=note,
                         estimate=_estimate(q, None, predictions)))  # fmt: skip
    return rows


def node_rows(state: LiveState) -> list[dict[str, Any]]:
    """Per node of the chosen partitions: state, GPUs in all, allocated and free (sinfo Gres,
    GresUsed), and the running jobs squeue places on it."""
    on_node: dict[str, list[str]] = {}
    for q in state.jobs:
        if q.is_running:
            for host in parse_hostlist(q.node_list):
                on_node.setdefault(host, []).append(q.job_id)
    return [
        {
            "name": n.name, "state": n.state, "partitions": list(n.partitions), "usable": n.is_usable,
            "gpus": n.gpus, "gpus_used": n.gpus_used, "gpus_free": n.gpus_free, "jobs": on_node.get(n.name, []),
        }
        for n in _nodes_in(state)
    ]  # fmt: skip


def _nodes_in(state: LiveState) -> list[NodeInfo]:
    parts = state.partitions
    return [n for n in state.nodes if not parts or not n.partitions or any(p in parts for p in n.partitions)]


def plan_summary(
    state: LiveState,
    plan: QueuePlan,
    rows: Sequence[SlurmRow],
    setup: Sequence[str],
    estimates: str,
    note: str | None = None,
) -> dict[str, Any]:
    """What the plan claims and how far to trust it: simulated makespan and mean wait of gpuplan's
    order and of Slurm's, the gain, who gains and who loses (per user and account, as `gpuplan slurm
    plan` prints it), the warnings of `gpuplan slurm plan`, and which jobs plan as endless."""
    from gpuplan.slurm.fairness import fairness_table

    no_limit = [r.job_id for r in rows if r.estimate == "none" and r.unmanaged is None]
    return {
        "fairness": fairness_table(plan, state.jobs),
        "policy": plan.policy,
        "backfill": plan.backfill,
        "placer": plan.placer,
        "cluster": plan.cluster.describe(),
        "partitions": list(state.partitions) or sorted({p for n in state.nodes for p in n.partitions}),
        "partitions_given": bool(state.partitions),
        "planned": plan.planned.as_dict(),
        "slurm_order": plan.slurm.as_dict(),
        "gain": plan.gain(),
        "estimates": estimates,
        "no_limit_jobs": no_limit,
        "warnings": list(plan.warnings),
        "setup_warnings": list(setup),
        "note": note,
        "now_s": plan.now_s,
    }


@dataclass(slots=True)
class SlurmView:
    """One read of Slurm and everything the pages show from it."""

    read_s: float
    version: int
    state: LiveState | None = None
    plan: QueuePlan | None = None
    rows: list[SlurmRow] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    setup: list[str] = field(default_factory=list)
    error: str | None = None  # Slurm could not be read: nothing else is set
    plan_error: str | None = None  # read, but not planned (no usable node, ...)
    signature: tuple[Any, ...] = ()
    planned_s: float = 0.0

    def counts(self) -> dict[str, int]:
        running = sum(1 for r in self.rows if r.state == "running")
        return {
            "running": running,
            "pending": len(self.rows) - running,
            "planned": sum(1 for r in self.rows if r.planned_rank is not None),
            "unmanaged": sum(1 for r in self.rows if r.unmanaged is not None),
        }

    def queue_page(self, offset: int, limit: int) -> dict[str, Any]:
        """One page of rows in the view's order, with the counts, the plan summary and any error."""
        return {
            "version": self.version,
            "read_s": self.read_s,
            "error": self.error,
            "plan_error": self.plan_error,
            "total": len(self.rows),
            "offset": offset,
            "limit": limit,
            **self.counts(),
            "summary": self.summary,
            "rows": [
                {"rank": offset + i + 1, **r.as_dict()}
                for i, r in enumerate(self.rows[offset : offset + limit])
            ],
        }

    def nodes(self) -> dict[str, Any]:
        nodes = [] if self.state is None else node_rows(self.state)
        return {
            "version": self.version,
            "read_s": self.read_s,
            "error": self.error,
            "nodes": nodes,
            "gpus": sum(n["gpus"] for n in nodes),
            "gpus_used": sum(n["gpus_used"] for n in nodes),
            "gpus_free": sum(n["gpus_free"] for n in nodes),
            "note": NO_GPU_READINGS,
        }


def _signature(state: LiveState) -> tuple[Any, ...]:
    """What, when it changes, changes the plan: jobs (state, priority, nodes, limit) and nodes."""
    jobs = sorted((q.job_id, q.state, q.priority, q.node_list, q.time_limit_s, q.reason) for q in state.jobs)
    nodes = sorted((n.name, n.state, n.gpus, n.gpus_used) for n in state.nodes)
    return (tuple(jobs), tuple(nodes), tuple(sorted(state.config.items())))


def plan_every_pending(
    state: LiveState,
    policy: str,
    predictions: dict[str, float] | None,
    choose_on: int = PLAN_MAX_PENDING,
    placer: str = DEFAULT_PLACER,
) -> tuple[QueuePlan, dict[str, Any] | None]:
    """The plan of every pending job of `state`, and on what its policy was chosen (None: on them all).

    With `policy` "best" and more than `choose_on` pending jobs, "best" (every policy and Slurm's
    order: 17 forecasts) runs on the first `choose_on` in Slurm's order only; the policy it picks then
    plans every pending job (Slurm's order and that policy: 3 forecasts). `placer` is the forecast's,
    as `plan_queue`'s.

    Raises:
        GpuplanError: no usable node, an unknown placer (as `plan_queue`).
    """
    pending = [q for q in state.jobs if q.is_pending and state.in_partitions(q)]
    if policy != "best" or len(pending) <= choose_on:
        return plan_queue(state, policy=policy, predictions=predictions, placer=placer), None
    later = set(slurm_order(pending)[choose_on:])
    sample = replace(state, jobs=[q for q in state.jobs if q.job_id not in later])
    chosen = plan_queue(sample, policy="best", predictions=predictions, placer=placer).policy
    plan = plan_queue(state, policy=chosen, predictions=predictions, placer=placer)
    what = "Slurm's own order" if chosen == SLURM_ORDER else f"policy {chosen}"
    choice = {
        "policy": chosen,
        "chosen_on_pending": choose_on,
        "pending": len(pending),
        "text": (
            f"{what} chosen on the first {choose_on:,} of {len(pending):,} pending jobs in Slurm's order "
            "(the best makespan, then mean wait, of every policy and Slurm's order there); every pending "
            "job is planned with it"
        ),
    }
    return plan, choice


class SlurmSource(LiveSource):
    """A Slurm cluster read through `gpuplan.slurm` (read-only; no per-GPU readings).

    Args:
        client: how Slurm is asked (its runner is the only subprocess owner).
        partitions: only these partitions (empty: all), as `gpuplan slurm plan --partition`.
        policy: a registered non-preemptive policy or "best", as `gpuplan slurm plan --policy`.
        predict: a duration model from `gpuplan predict fit` (`--predict`); None plans on time limits.
        cache_s: seconds one read serves every request.
        clock: epoch seconds (tests inject one).
        plan_max_pending: with policy "best", the pending jobs (first in Slurm's order) it is chosen on.
        placer: how the forecast places jobs, as `gpuplan slurm plan --placer` (Slurm places them itself).
    """

    is_fake = False
    backfill = "as Slurm's SchedulerType"

    def __init__(
        self,
        client: SlurmClient,
        partitions: Sequence[str] = (),
        policy: str = "best",
        predict: Path | None = None,
        cache_s: float = DEFAULT_CACHE_S,
        clock: Callable[[], float] = time.time,
        plan_max_pending: int = PLAN_MAX_PENDING,
        placer: str = DEFAULT_PLACER,
    ) -> None:
        self.client = client
        self.partitions = tuple(partitions)
        self.policy = policy
        self.predict = predict
        self.cache_s = cache_s
        self.clock = clock
        self.plan_max_pending = plan_max_pending
        self.placer = placer
        self._view: SlurmView | None = None
        self._lock = threading.Lock()

    @property
    def label(self) -> str:
        parts = ", ".join(self.partitions) or "all partitions"
        return f"Slurm cluster ({parts}); read-only; GPU allocation from sinfo, no per-GPU readings"

    @property
    def cluster(self) -> ClusterSpec:  # type: ignore[override]
        view = self._view
        if view is not None and view.plan is not None:
            return view.plan.cluster
        return ClusterSpec("slurm", ())

    def snapshot(self) -> NodeStatus:
        """No per-GPU or per-process readings: Slurm does not report them (NO_GPU_READINGS)."""
        return NodeStatus(self.clock(), (), (), "slurm")

    def queue(self) -> list[QueueRow]:
        """Running and pending jobs of the chosen partitions (for /metrics).

        Raises:
            GpuplanError: Slurm could not be read (the message says what failed and what to do).
        """
        view = self.view()
        if view.error is not None:
            raise GpuplanError(view.error)
        return [_queue_row(r, view.read_s) for r in view.rows]

    def health(self) -> dict[str, Any]:
        view = self.view()
        return {
            "ok": view.error is None,
            "slurm": {"reachable": view.error is None, "error": view.error, "read_s": view.read_s,
                      "plan_error": view.plan_error, **view.counts()},
            "gpus": self.cluster.total_gpus,
        }  # fmt: skip

    def view(self) -> SlurmView:
        """The latest read of Slurm, read again when older than `cache_s`. While one request reads
        Slurm the others get the previous view (none wait, unless there is none yet)."""
        view = self._view
        if view is not None and self.clock() - view.read_s < self.cache_s:
            return view
        if not self._lock.acquire(blocking=view is None):
            assert view is not None
            return view
        try:
            view = self._view
            if view is None or self.clock() - view.read_s >= self.cache_s:
                self._view = view = self._read(view)
            return view
        finally:
            self._lock.release()

    def _read(self, prev: SlurmView | None) -> SlurmView:
        version = 0 if prev is None else prev.version
        try:
            state = live_state(self.client, self.partitions)
        except GpuplanError as e:
            error = _one_line(e)
            bumped = version + (prev is None or prev.error != error)
            return SlurmView(read_s=self.clock(), version=bumped, error=error)
        now = self.clock()
        sig = _signature(state)
        if (prev is not None and prev.error is None and prev.signature == sig
                and now - prev.planned_s < REPLAN_S):  # fmt: skip
            return replace(prev, read_s=now)
        return self._plan(state, sig, version + 1, now)

    def _plan(self, state: LiveState, sig: tuple[Any, ...], version: int, now: float) -> SlurmView:
        from gpuplan.slurm.setup import setup_warnings

        view = SlurmView(read_s=now, version=version, state=state, signature=sig, planned_s=now)
        view.setup = setup_warnings(state.config, "priority")
        try:
            preds = predicted_durations(state, self.predict)
            view.plan, choice = plan_every_pending(
                state, self.policy, preds, self.plan_max_pending, self.placer
            )
        except GpuplanError as e:
            view.plan_error = f"cannot plan the queue: {_one_line(e)}"
            view.rows = slurm_rows(state, None)
            return view
        view.rows = slurm_rows(state, view.plan, preds)
        basis = f"predictions of {self.predict}" if self.predict else "time limits"
        note = None if choice is None else choice["text"]
        view.summary = plan_summary(state, view.plan, view.rows, view.setup, basis, note)
        view.summary["choice"] = choice
        return view

    def job(self, job_id: str) -> dict[str, Any]:
        """Job `job_id` of the view: its squeue fields and, pending, the plan's expected start and end
        with the planner's reason and explanation (`Outcome.explain`: `gpuplan slurm plan --json`'s).

        Raises:
            JobNotFoundError: not in the view (not running or pending in the chosen partitions).
            GpuplanError: Slurm could not be read.
        """
        view = self.view()
        if view.error is not None:
            raise GpuplanError(view.error)
        row = next((r for r in view.rows if r.job_id == job_id), None)
        if row is None:
            raise JobNotFoundError(
                f"no job {job_id[:40]!r} running or pending in {', '.join(self.partitions) or 'any partition'} "
                "(a finished job is sacct's: `gpuplan slurm` reads only the live queue)"
            )
        return _job_detail(view, row)

    def extra_metrics(self) -> Iterator[Metric]:
        """GPUs per node in all and allocated, from sinfo (Slurm's view; no DCGM series here)."""
        view = self.view()
        total = GaugeMetricFamily("gpuplan_slurm_node_gpus", "GPUs of a Slurm node (sinfo Gres).",
                                  labels=["node", "state"])  # fmt: skip
        used = GaugeMetricFamily("gpuplan_slurm_node_gpus_allocated",
                                 "GPUs allocated to jobs on a Slurm node (sinfo GresUsed).", labels=["node"])  # fmt: skip
        for n in [] if view.state is None else node_rows(view.state):
            total.add_metric([n["name"], n["state"]], n["gpus"])
            used.add_metric([n["name"]], n["gpus_used"])
        yield total
        yield used


def _job_detail(view: SlurmView, row: SlurmRow) -> dict[str, Any]:
    job = {**row.as_dict(), "id": row.job_id}
    plan = view.plan
    why = None if plan is None else plan.planned.explain(row.job_id)
    forecast: dict[str, Any] | None = None
    if row.state == "running":
        forecast = {"expected_start_s": row.start_s, "expected_end_s": row.expected_end_s, "reason": "",
                    "explanation": "running" + ("" if row.expected_end_s is not None else "; no time limit: no expected end"),
                    "gpu_ids": [], "waiting_for": [], "ahead": []}  # fmt: skip
    elif why is not None:
        forecast = {"expected_start_s": row.expected_start_s, "expected_end_s": row.expected_end_s,
                    "gpu_ids": [], "planned_rank": row.planned_rank, "slurm_rank": row.slurm_rank, **why}  # fmt: skip
    else:
        job["left_alone"] = row.unmanaged or row.unplanned
    return {
        "job_id": row.job_id, "source": "slurm", "agent_running": False, "now_s": view.read_s,
        "job": job, "forecast": forecast, "profile": None,
    }  # fmt: skip


def _one_line(e: Exception) -> str:
    return " / ".join(line.strip() for line in str(e).splitlines() if line.strip())


def _queue_row(r: SlurmRow, now_s: float) -> QueueRow:
    return QueueRow(
        job_id=r.job_id, state="running" if r.state == "running" else "waiting", gpus=r.gpus,
        submit_s=r.submit_s if r.submit_s is not None else now_s, name=r.name, user=r.user,
        time_limit_s=r.time_limit_s, start_s=r.start_s,
    )  # fmt: skip

"""plan.json: a plan as the local agent and the Slurm integration read it (schema in docs/plan.md)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuplan.errors import GpuplanError, InputError
from gpuplan.optimize.search import PlanResult

if TYPE_CHECKING:
    from gpuplan.model import ClusterSpec, Job
    from gpuplan.sim.result import SimResult

__all__ = [
    "DEFAULT_PLAN_PLACER",
    "PLAN_SCHEMA",
    "json_safe",
    "plan_to_dict",
    "read_plan",
    "replay_plan",
    "write_plan",
]

PLAN_SCHEMA = "gpuplan.plan/1"
_JOB_KEYS = ("id", "position", "submit_s", "start_s", "end_s", "gpus", "gpu_labels", "node")
DEFAULT_PLAN_PLACER = "first-fit"
"""The placer of a plan file written before plans recorded theirs (every plan then used first-fit)."""
_TOP_KEYS = ("schema", "objective", "backfill", "oracle", "uses_true_outcome", "cluster", "order", "jobs")


def json_safe(x: Any) -> Any:
    """JSON has no inf or NaN: they become null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    return x


def plan_to_dict(plan: PlanResult, trace: str | None = None) -> dict[str, Any]:
    """The plan as plan.json's object: order, planned start/end/GPUs per job, metrics, bound, search."""
    r = plan.result
    labels = r.gpu_labels
    nodes = [lab.split("/")[0] for lab in labels]
    spec = r.cluster
    return json_safe(
        {
            "schema": PLAN_SCHEMA,
            "trace": trace,
            "objective": plan.objective,
            "backfill": plan.backfill,
            "placer": plan.placer,
            "oracle": plan.oracle,
            "uses_true_outcome": plan.uses_true_outcome,
            "cluster": {
                "name": spec.name,
                "gpus": spec.total_gpus,
                "sharing": spec.sharing,
                "nodes": [
                    {"name": n.name, "gpus": n.gpus, "gpu_model": n.gpu.model, "gpu_mem_gb": n.gpu.mem_gb}
                    for n in spec.nodes
                ],
            },
            "order": list(plan.order),
            "jobs": [
                {
                    "id": j.job_id,
                    "position": j.position,
                    "submit_s": j.submit_s,
                    "start_s": j.start_s,
                    "end_s": j.end_s,
                    "gpus": list(j.gpus),
                    "gpu_labels": [labels[g] for g in j.gpus],
                    "node": nodes[j.gpus[0]] if j.gpus else None,
                }
                for j in plan.jobs
            ],
            "value_s": plan.value_s,
            "metrics": plan.metrics.as_dict(),
            "start": {
                "policy": plan.start_policy,
                "value_s": plan.start_value_s,
                "metrics": plan.start_metrics.as_dict(),
            },
            "fifo": {
                "policy": "fifo+none",
                "value_s": plan.fifo_value_s,
                "metrics": plan.fifo_metrics.as_dict(),
            },
            "bound": {
                "value_s": plan.bound.value_s,
                "name": plan.bound.name,
                "parts": dict(plan.bound.parts),
                "ratio": plan.bound_ratio,
            },
            "cpsat": None if plan.exact is None else plan.exact.summary(),
            "search": {
                "evaluations": plan.evaluations,
                "seconds": plan.seconds,
                "stop_reason": plan.stop_reason,
                "seed": plan.seed,
                "proven_optimal": plan.is_proven_optimal,
            },
        }
    )


def write_plan(plan: PlanResult, path: str | Path, trace: str | None = None) -> Path:
    """Write plan.json to `path` (parent folders are created) and return the path.

    Raises:
        OSError: the file cannot be written.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(plan_to_dict(plan, trace), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return out


def read_plan(path: str | Path) -> dict[str, Any]:
    """Read and check a plan.json; returns its object (apply it with `FixedOrder(data["order"])`, its
    `backfill` and its `placer`: `replay_plan`). A file without `placer` reads as first-fit.

    Raises:
        InputError: not JSON, another schema, a missing key, an unknown placer, or jobs that disagree
            with the order.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(
            str(p), None, None, str(e), f"a {PLAN_SCHEMA} JSON file written by `gpuplan plan --out`"
        ) from e
    if not isinstance(data, dict) or data.get("schema") != PLAN_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise InputError(str(p), None, "schema", found, PLAN_SCHEMA)
    for key in _TOP_KEYS:
        if key not in data:
            raise InputError(str(p), None, key, None, f"key {key!r} (see docs/plan.md)", reason="missing")
    data["placer"] = _placer_of(p, data.get("placer", DEFAULT_PLAN_PLACER))
    order, jobs = data["order"], data["jobs"]
    if len(set(order)) != len(order):
        raise InputError(str(p), None, "order", order, "each job id once")
    for i, job in enumerate(jobs):
        missing = [k for k in _JOB_KEYS if k not in job]
        if missing:
            raise InputError(
                str(p), None, f"jobs[{i}]", job, f"keys {', '.join(_JOB_KEYS)}", reason="missing"
            )
        if job["position"] >= len(order) or order[job["position"]] != job["id"]:
            raise InputError(
                str(p), None, f"jobs[{i}].position", job["position"], f"the index of {job['id']!r} in order"
            )
    return data


def _placer_of(path: Path, spec: Any) -> str:
    from gpuplan.core.placement import get_placer, placer_names

    if not isinstance(spec, str):
        raise InputError(str(path), None, "placer", spec, f"a placer name: {', '.join(placer_names())}")
    try:
        return get_placer(spec).spec
    except GpuplanError as e:
        raise InputError(str(path), None, "placer", spec, f"a placer spec: {e}") from e


def replay_plan(data: dict[str, Any], jobs: Sequence[Job], cluster: ClusterSpec) -> SimResult:
    """Simulate `jobs` on `cluster` in the plan's order, with its backfill mode, placer and oracle
    switch (`data` from `read_plan`): on the trace and cluster it was made for, the plan's own run.

    Raises:
        GpuplanError: as `simulate` (a job without a duration, a job that never fits).
    """
    from gpuplan.optimize.order import FixedOrder
    from gpuplan.sim.engine import simulate

    order = FixedOrder([str(x) for x in data["order"]], name="plan")
    placer = data.get("placer", DEFAULT_PLAN_PLACER)
    return simulate(jobs, cluster, order, data["backfill"], placer, oracle=bool(data["oracle"]))

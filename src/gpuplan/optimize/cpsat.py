"""Exact scheduling with OR-Tools CP-SAT: an optimum (or a proven bound) for the trace's true durations.

The model (docs/plan.md has the argument for each claim):

- one interval per job, start >= its release, length = its true duration (integer seconds: durations
  rounded down, releases up, so every real schedule maps onto a model schedule: the bound stays valid);
- exclusive GPUs on one node: one cumulative of GPU counts with the node's capacity; exact, because
  GPUs within a node are interchangeable: any profile that never asks for more than the node's GPUs
  can be given distinct GPUs for each job for its whole run (interval graphs are perfect);
- exclusive GPUs on several nodes: a boolean per (job, node its memory allows), an optional interval per
  pair, exactly one node per job, one cumulative per node (plus a redundant one over the cluster);
  exact for jobs that stay on one node; a job that may span nodes is only in the cluster-wide
  cumulative, a relaxation;
- shared GPUs: a relaxation (cumulatives over memory, job slots, and the GPUs of jobs that cannot
  share); interference only slows jobs down, so the true durations are the shortest possible;
- too many (job, node) pairs: the cluster-wide cumulative alone, a relaxation.

The objective is the makespan, the total completion time (reported as mean JCT), or the GPU-weighted
total completion time. `solver.best_objective_bound` turns into a lower bound in seconds that holds
for every schedule of the trace, whatever its order, placement or backfill, once the status is
OPTIMAL or FEASIBLE or even UNKNOWN (a bound is a bound).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.model import ClusterSpec, Job
from gpuplan.optimize.evaluate import check_objective
from gpuplan.sim.bounds import Bound, least_gpu_share, least_mem_gb, lower_bound

__all__ = [
    "MAX_JOBS",
    "MAX_PAIRS",
    "ExactResult",
    "combine",
    "simple_bound",
    "solve_exact",
    "strongest_bound",
]

MAX_PAIRS = 2000
"""Largest jobs x nodes for the per-node model; above it the cluster-wide relaxation is solved."""

MAX_JOBS = 5000
"""Largest trace `strongest_bound` hands to CP-SAT at all."""


@dataclass(slots=True)
class ExactResult:
    """What CP-SAT found.

    Attributes:
        status: OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN or MODEL_INVALID (CP-SAT's status name).
        objective: makespan, mean-jct or weighted.
        model: one-node, per-node or relaxed (which model was solved, see the module docstring).
        exact: the model's schedules are exactly what a scheduler can do (then OPTIMAL means no order,
            placement or backfill mode can do better).
        value_s: objective of the best solution in the model's integer seconds (None without one).
        bound_s: a lower bound on the objective for every schedule of the trace (seconds; for mean-jct
            and weighted a bound on that mean).
        start_s: job id -> start of the best solution, seconds from the first submit.
        node: job id -> node index of the best solution (None for a job left to the cluster-wide
            cumulative).
        seconds: wall time of the solve.
    """

    status: str
    objective: str
    model: str
    exact: bool
    value_s: float | None
    bound_s: float
    start_s: dict[str, float] = field(default_factory=dict)
    node: dict[str, int | None] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def is_proven_optimal(self) -> bool:
        """OPTIMAL on an exact model: no schedule of the trace does better than `value_s`."""
        return self.status == "OPTIMAL" and self.exact

    def order(self) -> list[str]:
        """Job ids by start in the best solution (ties keep trace order): a plan the simulator can
        replay with FixedOrder."""
        ids = list(self.start_s)
        rank = {jid: i for i, jid in enumerate(ids)}
        return sorted(ids, key=lambda jid: (self.start_s[jid], rank[jid]))

    def summary(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "objective": self.objective,
            "model": self.model,
            "exact": self.exact,
            "value_s": self.value_s,
            "bound_s": self.bound_s,
            "proven_optimal": self.is_proven_optimal,
            "seconds": self.seconds,
        }


@dataclass(slots=True)
class _Data:
    """The trace in the model's integer seconds."""

    rel: list[int]  # ceil(release)
    dur: list[int]  # floor(duration)
    rel_s: list[float]  # exact release, seconds from the first submit
    integral: bool  # releases and durations were whole seconds already: no rounding slack


def _data(jobs: Sequence[Job]) -> _Data:
    t0 = min(j.submit_s for j in jobs)
    rel_s = [j.submit_s - t0 for j in jobs]
    dur_s = [float(j.duration_s or 0.0) for j in jobs]
    integral = all(float(x).is_integer() for x in (*rel_s, *dur_s))
    return _Data([math.ceil(r) for r in rel_s], [math.floor(d) for d in dur_s], rel_s, integral)


def _check(jobs: Sequence[Job]) -> None:
    from gpuplan.sim.engine import require_durations

    require_durations(jobs, "solve exactly", "drop unfinished jobs or fill duration_s")


def _mem(job: Job) -> float | None:
    """The memory a job needs per GPU: its true use when known, else the estimate."""
    return job.mem_gb if job.mem_gb is not None else job.est_mem_gb


def _allowed_nodes(job: Job, cluster: ClusterSpec) -> list[int]:
    m = _mem(job)
    return [
        n
        for n, node in enumerate(cluster.nodes)
        if node.gpus >= job.gpus and (m is None or m <= node.gpu.mem_gb)
    ]


def solve_exact(
    jobs: Sequence[Job],
    cluster: ClusterSpec,
    objective: str = "makespan",
    time_limit_s: float = 10.0,
    *,
    seed: int = 0,
    num_workers: int = 2,
    hint: Mapping[str, tuple[float, int | None]] | None = None,
    lower_bound_s: float | None = None,
    upper_bound_s: float | None = None,
    max_pairs: int = MAX_PAIRS,
    deterministic: bool = False,
    wall_limit_s: float | None = None,
) -> ExactResult:
    """Solve the trace with CP-SAT for `objective` within `time_limit_s` seconds.

    Args:
        jobs: the trace; every job needs its true duration.
        cluster: where it runs.
        objective: makespan, mean-jct or weighted (see gpuplan.optimize.OBJECTIVES).
        time_limit_s: CP-SAT's wall-clock limit.
        seed: CP-SAT's random seed (with the same seed, workers and a limit it does not reach, the
            same answer).
        num_workers: CP-SAT's search workers.
        hint: job id -> (start_s, node index) of a known schedule (e.g. the best policy's), to start from.
        lower_bound_s: a proven makespan bound (e.g. sim.bounds.lower_bound) to tighten the model.
        upper_bound_s: the makespan of a known real schedule; shrinks the horizon (makespan only).
        max_pairs: above this many (job, node) pairs the cluster-wide relaxation is solved instead.
        deterministic: interleave the workers and stop on CP-SAT's deterministic time (time_limit_s of
            it, with 2x that in wall-clock seconds as a safety): the same answer on every run unless
            the safety cuts it short; the wall time varies with the machine.
        wall_limit_s: with `deterministic`, the wall-clock safety in seconds (default 30x
            time_limit_s, at least 10 s); the caller's own cap.

    Raises:
        GpuplanError: an empty trace, a job without a true duration, or one no node can host.
    """
    from ortools.sat.python import cp_model

    _check(jobs)
    objective = check_objective(objective)
    data = _data(jobs)
    horizon = max(data.rel) + sum(data.dur)
    if objective == "makespan" and upper_bound_s is not None and math.isfinite(upper_bound_s):
        horizon = min(horizon, math.ceil(upper_bound_s))
    m = cp_model.CpModel()
    starts = [
        m.new_int_var(r, max(r, horizon - d), f"s{i}") for i, (r, d) in enumerate(zip(data.rel, data.dur))
    ]
    intervals = [
        m.new_fixed_size_interval_var(s, d, f"iv{i}") for i, (s, d) in enumerate(zip(starts, data.dur))
    ]
    kind, exact, assign = _capacity(m, jobs, cluster, starts, intervals, data, max_pairs)
    ends = [s + d for s, d in zip(starts, data.dur)]
    if objective == "makespan":
        floor = max(r + d for r, d in zip(data.rel, data.dur))
        if lower_bound_s is not None:
            floor = max(
                floor, math.ceil(lower_bound_s - 1e-6) if data.integral else math.floor(lower_bound_s)
            )
        makespan = m.new_int_var(min(floor, horizon), max(floor, horizon), "makespan")
        m.add_max_equality(makespan, ends)
        m.minimize(makespan)
    else:
        weights = [1] * len(jobs) if objective == "mean-jct" else [j.gpus for j in jobs]
        m.minimize(sum(w * e for w, e in zip(weights, ends)))
    _add_hint(m, jobs, starts, assign, hint)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(float(time_limit_s), 0.01)
    if deterministic:
        solver.parameters.interleave_search = True
        solver.parameters.max_deterministic_time = max(float(time_limit_s), 0.01)
        # the wall-clock limit is only a safety net: on a loaded machine a tight one would cut the
        # search before its deterministic time and break reproducibility
        solver.parameters.max_time_in_seconds = (
            max(30.0 * float(time_limit_s), 10.0) if wall_limit_s is None else max(wall_limit_s, 0.01)
        )
    solver.parameters.num_workers = num_workers
    solver.parameters.random_seed = seed
    t0 = time.perf_counter()
    status = solver.solve(m)
    seconds = time.perf_counter() - t0
    name = solver.status_name(status)
    return _result(jobs, objective, kind, exact, name, solver, starts, assign, data, seconds)


def _capacity(m, jobs, cluster, starts, intervals, data, max_pairs):  # type: ignore[no-untyped-def]
    """Add the capacity constraints; returns (model kind, exact?, {job: {node: presence literal}})."""
    n_nodes = len(cluster.nodes)
    allowed = [_allowed_nodes(j, cluster) for j in jobs]
    for j, nodes in zip(jobs, allowed):
        if not nodes and not (j.may_span_nodes and j.gpus <= cluster.total_gpus):
            raise GpuplanError(
                f"job {j.id!r} asks for {j.gpus} GPU(s) with {_mem(j)} GB per GPU; no node of cluster "
                f"{cluster.name!r} can host it: fix the job or use a larger --cluster"
            )
    if cluster.sharing:
        _sharing_relaxation(m, jobs, cluster, intervals)
        return "relaxed", False, {}
    spans = [j.may_span_nodes and n_nodes > 1 for j in jobs]
    m.add_cumulative(intervals, [j.gpus for j in jobs], cluster.total_gpus)
    if n_nodes == 1:
        return "one-node", True, {i: {0: None} for i in range(len(jobs))}
    pairs = sum(len(a) for a, sp in zip(allowed, spans) if not sp)
    if pairs > max_pairs:
        return "relaxed", False, {}
    assign: dict[int, dict[int, Any]] = {}
    per_node: list[tuple[list[Any], list[int]]] = [([], []) for _ in range(n_nodes)]
    for i, (j, nodes) in enumerate(zip(jobs, allowed)):
        if spans[i]:
            continue
        lits = {}
        for n in nodes:
            lit = m.new_bool_var(f"x{i}_{n}") if len(nodes) > 1 else m.new_constant(1)
            iv = m.new_optional_fixed_size_interval_var(starts[i], data.dur[i], lit, f"iv{i}_{n}")
            per_node[n][0].append(iv)
            per_node[n][1].append(j.gpus)
            lits[n] = lit
        if len(nodes) > 1:
            m.add_exactly_one(lits.values())
        assign[i] = lits
    for n, (ivs, demands) in enumerate(per_node):
        if ivs:
            m.add_cumulative(ivs, demands, cluster.nodes[n].gpus)
    return "per-node", not any(spans), assign


def _sharing_relaxation(m, jobs, cluster, intervals) -> None:  # type: ignore[no-untyped-def]
    """Shared GPUs: memory cannot be shared, a GPU holds at most max_jobs_per_gpu jobs, GPU shares on
    one GPU add up to at most 1, and jobs using more than half of the largest GPU (or all of it) never
    share one with each other. Each job takes the least any run books (sim.bounds)."""
    smallest = min(n.gpu.mem_gb for n in cluster.nodes)
    largest = max(n.gpu.mem_gb for n in cluster.nodes)
    mems = [least_mem_gb(j) for j in jobs]
    tenths = [
        math.floor(10 * j.gpus * min(smallest if x is None else x, smallest)) for j, x in zip(jobs, mems)
    ]
    m.add_cumulative(intervals, tenths, math.ceil(10 * cluster.total_mem_gb))
    m.add_cumulative(intervals, [j.gpus for j in jobs], cluster.total_gpus * cluster.max_jobs_per_gpu)
    milli = [math.floor(1000 * least_gpu_share(j)) for j in jobs]
    if any(milli):
        m.add_cumulative(intervals, milli, 1000 * cluster.total_gpus)
    big = [i for i, x in enumerate(mems) if x is None or 2 * x > largest]
    if big:
        m.add_cumulative([intervals[i] for i in big], [jobs[i].gpus for i in big], cluster.total_gpus)


def _add_hint(m, jobs, starts, assign, hint) -> None:  # type: ignore[no-untyped-def]
    if not hint:
        return
    for i, j in enumerate(jobs):
        if j.id not in hint:
            continue
        start, node = hint[j.id]
        m.add_hint(starts[i], math.ceil(start))
        lits = assign.get(i, {})
        if node is not None and len(lits) > 1:
            for n, lit in lits.items():
                m.add_hint(lit, n == node)


def _result(jobs, objective, kind, exact, status, solver, starts, assign, data, seconds) -> ExactResult:  # type: ignore[no-untyped-def]
    has_solution = status in ("OPTIMAL", "FEASIBLE")
    raw_bound = solver.best_objective_bound if status != "INFEASIBLE" else -math.inf
    result = ExactResult(
        status, objective, kind, exact, None, _bound_s(objective, raw_bound, jobs, data), seconds=seconds
    )
    if not has_solution:
        return result
    result.value_s = _value_s(objective, solver.objective_value, jobs, data)
    for i, j in enumerate(jobs):
        result.start_s[j.id] = float(solver.value(starts[i]))
        lits = assign.get(i)
        result.node[j.id] = (
            None
            if not lits
            else next((n for n, lit in lits.items() if lit is None or solver.boolean_value(lit)), None)
        )
    return result


def _bound_s(objective: str, raw: float, jobs: Sequence[Job], data: _Data) -> float:
    """CP-SAT's bound on the integer model, as a bound on every real schedule (docs/plan.md).

    A real schedule maps to a model schedule whose ends are at most ceil(real end), so
    Σ w·real end > Σ w·(model end - 1) >= raw - Σ w; with whole-second data nothing is lost."""
    if not math.isfinite(raw):
        return 0.0
    if objective == "makespan":
        return max(raw - (0 if data.integral else 1), 0.0)
    weights = [1.0] * len(jobs) if objective == "mean-jct" else [float(j.gpus) for j in jobs]
    slack = 0.0 if data.integral else sum(weights)
    total = raw - slack - sum(w * r for w, r in zip(weights, data.rel_s))
    return max(total / sum(weights), 0.0)


def _value_s(objective: str, raw: float, jobs: Sequence[Job], data: _Data) -> float:
    if objective == "makespan":
        return float(raw)
    weights = [1.0] * len(jobs) if objective == "mean-jct" else [float(j.gpus) for j in jobs]
    return (raw - sum(w * r for w, r in zip(weights, data.rel_s))) / sum(weights)


def simple_bound(jobs: Sequence[Job], cluster: ClusterSpec, objective: str) -> Bound:
    """The bounds without a solver: sim.bounds for the makespan; for a (GPU-weighted) mean JCT each
    job's own duration and, on exclusive GPUs, the mean-busy-time bound (docs/bounds.md)."""
    if objective == "makespan":
        return lower_bound(jobs, cluster)
    weights = [1.0] * len(jobs) if objective == "mean-jct" else [float(j.gpus) for j in jobs]
    total_w = sum(weights)
    parts = {"own-duration": sum(w * float(j.duration_s or 0.0) for w, j in zip(weights, jobs)) / total_w}
    if not cluster.sharing:
        parts["busy-time"] = _busy_time_bound(jobs, weights, cluster.total_gpus)
    name = max(parts, key=lambda k: parts[k])
    return Bound(parts[name], name, parts)


def _busy_time_bound(jobs: Sequence[Job], weights: list[float], gpus: int) -> float:
    """Σ w·JCT / Σ w >= (Σ w·(M + d/2) - Σ w·r) / Σ w, with M the mean busy times of the one-machine
    relaxation (speed = the cluster's GPUs, work = GPU-seconds) in WSPT order, which no schedule beats."""
    t0 = min(j.submit_s for j in jobs)
    area = [j.gpus * float(j.duration_s or 0.0) for j in jobs]
    order = sorted(range(len(jobs)), key=lambda i: area[i] / weights[i])
    done, total = 0.0, 0.0
    for i in order:
        busy = (done + area[i] / 2) / gpus
        done += area[i]
        total += weights[i] * (busy + float(jobs[i].duration_s or 0.0) / 2 - (jobs[i].submit_s - t0))
    return max(total / sum(weights), 0.0)


def combine(base: Bound, exact: ExactResult | None) -> Bound:
    """`base` with CP-SAT's bound added as part 'cp-sat' (and its optimum when proven)."""
    if exact is None:
        return base
    parts = dict(base.parts)
    parts["cp-sat"] = exact.bound_s  # at OPTIMAL, CP-SAT's bound is its optimum
    name = max(parts, key=lambda k: parts[k])
    return Bound(parts[name], name, parts)


def strongest_bound(
    jobs: Sequence[Job],
    cluster: ClusterSpec,
    time_limit_s: float = 10.0,
    *,
    objective: str = "makespan",
    seed: int = 0,
    max_jobs: int = MAX_JOBS,
) -> Bound:
    """The best lower bound on `objective` for every schedule of the trace: sim.bounds (or each job's
    own duration for a mean JCT) and, when the trace has at most `max_jobs` jobs and time_limit_s > 0,
    CP-SAT's bound (part 'cp-sat').

    Raises:
        GpuplanError: an empty trace or a job without a true duration.
    """
    _check(jobs)
    base = simple_bound(jobs, cluster, check_objective(objective))
    if time_limit_s <= 0 or len(jobs) > max_jobs:
        return base
    lb = base.value_s if objective == "makespan" else None
    return combine(base, solve_exact(jobs, cluster, objective, time_limit_s, seed=seed, lower_bound_s=lb))

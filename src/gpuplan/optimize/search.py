"""`plan_order`: the best order of a trace found by simulation, starting from the best built-in policy.

Steps (docs/plan.md):

1. Baselines: every built-in policy under every backfill mode (conservative only up to
   `CONSERVATIVE_MAX_JOBS` jobs: it is slow on long queues; the plan's own mode first, and no new
   one once half the time budget is spent); the best by the objective is the start.
2. Candidates: each baseline's start order, replayed with FixedOrder under the plan's backfill mode,
   and (small enough traces) CP-SAT's solution order; CP-SAT's bound joins the lower bound.
3. Late-acceptance hill climbing over orders (swap, insert, and for the makespan: pull a job that ends
   after the bound earlier), each candidate scored by simulating it. Seeded; with `max_evals` set and
   the time limit not reached, the same seed gives the same order on every run.
4. The best order is simulated once more with `simulate` for the reported result.

What the search optimises is the simulated outcome of the trace, which uses the jobs' true durations
(the scheduler's own decisions use the estimates unless `oracle`): a what-if on history, an oracle of
the outcome; `PlanResult.uses_true_outcome` says so. With `forecast=True` the durations are replaced by
the estimates first, and the plan is a forecast a live scheduler could use.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuplan.core.backfill import backfill_names
from gpuplan.core.placement import get_placer
from gpuplan.core.policies import policy_names
from gpuplan.errors import GpuplanError
from gpuplan.model import ClusterSpec, Job
from gpuplan.optimize.cpsat import MAX_JOBS, ExactResult, combine, simple_bound, solve_exact
from gpuplan.optimize.evaluate import Evaluator, check_objective
from gpuplan.optimize.order import FixedOrder
from gpuplan.sim.bounds import Bound
from gpuplan.sim.result import Metrics, SimResult

__all__ = [
    "CONSERVATIVE_MAX_JOBS",
    "CPSAT_DETERMINISTIC_S",
    "DEFAULT_MAX_EVALS",
    "DEFAULT_TIME_LIMIT_S",
    "PlanProgressFn",
    "PlanResult",
    "PlannedJob",
    "plan_order",
]

CONSERVATIVE_MAX_JOBS = 2000
DEFAULT_MAX_EVALS = 5000
"""Simulations the search runs by default: the plan is then the same on every machine (the article's
80 jobs take about 5 s here, CP-SAT included; docs/plan.md)."""
DEFAULT_TIME_LIMIT_S = 300.0
"""The default wall-clock cap: reached only on a large trace or a very slow machine, and reported."""
CPSAT_DETERMINISTIC_S = 0.5
"""CP-SAT's default deterministic-time budget for the makespan (a tenth for the other objectives)."""
"""Baselines include conservative backfill only up to this many jobs (seconds per run beyond)."""

PlanProgressFn = Callable[[float, str], None]
"""(share of the time or evaluation budget used, what is running)."""

_HISTORY = 40  # late-acceptance history length: long enough to cross plateaus, short enough to converge


@dataclass(slots=True)
class PlannedJob:
    """One job of the plan: its position in the order and where and when the simulation ran it."""

    job_id: str
    position: int
    submit_s: float
    start_s: float
    end_s: float
    gpus: tuple[int, ...]  # global GPU indices (SimResult.gpu_labels names them)


@dataclass(slots=True)
class PlanResult:
    """The outcome of `plan_order`. Times in seconds from the first submit.

    Attributes:
        objective: makespan, mean-jct or weighted; `value_s` is the plan's value of it.
        placer: the placer spec every simulation used (baselines, search, the plan's run); apply the
            plan with it, as its `backfill`.
        backfill: the backfill mode the order is applied with.
        oracle: the scheduler's decisions saw true durations (else estimates).
        uses_true_outcome: the search scored orders by the outcome with the true durations (a what-if
            on history; False for a forecast on estimates).
        order: job ids in plan order; `jobs` has the planned start, end and GPUs of each.
        result: the plan's SimResult (policy "plan"); `metrics` is its Metrics.
        start_policy, start_value_s, start_metrics: the best built-in policy+backfill (the start).
        fifo_value_s, fifo_metrics: strict FIFO (fifo+none), the usual baseline.
        baselines: every built-in run simulated.
        bound: the strongest lower bound on the objective (sim.bounds, CP-SAT when it ran).
        exact: what CP-SAT found (None when it did not run).
        evaluations: simulations the search ran; seconds: wall time of plan_order.
        stop_reason: bound (the plan meets the lower bound: optimal), evaluations (the budget of
            simulations: the same on every machine), or time (the time limit, a cap, cut the search:
            the plan then depends on the machine's speed).
        time_cut: the time limit cut some part (baselines skipped, CP-SAT stopped on the wall clock,
            or the search) before its budget of work.
    """

    objective: str
    backfill: str
    oracle: bool
    uses_true_outcome: bool
    order: list[str]
    jobs: list[PlannedJob]
    value_s: float
    metrics: Metrics
    result: SimResult
    start_policy: str
    start_value_s: float
    start_metrics: Metrics
    fifo_value_s: float
    fifo_metrics: Metrics
    bound: Bound
    exact: ExactResult | None
    evaluations: int
    seconds: float
    stop_reason: str
    seed: int
    baselines: list[SimResult] = field(default_factory=list)
    time_cut: bool = False
    placer: str = "first-fit"

    @property
    def gain_s(self) -> float:
        """How much the plan improves on the start policy (seconds of the objective)."""
        return self.start_value_s - self.value_s

    @property
    def gain_vs_fifo_s(self) -> float:
        return self.fifo_value_s - self.value_s

    @property
    def bound_ratio(self) -> float:
        """value_s / bound: 1.0 is proven optimal."""
        return self.value_s / self.bound.value_s if self.bound.value_s > 0 else 1.0

    @property
    def is_proven_optimal(self) -> bool:
        return self.stop_reason == "bound"

    def summary(self) -> dict[str, Any]:
        """The flat object `gpuplan plan --json` prints."""
        return {
            "objective": self.objective,
            "backfill": self.backfill,
            "placer": self.placer,
            "oracle": self.oracle,
            "uses_true_outcome": self.uses_true_outcome,
            "value_s": self.value_s,
            "start_policy": self.start_policy,
            "start_value_s": self.start_value_s,
            "fifo_value_s": self.fifo_value_s,
            "gain_s": self.gain_s,
            "gain_vs_fifo_s": self.gain_vs_fifo_s,
            "lower_bound_s": self.bound.value_s,
            "lower_bound_name": self.bound.name,
            "bound_ratio": self.bound_ratio,
            "proven_optimal": self.is_proven_optimal,
            "cpsat": None if self.exact is None else self.exact.summary(),
            "evaluations": self.evaluations,
            "seconds": self.seconds,
            "stop_reason": self.stop_reason,
            "time_cut": self.time_cut,
            "seed": self.seed,
            "metrics": self.metrics.as_dict(),
        }


def plan_order(
    jobs: Sequence[Job],
    cluster: ClusterSpec,
    objective: str = "makespan",
    backfill: str = "easy",
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    seed: int = 0,
    progress: PlanProgressFn | None = None,
    *,
    oracle: bool = False,
    forecast: bool = False,
    max_evals: int | None = DEFAULT_MAX_EVALS,
    cpsat_time_s: float | None = None,
    placer: str = "first-fit",
) -> PlanResult:
    """Search for the order of `jobs` that minimises `objective` on `cluster` under `backfill`.

    Args:
        jobs: the trace (unique ids; true durations unless `forecast`).
        cluster: where it runs.
        objective: makespan, mean-jct (mean end - submit) or weighted (GPU-weighted mean JCT).
        backfill: the backfill mode the plan is applied with (none applies the order strictly).
        time_limit_s: wall-clock cap for everything (baselines, CP-SAT, search); with `max_evals` it
            only cuts a search that would run longer, and the result says so (`time_cut`).
        seed: the search's (and CP-SAT's) random seed.
        progress: called now and then with (share of the budget used, what is running).
        oracle: the scheduler's decisions (backfill reservations) see true durations.
        forecast: replace every duration by its estimate (est_duration_s, else requested_s) first:
            the plan is then a forecast, not a what-if on the true outcome.
        max_evals: stop the search after this many simulations (default DEFAULT_MAX_EVALS): with the
            time limit not reached, the same trace, options and seed give the same plan on any machine
            (every baseline runs, CP-SAT runs in its deterministic mode). None: search until the time
            limit (the result then depends on the machine's speed).
        placer: the placer spec (a registered name, parameters if any: fgd, best-fit, fgd:step=0.1) every
            simulation uses, baselines and the plan's run included; each run starts a fresh placer, so
            one that learns the workload (fgd) learns it from that run alone. The lower bounds hold for
            every placer.
        cpsat_time_s: CP-SAT's budget (0: none): with `max_evals`, its deterministic time (units of
            about a second on a fast machine); without, wall seconds. None: on traces of at most
            MAX_JOBS jobs, CPSAT_DETERMINISTIC_S for the makespan and a tenth of it for the other
            objectives (without `max_evals`: a quarter of the time limit up to 10 s, a tenth up to 3 s).

    Raises:
        GpuplanError: an unknown objective, backfill mode or placer, duplicate job ids, a job without
            a duration, or a job that never fits.
    """
    t_start = time.perf_counter()
    deadline = t_start + time_limit_s
    objective = check_objective(objective)
    placer = get_placer(placer).spec  # an unknown name fails before any simulation
    jobs = _prepared(jobs, forecast)
    ev = Evaluator(jobs, cluster, backfill, placer, oracle=oracle)
    ticker = _Ticker(progress, t_start, time_limit_s, max_evals)
    # bounded by evaluations, every baseline runs unless the cap is reached; by time, half of it
    stop_at = deadline if max_evals is not None else t_start + time_limit_s / 2
    baselines, baselines_cut = _baselines(jobs, cluster, ev.backfill.name, placer, oracle, stop_at, ticker)
    index = {j.id: i for i, j in enumerate(jobs)}
    # ties on the objective go to the lower mean JCT, as `simulate` ranks runs (then the label)
    scored = sorted(
        ((ev.value(objective, _ends(r, index)), r.label, r) for r in baselines),
        key=lambda t: (round(t[0], 6), t[2].metrics.mean_jct_s, t[1]),
    )
    start_value, _, start = scored[0]
    fifo = next(r for r in baselines if r.policy == "fifo" and r.backfill == "none")
    candidates = [_start_order(r, index) for _, _, r in scored]
    wall_left_s = max(deadline - time.perf_counter(), 0.01)
    exact = _run_cpsat(
        jobs, cluster, objective, start, cpsat_time_s, time_limit_s, seed, max_evals, ticker, wall_left_s
    )
    cpsat_cut = exact is not None and max_evals is not None and exact.seconds >= 0.98 * wall_left_s
    if exact is not None and exact.start_s:
        candidates.insert(0, [index[jid] for jid in exact.order()])
    bound = combine(simple_bound(jobs, cluster, objective), exact)
    target = _target(bound.value_s, jobs, objective)
    search = _Search(ev, objective, target, random.Random(seed), ticker)
    order, reason = search.run(candidates, deadline, max_evals)
    time_cut = max_evals is not None and (baselines_cut or cpsat_cut or reason == "time")
    if time_cut and reason != "bound":
        reason = "time"
    ticker("simulating the plan", force=True)
    plan_ids = [jobs[i].id for i in order]
    result = _simulate(jobs, cluster, FixedOrder(plan_ids, name="plan"), backfill, placer, oracle)
    value = ev.value(objective, _ends(result, index))
    return PlanResult(
        objective=objective, backfill=result.backfill, oracle=oracle, uses_true_outcome=not forecast,
        order=plan_ids, jobs=_planned(result, plan_ids, index, jobs), value_s=value, metrics=result.metrics,
        result=result, start_policy=start.label, start_value_s=start_value, start_metrics=start.metrics,
        fifo_value_s=ev.value(objective, _ends(fifo, index)), fifo_metrics=fifo.metrics, bound=bound,
        exact=exact, evaluations=ev.count, seconds=time.perf_counter() - t_start,
        stop_reason=_stop_reason(value, bound.value_s, target, reason), seed=seed, baselines=baselines,
        time_cut=time_cut, placer=placer,
    )  # fmt: skip


def _prepared(jobs: Sequence[Job], forecast: bool) -> list[Job]:
    if not jobs:
        raise GpuplanError("no jobs to plan: the trace is empty")
    seen: set[str] = set()
    for j in jobs:
        if j.id in seen:
            raise GpuplanError(
                f"job id {j.id!r} appears twice in the trace; a plan names jobs by id: make ids unique"
            )
        seen.add(j.id)
    if not forecast:
        return list(jobs)
    unknown = [j.id for j in jobs if j.planning_duration_s(False) is None]
    if unknown:
        raise GpuplanError(
            f"{len(unknown)} job(s) have neither est_duration_s nor requested_s (first: {unknown[0]!r}); "
            "a forecast needs an estimate for every job"
        )
    return [dataclasses.replace(j, duration_s=j.planning_duration_s(False)) for j in jobs]


class _Ticker:
    """Reports progress at most every 0.1 s: share of the time or evaluation budget used."""

    def __init__(self, fn: PlanProgressFn | None, t0: float, limit_s: float, max_evals: int | None) -> None:
        self.fn, self.t0, self.limit_s, self.max_evals = fn, t0, max(limit_s, 1e-9), max_evals
        self.last = -1.0
        self.evals = 0

    def __call__(self, what: str, force: bool = False) -> None:
        if self.fn is None:
            return
        now = time.perf_counter()
        if not force and now - self.last < 0.1:
            return
        self.last = now
        share = (now - self.t0) / self.limit_s
        if self.max_evals:
            share = max(share, self.evals / self.max_evals)
        self.fn(min(share, 1.0), what)


def _simulate(
    jobs: Sequence[Job], cluster: ClusterSpec, policy: Any, backfill: str, placer: str, oracle: bool
) -> SimResult:
    from gpuplan.sim.engine import simulate

    return simulate(jobs, cluster, policy, backfill, placer, oracle=oracle)


def _baselines(
    jobs: Sequence[Job],
    cluster: ClusterSpec,
    backfill: str,
    placer: str,
    oracle: bool,
    stop_at: float,
    ticker: _Ticker,
) -> tuple[list[SimResult], bool]:
    """fifo+none, then every policy under the plan's backfill mode, then under the other modes; later
    ones are skipped once `stop_at` has passed, so a huge trace still gets a search. Returns the runs
    and whether some were skipped."""
    modes = [b for b in backfill_names() if b != "conservative" or len(jobs) <= CONSERVATIVE_MAX_JOBS]
    modes.sort(key=lambda b: (b != backfill, b != "none"))
    pairs = [("fifo", "none")] + [(p, b) for b in modes for p in policy_names() if (p, b) != ("fifo", "none")]
    out: list[SimResult] = []
    for p, b in pairs:
        if out and time.perf_counter() >= stop_at:
            return out, True
        ticker(f"simulating {p}+{b}")
        out.append(_simulate(jobs, cluster, p, b, placer, oracle))
    return out, False


def _ends(result: SimResult, index: dict[str, int]) -> list[float]:
    ends = [0.0] * len(index)
    for r in result.records:
        ends[index[r.job_id]] = r.end_s
    return ends


def _start_order(result: SimResult, index: dict[str, int]) -> list[int]:
    """Trace indices by start in a run (ties keep trace order)."""
    return [index[r.job_id] for r in sorted(result.records, key=lambda r: (r.start_s, index[r.job_id]))]


def _run_cpsat(
    jobs, cluster, objective, start, cpsat_time_s, limit_s, seed, max_evals, ticker, wall_left_s
) -> ExactResult | None:  # type: ignore[no-untyped-def]
    if cpsat_time_s is None:  # its bound rarely helps a mean JCT (the busy-time bound is stronger)
        if max_evals is not None:
            share = CPSAT_DETERMINISTIC_S if objective == "makespan" else CPSAT_DETERMINISTIC_S / 10
        else:
            share = min(limit_s / 4, 10.0) if objective == "makespan" else min(limit_s / 10, 3.0)
        cpsat_time_s = share if len(jobs) <= MAX_JOBS else 0.0
    if cpsat_time_s <= 0:
        return None
    ticker("CP-SAT", force=True)
    makespan = objective == "makespan"
    # no solution hint: on the article's days a hint from the best policy steers CP-SAT's first
    # solutions towards it and ends 1-2 % worse than its own first LP-guided solution
    return solve_exact(
        jobs, cluster, objective, cpsat_time_s, seed=seed,
        lower_bound_s=simple_bound(jobs, cluster, objective).value_s if makespan else None,
        upper_bound_s=start.metrics.makespan_s if makespan else None, deterministic=max_evals is not None,
        wall_limit_s=wall_left_s if max_evals is not None else None,
    )  # fmt: skip


def _stop_reason(value_s: float, bound_s: float, target_s: float, reason: str) -> str:
    """'bound' (proven optimal) only for a plan the bound covers: at or above the bound, within the target.

    A plan below its own lower bound means the bound does not hold for it: no optimality is claimed."""
    if bound_s - 1e-6 <= value_s <= target_s:
        return "bound"
    return reason if reason != "bound" else "bound-not-covering"


def _target(bound_s: float, jobs: Sequence[Job], objective: str) -> float:
    """The objective value that proves optimality: the bound, rounded up to whole seconds for a makespan
    of whole-second data (every event then falls on a whole second)."""
    if objective != "makespan":
        return bound_s
    t0 = min(j.submit_s for j in jobs)
    whole = all(float(x).is_integer() for j in jobs for x in (j.submit_s - t0, j.duration_s or 0.0))
    return float(math.ceil(bound_s - 1e-6)) if whole else bound_s


def _planned(
    result: SimResult, order: list[str], index: dict[str, int], jobs: Sequence[Job]
) -> list[PlannedJob]:
    by_id = {r.job_id: r for r in result.records}
    out = []
    for pos, jid in enumerate(order):
        r = by_id[jid]
        out.append(PlannedJob(jid, pos, r.submit_s, r.start_s, r.end_s, tuple(r.gpus)))
    return out


class _Search:
    """Late-acceptance hill climbing over orders (Burke & Bykov): accept a candidate that is no worse
    than the current order or than the current order `_HISTORY` steps ago."""

    def __init__(
        self, ev: Evaluator, objective: str, target: float, rng: random.Random, ticker: _Ticker
    ) -> None:
        self.ev, self.objective, self.target, self.rng, self.ticker = ev, objective, target, rng, ticker

    def score(self, order: list[int]) -> tuple[tuple[float, float], list[float]]:
        """(objective, tie-break) of an order, and its ends. Ties on the makespan are broken by the
        GPU-seconds still running after the target (the work to squeeze in); on a mean JCT by the makespan."""
        ends = self.ev.ends(order)
        self.ticker.evals = self.ev.count
        value = self.ev.value(self.objective, ends)
        if self.objective != "makespan":
            return (value, max(ends)), ends
        t, dur, gpus = self.target, self.ev.dur, self.ev.gpus
        late = sum(g * (e - max(e - d, t)) for e, d, g in zip(ends, dur, gpus) if e > t)
        return (value, late), ends

    def run(
        self, candidates: list[list[int]], deadline: float, max_evals: int | None
    ) -> tuple[list[int], str]:
        best, best_key, best_ends = candidates[0], (math.inf, math.inf), []
        for order in candidates:
            key, ends = self.score(order)
            if key < best_key:
                best, best_key, best_ends = order, key, ends
        cur, cur_key, cur_ends = best, best_key, best_ends
        history = [cur_key] * _HISTORY
        step = 0
        while True:
            if best_key[0] <= self.target:
                return best, "bound"
            if max_evals is not None and self.ev.count >= max_evals:
                return best, "evaluations"
            if time.perf_counter() >= deadline:
                return best, "time"
            cand = self._move(cur, cur_ends)
            key, ends = self.score(cand)
            slot = step % _HISTORY
            if key <= cur_key or key <= history[slot]:
                cur, cur_key, cur_ends = cand, key, ends
                if key < best_key:
                    best, best_key = cand, key
            history[slot] = cur_key
            step += 1
            self.ticker("searching orders")

    def _move(self, order: list[int], ends: list[float]) -> list[int]:
        rng, n = self.rng, len(order)
        out = list(order)
        if n < 2:
            return out
        r = rng.random()
        if self.objective == "makespan" and r < 0.4:
            late = [p for p, i in enumerate(order) if ends[i] > self.target]
            if late:
                src = late[rng.randrange(len(late))]
                dst = rng.randrange(src + 1)
                out.insert(dst, out.pop(src))
                return out
        a, b = rng.randrange(n), rng.randrange(n)
        if r < 0.7:
            out.insert(b, out.pop(a))
        else:
            out[a], out[b] = out[b], out[a]
        return out

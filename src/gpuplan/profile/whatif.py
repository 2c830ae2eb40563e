"""The what-if of an audit: the history's jobs replayed under FIFO and under every built-in policy
(EASY backfill, first-fit), and what the best one would have saved. Definitions: docs/audit.md.

Only jobs with a duration are replayed; the others (never started, still running, censored) are
excluded and counted. A time budget keeps the audit quick on big traces: FIFO always runs first, the
other policies run in a fixed order while the budget allows, and the result lists what was skipped.
A policy that orders the jobs exactly as one already simulated (several do when no job has an
estimate) gives the same schedule, so it is not simulated again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuplan.core.policies import policy_names
from gpuplan.errors import ScheduleError, UnknownNameError
from gpuplan.model import ClusterSpec, Job, NodeSpec
from gpuplan.sim.engine import queue_order, simulate
from gpuplan.sim.fits import fits_on
from gpuplan.sim.result import SimResult

__all__ = ["BACKFILL", "POLICY_ORDER", "ProgressFn", "WhatIf", "what_if"]

BACKFILL = "easy"
# FIFO is the baseline; the rest in the order they are worth trying when time is short.
POLICY_ORDER: tuple[str, ...] = (
    "fifo",
    "article",
    "sjf",
    "gpu-time",
    "ljf",
    "large-gpus-first",
    "small-gpus-first",
    "mem-desc",
)
ProgressFn = Callable[[int, str], None]  # (jobs replayed since the last call, what is running)


class _OverBudget(Exception):
    """Raised inside a simulation's progress callback to stop a run past the deadline."""


@dataclass(slots=True)
class WhatIf:
    """The replay of the history under FIFO and the best built-in policy.

    Attributes:
        jobs: jobs replayed.
        excluded_no_duration: jobs left out because their duration is unknown.
        excluded_never_fit: jobs left out because they can never start on the cluster.
        oracle: the policies saw the true durations.
        runs: the finished runs, best first (makespan, then mean JCT, FIFO before others, then label).
        skipped: policy -> why it was not simulated (time budget).
        same_as: policy -> the policy whose run it shares because it orders the jobs the same way.
        fifo: the FIFO run (the baseline), None when it did not finish.
        best: the best run, None when no run finished or none may be called best
            (`no_winner`: nobody waited in any run, or every run gives the same figures).
        time_saved_s: FIFO makespan - best makespan.
        gpu_hours_freed: time_saved_s x cluster GPUs / 3600: GPU-hours the cluster would have had
            free for other work.
        budget_s: the time budget (None: no limit).
        elapsed_s: time spent simulating.
        error: why there is no replay at all, if so.
        notes: assumptions and warnings, for the reader of the audit.
    """

    jobs: int
    excluded_no_duration: int
    excluded_never_fit: int
    cluster_gpus: int
    oracle: bool = False
    runs: list[SimResult] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    same_as: dict[str, str] = field(default_factory=dict)
    budget_s: float | None = None
    elapsed_s: float = 0.0
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def fifo(self) -> SimResult | None:
        return next((r for r in self.runs if r.policy == "fifo"), None)

    @property
    def best(self) -> SimResult | None:
        from gpuplan.sim.compare import best_run

        return best_run(self.runs, ranked=True) if self.runs else None

    @property
    def no_winner(self) -> str | None:
        """Why no run is called best although runs finished (sim.compare.no_winner_reason)."""
        from gpuplan.sim.compare import no_winner_reason

        return no_winner_reason(self.runs) if self.runs else None

    @property
    def time_saved_s(self) -> float | None:
        if self.fifo is None or self.best is None:
            return None
        return self.fifo.metrics.makespan_s - self.best.metrics.makespan_s

    @property
    def gpu_hours_freed(self) -> float | None:
        saved = self.time_saved_s
        return None if saved is None else saved * self.cluster_gpus / 3600.0

    def as_dict(self) -> dict[str, Any]:
        fifo, best = self.fifo, self.best
        return {
            "jobs": self.jobs,
            "excluded_no_duration": self.excluded_no_duration,
            "excluded_never_fit": self.excluded_never_fit,
            "backfill": BACKFILL,
            "oracle": self.oracle,
            "policies_simulated": [r.policy for r in self.runs if r.policy not in self.same_as],
            "policies_skipped": dict(self.skipped),
            "same_schedule_as": dict(self.same_as),
            "budget_s": self.budget_s,
            "elapsed_s": self.elapsed_s,
            "runs": [_finite_summary(r) for r in self.runs],
            "fifo": None if fifo is None else fifo.label,
            "best": None if best is None else best.label,
            "no_winner": self.no_winner,
            "time_saved_s": self.time_saved_s,
            "gpu_hours_freed": self.gpu_hours_freed,
            "error": self.error,
            "notes": list(self.notes),
        }


def _finite_summary(r: SimResult) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.summary().items()}


def what_if(
    jobs: Sequence[Job],
    cluster: ClusterSpec,
    *,
    policies: Sequence[str] = POLICY_ORDER,
    oracle: bool = False,
    budget_s: float | None = None,
    progress: ProgressFn | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> WhatIf:
    """Replay the jobs that have a duration under each policy with EASY backfill and first-fit.

    Without `oracle`, policies see est_duration_s / requested_s, as a real scheduler would; with it
    they see the true durations (an optimistic replay; every output says so).

    Args:
        jobs: the history.
        cluster: the cluster to replay on.
        policies: policy names, simulated in this order; FIFO is always simulated first.
        oracle: let policies see the true durations.

    Raises:
        UnknownNameError: an unknown name in `policies`.
        budget_s: seconds of simulation allowed (None: no limit). A run that would not fit, judged by
            the slowest run so far, is skipped; a run past the deadline is stopped and skipped.
        progress: called with (jobs replayed since the last call, description) during the runs.
        clock: the time source (tests inject a fake one).
    """
    replay = [j for j in jobs if j.duration_s is not None]
    fits = fits_on(cluster, oracle)
    runnable = [j for j in replay if fits(j)]
    result = WhatIf(len(runnable), len(jobs) - len(replay), len(replay) - len(runnable), cluster.total_gpus)
    result.budget_s, result.oracle = budget_s, oracle
    result.notes += _exclusion_notes(result, cluster)
    if not runnable:
        result.error = "no job has both a duration and a fit on the cluster: nothing to replay"
        return result
    sim_cluster = _count_only(runnable, cluster)
    if sim_cluster is not cluster:
        result.notes.append(
            "replayed on one node of all the GPUs: every job needs 1 GPU or may span nodes on an "
            "exclusive cluster of one GPU model, so only free-GPU counts matter (the schedule is the same)"
        )
    _run_all(result, runnable, sim_cluster, _ordered(policies), budget_s, progress, clock)
    result.runs.sort(key=lambda r: (r.metrics.makespan_s, r.metrics.mean_jct_s, r.policy != "fifo", r.label))
    if sim_cluster is cluster:  # on the one node of all GPUs fragmentation means nothing
        from gpuplan.sim.fragseries import attach_fragmentation

        attach_fragmentation(result.runs, runnable)
    result.notes += _same_notes(result.same_as)
    if oracle:
        result.notes.append("ORACLE replay: policies saw the true durations, which no real scheduler knows")
    result.notes += sorted(
        {w.replace(" or use --oracle", " or pass --oracle") for r in result.runs for w in r.warnings}
    )
    return result


def _ordered(policies: Sequence[str]) -> list[str]:
    """FIFO first, then `policies` in order, each once.

    Raises:
        UnknownNameError: a name that is not a registered policy; the message lists the valid ones.
    """
    valid = policy_names()
    for p in policies:
        if p not in valid:
            raise UnknownNameError("policy", p, valid)
    return list(dict.fromkeys(["fifo", *policies]))


def _run_all(
    result: WhatIf,
    jobs: list[Job],
    cluster: ClusterSpec,
    policies: list[str],
    budget_s: float | None,
    progress: ProgressFn | None,
    clock: Callable[[], float],
) -> None:
    t0 = clock()
    deadline = None if budget_s is None else t0 + budget_s
    slowest = 0.0
    by_order: dict[bytes, SimResult] = {}
    for policy in policies:
        order = queue_order(jobs, policy, result.oracle)
        if order in by_order:
            twin = by_order[order]
            result.runs.append(replace(twin, policy=policy))
            result.same_as[policy] = twin.policy
            continue
        t_run = clock()
        if deadline is not None and policy != "fifo" and t_run + slowest > deadline:
            result.skipped[policy] = f"time budget: the slowest run took {slowest:.1f} s"
            continue
        try:
            run = _run(jobs, cluster, policy, result.oracle, deadline, progress, clock)
            result.runs.append(run)
            by_order[order] = run
        except _OverBudget:
            result.skipped[policy] = f"time budget: stopped after {clock() - t_run:.1f} s"
        except ScheduleError as e:
            result.skipped[policy] = f"cannot replay: {e}"
        slowest = max(slowest, clock() - t_run)
    result.elapsed_s = clock() - t0
    over = [p for p, why in result.skipped.items() if why.startswith("time budget")]
    if over:
        result.notes.append(
            f"not simulated within the {budget_s:g} s budget: {', '.join(over)}; the best is the best of "
            "the others (pass --sim-budget 0, or run `gpuplan simulate -p all`, for every policy)"
        )
    if result.fifo is None:
        why = result.skipped.get("fifo", "it did not finish")
        result.error = f"no what-if: the FIFO replay did not complete ({why})"


def _same_notes(same_as: dict[str, str]) -> list[str]:
    groups: dict[str, list[str]] = {}
    for policy, twin in same_as.items():
        groups.setdefault(twin, []).append(policy)
    return [
        f"{', '.join(names)} order the jobs exactly as {twin} here (same schedule, simulated once)"
        for twin, names in groups.items()
    ]


def _run(
    jobs: list[Job],
    cluster: ClusterSpec,
    policy: str,
    oracle: bool,
    deadline: float | None,
    progress: ProgressFn | None,
    clock: Callable[[], float],
) -> SimResult:
    reported = 0
    label = f"simulating {policy}+{BACKFILL}"

    def tick(done: int, total: int) -> None:
        nonlocal reported
        if progress is not None:
            progress(done - reported, label)
        reported = done
        if deadline is not None and clock() > deadline:
            raise _OverBudget

    run = simulate(jobs, cluster, policy, BACKFILL, "first-fit", oracle=oracle, progress=tick)
    if progress is not None:
        progress(len(jobs) - reported, label)
    return run


def _count_only(jobs: Sequence[Job], cluster: ClusterSpec) -> ClusterSpec:
    """One node holding every GPU when that gives the same schedule, else the cluster itself.

    On an exclusive cluster of one GPU memory size, a job of 1 GPU or one that may span nodes fits
    exactly when enough GPUs are free in all, wherever they are: node boundaries change no start
    time, and the simulator is much faster on one node than on many (a 128-node SWF machine).
    """
    if cluster.sharing or len(cluster.nodes) == 1 or cluster.has_host_resources:
        return cluster  # (CPU and host memory are per node: node boundaries matter)
    if len({n.gpu.mem_gb for n in cluster.nodes}) != 1:
        return cluster
    if not all(j.gpus == 1 or j.may_span_nodes for j in jobs):
        return cluster
    node = NodeSpec("all", cluster.total_gpus, cluster.nodes[0].gpu)
    return ClusterSpec(cluster.name, (node,), sharing=False, max_jobs_per_gpu=cluster.max_jobs_per_gpu)


def _exclusion_notes(result: WhatIf, cluster: ClusterSpec) -> list[str]:
    notes = []
    if result.excluded_no_duration:
        notes.append(
            f"{result.excluded_no_duration} job(s) without a duration (never started, still running or "
            "censored) are not replayed"
        )
    # jobs that never fit are counted in excluded_never_fit; the CLI warns about them on stderr
    return notes

"""Simulate one trace under every policy x backfill pair (the comparison `simulate`, `demo`, the
dashboard's what-if and `audit` all run)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuplan.core.preemption import PreemptionCost
    from gpuplan.model import ClusterSpec, Job
    from gpuplan.sim.result import SimResult

__all__ = ["rank_key", "run_matrix"]


def rank_key(r: SimResult) -> tuple[float, float, str]:
    """Best first: makespan, then (for equal makespans, common on traces with arrivals) mean JCT."""
    return (round(r.metrics.makespan_s, 6), r.metrics.mean_jct_s, r.label)


def run_matrix(
    jobs: Sequence[Job],
    cluster: ClusterSpec,
    policies: Sequence[str],
    backfills: Sequence[str],
    placer: str = "first-fit",
    oracle: bool = False,
    show_progress: bool = True,
    estimates: str = "trace",
    preemption: PreemptionCost | None = None,
) -> list[SimResult]:
    """Simulate every policy x backfill pair; results sorted by makespan, then mean JCT.

    A preemptive policy (las, tiresias, gittins) ignores the backfill mode: it runs once, as +none.
    `estimates` "history": every run learns its estimates online from its own finished jobs."""
    from gpuplan.core.estimates import OnlineEstimator
    from gpuplan.core.policies import is_preemptive, policy_class
    from gpuplan.progress import LazyProgress
    from gpuplan.sim.bounds import lower_bound
    from gpuplan.sim.engine import as_policy, queue_order, simulate

    results = []
    bound_s = lower_bound(jobs, cluster).value_s  # the same for every run: computed once
    # Policies that order these jobs the same way make the same schedule with each backfill mode
    # (e.g. sjf and fifo when no job has an estimate): simulate it once (static keys only).
    preemptive = {p for p in policies if is_preemptive(p)}
    static = estimates != "history"
    # fairshare's ranks move with the users' usage: never a twin of a static order
    ranked = {p for p in policies if policy_class(p).usage_ranked}
    orders = (
        {p: queue_order(jobs, p, oracle) for p in policies if p not in preemptive and p not in ranked}
        if static
        else {}
    )
    simulated: dict[tuple[bytes, str], SimResult] = {}
    pairs = [(p, b) for p in policies if p not in preemptive for b in backfills]
    pairs += [(p, "none") for p in policies if p in preemptive]
    n = len(jobs)
    with LazyProgress(len(pairs) * n, "simulating", enabled=show_progress) as bar:
        for i, (p, b) in enumerate(pairs):
            label = f"simulating {p}+{b} ({i + 1}/{len(pairs)})"

            def tick(done: int, total: int, base: int = i * n, label: str = label) -> None:
                bar.set(base + done, label)

            twin = simulated.get((orders[p], b)) if p in orders else None
            if twin is not None:
                results.append(as_policy(twin, jobs, p, oracle))
                bar.set((i + 1) * n, label)
                continue
            est = OnlineEstimator() if estimates == "history" else None
            results.append(
                simulate(
                    jobs,
                    cluster,
                    p,
                    b,
                    placer,
                    oracle=oracle,
                    progress=tick,
                    estimator=est,
                    preemption=preemption,
                    lower_bound_s=bound_s,
                )
            )
            if p in orders:
                simulated[(orders[p], b)] = results[-1]
            bar.set((i + 1) * n, label)
    results.sort(key=rank_key)
    return results

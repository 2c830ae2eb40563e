"""Simulate one trace under every policy x backfill pair (the comparison `simulate`, `demo`, the
dashboard's what-if and `audit` all run)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuplan.core.preemption import PreemptionCost
    from gpuplan.model import ClusterSpec, Job
    from gpuplan.progress import LazyProgress
    from gpuplan.sim.result import SimResult
    from gpuplan.sim.sweep import Run

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
    workers: int = 1,
    dask: str | None = None,
) -> list[SimResult]:
    """Simulate every policy x backfill pair; results sorted by makespan, then mean JCT.

    `workers` > 1: on that many local processes; `dask`: on the Dask scheduler at that address
    (sim/sweep.py); the results are the same wherever the runs ran.

    A preemptive policy (las, tiresias, gittins) ignores the backfill mode: it runs once, as +none.
    `estimates` "history": every run learns its estimates online from its own finished jobs."""
    from gpuplan.core.policies import is_preemptive, policy_class
    from gpuplan.progress import LazyProgress
    from gpuplan.sim.bounds import lower_bound
    from gpuplan.sim.engine import as_policy, queue_order
    from gpuplan.sim.sweep import Run, run_all

    bound_s = lower_bound(jobs, cluster).value_s  # the same for every run: computed once
    # Policies that order these jobs the same way make the same schedule with each backfill mode
    # (e.g. sjf and fifo when no job has an estimate): simulate it once (static keys only).
    preemptive = {p for p in policies if is_preemptive(p)}
    static = estimates != "history"
    # fairshare's ranks move with the users' usage: never a twin of a static order
    ranked = {p for p in policies if policy_class(p).usage_ranked}
    ordered = [p for p in policies if p not in preemptive and p not in ranked] if static else []
    # a twin needs two of these pairs with one backfill mode: two such policies, or a mode given twice
    # (one policy's order on a million jobs costs a second or two, for nothing to compare it with)
    if len(ordered) < 2 and len(set(backfills)) == len(backfills):
        ordered = []
    orders = {p: queue_order(jobs, p, oracle) for p in ordered}
    pairs = [(p, b) for p in policies if p not in preemptive for b in backfills]
    pairs += [(p, "none") for p in policies if p in preemptive]
    first: dict[tuple[bytes, str], int] = {}  # (queue order, backfill) -> the pair simulated for it
    twin_of: dict[int, int] = {}
    for i, (p, b) in enumerate(pairs):
        if p in orders:
            twin_of[i] = first.setdefault((orders[p], b), i)
    todo = [i for i in range(len(pairs)) if twin_of.get(i, i) == i]
    runs = [
        Run("trace", pairs[i][0], pairs[i][1], placer, oracle, estimates, preemption, bound_s) for i in todo
    ]
    n = len(jobs)
    with LazyProgress(len(runs) * n, "simulating", enabled=show_progress) as bar:
        if workers == 1 and dask is None:
            done = _in_process(jobs, cluster, runs, bar)
        else:
            done = run_all(
                {"trace": (jobs, cluster)},
                runs,
                workers,
                dask,
                on_done=lambda k: bar.advance(n, f"simulated {runs[k].policy}+{runs[k].backfill}"),
            )
    simulated = dict(zip(todo, done, strict=True))
    results = [
        simulated[i] if twin_of.get(i, i) == i else as_policy(simulated[twin_of[i]], jobs, p, oracle)
        for i, (p, _b) in enumerate(pairs)
    ]
    results.sort(key=rank_key)
    return results


def _in_process(
    jobs: Sequence[Job], cluster: ClusterSpec, runs: list[Run], bar: LazyProgress
) -> list[SimResult]:
    """The runs one after the other in this process, the bar moving with each run's finished jobs."""
    from gpuplan.core.estimates import OnlineEstimator
    from gpuplan.sim.engine import simulate

    out = []
    n = len(jobs)
    for i, run in enumerate(runs):
        label = f"simulating {run.policy}+{run.backfill} ({i + 1}/{len(runs)})"
        base = bar.done

        def tick(done: int, total: int, base: int = base, label: str = label) -> None:
            bar.set(base + done, label)

        out.append(
            simulate(
                jobs,
                cluster,
                run.policy,
                run.backfill,
                run.placer,
                oracle=run.oracle,
                progress=tick,
                estimator=OnlineEstimator() if run.estimates == "history" else None,
                preemption=run.preemption,
                lower_bound_s=run.lower_bound_s,
            )
        )
        bar.set(base + n, label)
    return out

"""Invariants of every schedule, over random small traces and clusters (hypothesis, deterministic).

- the simulator gives the start times of an independent reference scheduler (tests/reference_scheduler.py)
  on one exclusive node with exact estimates, for every policy x backfill x placer;
- no run places more GPUs, memory or jobs on a GPU than the cluster has, and every job gets its GPUs
  on one node unless it may span nodes;
- the plan evaluator (optimize/evaluate.py) gives the simulator's schedule for any order.

Cases come from tests/invariant_cases.py; each property runs a fixed set of examples (derandomized, no
example database) so CI runs the same cases every time. `pytest --hypothesis-show-statistics` prints the
counts and the `event`s each property saw.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from hypothesis import event, given
from hypothesis import strategies as st

from gpuplan.optimize.evaluate import Evaluator
from gpuplan.optimize.order import FixedOrder
from gpuplan.sim.engine import simulate
from gpuplan.sim.result import SimResult
from invariant_cases import (
    BACKFILLS,
    INVARIANTS,
    PLACERS,
    Case,
    any_clusters,
    booked_mem_gb,
    cases,
    exclusive_clusters,
    single_node_exact_cases,
)
from reference_scheduler import reference_starts


def _run(case: Case) -> SimResult:
    return simulate(case.jobs, case.cluster, case.policy, case.backfill, case.placer, oracle=case.oracle)


# ---- the reference scheduler ----------------------------------------------------------------------


@INVARIANTS(400)
@given(case=single_node_exact_cases())
def test_simulator_starts_jobs_when_the_reference_scheduler_does(case: Case) -> None:
    # one drawn trace, every backfill mode and placer (placers cannot matter on one exclusive node)
    for backfill in BACKFILLS:
        want = reference_starts(case.jobs, case.cluster.nodes[0].gpus, case.policy, backfill, case.oracle)
        for placer in PLACERS:
            res = simulate(case.jobs, case.cluster, case.policy, backfill, placer, oracle=case.oracle)
            got = {r.job_id: r.start_s for r in res.records}
            assert got == want, (backfill, placer)
        order = sorted(case.jobs, key=lambda j: (want[j.id], j.id))
        overtaken = any(a.submit_s > b.submit_s for a, b in itertools.pairwise(order))
        event(f"{backfill}: {'some job overtook another' if overtaken else 'submit order'}")


# ---- capacity -------------------------------------------------------------------------------------


def _check_capacity(case: Case, res: SimResult) -> None:
    cluster, oracle = case.cluster, case.oracle
    jobs = {j.id: j for j in case.jobs}
    cap = [n.gpu.mem_gb for n in cluster.nodes for _ in range(n.gpus)]
    node_of = [k for k, n in enumerate(cluster.nodes) for _ in range(n.gpus)]
    max_share = cluster.max_jobs_per_gpu if cluster.sharing else 1
    assert sorted(r.job_id for r in res.records) == sorted(jobs)
    on_gpu: dict[int, list[tuple[float, float, float | None]]] = defaultdict(list)
    for r in res.records:
        job = jobs[r.job_id]
        assert len(set(r.gpus)) == len(r.gpus) == job.gpus, r
        assert all(0 <= g < len(cap) for g in r.gpus), r
        assert job.may_span_nodes or len({node_of[g] for g in r.gpus}) == 1, r
        assert r.submit_s <= r.start_s <= r.end_s, r
        for g in r.gpus:
            on_gpu[g].append((r.start_s, r.end_s, booked_mem_gb(job, oracle)))
    for g, spans in on_gpu.items():
        # at every start, the jobs holding the GPU then; a job that takes no time is checked against the
        # jobs running across its instant only (a job starting at that instant may come a pass later)
        for s, e, mem in spans:
            if s < e:
                holding = [x for x in spans if x[0] <= s < x[1]]
            else:
                holding = [x for x in spans if x[0] < s < x[1]] + [(s, e, mem)]
            assert len(holding) <= max_share, (g, s, holding)
            if len(holding) > 1:
                assert all(m is not None for _, _, m in holding), (g, s, holding)  # unknown: whole GPU
                assert sum(m for _, _, m in holding if m is not None) <= cap[g], (g, s, holding)
            elif mem is not None:
                assert mem <= cap[g], (g, s, mem)
            event("a GPU shared" if len(holding) > 1 else "GPUs not shared")


@INVARIANTS(500)
@given(case=cases())
def test_no_run_places_more_than_the_cluster_has(case: Case) -> None:
    res = _run(case)
    _check_capacity(case, res)
    event(f"sharing={case.cluster.sharing}, spanning jobs={any(j.may_span_nodes for j in case.jobs)}")


# ---- the plan evaluator ---------------------------------------------------------------------------


_FAST = cases(
    clusters=exclusive_clusters(), backfills=("none", "easy"), placers=("first-fit",), spanning=False
)
_ANY = cases(clusters=any_clusters(), placers=PLACERS)


@INVARIANTS(300)
@given(case=st.one_of(_FAST, _ANY), data=st.data())
def test_plan_evaluator_gives_the_simulators_schedule(case: Case, data: st.DataObject) -> None:
    mirrored = (
        not case.cluster.sharing
        and case.placer == "first-fit"
        and not any(j.may_span_nodes for j in case.jobs)
    )
    n = len(case.jobs)
    orders = [list(range(n)), *(data.draw(st.permutations(range(n))) for _ in range(3))]
    for backfill in ("none", "easy") if mirrored else (case.backfill,):
        ev = Evaluator(case.jobs, case.cluster, backfill, case.placer, oracle=case.oracle)
        assert ev.path == "simulate"  # no copy of the rules: the core's own scheduler scores a plan
        event(f"evaluator path: {ev.path}")
        for order in orders:
            ends = ev.ends(order)
            ids = [case.jobs[i].id for i in order]
            res = simulate(
                case.jobs, case.cluster, FixedOrder(ids), backfill, case.placer, oracle=case.oracle
            )  # fmt: skip
            by_id = {r.job_id: r.end_s for r in res.records}
            assert ends == [by_id[j.id] for j in case.jobs], (backfill, ids)


# ---- the lower bound ------------------------------------------------------------------------------


@INVARIANTS(500)
@given(case=cases())
def test_makespan_is_never_below_the_reported_lower_bound(case: Case) -> None:
    m = _run(case).metrics
    assert m.makespan_s >= m.lower_bound_s, (m.makespan_s, m.lower_bound_s)  # no tolerance: a bound holds
    event("bound met exactly" if m.makespan_s == m.lower_bound_s else "bound below the makespan")

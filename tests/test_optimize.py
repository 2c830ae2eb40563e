"""Plans: FixedOrder, the fast evaluator, CP-SAT and the search, on small seeded random traces.

Every bound must stay below every schedule the simulator or CP-SAT can produce; the search must never
beat a proven optimum; budgeted runs must be reproducible.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from gpuplan.core.backfill import backfill_names
from gpuplan.core.policies import policy_names
from gpuplan.errors import GpuplanError, InputError, UnknownNameError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.optimize import (
    Evaluator,
    FixedOrder,
    objective_value,
    plan_order,
    plan_to_dict,
    read_plan,
    solve_exact,
    strongest_bound,
    write_plan,
)
from gpuplan.optimize.cpsat import simple_bound
from gpuplan.sim.engine import simulate

A100 = GpuSpec("A100-80GB", 80.0)
A40 = GpuSpec("A40-48GB", 48.0)


def _cluster(*sizes: int, gpu: GpuSpec = A100, sharing: bool = False, mixed: bool = False) -> ClusterSpec:
    nodes = tuple(NodeSpec(f"n{i}", g, A40 if mixed and i % 2 else gpu) for i, g in enumerate(sizes))
    return ClusterSpec("test", nodes, sharing=sharing)


def _trace(
    seed: int, n: int, max_gpus: int, *, releases: bool = False, fractional: bool = False
) -> list[Job]:
    """n jobs of 1..max_gpus GPUs; estimates off by up to 40 %; optional arrivals and fractional seconds."""
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for i in range(n):
        d = rng.randint(60, 3600) + (rng.random() if fractional else 0.0)
        if releases:
            t += rng.randint(0, 600) + (rng.random() if fractional else 0.0)
        mem = rng.choice([10.0, 30.0, 45.0, 60.0, 75.0])
        jobs.append(
            Job(
                f"j{i:02d}",
                t,
                rng.choice([g for g in (1, 1, 2, 2, 4, 8) if g <= max_gpus]),
                mem_gb=mem,
                duration_s=d,
                est_duration_s=round(d * rng.uniform(0.6, 1.4)),
                est_mem_gb=mem,
                gpu_util_pct=rng.uniform(20, 95),
            )
        )
    return jobs


def _ends(result, jobs):  # type: ignore[no-untyped-def]
    index = {j.id: i for i, j in enumerate(jobs)}
    ends = [0.0] * len(jobs)
    for r in result.records:
        ends[index[r.job_id]] = r.end_s
    return ends


# ---- FixedOrder ----------------------------------------------------------------------------------


def test_fixed_order_reproduces_a_given_order_without_backfill() -> None:
    jobs = _trace(1, 12, 8)
    order = [j.id for j in reversed(jobs)]
    result = simulate(jobs, _cluster(8), FixedOrder(order), "none")
    starts = {r.job_id: r.start_s for r in result.records}
    # strict order, all released at 0: each job starts no earlier than the one before it
    assert all(starts[a] <= starts[b] for a, b in itertools.pairwise(order))
    # and replaying a run's start order reproduces that run exactly
    fifo = simulate(jobs, _cluster(8), "fifo", "none")
    replay = simulate(jobs, _cluster(8), FixedOrder([r.job_id for r in fifo.records]), "none")
    assert [(r.job_id, r.start_s, r.gpus) for r in replay.records] == [
        (r.job_id, r.start_s, r.gpus) for r in fifo.records
    ]


def test_fixed_order_puts_unlisted_jobs_last_fifo_and_rejects_duplicates() -> None:
    jobs = [Job(f"j{i}", 0.0, 8, duration_s=10.0) for i in range(4)]
    result = simulate(jobs, _cluster(8), FixedOrder(["j2", "j0"]), "none")
    assert [r.job_id for r in result.records] == ["j2", "j0", "j1", "j3"]
    with pytest.raises(GpuplanError, match="'j1' appears twice"):
        FixedOrder(["j1", "j2", "j1"])


# ---- the evaluator is the simulator ---------------------------------------------------------------


@pytest.mark.parametrize("backfill", ["none", "easy", "conservative"])
@pytest.mark.parametrize(
    ("sizes", "mixed", "releases"), [((8,), False, False), ((4, 4, 8), True, True), ((8, 8), False, True)]
)
def test_evaluator_gives_the_simulators_ends(backfill: str, sizes: tuple[int, ...], mixed: bool, releases: bool) -> None:  # fmt: skip
    jobs = _trace(7, 30, 4 if 4 in sizes else 8, releases=releases, fractional=True)
    for j in jobs[::5]:
        j.est_mem_gb = min(
            (j.mem_gb or 0) + 15.0, 80.0
        )  # the simulator books the larger of estimate and truth
    cluster = _cluster(*sizes, mixed=mixed)
    ev = Evaluator(jobs, cluster, backfill)
    assert ev.path == "simulate"
    rng = random.Random(3)
    for _ in range(4):
        order = list(range(len(jobs)))
        rng.shuffle(order)
        expected = _ends(simulate(jobs, cluster, FixedOrder([jobs[i].id for i in order]), backfill), jobs)
        assert ev.ends(order) == expected


# ---- bounds hold for every schedule ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("seed", "sizes", "releases", "fractional"),
    [(1, (8,), False, False), (2, (8,), True, True), (3, (4, 4), True, False), (4, (4, 8), False, True)],
)
def test_every_bound_is_below_every_feasible_schedule(
    seed: int, sizes: tuple[int, ...], releases: bool, fractional: bool
) -> None:
    jobs = _trace(seed, 10, min(sizes), releases=releases, fractional=fractional)
    cluster = _cluster(*sizes)
    runs = [simulate(jobs, cluster, p, b) for p in policy_names() for b in backfill_names()]
    plan = plan_order(jobs, cluster, "makespan", "easy", 20, seed, max_evals=150, cpsat_time_s=0.3)
    runs.append(plan.result)
    exact = plan.exact
    assert exact is not None
    bound = strongest_bound(jobs, cluster, 0.2)
    best_sim = min(r.metrics.makespan_s for r in runs)
    for value in (bound.value_s, plan.bound.value_s, exact.bound_s, *bound.parts.values()):
        assert value <= best_sim + 1e-6
        if not fractional and exact.value_s is not None:
            assert value <= exact.value_s + 1e-6  # a CP-SAT schedule is a real schedule on whole seconds
    for objective in ("mean-jct", "weighted"):
        low = simple_bound(jobs, cluster, objective).value_s
        cp = solve_exact(jobs, cluster, objective, 0.2).bound_s
        ev = Evaluator(jobs, cluster, "none")
        best = min(ev.value(objective, _ends(r, jobs)) for r in runs)
        assert max(low, cp) <= best + 1e-6


def test_sharing_relaxation_bounds_every_sharing_run() -> None:
    jobs = _trace(5, 12, 2, releases=True)
    cluster = _cluster(2, 2, sharing=True)
    bound = strongest_bound(jobs, cluster, 0.3)
    assert "cp-sat" in bound.parts
    for p in ("fifo", "sjf", "mem-desc", "article"):
        for b in ("none", "easy"):
            assert bound.value_s <= simulate(jobs, cluster, p, b).metrics.makespan_s + 1e-6


# ---- CP-SAT and the search agree -------------------------------------------------------------------


@pytest.mark.parametrize("seed", [14, 16, 20])
def test_search_never_beats_a_proven_optimum_and_replays_it_on_one_node(seed: int) -> None:
    jobs = _trace(seed, 9, 8)
    cluster = _cluster(8)
    exact = solve_exact(jobs, cluster, "makespan", 10.0)
    assert exact.status == "OPTIMAL" and exact.is_proven_optimal and exact.value_s is not None
    assert exact.bound_s == exact.value_s
    # one node, exclusive, all at t=0: strict order replays CP-SAT's schedule (docs/plan.md)
    replay = simulate(jobs, cluster, FixedOrder(exact.order()), "none")
    assert replay.metrics.makespan_s == exact.value_s
    for backfill in ("none", "easy"):
        plan = plan_order(jobs, cluster, "makespan", backfill, 20, seed, max_evals=200, cpsat_time_s=0)
        assert plan.value_s >= exact.value_s - 1e-6
    plan = plan_order(jobs, cluster, "makespan", "none", 20, seed, max_evals=200, cpsat_time_s=2)
    assert plan.value_s == exact.value_s and plan.stop_reason == "bound" and plan.bound_ratio == 1.0


def test_search_never_beats_cpsat_on_several_nodes_with_arrivals() -> None:
    jobs = _trace(21, 10, 4, releases=True)
    cluster = _cluster(4, 4)
    exact = solve_exact(jobs, cluster, "makespan", 2.0)
    assert exact.model == "per-node" and exact.exact
    plan = plan_order(jobs, cluster, "makespan", "easy", 20, 0, max_evals=200, cpsat_time_s=0)
    assert plan.value_s >= exact.bound_s - 1e-6
    if exact.is_proven_optimal:
        assert exact.value_s is not None and plan.value_s >= exact.value_s - 1e-6


def test_cpsat_uses_the_relaxed_model_beyond_max_pairs() -> None:
    jobs = _trace(2, 10, 4)
    exact = solve_exact(jobs, _cluster(4, 4), "makespan", 0.2, max_pairs=5)
    assert exact.model == "relaxed" and not exact.exact and not exact.is_proven_optimal


# ---- the search ---------------------------------------------------------------------------------------


def test_same_seed_and_budget_give_the_same_plan() -> None:
    jobs = _trace(8, 25, 8)
    cluster = _cluster(8)
    runs = [plan_order(jobs, cluster, "makespan", "easy", 60, seed=4, max_evals=120, cpsat_time_s=0.2) for _ in range(2)]  # fmt: skip
    assert runs[0].order == runs[1].order and runs[0].value_s == runs[1].value_s
    assert runs[0].stop_reason in ("evaluations", "bound")
    assert runs[0].evaluations <= 120 + 1
    other = plan_order(jobs, cluster, "mean-jct", "easy", 60, seed=5, max_evals=120, cpsat_time_s=0)
    assert sorted(other.order) == sorted(j.id for j in jobs)


def test_plan_is_never_worse_than_its_candidates_and_reports_honestly() -> None:
    jobs = _trace(9, 20, 8)
    plan = plan_order(jobs, _cluster(8), "makespan", "none", 30, 0, max_evals=300, cpsat_time_s=0)
    replay = simulate(jobs, _cluster(8), FixedOrder(plan.order), "none")
    assert replay.metrics.makespan_s == plan.value_s == plan.metrics.makespan_s
    assert plan.value_s <= plan.fifo_value_s and plan.uses_true_outcome
    assert plan.result.policy == "plan" and len(plan.baselines) == 24
    assert [p.job_id for p in plan.jobs] == plan.order
    assert plan.bound_ratio >= 1.0
    forecast = plan_order(
        jobs, _cluster(8), "makespan", "none", 30, 0, forecast=True, max_evals=20, cpsat_time_s=0
    )
    assert not forecast.uses_true_outcome


def test_objective_value_and_bad_input() -> None:
    assert objective_value("makespan", [3.0, 5.0], [0.0, 1.0], [1, 2]) == 5.0
    assert objective_value("mean-jct", [3.0, 5.0], [0.0, 1.0], [1, 2]) == 3.5
    assert objective_value("weighted", [3.0, 5.0], [0.0, 1.0], [1, 2]) == pytest.approx(11 / 3)
    jobs = _trace(1, 3, 8)
    with pytest.raises(UnknownNameError, match="valid names: makespan, mean-jct, weighted"):
        plan_order(jobs, _cluster(8), "fastest")
    twice = [*jobs, jobs[0]]
    with pytest.raises(GpuplanError, match="appears twice"):
        plan_order(twice, _cluster(8), max_evals=1)
    unknown = [Job("a", 0.0, 1, duration_s=None)]
    with pytest.raises(GpuplanError, match="no true duration"):
        plan_order(unknown, _cluster(8), max_evals=1)


# ---- plan.json ------------------------------------------------------------------------------------------


def test_plan_json_round_trip(tmp_path: Path) -> None:
    jobs = _trace(4, 12, 4)
    cluster = _cluster(4, 4)
    plan = plan_order(jobs, cluster, "makespan", "easy", 20, 0, max_evals=50, cpsat_time_s=0.2)
    path = write_plan(plan, tmp_path / "out" / "plan.json", trace="t.jsonl")
    data = read_plan(path)
    assert data == plan_to_dict(plan, "t.jsonl")
    assert data["schema"] == "gpuplan.plan/1" and data["order"] == plan.order
    assert (
        data["bound"]["value_s"] == plan.bound.value_s and data["search"]["evaluations"] == plan.evaluations
    )
    replay = simulate(jobs, cluster, FixedOrder(data["order"]), data["backfill"])
    planned = {j["id"]: (j["start_s"], tuple(j["gpus"])) for j in data["jobs"]}
    assert {r.job_id: (r.start_s, r.gpus) for r in replay.records} == planned
    assert all(j["node"] in ("n0", "n1") and len(j["gpu_labels"]) == len(j["gpus"]) for j in data["jobs"])
    (tmp_path / "bad.json").write_text('{"schema": "other"}', encoding="utf-8")
    with pytest.raises(InputError, match="schema"):
        read_plan(tmp_path / "bad.json")
    data["jobs"][0]["position"] = 5
    (tmp_path / "moved.json").write_text(__import__("json").dumps(data), encoding="utf-8")
    with pytest.raises(InputError, match="position"):
        read_plan(tmp_path / "moved.json")


def test_start_policy_ties_on_makespan_go_to_the_lower_mean_jct() -> None:
    """Every policy ends at 5000 s (job x): the start ("best policy") is the one with the lowest mean
    JCT, as `simulate` ranks runs, not the first label in alphabetical order."""
    jobs = [Job("x", 0, 1, duration_s=5000), Job("y", 0, 1, duration_s=50), Job("b", 1, 7, duration_s=100)]
    jobs += [Job(f"s{i}", 2, 1, duration_s=100) for i in range(7)]
    plan = plan_order(jobs, _cluster(8), "makespan", "none", 20, 0, max_evals=20, cpsat_time_s=0)
    runs = {r.label: r for r in plan.baselines}
    assert len({round(r.metrics.makespan_s, 6) for r in runs.values()}) == 1
    best_jct = min(r.metrics.mean_jct_s for r in runs.values())
    assert runs[plan.start_policy].metrics.mean_jct_s == best_jct
    assert runs["article+none"].metrics.mean_jct_s > best_jct  # the old alphabetical pick was worse

"""The fast plan evaluator (optimize/evaluate.py) keeps its own step-by-step copy of the none and EASY
rules on free-GPU counts. This property pins it to the simulator: on random traces and clusters of the
kind it accepts (exclusive GPUs, first-fit, no spanning jobs), for random orders, it must take the fast
path and give exactly the simulator's end times, with estimates exact, wrong or missing and memory
known, estimated or unknown."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.core.booking import booked_mem_gb, fits_empty_cluster
from gpuplan.core.placement import get_placer
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.optimize.evaluate import Evaluator
from gpuplan.optimize.order import FixedOrder
from gpuplan.sim.engine import simulate

FIRST_FIT = get_placer("first-fit")
GPUS = {40.0: GpuSpec("A100-40GB", 40.0), 80.0: GpuSpec("A100-80GB", 80.0)}


@st.composite
def _case(draw: st.DrawFn) -> tuple[list[Job], ClusterSpec, list[int]]:
    nodes = draw(
        st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from([40.0, 80.0])), min_size=1, max_size=3)
    )
    cluster = ClusterSpec("prop", tuple(NodeSpec(f"n{i}", g, GPUS[m]) for i, (g, m) in enumerate(nodes)))
    widest = max(g for g, _ in nodes)
    biggest = max(m for _, m in nodes)
    jobs = []
    for i in range(draw(st.integers(1, 12))):
        dur = draw(st.sampled_from([0.0, 1.0, 5.0, 10.0, 12.5, 30.0, 100.0]))
        est = draw(st.sampled_from(["exact", "half", "double", "missing"]))
        est_s = {"exact": dur, "half": dur / 2, "double": dur * 2, "missing": None}[est]
        mem = draw(st.one_of(st.none(), st.sampled_from([10.0, 39.0, 60.0, biggest])))
        est_mem = draw(st.one_of(st.none(), st.sampled_from([5.0, 45.0])))
        if est_mem is not None and est_mem > biggest:
            est_mem = None
        job = Job(f"j{i}", draw(st.sampled_from([0.0, 0.0, 3.0, 10.0, 50.0])), draw(st.integers(1, widest)),
                  duration_s=dur, est_duration_s=est_s, mem_gb=mem, est_mem_gb=est_mem)  # fmt: skip
        if not all(
            fits_empty_cluster(cluster, FIRST_FIT, job.gpus, booked_mem_gb(job, o), False)
            for o in (False, True)
        ):
            job = replace(job, mem_gb=None, est_mem_gb=None)  # too big for the nodes wide enough: whole GPUs
        jobs.append(job)
    order = draw(st.permutations(range(len(jobs))))
    return jobs, cluster, list(order)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_case(), backfill=st.sampled_from(["none", "easy"]), oracle=st.booleans())
def test_fast_evaluator_matches_the_simulator(case: tuple[list[Job], ClusterSpec, list[int]], backfill: str, oracle: bool) -> None:  # fmt: skip
    jobs, cluster, order = case
    ev = Evaluator(jobs, cluster, backfill, oracle=oracle)
    assert ev.path == "list-scheduler"  # a drifted copy would fall back here, and this would fail
    res = simulate(jobs, cluster, FixedOrder([jobs[i].id for i in order]), backfill, oracle=oracle)
    by_id = {r.job_id: r.end_s for r in res.records}
    assert ev.ends(order) == [by_id[j.id] for j in jobs]

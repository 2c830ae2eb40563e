"""Makespan lower bounds: each bound by hand on small cases, and no schedule ever beats any of them."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.cluster import load_cluster
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.bounds import lower_bound
from gpuplan.sim.engine import simulate

A100 = GpuSpec("A100-80GB", 80.0)
POLICIES = ("fifo", "sjf", "ljf", "small-gpus-first", "large-gpus-first", "mem-desc", "gpu-time", "article")
BACKFILLS = ("none", "easy", "conservative")


class _Model:
    """Stand-in interference model: rate = 100 / (100 + k * sum of neighbours' busy %)."""

    DEFAULT_UTIL_PCT = 50.0

    def __init__(self, k: float = 1.0) -> None:
        self.k = k

    def rate(self, util_pct: float, neighbour_utils_pct: list[float]) -> float:
        return 100.0 / (100.0 + self.k * sum(neighbour_utils_pct))


def _job(jid: str, gpus: int, dur: float, submit: float = 0.0, **kw: Any) -> Job:
    return Job(jid, submit, gpus, duration_s=dur, est_duration_s=dur, **kw)


def _cluster(*sizes: int, mem: float = 80.0, sharing: bool = False) -> ClusterSpec:
    gpu = GpuSpec(f"GPU-{mem:g}GB", mem)
    return ClusterSpec("test", tuple(NodeSpec(f"n{i}", g, gpu) for i, g in enumerate(sizes)), sharing=sharing)


# ---- exclusive clusters -------------------------------------------------------------------------------


def test_longest_job_counts_its_release_time() -> None:
    # 8 GPUs. Times from the first submit (1000): a at 0 (2 GPUs, 50 s), b and c at 100.
    # longest-job: max(0 + 50, 100 + 120, 100 + 10) = 220.
    # gpu-area: from 100 on: (120*1 + 10*8) / 8 = 25 -> 125; from 0: (100 + 200) / 8 = 37.5 -> 125.
    # big-jobs (1 node, so the whole-cluster and per-node groups coincide):
    #   k=1: jobs wider than 4 (c): 100 + 10 = 110;  k=2,3: c over 2, 3 slots: 105, 103.3;
    #   k=4..7: a and c: at most 102.5;  k=8: every job over 8 slots: 100 + (120 + 10) / 8 = 116.25.
    jobs = [
        _job("a", 2, 50, submit=1000.0),
        _job("b", 1, 120, submit=1100.0),
        _job("c", 8, 10, submit=1100.0),
    ]
    bound = lower_bound(jobs, load_cluster("8xA100-80GB"))
    assert bound.parts == pytest.approx({"longest-job": 220.0, "gpu-area": 125.0, "big-jobs": 116.25})
    assert (bound.name, bound.value_s) == ("longest-job", 220.0)


def test_gpu_area_with_release_times() -> None:
    # 2 GPUs. J1 (0, 1 GPU, 100 s), J2 (10, 2 GPUs, 50 s), J3 (20, 1 GPU, 5 s).
    # gpu-area: from 20: 5/2 -> 22.5; from 10: (5 + 100)/2 -> 62.5; from 0: (105 + 100)/2 -> 102.5.
    # longest-job: max(100, 60, 25) = 100.
    # big-jobs: k=1: J2 (2 GPUs > 2/2) alone on 1 slot: 10 + 50 = 60; k=2: every job (width*3 > 2) on
    # 2 slots: from 0: (100 + 50 + 5)/2 = 77.5; k>=3: less.
    jobs = [_job("J1", 1, 100), _job("J2", 2, 50, submit=10.0), _job("J3", 1, 5, submit=20.0)]
    bound = lower_bound(jobs, _cluster(2))
    assert bound.parts == pytest.approx({"longest-job": 100.0, "gpu-area": 102.5, "big-jobs": 77.5})
    assert bound.name == "gpu-area"


def test_big_jobs_wider_than_half_the_cluster_run_one_at_a_time() -> None:
    # 4 nodes x 8 GPUs; three 24-GPU spanning jobs of 100 s. Two never fit together (48 > 32):
    # big-jobs k=1: 3 * 100 = 300. gpu-area: 3 * 24 * 100 / 32 = 225. longest: 100.
    cluster = load_cluster("4x8xA100-80GB")
    jobs = [_job(f"w{i}", 24, 100, may_span_nodes=True) for i in range(3)]
    bound = lower_bound(jobs, cluster)
    assert bound.parts == pytest.approx({"longest-job": 100.0, "gpu-area": 225.0, "big-jobs": 300.0})
    assert bound.name == "big-jobs"
    # and the bound is tight: one at a time
    assert simulate(jobs, cluster).metrics.makespan_s == 300.0


def test_big_jobs_wider_than_half_a_node_run_one_per_node() -> None:
    # 4 nodes x 8 GPUs; eight single-node 5-GPU jobs of 100 s: at most one per node (10 > 8), so 4 at a
    # time: 8 * 100 / 4 = 200. gpu-area: 8 * 5 * 100 / 32 = 125. Whole-cluster groups: 5*(k+1) > 32 from
    # k=6 on: 800/6 = 133.3 at most.
    cluster = load_cluster("4x8xA100-80GB")
    jobs = [_job(f"f{i}", 5, 100) for i in range(8)]
    bound = lower_bound(jobs, cluster)
    assert bound.parts == pytest.approx({"longest-job": 100.0, "gpu-area": 125.0, "big-jobs": 200.0})
    assert simulate(jobs, cluster).metrics.makespan_s == 200.0
    # the same jobs allowed to span: the per-node argument no longer holds
    spanning = [_job(f"f{i}", 5, 100, may_span_nodes=True) for i in range(8)]
    assert lower_bound(spanning, cluster).parts["big-jobs"] == pytest.approx(800 / 6)


def test_bounds_use_true_durations_not_estimates() -> None:
    jobs = [Job("a", 0.0, 1, duration_s=100.0, est_duration_s=1.0, requested_s=5.0)]
    assert lower_bound(jobs, _cluster(1)).value_s == 100.0


def test_simulation_reports_the_bound() -> None:
    jobs = [_job("J1", 1, 100), _job("J2", 2, 50, submit=10.0), _job("J3", 1, 5, submit=20.0)]
    res = simulate(jobs, _cluster(2), "fifo", "none")
    assert res.metrics.lower_bound_s == lower_bound(jobs, _cluster(2)).value_s == pytest.approx(102.5)


# ---- sharing clusters ---------------------------------------------------------------------------------


def test_jobs_over_half_a_gpu_cannot_share() -> None:
    # One H200 (141 GB). Three 100 GB jobs of 100 s: two never fit together (200 > 141).
    # exclusive-area: 3 * 1 * 100 / 1 = 300. memory-area: 3 * 100 * 100 / 141. longest: 100.
    h200 = load_cluster("1xH200-141GB")
    jobs = [_job(f"x{i}", 1, 100, mem_gb=100.0) for i in range(3)]
    bound = lower_bound(jobs, h200)
    assert bound.parts == pytest.approx(
        {"longest-job": 100.0, "memory-area": 30000 / 141, "exclusive-area": 300.0}
    )
    assert bound.name == "exclusive-area"
    assert simulate(jobs, h200, interference=_Model(0)).metrics.makespan_s == 300.0


def test_memory_area_on_a_shared_cluster() -> None:
    # 2 GPUs of 100 GB, sharing. Six 40 GB jobs of 100 s.
    # memory-area: 6 * 40 * 100 / 200 = 120. No job needs more than half a GPU: exclusive-area 0.
    # Two share a GPU (80 <= 100), a third does not fit: 4 at a time, 2 rounds: makespan 200.
    cluster = _cluster(2, mem=100.0, sharing=True)
    jobs = [_job(f"m{i}", 1, 100, mem_gb=40.0) for i in range(6)]
    bound = lower_bound(jobs, cluster)
    assert bound.parts == pytest.approx({"longest-job": 100.0, "memory-area": 120.0, "exclusive-area": 0.0})
    assert simulate(jobs, cluster, interference=_Model(0)).metrics.makespan_s == 200.0


def test_unknown_and_large_memory_count_as_the_smallest_gpu() -> None:
    # Nodes of one 40 GB and one 80 GB GPU (120 GB in all), sharing.
    # u (unknown memory) and v (60 GB) each count as 40 GB: memory-area (40 + 40) * 100 / 120.
    # Neither can share with another such job (unknown; 60 * 2 > 80): exclusive-area 2 * 100 / 2 = 100.
    cluster = ClusterSpec(
        "hetero",
        (NodeSpec("small", 1, GpuSpec("s", 40.0)), NodeSpec("big", 1, GpuSpec("b", 80.0))),
        sharing=True,
    )
    jobs = [_job("u", 1, 100), _job("v", 1, 100, mem_gb=60.0)]
    bound = lower_bound(jobs, cluster)
    assert bound.parts == pytest.approx(
        {"longest-job": 100.0, "memory-area": 8000 / 120, "exclusive-area": 100.0}
    )


def test_underestimated_memory_never_beats_the_bound() -> None:
    # One 100 GB GPU, sharing. Two jobs truly use 60 GB each (120 GB together: they cannot share),
    # but their estimates say 40 GB. Whatever the scheduler believes, the run cannot end before 200 s:
    # the bound is 200 (exclusive-area: 60 * 2 > 100) and the simulated makespan must not be below it.
    cluster = _cluster(1, mem=100.0, sharing=True)
    jobs = [_job(n, 1, 100, mem_gb=60.0, est_mem_gb=40.0) for n in "ab"]
    bound = lower_bound(jobs, cluster)
    assert bound.value_s == 200.0
    res = simulate(jobs, cluster, "fifo", "easy", interference=_Model(0))
    assert res.metrics.makespan_s >= bound.value_s


def test_gpu_shares_without_memory_share_a_gpu() -> None:
    # One 80 GB GPU, sharing. Three jobs of half a GPU each (gpu_share 0.5, memory unknown), 100 s.
    # They book no memory (their share binds them): two run at once, then the third: makespan 200.
    # memory-area and exclusive-area: 0 (counting them as whole GPUs gave 300 > 200: no bound);
    # share-area: 3 * 0.5 * 100 / 1 = 150.
    cluster = _cluster(1, sharing=True)
    jobs = [Job(f"s{i}", 0.0, 1, duration_s=100.0, gpu_share=0.5) for i in range(3)]
    bound = lower_bound(jobs, cluster)
    assert bound.parts == pytest.approx(
        {"longest-job": 100.0, "memory-area": 0.0, "exclusive-area": 0.0, "share-area": 150.0}
    )
    assert simulate(jobs, cluster, interference=_Model(0)).metrics.makespan_s == 200.0


def test_cpsat_bound_on_gpu_shares_holds() -> None:
    from gpuplan.optimize.cpsat import solve_exact

    cluster = _cluster(1, sharing=True)
    two = [Job(f"s{i}", 0.0, 1, duration_s=100.0, gpu_share=0.5) for i in range(2)]
    exact = solve_exact(two, cluster, "makespan", 2.0, deterministic=True)
    assert exact.bound_s <= 100.0 == simulate(two, cluster, interference=_Model(0)).metrics.makespan_s
    three = [*two, Job("s2", 0.0, 1, duration_s=100.0, gpu_share=0.75)]  # 0.75 shares with no 0.5
    exact = solve_exact(three, cluster, "makespan", 2.0, deterministic=True)
    assert 175.0 <= exact.bound_s <= 200.0  # share cumulative: (0.5 + 0.5 + 0.75) * 100


# ---- property: no run beats any bound -----------------------------------------------------------------


@st.composite
def _instances(draw: st.DrawFn) -> tuple[ClusterSpec, list[Job]]:
    sharing = draw(st.booleans())
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))
    mems = draw(st.lists(st.sampled_from([40.0, 80.0]), min_size=len(sizes), max_size=len(sizes)))
    nodes = tuple(NodeSpec(f"n{i}", g, GpuSpec(f"G{m:g}", m)) for i, (g, m) in enumerate(zip(sizes, mems)))
    cluster = ClusterSpec("h", nodes, sharing=sharing, max_jobs_per_gpu=draw(st.integers(1, 3)))
    min_cap, total = min(mems), sum(sizes)
    jobs = []
    for i in range(draw(st.integers(1, 6))):
        span = len(sizes) > 1 and draw(st.booleans())
        gpus = draw(st.integers(1, total if span else max(sizes)))
        mem = draw(st.one_of(st.none(), st.integers(1, int(min_cap)).map(float)))
        # estimates of memory never below the truth here (see test_underestimated_memory_never_beats_the_bound)
        est_mem = (
            None
            if mem is None
            else draw(st.one_of(st.none(), st.integers(int(mem), int(min_cap)).map(float)))
        )
        dur = float(draw(st.integers(0, 100)))
        share = draw(st.one_of(st.none(), st.sampled_from([0.25, 0.5, 0.75, 1.0]))) if gpus == 1 else None
        jobs.append(
            Job(
                f"j{i}",
                float(draw(st.integers(0, 60))),
                gpus,
                mem_gb=mem,
                est_mem_gb=est_mem,
                duration_s=dur,
                est_duration_s=draw(st.one_of(st.none(), st.integers(0, 200).map(float))),
                requested_s=draw(st.one_of(st.none(), st.integers(1, 300).map(float))),
                gpu_util_pct=draw(st.one_of(st.none(), st.integers(1, 100).map(float))),
                may_span_nodes=span,
                gpu_share=share,
            )
        )
    return cluster, jobs


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_instances(), st.sampled_from(["first-fit", "best-fit", "spread", "fgd"]))
def test_no_policy_or_backfill_beats_any_bound(instance: tuple[ClusterSpec, list[Job]], placer: str) -> None:
    cluster, jobs = instance
    bound = lower_bound(jobs, cluster)
    assert bound.value_s == max(bound.parts.values())
    for policy, backfill, oracle in itertools.product(POLICIES, BACKFILLS, (False, True)):
        res = simulate(jobs, cluster, policy, backfill, placer, oracle=oracle, interference=_Model(1.0))
        for name, value in bound.parts.items():
            assert value <= res.metrics.makespan_s + 1e-6, (name, policy, backfill, oracle, res.records)

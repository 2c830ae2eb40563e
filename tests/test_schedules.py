"""Hand-computed schedules: backfill modes, never-fitting jobs, GPU sharing with interference, policies,
placement invariants on random workloads, determinism, metrics, and the Scheduler driven by a clock.

Every expected schedule is written out in a comment as `job [start, end) GPUs` with the reason.
Unless a test says otherwise, estimates equal true durations, so plans and reality agree.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from typing import Any

import pytest

from gpuplan.cluster import load_cluster
from gpuplan.core.backfill import backfill_names
from gpuplan.core.interference import InterferenceModel
from gpuplan.core.placement import placer_names
from gpuplan.core.policies import ARTICLE_CLASSES, article_class, get_policy, policy_names
from gpuplan.core.scheduler import Scheduler, Started
from gpuplan.errors import JobNeverFitsError, ScheduleError, UnknownNameError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.engine import simulate
from gpuplan.sim.result import SimResult
from gpuplan.synth import synth_poisson

A100 = GpuSpec("A100-80GB", 80.0)
H200 = GpuSpec("H200-141GB", 141.0)
POLICIES = (
    "fifo",
    "sjf",
    "ljf",
    "small-gpus-first",
    "large-gpus-first",
    "mem-desc",
    "gpu-time",
    "article",
)
BACKFILLS = ("none", "easy", "conservative")
PLACERS = ("first-fit", "best-fit", "spread")

Sched = dict[str, tuple[float, float, tuple[int, ...]]]


def _cluster(*sizes: int, gpu: GpuSpec = A100, sharing: bool = False, max_share: int = 4) -> ClusterSpec:
    nodes = tuple(NodeSpec(f"n{i}", g, gpu) for i, g in enumerate(sizes))
    return ClusterSpec("test", nodes, sharing=sharing, max_jobs_per_gpu=max_share)


def _job(jid: str, gpus: int, dur: float, submit: float = 0.0, est: float | None = None, **kw: Any) -> Job:
    return Job(jid, submit, gpus, duration_s=dur, est_duration_s=dur if est is None else est, **kw)


def _sched(res: SimResult) -> Sched:
    return {r.job_id: (r.start_s, r.end_s, r.gpus) for r in res.records}


def _run(
    jobs: list[Job],
    cluster: ClusterSpec,
    backfill: str = "easy",
    policy: str = "fifo",
    placer: str = "first-fit",
    **kw: Any,
) -> Sched:
    return _sched(simulate(jobs, cluster, policy, backfill, placer, **kw))


class _Model:
    """A stand-in interference model: rate = 100 / (100 + k * sum of the neighbours' busy percent).

    k = 0 is a model without interference; k = 1 halves the rate next to one fully busy neighbour.
    """

    DEFAULT_UTIL_PCT = 25.0

    def __init__(self, k: float = 1.0) -> None:
        self.k = k
        self.calls: list[tuple[float, tuple[float, ...]]] = []

    def rate(self, util_pct: float, neighbour_utils_pct: list[float]) -> float:
        self.calls.append((util_pct, tuple(sorted(neighbour_utils_pct))))
        return 100.0 / (100.0 + self.k * sum(neighbour_utils_pct))


# ---- 1. EASY backfill keeps the head's reservation ----------------------------------------------------


@pytest.mark.parametrize("backfill", BACKFILLS)
def test_long_job_that_takes_the_heads_gpus_does_not_start(backfill: str) -> None:
    # 1 node x 4 GPUs, all submitted at 0, fifo.
    # A [0,100) GPUs 0,1. H (4 GPUs) is blocked: its reservation (shadow) is 100, when A ends.
    # L (2 GPUs, 200 s) fits now on GPUs 2,3 but would run to 200 and H needs all 4 GPUs at 100: it must
    # not start (in any mode). H [100,150) GPUs 0-3, then L [150,350) GPUs 0,1.
    jobs = [_job("A", 2, 100), _job("H", 4, 50), _job("L", 2, 200)]
    got = _run(jobs, _cluster(4), backfill)
    assert got == {
        "A": (0.0, 100.0, (0, 1)),
        "H": (100.0, 150.0, (0, 1, 2, 3)),
        "L": (150.0, 350.0, (0, 1)),
    }


@pytest.mark.parametrize(("est", "s_start"), [(100.0, 0.0), (101.0, 150.0)])
@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_short_job_ending_by_the_shadow_starts(backfill: str, est: float, s_start: float) -> None:
    # A [0,100) GPUs 0,1; H (4 GPUs) reserved at 100.
    # S (2 GPUs, true 90 s) with an estimate of 100 s ends by the shadow (0 + 100 <= 100): S [0,90) 2,3.
    # With an estimate of 101 s it would end after 100 on GPUs H needs: it waits for H: S [150,240) 0,1.
    # H starts exactly at its reservation, 100, in both cases.
    jobs = [_job("A", 2, 100), _job("H", 4, 50), _job("S", 2, 90, est=est)]
    got = _run(jobs, _cluster(4), backfill)
    assert got["H"] == (100.0, 150.0, (0, 1, 2, 3))
    assert got["S"] == (s_start, s_start + 90.0, (2, 3) if s_start == 0.0 else (0, 1))


def test_backfill_none_keeps_the_short_job_behind_the_head() -> None:
    # Same jobs without backfill: S waits for H. A [0,100), H [100,150), S [150,240) GPUs 0,1.
    jobs = [_job("A", 2, 100), _job("H", 4, 50), _job("S", 2, 90, est=100)]
    got = _run(jobs, _cluster(4), "none")
    assert got["S"] == (150.0, 240.0, (0, 1))
    assert got["H"] == (100.0, 150.0, (0, 1, 2, 3))


def test_reservations_trust_estimates_so_an_overrun_delays_the_head() -> None:
    # S estimates 100 s (ends by the shadow at 100) but truly runs 130 s: it starts at 0 on GPUs 2,3 and
    # H, which needs S's GPUs, starts when S really ends: H [130,180).
    jobs = [_job("A", 2, 100), _job("H", 4, 50), _job("S", 2, 130, est=100)]
    got = _run(jobs, _cluster(4), "easy")
    assert got["S"] == (0.0, 130.0, (2, 3))
    assert got["H"] == (130.0, 180.0, (0, 1, 2, 3))


@pytest.mark.parametrize("placer", PLACERS)
@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_long_job_on_gpus_the_head_does_not_need_starts(backfill: str, placer: str) -> None:
    # 2 nodes x 4 GPUs. A [0,100) node0 (GPUs 0-3); B [0,1000) node1 GPUs 4,5.
    # H (4 GPUs, one node) is blocked; its reservation is node0 at 100 (node1 frees only at 1000).
    # L (2 GPUs, 500 s) runs far past 100 but only node1's GPUs 6,7 are free, which H does not need:
    # L [0,500) GPUs 6,7. H [100,150) GPUs 0-3, exactly its reservation.
    jobs = [_job("A", 4, 100), _job("B", 2, 1000), _job("H", 4, 50), _job("L", 2, 500)]
    got = _run(jobs, _cluster(4, 4), backfill, placer=placer)
    assert got == {
        "A": (0.0, 100.0, (0, 1, 2, 3)),
        "B": (0.0, 1000.0, (4, 5)),
        "H": (100.0, 150.0, (0, 1, 2, 3)),
        "L": (0.0, 500.0, (6, 7)),
    }


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_head_reservation_waits_for_enough_jobs_to_end(backfill: str) -> None:
    # 1 node x 4 GPUs. A [0,50) GPU 0, B [0,100) GPU 1, C [0,300) GPU 2; GPU 3 free.
    # H needs 3 GPUs: 2 free at 50, 3 at 100 -> reservation 100.
    # L1 (1 GPU, 200 s) would hold GPU 3 past 100, leaving only GPUs 0,1 for H: it must not start.
    # L2 (1 GPU, 100 s) ends exactly at the shadow: L2 [0,100) GPU 3.
    # At 50 L1 still may not start (it would end at 250 and take GPU 0).
    # At 100 B and L2 end: H [100,110) GPUs 0,1,3; L1 [110,310) GPU 0 after H.
    jobs = [
        _job("A", 1, 50),
        _job("B", 1, 100),
        _job("C", 1, 300),
        _job("H", 3, 10),
        _job("L1", 1, 200),
        _job("L2", 1, 100),
    ]
    got = _run(jobs, _cluster(4), backfill)
    assert got == {
        "A": (0.0, 50.0, (0,)),
        "B": (0.0, 100.0, (1,)),
        "C": (0.0, 300.0, (2,)),
        "L2": (0.0, 100.0, (3,)),
        "H": (100.0, 110.0, (0, 1, 3)),
        "L1": (110.0, 310.0, (0,)),
    }


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_long_job_may_use_gpus_that_short_backfilled_jobs_free_by_the_shadow(backfill: str) -> None:
    # 1 node x 5 GPUs. R [0,100) GPUs 0,1,2. H (4 GPUs) reserved at 100.
    # S (1 GPU, 50 s) ends by the shadow: S [0,50) GPU 3.
    # L (1 GPU, 500 s) on GPU 4: at 100 GPUs 0,1,2 (R) and 3 (S ended at 50) are free, 4 GPUs for H,
    # so L leaves the reservation intact and starts: L [0,500) GPU 4. H [100,110) GPUs 0-3.
    jobs = [_job("R", 3, 100), _job("H", 4, 10), _job("S", 1, 50), _job("L", 1, 500)]
    got = _run(jobs, _cluster(5), backfill)
    assert got == {
        "R": (0.0, 100.0, (0, 1, 2)),
        "S": (0.0, 50.0, (3,)),
        "L": (0.0, 500.0, (4,)),
        "H": (100.0, 110.0, (0, 1, 2, 3)),
    }


# Set-up orders that leave R1 on GPU 0, F on GPU 1 and R2 on GPU 2 under each placer.
_SETUP_ORDER = {
    "first-fit": ("R1", "F", "R2"),
    "best-fit": ("R1", "F", "R2"),  # F packs onto node0, R2 then only fits node1
    "spread": ("R1", "R2", "F"),  # R2 goes to the emptier node1, F to the lower of two equal nodes
}
_SETUP_EST = {"R1": 100.0, "F": 1.0, "R2": 1000.0}


@pytest.mark.parametrize("placer", PLACERS)
@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_backfill_finds_the_gpus_that_leave_the_head_alone(backfill: str, placer: str) -> None:
    # 2 nodes x 2 GPUs, driven step by step.
    # t=0: R1 (100 s) GPU 0, F (1 s) GPU 1, R2 (1000 s) GPU 2. F ends at 1: free GPUs 1 (node0), 3 (node1).
    # t=1: H (2 GPUs, one node) is blocked; its reservation is node0 at 100, when R1 ends.
    # L (1 GPU, 500 s) fits on GPU 1 (which H needs at 100) or GPU 3 (which H never needs): a backfill
    # that keeps H's reservation starts L on GPU 3 now, whichever GPU the placer would rank first.
    s = Scheduler(_cluster(2, 2), "fifo", backfill, placer)
    jid_of = {}
    for jid, name in enumerate(_SETUP_ORDER[placer]):
        s.submit(jid, Job(name, 0.0, 1, est_duration_s=_SETUP_EST[name]))
        jid_of[name] = jid
    assert len(s.schedule(0.0)) == 3
    assert {name: s.slot(j).alloc for name, j in jid_of.items()} == {"R1": (0,), "F": (1,), "R2": (2,)}
    s.finish(jid_of["F"])
    s.submit(3, Job("H", 1.0, 2, est_duration_s=10.0))
    s.submit(4, Job("L", 1.0, 1, est_duration_s=500.0))
    assert s.schedule(1.0) == [Started(4, (3,))]


# ---- 2. conservative protects every reservation, EASY only the head's --------------------------------


def _second_job_case() -> list[Job]:
    return [_job("A", 2, 100), _job("B", 1, 200), _job("H1", 4, 100), _job("H2", 3, 50), _job("L", 1, 150)]


def test_easy_lets_a_job_delay_the_second_queued_job() -> None:
    # 1 node x 4 GPUs. A [0,100) GPUs 0,1; B [0,200) GPU 2; GPU 3 free.
    # H1 (4 GPUs) is the head: reserved at 200 (B's end). H2 (3 GPUs) does not fit now.
    # L (1 GPU, 150 s) ends at 150 <= 200: EASY starts it: L [0,150) GPU 3.
    # At 100 (A ends) only GPUs 0,1 are free: H2 cannot start. At 150 (L ends) H2 fits and ends by 200:
    # H2 [150,200) GPUs 0,1,3. H1 [200,300) GPUs 0-3.
    got = _run(_second_job_case(), _cluster(4), "easy")
    assert got == {
        "A": (0.0, 100.0, (0, 1)),
        "B": (0.0, 200.0, (2,)),
        "L": (0.0, 150.0, (3,)),
        "H2": (150.0, 200.0, (0, 1, 3)),
        "H1": (200.0, 300.0, (0, 1, 2, 3)),
    }


def test_conservative_does_not_delay_the_second_queued_job() -> None:
    # Same jobs. Free GPUs over time: 1 in [0,100), 3 in [100,200), 4 from 200.
    # H1 reserved [200,300). H2 (3 GPUs, 50 s) reserved [100,150). L (1 GPU, 150 s) from 0 would hold a GPU
    # in [100,150) where H2 needs all 3 free ones: L is reserved at 300 (the first gap of 150 s).
    # H2 [100,150) GPUs 0,1,3; H1 [200,300) GPUs 0-3; L [300,450) GPU 0.
    got = _run(_second_job_case(), _cluster(4), "conservative")
    assert got == {
        "A": (0.0, 100.0, (0, 1)),
        "B": (0.0, 200.0, (2,)),
        "H2": (100.0, 150.0, (0, 1, 3)),
        "H1": (200.0, 300.0, (0, 1, 2, 3)),
        "L": (300.0, 450.0, (0,)),
    }


def test_no_backfill_on_the_second_job_case() -> None:
    # Strict order: H1 waits for B (200); H2 and L follow it at 300: H2 GPUs 0,1,2, L GPU 3.
    got = _run(_second_job_case(), _cluster(4), "none")
    assert got["H1"] == (200.0, 300.0, (0, 1, 2, 3))
    assert got["H2"] == (300.0, 350.0, (0, 1, 2))
    assert got["L"] == (300.0, 450.0, (3,))


def test_conservative_with_a_spanning_job_books_gpus_it_can_hold_for_its_whole_run() -> None:
    # Nodes: n0 4 GPUs (0-3), n1 4 GPUs (4-7), n2 2 GPUs (8,9). Set-up at t=0, first-fit:
    # A (2 GPUs, 10 s) 0,1; G1 (2 GPUs, 1 s) 2,3; C (1 GPU, 1000 s) 4; G2 (3 GPUs, 1 s) 5,6,7; B (2, 10 s) 8,9.
    # G1 and G2 finish: free now n0 2 (GPUs 2,3), n1 3 (GPUs 5,6,7), n2 0.
    # Q1 (4 GPUs, one node, 100 s) is reserved on n0 at 10 (n1 frees a 4th GPU only at 1000).
    # S (5 GPUs, may span, 20 s) over [0,20): n0's 2 free GPUs are Q1's from 10 on and n2 has none until
    # 10, so only n1's 3 GPUs are free for the whole run: S must not start now (nor crash).
    s = Scheduler(_cluster(4, 4, 2), "fifo", "conservative", "first-fit")
    setup = [("A", 2, 10.0), ("G1", 2, 1.0), ("C", 1, 1000.0), ("G2", 3, 1.0), ("B", 2, 10.0)]
    for jid, (name, g, est) in enumerate(setup):
        s.submit(jid, Job(name, 0.0, g, est_duration_s=est))
    assert [st.gpu_ids for st in s.schedule(0.0)] == [(0, 1), (2, 3), (4,), (5, 6, 7), (8, 9)]
    s.finish(1)
    s.finish(3)
    s.submit(5, Job("Q1", 0.0, 4, est_duration_s=100.0))
    s.submit(6, Job("S", 0.0, 5, est_duration_s=20.0, may_span_nodes=True))
    assert s.schedule(0.0) == []
    # t=10: A and B end. Q1 takes n0; S spans n1's 3 free GPUs and n2's 2.
    s.finish(0)
    s.finish(4)
    assert s.schedule(10.0) == [Started(5, (0, 1, 2, 3)), Started(6, (5, 6, 7, 8, 9))]


@pytest.mark.parametrize("sharing", [False, True])
def test_conservative_zero_length_jobs_still_hold_their_gpu_until_they_end(sharing: bool) -> None:
    # One 100 GB GPU. a and b (60 GB each) both estimate 0 s (an oracle run of jobs that failed at once
    # plans with 0 too). a starts at 0 and holds the GPU until the caller reports its end; b does not fit
    # next to it (exclusive: one job per GPU; sharing: 120 GB > 100 GB) and must wait, not start on top.
    cluster = _cluster(1, gpu=GpuSpec("G100", 100.0), sharing=sharing)
    s = Scheduler(cluster, "fifo", "conservative", "first-fit")
    s.submit(0, Job("a", 0.0, 1, mem_gb=60.0, est_duration_s=0.0))
    s.submit(1, Job("b", 0.0, 1, mem_gb=60.0, est_duration_s=0.0))
    assert s.schedule(0.0) == [Started(0, (0,))]
    s.finish(0)
    assert s.schedule(0.0) == [Started(1, (0,))]


@pytest.mark.parametrize("backfill", BACKFILLS)
def test_zero_length_jobs_in_an_oracle_run(backfill: str) -> None:
    # One GPU; three jobs that end the instant they start: a, b, c all [0,0) on GPU 0, one after another.
    jobs = [_job(n, 1, 0, est=5) for n in "abc"]
    got = _run(jobs, _cluster(1), backfill, oracle=True)
    assert got == {n: (0.0, 0.0, (0,)) for n in "abc"}


# ---- 3. no backfill: strict order ---------------------------------------------------------------------


def test_no_backfill_first_blocked_job_blocks_all_behind_it() -> None:
    # 1 node x 4 GPUs. A [0,100) GPUs 0,1,2. B (2 GPUs) does not fit. C (1 GPU, 10 s) fits GPU 3 but
    # must wait behind B: B [100,110) GPUs 0,1; C [100,110) GPU 2.
    jobs = [_job("A", 3, 100), _job("B", 2, 10), _job("C", 1, 10)]
    assert _run(jobs, _cluster(4), "none") == {
        "A": (0.0, 100.0, (0, 1, 2)),
        "B": (100.0, 110.0, (0, 1)),
        "C": (100.0, 110.0, (2,)),
    }
    # EASY starts C at once on GPU 3 (it ends at 10, long before B's reservation at 100).
    assert _run(jobs, _cluster(4), "easy")["C"] == (0.0, 10.0, (3,))


def test_no_backfill_scheduler_returns_only_the_jobs_before_the_blocker() -> None:
    s = Scheduler(_cluster(4), "fifo", "none", "first-fit")
    for jid, g in enumerate([1, 1, 4, 1, 1]):
        s.submit(jid, Job(f"j{jid}", 0.0, g, est_duration_s=10.0))
    assert s.schedule(0.0) == [Started(0, (0,)), Started(1, (1,))]
    assert list(s.waiting_jids()) == [2, 3, 4]
    s.finish(0)
    assert s.schedule(5.0) == []  # 3 free GPUs, the 4-GPU job still blocks the 1-GPU jobs
    s.finish(1)
    assert s.schedule(10.0) == [Started(2, (0, 1, 2, 3))]


# ---- 4. jobs that can never fit -----------------------------------------------------------------------


@pytest.mark.parametrize("backfill", BACKFILLS)
@pytest.mark.parametrize(
    ("cluster", "job"),
    [
        ("8xA100-80GB", Job("too-wide", 0.0, 9, duration_s=10.0)),
        ("4x8xA100-80GB", Job("two-nodes", 5.0, 16, duration_s=10.0)),
        ("4x8xA100-80GB", Job("whole+1", 5.0, 33, duration_s=10.0, may_span_nodes=True)),
        ("8xA100-80GB", Job("too-fat", 0.0, 1, mem_gb=100.0, duration_s=10.0)),
        ("1xH200-141GB", Job("too-fat-shared", 0.0, 1, mem_gb=150.0, duration_s=10.0)),
        ("4x8xA100-80GB", Job("fat-span", 0.0, 2, mem_gb=81.0, duration_s=10.0, may_span_nodes=True)),
    ],
)
def test_job_that_never_fits_raises_naming_it(cluster: str, job: Job, backfill: str) -> None:
    jobs = [_job("ok", 1, 10), job]
    with pytest.raises(JobNeverFitsError) as err:
        simulate(jobs, load_cluster(cluster), "fifo", backfill, "first-fit", interference=_Model())
    assert repr(job.id) in str(err.value)
    assert isinstance(err.value, ScheduleError)


def test_scheduler_submit_rejects_a_never_fitting_job_and_keeps_nothing() -> None:
    s = Scheduler(load_cluster("8xA100-80GB"))
    with pytest.raises(JobNeverFitsError, match="'big'"):
        s.submit(0, Job("big", 0.0, 9, est_duration_s=1.0))
    assert s.waiting_count == 0 and s.schedule(0.0) == []


@pytest.mark.parametrize("placer", PLACERS)
def test_spanning_job_runs_across_nodes(placer: str) -> None:
    # 4 nodes x 8 GPUs, empty: 16 GPUs that may span take two whole nodes (the roomiest nodes first,
    # ties by the placer's order, which is node order on an empty cluster): GPUs 0-15 at 0.
    job = _job("wide", 16, 10, may_span_nodes=True)
    got = _run([job], load_cluster("4x8xA100-80GB"), "easy", placer=placer)
    assert got["wide"] == (0.0, 10.0, tuple(range(16)))


def test_spanning_job_uses_one_node_when_one_fits() -> None:
    # 8 GPUs that may span still take one whole node
    job = _job("w", 8, 10, may_span_nodes=True)
    assert _run([job], load_cluster("4x8xA100-80GB"))["w"] == (0.0, 10.0, tuple(range(8)))


# ---- 5. GPU sharing and interference ------------------------------------------------------------------


@pytest.mark.parametrize("backfill", BACKFILLS)
def test_sharing_only_while_memory_fits(backfill: str) -> None:
    # One H200 of 141 GB, no interference (k=0). X and Y (60 GB each) share it [0,100); Z (60 GB) would
    # make 180 GB: Z waits for them: Z [100,200).
    jobs = [_job(n, 1, 100, mem_gb=60.0) for n in "XYZ"]
    got = _run(jobs, load_cluster("1xH200-141GB"), backfill, interference=_Model(k=0))
    assert got == {"X": (0.0, 100.0, (0,)), "Y": (0.0, 100.0, (0,)), "Z": (100.0, 200.0, (0,))}


def test_sharing_up_to_exactly_the_gpu_memory() -> None:
    # 70.5 + 70.5 = 141 fits exactly; 70.6 + 70.5 does not.
    h200 = load_cluster("1xH200-141GB")
    got = _run([_job("a", 1, 10, mem_gb=70.5), _job("b", 1, 10, mem_gb=70.5)], h200, interference=_Model(0))
    assert got["b"][0] == 0.0
    got = _run([_job("a", 1, 10, mem_gb=70.6), _job("b", 1, 10, mem_gb=70.5)], h200, interference=_Model(0))
    assert got["b"][0] == 10.0


def test_sharing_limited_by_max_jobs_per_gpu() -> None:
    # 141 GB GPU, at most 2 jobs: a, b [0,100); c (10 GB would fit) waits: c [100,200).
    cluster = _cluster(1, gpu=H200, sharing=True, max_share=2)
    jobs = [_job(n, 1, 100, mem_gb=10.0) for n in "abc"]
    assert _run(jobs, cluster, interference=_Model(0))["c"] == (100.0, 200.0, (0,))


def test_sharing_unknown_memory_takes_the_whole_gpu() -> None:
    # X has unknown memory: it holds the GPU alone; Y (10 GB) waits: Y [100,150).
    jobs = [_job("X", 1, 100), _job("Y", 1, 50, mem_gb=10.0)]
    assert _run(jobs, load_cluster("1xH200-141GB"), interference=_Model(0))["Y"] == (100.0, 150.0, (0,))


def test_interference_slows_neighbours_and_the_survivor_speeds_back_up() -> None:
    # Model: rate = 100 / (100 + neighbours' busy %).
    # X (100 % busy, 100 s alone) and Y (50 % busy, 30 s alone) share the GPU from 0:
    #   X runs at 100/150 = 2/3, Y at 100/200 = 1/2.  Y: 30 s of work at 1/2 -> ends at 60.
    #   By 60 X has done 60 * 2/3 = 40 s of work; the other 60 s run alone at rate 1 -> X ends at 120
    #   (not at 150, where it would end if it stayed slowed).
    model = _Model(k=1)
    jobs = [
        _job("X", 1, 100, mem_gb=60.0, gpu_util_pct=100.0),
        _job("Y", 1, 30, mem_gb=60.0, gpu_util_pct=50.0),
    ]
    got = _run(jobs, load_cluster("1xH200-141GB"), interference=model)
    assert got["Y"][:2] == pytest.approx((0.0, 60.0))
    assert got["X"][:2] == pytest.approx((0.0, 120.0))
    assert (100.0, (50.0,)) in model.calls and (50.0, (100.0,)) in model.calls


def test_interference_uses_the_models_default_util_for_unknown_util() -> None:
    # X's busy % is unknown: the model's DEFAULT_UTIL_PCT (25) stands in.
    # X (50 s) runs at 100/200 = 0.5 next to Y (100 %): ends at 100.
    # Y (100 s) runs at 100/125 = 0.8 until 100 (80 s done), then alone: ends at 120.
    jobs = [_job("X", 1, 50, mem_gb=60.0), _job("Y", 1, 100, mem_gb=60.0, gpu_util_pct=100.0)]
    got = _run(jobs, load_cluster("1xH200-141GB"), interference=_Model(k=1))
    assert got["X"][1] == pytest.approx(100.0)
    assert got["Y"][1] == pytest.approx(120.0)


def test_interference_with_an_idle_neighbour() -> None:
    # X is 0 % busy (it waits on I/O): Y (100 %) next to it runs at 100/(100+0) = 1 and ends at 100.
    # X runs at 100/200 = 0.5 next to Y: 50 s done by 100, then alone: X ends at 150.
    jobs = [
        _job("X", 1, 100, mem_gb=60.0, gpu_util_pct=0.0),
        _job("Y", 1, 100, mem_gb=60.0, gpu_util_pct=100.0),
    ]
    got = _run(jobs, load_cluster("1xH200-141GB"), interference=_Model(k=1))
    assert got["Y"][1] == pytest.approx(100.0)
    assert got["X"][1] == pytest.approx(150.0)


def test_default_interference_model_drives_a_shared_run() -> None:
    # No model given on a sharing cluster: the simulator uses InterferenceModel.default().
    # X (100 % busy, 100 s) and Y (50 % busy, 30 s) share the H200 from 0 at rates r_x, r_y from the model;
    # Y ends first at t_y = 30 / r_y; X has done t_y * r_x by then and finishes the rest alone at rate 1.
    # Y, with unknown busy %, counts as the model's DEFAULT_UTIL_PCT in the second run.
    model = InterferenceModel.default()
    r_x, r_y = model.rate(100.0, [50.0]), model.rate(50.0, [100.0])
    assert 0.0 < r_y < r_x < 1.0
    t_y = 30.0 / r_y
    assert t_y < 100.0 / r_x  # Y is done first
    jobs = [
        _job("X", 1, 100, mem_gb=60.0, gpu_util_pct=100.0),
        _job("Y", 1, 30, mem_gb=60.0, gpu_util_pct=50.0),
    ]
    got = _run(jobs, load_cluster("1xH200-141GB"))
    assert got["Y"][1] == pytest.approx(t_y)
    assert got["X"][1] == pytest.approx(t_y + (100.0 - t_y * r_x))

    jobs[1] = _job("Y", 1, 30, mem_gb=60.0)
    u = InterferenceModel.DEFAULT_UTIL_PCT
    r_x, r_y = model.rate(100.0, [u]), model.rate(u, [100.0])
    t_y = 30.0 / r_y
    assert t_y < 100.0 / r_x
    got = _run(jobs, load_cluster("1xH200-141GB"))
    assert got["Y"][1] == pytest.approx(t_y)
    assert got["X"][1] == pytest.approx(t_y + (100.0 - t_y * r_x))


def test_multi_gpu_job_is_slowed_by_a_neighbour_on_one_of_its_gpus() -> None:
    # 1 node x 2 H200, sharing. J (2 GPUs, 100 %, 100 s) on GPUs 0,1; K (1 GPU, 50 %, 30 s) goes to GPU 0
    # (first-fit). J's rate is its slowest GPU's: 100/150 on GPU 0; K runs at 1/2, ends at 60; J has done
    # 40 s of work by then and ends at 120.
    cluster = _cluster(2, gpu=H200, sharing=True)
    jobs = [
        _job("J", 2, 100, mem_gb=60.0, gpu_util_pct=100.0),
        _job("K", 1, 30, mem_gb=60.0, gpu_util_pct=50.0),
    ]
    got = _run(jobs, cluster, interference=_Model(k=1))
    assert got["J"][2] == (0, 1) and got["K"][2] == (0,)
    assert got["K"][1] == pytest.approx(60.0)
    assert got["J"][1] == pytest.approx(120.0)


# ---- 6. invariants on random workloads ----------------------------------------------------------------


def _check_schedule(jobs: list[Job], res: SimResult) -> None:
    """Every job once, on its GPU count, on one node, never before its submit; GPUs never over-committed."""
    cluster = res.cluster
    node_of = [n for n, node in enumerate(cluster.nodes) for _ in range(node.gpus)]
    cap = [node.gpu.mem_gb for node in cluster.nodes for _ in range(node.gpus)]
    by_id = {j.id: j for j in jobs}
    t0 = min(j.submit_s for j in jobs)
    assert sorted(r.job_id for r in res.records) == sorted(by_id)
    per_gpu: dict[int, list[tuple[float, float, float | None]]] = defaultdict(list)
    for r in res.records:
        job = by_id[r.job_id]
        assert len(r.gpus) == len(set(r.gpus)) == job.gpus
        if not job.may_span_nodes:
            assert len({node_of[g] for g in r.gpus}) == 1, r
        assert r.start_s >= job.submit_s - t0 - 1e-9
        if cluster.sharing:
            assert r.end_s - r.start_s >= (job.duration_s or 0.0) - 1e-6  # interference only slows down
        else:
            assert r.end_s - r.start_s == pytest.approx(job.duration_s)
        for g in r.gpus:
            per_gpu[g].append((r.start_s, r.end_s, r.mem_gb))
    for g, spans in per_gpu.items():
        if not cluster.sharing:
            spans.sort()
            for (_, end, _), (start, _, _) in itertools.pairwise(spans):
                assert end <= start + 1e-9, f"GPU {g} over-committed"
            continue
        for t, _, _ in spans:  # usage only grows at a start: check every start instant
            live = [(s, e, m) for s, e, m in spans if s <= t < e]
            assert len(live) <= cluster.max_jobs_per_gpu
            assert sum(cap[g] if m is None else m for _, _, m in live) <= cap[g] + 1e-9


_MIX = {1: 0.3, 2: 0.2, 4: 0.3, 8: 0.2}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("oracle", [False, True])
def test_random_workloads_exclusive_never_split_or_overcommit(seed: int, oracle: bool) -> None:
    cluster = load_cluster("4x8xA100-80GB")
    jobs = synth_poisson(60, seed=seed, load=0.9, total_gpus=32, gpu_mix=_MIX)
    assert {4, 8} <= {j.gpus for j in jobs}
    for policy, backfill, placer in itertools.product(POLICIES, BACKFILLS, placer_names()):
        res = simulate(jobs, cluster, policy, backfill, placer, oracle=oracle)
        _check_schedule(jobs, res)


@pytest.mark.parametrize("seed", [2, 3])
def test_random_workloads_sharing_never_overcommit_memory(seed: int) -> None:
    cluster = ClusterSpec("4x8xH200", tuple(NodeSpec(f"n{i}", 8, H200) for i in range(4)), sharing=True)
    jobs = synth_poisson(50, seed=seed, load=0.9, total_gpus=32, gpu_mix=_MIX)
    for policy, backfill, placer in itertools.product(POLICIES, BACKFILLS, PLACERS):
        res = simulate(jobs, cluster, policy, backfill, placer, interference=_Model(k=0.5))
        _check_schedule(jobs, res)


@pytest.mark.parametrize("seed", [4, 5])
def test_random_workloads_with_spanning_jobs(seed: int) -> None:
    # every third job may span nodes, and the wide ones among them (4 and 8 GPUs) double to 8 and 16
    cluster = load_cluster("4x8xA100-80GB")
    jobs = synth_poisson(60, seed=seed, load=0.9, total_gpus=32, gpu_mix=_MIX)
    jobs = [
        dataclasses.replace(j, gpus=j.gpus * 2 if j.gpus >= 4 else j.gpus, may_span_nodes=True)
        if i % 3 == 0
        else j
        for i, j in enumerate(jobs)
    ]
    assert any(j.gpus > 8 for j in jobs)
    for policy, backfill, placer in itertools.product(POLICIES, BACKFILLS, PLACERS):
        res = simulate(jobs, cluster, policy, backfill, placer)
        _check_schedule(jobs, res)


def test_random_workloads_cover_the_registries() -> None:
    # the loops above must not silently skip a policy, backfill mode or placer someone registers
    assert set(policy_names()) == set(POLICIES)
    assert set(backfill_names()) == set(BACKFILLS)
    assert set(PLACERS) <= set(placer_names())


# ---- 7. determinism -----------------------------------------------------------------------------------


@pytest.mark.parametrize("backfill", BACKFILLS)
@pytest.mark.parametrize("policy", POLICIES)
def test_equal_keys_keep_trace_order(policy: str, backfill: str) -> None:
    # One GPU; c, a, b are equal in every respect and submitted together: they run in trace order
    # c [0,10), a [10,20), b [20,30) under every policy, not sorted by id.
    jobs = [_job(n, 1, 10, mem_gb=10.0) for n in "cab"]
    got = _run(jobs, _cluster(1), backfill, policy=policy)
    assert [got[n][0] for n in "cab"] == [0.0, 10.0, 20.0]


def test_fifo_orders_by_submit_time_then_trace_order() -> None:
    # trace order: late (t=5), x (t=0), y (t=0): x [0,10), y [10,20), late [20,30)
    jobs = [_job("late", 1, 10, submit=5.0), _job("x", 1, 10), _job("y", 1, 10)]
    got = _run(jobs, _cluster(1), "none")
    assert [got[n][0] for n in ("x", "y", "late")] == [0.0, 10.0, 20.0]


@pytest.mark.parametrize("backfill", BACKFILLS)
def test_same_simulation_twice_gives_identical_records(backfill: str) -> None:
    cluster = load_cluster("4x8xA100-80GB")
    jobs = synth_poisson(80, seed=7, load=1.2, total_gpus=32, gpu_mix=_MIX)
    for policy in POLICIES:
        a = simulate(jobs, cluster, policy, backfill, "best-fit")
        b = simulate(list(jobs), cluster, policy, backfill, "best-fit")
        assert a.records == b.records
        assert a.metrics == b.metrics


# ---- 9. policies --------------------------------------------------------------------------------------


def _queue() -> list[Job]:
    # id  submit gpus est  true  mem   est*gpus
    # q0  0      1    300  1000  10    300
    # q1  1      4    100  50    70    400
    # q2  2      2    120  10    40    240
    # q3  3      8    50   5000  20    400
    rows = [(0, 1, 300, 1000, 10), (1, 4, 100, 50, 70), (2, 2, 120, 10, 40), (3, 8, 50, 5000, 20)]
    return [
        Job(f"q{i}", float(sub), g, mem_gb=float(m), duration_s=float(d), est_duration_s=float(e))
        for i, (sub, g, e, d, m) in enumerate(rows)
    ]


def _order(policy: str, jobs: list[Job], oracle: bool = False) -> list[str]:
    """The queue order a Scheduler keeps (nothing is scheduled)."""
    s = Scheduler(load_cluster("8xA100-80GB"), policy, "none", "first-fit", oracle=oracle)
    for jid, job in enumerate(jobs):
        s.submit(jid, job)
    return [jobs[j].id for j in s.waiting_jids()]


@pytest.mark.parametrize(
    ("policy", "oracle", "expected"),
    [
        ("fifo", False, ["q0", "q1", "q2", "q3"]),
        ("sjf", False, ["q3", "q1", "q2", "q0"]),  # est 50, 100, 120, 300
        ("sjf", True, ["q2", "q1", "q0", "q3"]),  # true 10, 50, 1000, 5000
        ("ljf", False, ["q0", "q2", "q1", "q3"]),
        ("ljf", True, ["q3", "q0", "q1", "q2"]),
        ("small-gpus-first", False, ["q0", "q2", "q1", "q3"]),
        ("large-gpus-first", False, ["q3", "q1", "q2", "q0"]),
        ("mem-desc", False, ["q1", "q2", "q3", "q0"]),
        ("gpu-time", False, ["q2", "q0", "q1", "q3"]),  # 240, 300, 400 (submit 1), 400 (submit 3)
        ("gpu-time", True, ["q2", "q1", "q0", "q3"]),  # 20, 200, 1000, 40000
    ],
)
def test_policy_orders_the_queue(policy: str, oracle: bool, expected: list[str]) -> None:
    assert _order(policy, _queue(), oracle) == expected


def test_sjf_falls_back_to_the_limit_then_to_endless() -> None:
    jobs = [
        Job("none", 0.0, 1, duration_s=1.0),  # neither estimate nor limit: last
        Job("limit", 0.0, 1, duration_s=1000.0, requested_s=60.0),  # limit 60
        Job("est", 0.0, 1, duration_s=1.0, est_duration_s=100.0, requested_s=10.0),  # estimate wins: 100
    ]
    assert _order("sjf", jobs) == ["limit", "est", "none"]
    assert _order("sjf", jobs, oracle=True) == ["none", "est", "limit"]  # true 1, 1 (trace order), 1000


def test_sjf_simulation_uses_estimates_unless_oracle() -> None:
    # One GPU. s-est is short by estimate (10) but truly long (100); s-true the other way round.
    # sjf: s-est [0,100), s-true [100,110). sjf oracle: s-true [0,10), s-est [10,110).
    jobs = [_job("s-true", 1, 10, est=100), _job("s-est", 1, 100, est=10)]
    got = _run(jobs, _cluster(1), "none", policy="sjf")
    assert got["s-est"][:2] == (0.0, 100.0) and got["s-true"][:2] == (100.0, 110.0)
    got = _run(jobs, _cluster(1), "none", policy="sjf", oracle=True)
    assert got["s-true"][:2] == (0.0, 10.0) and got["s-est"][:2] == (10.0, 110.0)


def test_mem_desc_puts_unknown_memory_first_and_uses_estimates() -> None:
    jobs = [
        Job("m30", 0.0, 1, mem_gb=30.0, duration_s=1.0),
        Job("m20-est50", 0.0, 1, mem_gb=20.0, est_mem_gb=50.0, duration_s=1.0),
        Job("unknown", 0.0, 1, duration_s=1.0),
    ]
    assert _order("mem-desc", jobs) == ["unknown", "m20-est50", "m30"]
    assert _order("mem-desc", jobs, oracle=True) == ["unknown", "m30", "m20-est50"]


_MIN = 60.0


@pytest.mark.parametrize(
    ("est_min", "mem", "cls"),
    [
        (20, 70.0, "short-high-mem"),
        (29.9, 5.0, "short-high-mem"),  # short beats low memory
        (30, 20.0, "very-long-low-mem"),  # not short and low memory (<= 20 GB)
        (30, 20.1, "long-moderate-mem"),
        (89.9, 60.0, "long-moderate-mem"),
        (90, 60.0, "very-long-low-mem"),  # very long, whatever the memory
        (40, None, "long-moderate-mem"),
        (None, 10.0, "long-moderate-mem"),  # unknown duration
    ],
)
def test_article_class_boundaries(est_min: float | None, mem: float | None, cls: str) -> None:
    est = None if est_min is None else est_min * _MIN
    assert article_class(Job("j", 0.0, 1, mem_gb=mem, est_duration_s=est)) == cls
    assert cls in ARTICLE_CLASSES


def test_article_orders_by_class_then_gpus_then_longest() -> None:
    rows = [  # id, est minutes, mem, gpus -> class
        ("a0", 20, 70.0, 1),  # short-high-mem
        ("a1", 40, 30.0, 2),  # long-moderate
        ("a2", 120, 10.0, 1),  # very-long
        ("a3", 45, 15.0, 1),  # very-long (not short, <= 20 GB)
        ("a4", 50, 30.0, 4),  # long-moderate
        ("a5", 100, 60.0, 1),  # very-long (>= 90 min)
        ("a6", None, 30.0, 1),  # long-moderate, endless
    ]
    jobs = [
        Job(i, 0.0, g, mem_gb=m, duration_s=1.0, est_duration_s=None if e is None else e * _MIN)
        for i, e, m, g in rows
    ]
    # very-long by longest first: a2 (120), a5 (100), a3 (45); long-moderate by most GPUs: a4 (4), a1 (2),
    # a6 (1); then short: a0
    assert _order("article", jobs) == ["a2", "a5", "a3", "a4", "a1", "a6", "a0"]


def test_policy_keys_are_static_and_registry_rejects_unknown_names() -> None:
    jobs = _queue()
    for name in POLICIES:
        p = get_policy(name)
        assert p.name == name and p.description
        keys = [p.key(j, i, False) for i, j in enumerate(jobs)]
        # a key depends on the job and its trace position only: another instance, having ranked the
        # jobs in the other order, on copies of the jobs, at a later time, gives the same keys
        other = get_policy(name)
        again = [other.key(dataclasses.replace(jobs[i]), i, False) for i in reversed(range(len(jobs)))]
        assert again[::-1] == keys
        # equal jobs keep trace order: a twin of q1 at a later position ranks right after it
        twin = dataclasses.replace(jobs[1], id="twin")
        assert (
            sorted([*keys, p.key(twin, 9, False)]).index(p.key(twin, 9, False))
            == sorted(keys).index(keys[1]) + 1
        )
        # the Scheduler keeps the order of the keys it computed at submit, however long the jobs wait
        s = Scheduler(load_cluster("8xA100-80GB"), name, "none", "first-fit")
        s.submit(99, Job("blocker", 0.0, 8, duration_s=1e6, est_duration_s=1e6))
        assert [st.jid for st in s.schedule(0.0)] == [99]
        for jid, job in enumerate(jobs):
            s.submit(jid, job)
        expected = sorted(range(len(jobs)), key=lambda i: (*keys[i], i))
        for now in (0.0, 10.0, 5e5):
            assert s.schedule(now) == [] and list(s.waiting_jids()) == expected
    with pytest.raises(UnknownNameError, match="fifo"):
        get_policy("lifo")


# ---- 10. metrics by hand ------------------------------------------------------------------------------


def test_metrics_of_a_three_job_schedule() -> None:
    # 1 node x 2 GPUs, fifo, no backfill.
    # J1 (submit 0, 1 GPU, 100 s): [0,100) GPU 0.
    # J2 (submit 10, 2 GPUs, 50 s): waits for J1: [100,150) GPUs 0,1.
    # J3 (submit 20, 1 GPU, 5 s): blocked behind J2: [150,155) GPU 0.
    jobs = [_job("J1", 1, 100), _job("J2", 2, 50, submit=10.0), _job("J3", 1, 5, submit=20.0)]
    res = simulate(jobs, _cluster(2), "fifo", "none", "first-fit")
    assert _sched(res) == {
        "J1": (0.0, 100.0, (0,)),
        "J2": (100.0, 150.0, (0, 1)),
        "J3": (150.0, 155.0, (0,)),
    }
    m = res.metrics
    assert m.jobs == 3
    assert m.makespan_s == 155.0
    # busy GPU-seconds: 1*100 + 2*50 + 1*5 = 205 over 2 GPUs * 155 s
    assert m.gpu_hours == pytest.approx(205 / 3600)
    assert m.utilization == pytest.approx(205 / 310)
    # JCT 100, 140, 135; wait 0, 90, 130 (numpy linear percentiles)
    assert m.mean_jct_s == pytest.approx(125.0)
    assert m.p50_jct_s == pytest.approx(135.0)
    assert m.p95_jct_s == pytest.approx(135 + 0.9 * 5)
    assert m.mean_wait_s == pytest.approx(220 / 3)
    assert m.p50_wait_s == pytest.approx(90.0)
    assert m.p95_wait_s == pytest.approx(90 + 0.9 * 40)
    # bounded slowdown (10 s bound): 100/100, 140/50, 135/max(5, 10) -> (1 + 2.8 + 13.5) / 3
    assert m.mean_bounded_slowdown == pytest.approx(17.3 / 3)
    # idle GPUs while a job waited: [10,100) one idle GPU (J2 waiting); [100,150) none idle
    assert m.idle_gpu_hours_while_waiting == pytest.approx(90 / 3600)
    # bound: gpu-area max(20 + 5/2, 10 + 105/2, 0 + 205/2) = 102.5
    assert m.lower_bound_s == pytest.approx(102.5)
    assert m.bound_ratio == pytest.approx(155 / 102.5)
    # busy GPUs from each instant on (the last entry at an instant wins)
    assert dict(res.util_timeline) == {0.0: 1, 100.0: 2, 150.0: 1, 155.0: 0}


def test_metrics_with_easy_backfill_of_the_same_jobs() -> None:
    # EASY: at 20 J3 (ends 25) runs on the idle GPU 1 before J2's reservation at 100: J3 [20,25) GPU 1.
    jobs = [_job("J1", 1, 100), _job("J2", 2, 50, submit=10.0), _job("J3", 1, 5, submit=20.0)]
    res = simulate(jobs, _cluster(2), "fifo", "easy", "first-fit")
    assert _sched(res)["J3"] == (20.0, 25.0, (1,))
    m = res.metrics
    assert m.makespan_s == 150.0
    assert m.utilization == pytest.approx(205 / 300)
    assert m.mean_wait_s == pytest.approx(90 / 3)
    # one idle GPU while J2 waited in [10,20) and [25,100); none in [20,25)
    assert m.idle_gpu_hours_while_waiting == pytest.approx(85 / 3600)
    # J3: JCT 5 over max(5, 10) = 0.5, bounded below by 1
    assert m.mean_bounded_slowdown == pytest.approx((1 + 2.8 + 1) / 3)


def test_utilization_counts_a_shared_gpu_once() -> None:
    # Two 60 GB jobs share one H200 for [0,100) (no interference): the GPU is busy 100 s, not 200.
    jobs = [_job("a", 1, 100, mem_gb=60.0), _job("b", 1, 100, mem_gb=60.0)]
    res = simulate(jobs, load_cluster("1xH200-141GB"), interference=_Model(0))
    assert res.metrics.utilization == pytest.approx(1.0)
    assert res.metrics.gpu_hours == pytest.approx(100 / 3600)


def test_metrics_are_relative_to_the_first_submit() -> None:
    jobs = [_job("a", 1, 10, submit=1000.0), _job("b", 1, 10, submit=1005.0)]
    res = simulate(jobs, _cluster(1), "fifo", "none")
    # a [0,10), b submitted at 5, waits 5: [10,20)
    assert _sched(res) == {"a": (0.0, 10.0, (0,)), "b": (10.0, 20.0, (0,))}
    assert res.metrics.makespan_s == 20.0
    assert res.metrics.mean_wait_s == pytest.approx(2.5)


# ---- the Scheduler driven by a clock (the local agent) ------------------------------------------------


def test_scheduler_step_by_step_with_an_external_clock() -> None:
    # 1 node x 2 GPUs, fifo + EASY. t=0: J0 (1 GPU, est 100) starts on GPU 0; J1 (2 GPUs) is the head,
    # reserved at 100; J2 (1 GPU, est 50) ends by 100: starts on GPU 1.
    s = Scheduler(_cluster(2), "fifo", "easy", "first-fit")
    s.submit(0, Job("J0", 0.0, 1, est_duration_s=100.0))
    s.submit(1, Job("J1", 0.0, 2, est_duration_s=10.0))
    s.submit(2, Job("J2", 0.0, 1, est_duration_s=50.0))
    assert s.schedule(0.0) == [Started(0, (0,)), Started(2, (1,))]
    assert s.waiting_count == 1 and list(s.waiting_jids()) == [1]
    assert s.schedule(10.0) == []
    s.finish(2)  # J2 ends early, at 40: J1 still needs GPU 0
    assert s.schedule(40.0) == []
    s.finish(0)  # J0 ends at 90, before its estimate
    assert s.schedule(90.0) == [Started(1, (0, 1))]
    assert s.waiting_count == 0 and s.slot(1).expected_end_s == 100.0
    s.finish(1)
    assert s.schedule(200.0) == [] and s.state.idle_total == 2


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_scheduler_job_past_its_estimate_blocks_backfill_that_would_delay_the_head(backfill: str) -> None:
    # 1 node x 2 GPUs. R (est 10) started at 0 on GPU 0 and is still running at 50 (past its estimate).
    # H (2 GPUs) could start the instant R ends; L (1 GPU, est 5) would hold GPU 1 past that: no start.
    s = Scheduler(_cluster(2), "fifo", backfill, "first-fit")
    s.submit(0, Job("R", 0.0, 1, est_duration_s=10.0))
    assert s.schedule(0.0) == [Started(0, (0,))]
    s.submit(1, Job("H", 50.0, 2, est_duration_s=10.0))
    s.submit(2, Job("L", 50.0, 1, est_duration_s=5.0))
    assert s.schedule(50.0) == []
    # a better estimate: R ends at 200. Now L (50 + 5 <= 200) fits before H's reservation.
    s.set_expected_end(0, 200.0)
    assert s.schedule(50.0) == [Started(2, (1,))]
    assert s.slot(2).expected_end_s == 55.0


def test_scheduler_job_without_estimate_never_backfills_but_still_runs_in_order() -> None:
    # 1 node x 2 GPUs. A (est 100) on GPU 0; H (2 GPUs) head reserved at 100; U (1 GPU, no estimate or
    # limit) plans as endless, so it may not backfill onto GPU 1.
    s = Scheduler(_cluster(2), "fifo", "easy", "first-fit")
    s.submit(0, Job("A", 0.0, 1, est_duration_s=100.0))
    s.submit(1, Job("H", 0.0, 2, est_duration_s=10.0))
    s.submit(2, Job("U", 0.0, 1))
    assert s.schedule(0.0) == [Started(0, (0,))]
    s.finish(0)
    assert s.schedule(100.0) == [Started(1, (0, 1))]
    s.finish(1)
    assert s.schedule(110.0) == [Started(2, (0,))]


def test_a_job_without_true_duration_is_a_clear_error_everywhere() -> None:
    from gpuplan.errors import ScheduleError
    from gpuplan.optimize.cpsat import solve_exact

    cluster = load_cluster("8xA100-80GB")
    jobs = [Job("done", 0.0, 1, duration_s=10.0), Job("pending", 0.0, 1)]
    with pytest.raises(
        ScheduleError, match=r"1 job\(s\) have no true duration \(first: 'pending'\).*fill duration_s"
    ):
        simulate(jobs, cluster)
    with pytest.raises(ScheduleError, match="to solve exactly needs duration_s"):
        solve_exact(jobs, cluster, "makespan", 0.1)
    with pytest.raises(ScheduleError, match="no jobs to simulate"):
        simulate([], cluster)

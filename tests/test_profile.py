"""The audit's pure functions (gpuplan.profile) on hand-made job lists with hand-computed answers."""

from __future__ import annotations

import json
import math
from itertools import count
from pathlib import Path

import pytest

from gpuplan.cluster import load_cluster
from gpuplan.core.placement import FirstFit
from gpuplan.errors import UnknownNameError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.profile import (
    ARTICLE_UNKNOWN,
    achieved,
    article_shares,
    audit_jobs,
    distribution,
    duration_class,
    gpu_class,
    histogram,
    memory_basis,
    memory_class,
    meta_seconds,
    profile_matrix,
    queue_of,
    state_counts,
    top_queues,
    top_users,
    what_if,
)
from gpuplan.profile import whatif as whatif_mod
from gpuplan.sim.engine import simulate
from gpuplan.synth import synth_article, synth_poisson

FIXTURES = Path(__file__).parent / "fixtures"
A100 = GpuSpec("A100-80GB", 80.0)


def _cluster(nodes: int, gpus: int, mem_gb: float = 80.0, sharing: bool = False) -> ClusterSpec:
    gpu = GpuSpec(f"GPU-{mem_gb:g}GB", mem_gb)
    return ClusterSpec("test", tuple(NodeSpec(f"n{i}", gpus, gpu) for i in range(nodes)), sharing=sharing)


# --------------------------------------------------------------------------- distributions, states


def test_distribution_hand_computed() -> None:
    d = distribution([5.0, 1.0, 4.0, 2.0, 3.0])
    # linear interpolation between order statistics: p90 = 4 + 0.6 * (5 - 4)
    assert (d.count, d.min, d.p50, d.max, d.mean) == (5, 1.0, 3.0, 5.0, 3.0)
    assert d.p90 == pytest.approx(4.6)
    assert d.p99 == pytest.approx(4.96)


def test_distribution_of_nothing_is_count_zero() -> None:
    d = distribution([])
    assert d.count == 0
    assert d.as_dict() == {
        "count": 0,
        "min": None,
        "p50": None,
        "p90": None,
        "p99": None,
        "max": None,
        "mean": None,
    }


def test_state_counts_use_state_then_phase_then_status() -> None:
    jobs = [
        Job("a", 0, 1, meta={"state": "COMPLETED"}),
        Job("b", 0, 1, meta={"state": "COMPLETED", "phase": "Running"}),
        Job("c", 0, 1, meta={"phase": "Running"}),
        Job("d", 0, 1, meta={"status": "failed"}),
        Job("e", 0, 1),
        Job("f", 0, 1, meta={"state": "  "}),
    ]
    assert state_counts(jobs) == {"COMPLETED": 2, "unknown": 2, "Running": 1, "failed": 1}
    assert list(state_counts(jobs)) == ["COMPLETED", "unknown", "Running", "failed"]  # most common first


def test_meta_seconds_reads_numbers_and_numeric_strings() -> None:
    job = Job(
        "a", 0, 1, meta={"start_s": "12.5", "end_s": 20, "bad": "soon", "nan": float("nan"), "flag": True}
    )
    assert meta_seconds(job, "start_s") == 12.5
    assert meta_seconds(job, "end_s") == 20.0
    for key in ("bad", "nan", "flag", "missing"):
        assert meta_seconds(job, key) is None


def test_histogram_log_and_linear() -> None:
    h = histogram([1.0, 10.0, 100.0, 1000.0], bins=3, log=True)
    assert h.edges == pytest.approx((1.0, 10.0, 100.0, 1000.0))
    assert h.counts == (1, 1, 2)  # the last bin is closed
    flat = histogram([7.0, 7.0])
    assert flat.counts == (2,)
    assert histogram([]).counts == ()


# --------------------------------------------------------------------------- classes


@pytest.mark.parametrize(
    ("duration_s", "expected"),
    [(0.0, "< 10 min"), (599.9, "< 10 min"), (600.0, "10 min–1 h"), (3599.0, "10 min–1 h"),
     (3600.0, "1–6 h"), (21599.0, "1–6 h"), (21600.0, "> 6 h"), (None, "unknown")],
)  # fmt: skip
def test_duration_class_bounds(duration_s: float | None, expected: str) -> None:
    assert duration_class(duration_s) == expected


@pytest.mark.parametrize(
    ("mem_gb", "expected"),
    [(0.0, "low"), (19.9, "low"), (20.0, "moderate"), (50.0, "moderate"), (50.1, "high"), (None, "unknown")],
)
def test_memory_class_absolute(mem_gb: float | None, expected: str) -> None:
    assert memory_class(mem_gb) == expected
    # an 80 GB cluster gives exactly the absolute bounds
    assert memory_class(mem_gb, memory_basis(_cluster(1, 8, 80.0))) == expected


def test_memory_class_relative_to_the_largest_gpu() -> None:
    basis = memory_basis(_cluster(1, 4, 32.0))  # 25 % and 62.5 % of 32 GB
    assert (basis.relative, basis.low_below_gb, basis.high_above_gb) == (True, 8.0, 20.0)
    assert [memory_class(m, basis) for m in (7.9, 8.0, 20.0, 21.0)] == ["low", "moderate", "moderate", "high"]
    mixed = ClusterSpec("m", (NodeSpec("a", 1, GpuSpec("s", 16.0)), NodeSpec("b", 1, GpuSpec("l", 160.0))))
    assert memory_basis(mixed).reference_gpu_mem_gb == 160.0
    assert memory_basis(None).relative is False


@pytest.mark.parametrize(
    ("gpus", "expected"), [(1, "1"), (2, "2–4"), (4, "2–4"), (5, "5–8"), (8, "5–8"), (9, "> 8")]
)
def test_gpu_class(gpus: int, expected: str) -> None:
    assert gpu_class(gpus) == expected


def _six_jobs() -> list[Job]:
    """GPU-hours: a 1/12, b 1, c 16, d 1/2, e unknown, f 1/12; total 17 + 2/3."""
    return [
        Job("a", 0, 1, mem_gb=10.0, duration_s=300.0, user="u1", meta={"queue": "short"}),
        Job("b", 0, 2, mem_gb=30.0, duration_s=1800.0, user="u2", meta={"partition": "gpu"}),
        Job("c", 0, 8, mem_gb=70.0, duration_s=7200.0, user="u1", meta={"queue": "long", "partition": "x"}),
        Job("d", 0, 1, mem_gb=12.0, duration_s=1800.0, meta={"vc": "vc7"}),
        Job("e", 0, 16),
        Job("f", 0, 1, mem_gb=15.0, duration_s=300.0, meta={"qos": "BE"}),
    ]


TOTAL_H = 17 + 2 / 3


def test_profile_matrix_hand_computed() -> None:
    m = profile_matrix(_six_jobs())
    cells = {k: (s.jobs, s.gpu_hours, s.gpu_hour_share) for k, s in m.cells.items()}
    assert list(cells) == [  # class order: duration, then memory, then GPUs
        ("< 10 min", "low", "1"),
        ("10 min–1 h", "low", "1"),
        ("10 min–1 h", "moderate", "2–4"),
        ("1–6 h", "high", "5–8"),
        ("unknown", "unknown", "> 8"),
    ]
    assert cells[("< 10 min", "low", "1")] == pytest.approx((2, 1 / 6, (1 / 6) / TOTAL_H))
    assert cells[("10 min–1 h", "low", "1")] == pytest.approx((1, 0.5, 0.5 / TOTAL_H))
    assert cells[("10 min–1 h", "moderate", "2–4")] == pytest.approx((1, 1.0, 1 / TOTAL_H))
    assert cells[("1–6 h", "high", "5–8")] == pytest.approx((1, 16.0, 16 / TOTAL_H))
    assert cells[("unknown", "unknown", "> 8")] == (1, 0.0, 0.0)
    assert (m.total_jobs, m.total_gpu_hours) == (6, pytest.approx(TOTAL_H))
    assert sum(s.gpu_hour_share for s in m.cells.values()) == pytest.approx(1.0)
    assert m.margin(2)["1"].jobs == 3
    assert m.margin(1)["low"].gpu_hours == pytest.approx(2 / 3)


def test_profile_matrix_relative_memory_moves_jobs_up() -> None:
    m = profile_matrix(_six_jobs(), _cluster(1, 8, 32.0))  # low < 8, high > 20 GB
    assert ("10 min–1 h", "moderate", "1") in m.cells  # d: 12 GB is moderate on a 32 GB GPU
    assert ("10 min–1 h", "high", "2–4") in m.cells  # b: 30 GB is high
    assert m.as_dict()["memory_basis"] == {
        "kind": "relative", "reference_gpu_mem_gb": 32.0, "low_below_gb": 8.0, "high_above_gb": 20.0,
    }  # fmt: skip


def test_article_shares_hand_computed() -> None:
    shares = {s.name: s for s in article_shares(_six_jobs())}
    assert list(shares) == ["very-long-low-mem", "long-moderate-mem", "short-high-mem", ARTICLE_UNKNOWN]
    # c: >= 90 min; d: >= 30 min with <= 20 GB; b: 30 min with 30 GB; a, f: < 30 min; e: no duration
    assert (shares["very-long-low-mem"].jobs, shares["very-long-low-mem"].gpu_hours) == (
        2,
        pytest.approx(16.5),
    )
    assert (shares["long-moderate-mem"].jobs, shares["long-moderate-mem"].gpu_hours) == (
        1,
        pytest.approx(1.0),
    )
    assert (shares["short-high-mem"].jobs, shares["short-high-mem"].gpu_hours) == (2, pytest.approx(1 / 6))
    assert (shares[ARTICLE_UNKNOWN].jobs, shares[ARTICLE_UNKNOWN].gpu_hours) == (1, 0.0)
    assert shares["very-long-low-mem"].gpu_hour_share == pytest.approx(16.5 / TOTAL_H)
    assert shares["short-high-mem"].job_share == pytest.approx(2 / 6)


def test_top_users_and_queues() -> None:
    jobs = _six_jobs()
    users = top_users(jobs, top=2)
    assert users.distinct == 3
    assert [(e.name, e.jobs) for e in users.entries] == [("u1", 2), ("u2", 1)]
    assert users.entries[0].gpu_hours == pytest.approx(16 + 1 / 12)
    assert users.entries[0].gpu_hour_share == pytest.approx((16 + 1 / 12) / TOTAL_H)
    assert [queue_of(j) for j in jobs] == ["short", "gpu", "long", "vc7", None, "BE"]
    queues = top_queues(jobs)
    assert [e.name for e in queues.entries] == [
        "long",
        "gpu",
        "vc7",
        "BE",
        "short",
        "(no queue)",
    ]  # ties: by name
    assert top_users([Job("x", 0, 1)]).as_dict() == {"distinct": 0, "top": []}
    assert top_queues([Job("x", 0, 1)]).entries == []


# --------------------------------------------------------------------------- achieved


def _history() -> list[Job]:
    """2 nodes x 4 GPUs; (submit, start, end, GPUs). Hand-computed in the tests below."""
    rows = [
        ("j1", 0, 0, 100, 3),
        ("j2", 0, 0, 200, 3),
        ("j3", 10, 100, 300, 4),
        ("j4", 150, 200, 250, 2),
        ("j5", 210, 250, 260, 2),
        ("j6", 270, 280, 290, 1),
    ]
    jobs = [Job(i, s, g, duration_s=e - st, meta={"start_s": st, "end_s": e}) for i, s, st, e, g in rows]
    jobs.append(Job("j7", 280, 8, meta={"state": "PENDING"}))  # never started: waits to the end (300)
    return jobs


def test_achieved_utilization_delay_and_peak() -> None:
    a = achieved(_history(), _cluster(2, 4), bins=3)
    assert a is not None
    assert (a.jobs_started, a.jobs_never_started) == (6, 1)
    assert a.window_s == (0.0, 300.0)
    # GPU-seconds held: 300 + 600 + 800 + 100 + 20 + 10 = 1830 of 8 x 300
    assert a.allocated_gpu_hours == pytest.approx(1830 / 3600)
    assert a.utilization == pytest.approx(1830 / 2400)
    assert a.peak_allocated_gpus == 7
    d = a.queue_delay_s  # 0, 0, 90, 50, 40, 10
    assert (d.count, d.p50, d.max, d.mean) == (6, 25.0, 90.0, pytest.approx(190 / 6))
    tl = a.timeline
    assert (tl.bin_s, tl.t_s) == (100.0, [0.0, 100.0, 200.0])
    assert tl.allocated_gpus == pytest.approx([6.0, 7.0, 5.3])
    assert tl.waiting_jobs == pytest.approx([0.9, 0.5, 0.7])
    assert tl.utilization == pytest.approx([0.75, 0.875, 0.6625])
    assert any("1 job(s) never started" in n for n in a.notes)


def test_idle_split_hand_computed() -> None:
    a = achieved(_history(), _cluster(2, 4))
    assert a is not None and a.idle_while_waiting is not None
    idle = a.idle_while_waiting
    # [10,100): 2 idle < j3's 4; [150,200): 1 idle < j4's 2; [280,300): 3 then 4 idle < j7's 8 (spans)
    assert idle.too_few_gpu_h == pytest.approx((2 * 90 + 1 * 50 + 3 * 10 + 4 * 10) / 3600)
    # [210,250): 2 idle >= j5's 2, but ceil(2 / 2 nodes) = 1 < 2: only if both free GPUs share a node
    assert idle.fragmentation_gpu_h == pytest.approx(2 * 40 / 3600)
    # [270,280): 4 idle, j6 needs 1 <= ceil(4 / 2): it fits whatever the placement
    assert idle.usable_gpu_h == pytest.approx(4 * 10 / 3600)
    assert idle.total_gpu_h == pytest.approx(420 / 3600)


def test_idle_split_spanning_jobs_count_only_gpus() -> None:
    jobs = [
        Job("run", 0, 6, duration_s=100, meta={"start_s": 0, "end_s": 100}),
        Job("wide", 10, 2, may_span_nodes=True, duration_s=10, meta={"start_s": 50, "end_s": 60}),
    ]
    a = achieved(jobs, _cluster(4, 2))  # 8 GPUs, 2 idle, the waiting job may take them anywhere
    assert a is not None and a.idle_while_waiting is not None
    assert a.idle_while_waiting.usable_gpu_h == pytest.approx(2 * 40 / 3600)
    assert a.idle_while_waiting.fragmentation_gpu_h == 0.0


def test_idle_split_counts_jobs_that_never_started_apart() -> None:
    """A pod pending until it is cancelled fits the idle GPUs yet never starts: its wait was not for
    GPUs, so those GPU-hours are not called usable (nor fragmentation) but counted apart."""
    jobs = [
        Job("run", 0, 6, duration_s=100, meta={"start_s": 0, "end_s": 100}),
        Job("late", 20, 1, duration_s=10, meta={"start_s": 60, "end_s": 70}),  # waits 20..60, fits 2 idle
        Job("held", 10, 1, meta={"state": "PENDING", "end_s": 90}),  # fits, pending 10..90, cancelled
        Job("wide", 0, 4, meta={"state": "PENDING", "end_s": 30}),  # never fits 2 idle: too few
    ]
    a = achieved(jobs, _cluster(4, 2))  # 8 GPUs; 2 idle while "run" holds 6 (1 more while "late" runs)
    assert a is not None and a.idle_while_waiting is not None
    idle = a.idle_while_waiting
    assert idle.usable_gpu_h == pytest.approx(2 * 40 / 3600)  # [20,60): "late" (started) fitted
    # [0,10): only "wide" waits; [10,20) and [60,70) with 1 idle and [70,90): only "held" fits
    assert idle.too_few_gpu_h == pytest.approx(2 * 10 / 3600)
    assert idle.never_started_fit_gpu_h == pytest.approx((2 * 10 + 1 * 10 + 2 * 20) / 3600)
    assert idle.fragmentation_gpu_h == 0.0
    parts = idle.usable_gpu_h + idle.fragmentation_gpu_h + idle.too_few_gpu_h + idle.never_started_fit_gpu_h
    assert idle.total_gpu_h == pytest.approx(parts)
    assert achieved(jobs[:2], _cluster(4, 2)).idle_while_waiting.never_started_fit_gpu_h == 0.0  # type: ignore[union-attr]


def test_achieved_without_start_times_is_none() -> None:
    assert achieved([Job("a", 0, 1, duration_s=5)], _cluster(1, 8)) is None


def test_achieved_odd_times_are_noted() -> None:
    jobs = [
        Job("early", 10, 1, meta={"start_s": 5, "end_s": 20}),  # starts before its submit
        Job("back", 0, 1, meta={"start_s": 30, "end_s": 25}),  # ends before it starts
        Job("open", 0, 2, meta={"start_s": 0}),  # still running: to the end of the trace
    ]
    a = achieved(jobs, _cluster(1, 2))
    assert a is not None
    assert a.queue_delay_s.min == 0.0
    assert a.window_s == (0.0, 30.0)
    assert a.allocated_gpu_hours == pytest.approx((15 + 0 + 2 * 30) / 3600)
    text = " ".join(a.notes)
    for needle in ("before their submit", "end before they start", "running until the end", "more than"):
        assert needle in text, (needle, a.notes)


def test_achieved_without_cluster_has_no_utilization() -> None:
    a = achieved(_history())
    assert a is not None
    assert (a.utilization, a.idle_while_waiting, a.timeline.utilization) == (None, None, None)
    assert a.peak_allocated_gpus == 7


# --------------------------------------------------------------------------- what-if


def test_what_if_matches_the_simulator_and_frees_gpu_hours() -> None:
    jobs = synth_article(0)
    cluster = load_cluster("8xA100-80GB")
    w = what_if(jobs, cluster)
    assert (w.jobs, w.excluded_no_duration, w.excluded_never_fit, w.error) == (80, 0, 0, None)
    assert sorted(r.policy for r in w.runs) == sorted(whatif_mod.POLICY_ORDER)
    assert w.fifo is not None and w.best is not None
    assert w.fifo.metrics.makespan_s == simulate(jobs, cluster, "fifo", "easy").metrics.makespan_s
    spans = [r.metrics.makespan_s for r in w.runs]
    assert spans == sorted(spans) and w.best is w.runs[0]
    assert w.time_saved_s == pytest.approx(w.fifo.metrics.makespan_s - w.best.metrics.makespan_s)
    assert w.time_saved_s is not None and w.time_saved_s > 0
    assert w.gpu_hours_freed == pytest.approx(w.time_saved_s * 8 / 3600)
    json.dumps(w.as_dict(), allow_nan=False)


def test_what_if_excludes_and_counts_jobs_it_cannot_replay() -> None:
    jobs = [
        Job("ok", 0, 1, duration_s=60),
        Job("ok2", 0, 2, duration_s=30),
        Job("running", 0, 1, meta={"censored": True}),
        Job("huge", 0, 16, duration_s=10),  # 16 GPUs on one 8-GPU node: never fits
        Job("fat", 0, 1, mem_gb=100.0, duration_s=10),  # 100 GB on 80 GB GPUs
    ]
    w = what_if(jobs, load_cluster("8xA100-80GB"))
    assert (w.jobs, w.excluded_no_duration, w.excluded_never_fit) == (2, 1, 2)
    notes = " ".join(w.notes)
    assert "1 job(s) without a duration" in notes
    assert "can never start" not in notes  # said once, on stderr, by the command (tests/test_cli_rules.py)


def test_what_if_with_nothing_to_replay_says_why() -> None:
    w = what_if([Job("a", 0, 1)], load_cluster("8xA100-80GB"))
    assert w.runs == [] and w.error is not None and "nothing to replay" in w.error
    assert w.as_dict()["gpu_hours_freed"] is None


def test_policies_with_the_same_order_are_simulated_once() -> None:
    # no estimates: sjf, gpu-time and mem-desc rank every job as endless / unknown, i.e. as FIFO does
    jobs = [Job(f"j{i}", float(i), 1 + i % 3, duration_s=100.0 + 37 * i) for i in range(12)]
    w = what_if(jobs, _cluster(1, 4))
    assert w.same_as["sjf"] == "fifo" and w.same_as["gpu-time"] == "fifo" and w.same_as["mem-desc"] == "fifo"
    # ljf and large-gpus-first: most GPUs first, as the article order does when every class is unknown
    assert w.same_as["ljf"] == "article" and w.same_as["large-gpus-first"] == "article"
    by_name = {r.policy: r for r in w.runs}
    assert by_name["sjf"].metrics == by_name["fifo"].metrics
    assert by_name["sjf"].metrics == simulate(jobs, _cluster(1, 4), "sjf", "easy").metrics
    assert "sjf" not in w.as_dict()["policies_simulated"]
    assert any("order the jobs exactly as fifo" in n for n in w.notes)


def test_unknown_policy_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownNameError, match=r"unknown policy 'fastest'.*gpu-time"):
        what_if([Job("a", 0, 1, duration_s=1)], _cluster(1, 8), policies=["fastest"])


def test_nobody_waits_no_best() -> None:
    """A replay where every job starts at its submit time: no policy was compared, none is "best"."""
    jobs = [Job(f"j{i}", float(i * 1000), 1, duration_s=10.0) for i in range(5)]  # nothing ever waits
    w = what_if(jobs, _cluster(1, 8))
    assert len(w.runs) > 1 and w.runs[0].policy == "fifo"  # ties rank FIFO first
    assert w.best is None and w.no_winner is not None and "no job waited" in w.no_winner
    assert w.time_saved_s is None and w.gpu_hours_freed is None
    assert w.as_dict()["best"] is None and w.as_dict()["no_winner"] == w.no_winner


def test_best_exists_when_jobs_wait() -> None:
    from gpuplan.synth import synth_article

    w = what_if(synth_article(0), _cluster(1, 8))  # 80 jobs at t=0 on 8 GPUs: the order matters
    assert w.no_winner is None and w.best is not None and w.time_saved_s is not None


def _ticking_clock(step_s: float):  # type: ignore[no-untyped-def]
    ticks = count()
    return lambda: next(ticks) * step_s


def test_budget_skips_policies_and_says_so() -> None:
    jobs = synth_article(0)
    w = what_if(jobs, load_cluster("8xA100-80GB"), budget_s=1.0, clock=_ticking_clock(10.0))
    assert [r.policy for r in w.runs if r.policy not in w.same_as] == ["fifo"]
    assert w.skipped and all(v.startswith("time budget") for v in w.skipped.values())
    assert any("not simulated within the 1 s budget" in n for n in w.notes)
    assert w.error is None and w.best is w.fifo


def test_budget_stops_a_long_fifo_run() -> None:
    jobs = synth_poisson(2500, seed=1, load=0.9, total_gpus=32)  # progress ticks every 2000 jobs
    w = what_if(jobs, load_cluster("4x8xA100-80GB"), budget_s=1.0, clock=_ticking_clock(100.0))
    assert w.runs == []
    assert w.error is not None and "FIFO replay did not complete" in w.error and "time budget" in w.error


def test_progress_reports_every_replayed_job() -> None:
    seen: list[tuple[int, str]] = []
    jobs = synth_article(1)
    w = what_if(
        jobs, load_cluster("8xA100-80GB"), policies=["fifo", "sjf"], progress=lambda n, d: seen.append((n, d))
    )
    simulated = len([r for r in w.runs if r.policy not in w.same_as])
    assert sum(n for n, _ in seen) == 80 * simulated
    assert {d for _, d in seen} <= {"simulating fifo+easy", "simulating sjf+easy"}


def test_count_only_cluster_gives_the_same_schedule() -> None:
    # 1-GPU nodes and jobs that are 1 GPU or may span: node boundaries do not matter (an SWF machine)
    cluster = _cluster(16, 1)
    jobs = [
        Job(f"j{i}", float(7 * i), 1 if i % 3 else 1 + i % 5 * 3, may_span_nodes=i % 3 == 0,
            duration_s=50.0 + (i * 37) % 400, requested_s=600.0)
        for i in range(120)
    ]  # fmt: skip
    assert whatif_mod._count_only(jobs, cluster).nodes[0].gpus == 16
    w = what_if(jobs, cluster, policies=["fifo", "sjf", "small-gpus-first"])
    assert any("one node of all the GPUs" in n for n in w.notes)
    for r in w.runs:
        direct = simulate(jobs, cluster, r.policy, "easy")
        mine = sorted((x.job_id, x.start_s, x.end_s) for x in r.records)
        assert mine == sorted((x.job_id, x.start_s, x.end_s) for x in direct.records), r.policy


def test_count_only_is_not_used_when_placement_matters() -> None:
    cluster = _cluster(2, 4)
    assert whatif_mod._count_only([Job("a", 0, 2, duration_s=1)], cluster) is cluster
    assert whatif_mod._count_only([Job("a", 0, 1, duration_s=1)], _cluster(2, 4, sharing=True)).sharing
    mixed = ClusterSpec("m", (NodeSpec("a", 1, GpuSpec("s", 16.0)), NodeSpec("b", 1, A100)))
    assert whatif_mod._count_only([Job("a", 0, 1, duration_s=1)], mixed) is mixed


class _FirstFitFullScan(FirstFit):
    """First-fit ranking every node (no early exit): what the shortcut must reproduce."""

    first_wins = False


def test_early_exit_first_fit_places_like_first_fit_on_a_sharing_cluster() -> None:
    cluster = load_cluster(str(FIXTURES / "clusters" / "mixed.toml"))
    jobs = synth_poisson(400, seed=3, load=1.3, total_gpus=cluster.total_gpus)
    for policy in ("fifo", "small-gpus-first"):
        ours = simulate(jobs, cluster, policy, "easy", "first-fit")
        base = simulate(jobs, cluster, policy, "easy", _FirstFitFullScan())
        assert ours.records == base.records, policy
        assert base.metrics.mean_wait_s > 0  # the queue was not empty, so placement mattered


# --------------------------------------------------------------------------- the whole audit


def test_audit_jobs_as_dict_is_plain_json() -> None:
    jobs = [*_history(), Job("c", 5, 1, duration_s=50, meta={"censored": True, "start_s": 5})]
    a = audit_jobs(jobs, _cluster(2, 4), top=3, bins=10)
    d = json.loads(json.dumps(a.as_dict(), allow_nan=False))
    assert set(d) == {
        "jobs", "censored_jobs", "cluster", "states", "distributions", "histograms", "matrix",
        "article_classes", "top_users", "top_queues", "achieved", "what_if", "notes",
    }  # fmt: skip
    assert (d["jobs"], d["censored_jobs"]) == (8, 1)
    assert d["states"] == {"unknown": 7, "PENDING": 1}
    assert set(d["distributions"]) == {"duration_s", "gpus", "mem_gb", "gpu_hours"}
    assert d["distributions"]["mem_gb"]["count"] == 0
    assert d["what_if"]["excluded_no_duration"] == 1
    assert len(d["achieved"]["timeline"]["t_s"]) == 10
    assert any("no job gives mem_gb" in n for n in d["notes"])


def test_audit_without_cluster_profiles_only() -> None:
    a = audit_jobs(_six_jobs())
    assert a.what_if is None and a.achieved is None
    assert a.matrix.basis.relative is False
    assert any("no cluster" in n for n in a.notes)
    assert math.isclose(a.distributions["gpu_hours"].max or 0.0, 16.0)

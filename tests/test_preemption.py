"""Preemption in the core and the preemptive policies, on schedules computed by hand."""

from __future__ import annotations

import math

import pytest

from gpuplan.core.preemption import DEFAULT_RESTART_OVERHEAD_S, PreemptionCost
from gpuplan.core.preemptive import Gittins, Las, Tiresias
from gpuplan.core.scheduler import Scheduler
from gpuplan.errors import ScheduleError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.engine import simulate
from gpuplan.sim.preempt import PreemptiveRun

ONE_GPU = ClusterSpec("1x1", (NodeSpec("n1", 1, GpuSpec("A100-80GB", 80.0)),))


def _times(result):  # type: ignore[no-untyped-def]
    return {r.job_id: (r.start_s, r.end_s) for r in result.records}


def _long_and_short(**meta: object) -> list[Job]:
    return [
        Job("long", 0.0, 1, duration_s=10_000.0, meta=dict(meta)),
        Job("short", 100.0, 1, duration_s=100.0),
    ]


def test_las_suspends_at_the_quantum_and_resumes_with_the_restart_overhead() -> None:
    # long holds the GPU until its attained service leaves level 0 (3600 GPU-s); short, level 0, takes
    # it then; long resumes at 3700 after 10 s of overhead with 6400 s of work left.
    r = simulate(_long_and_short(), ONE_GPU, "las", "none")
    assert _times(r) == {
        "long": (0.0, 3700.0 + DEFAULT_RESTART_OVERHEAD_S + 6400.0),
        "short": (3600.0, 3700.0),
    }
    assert r.metrics.preemptions == 1
    assert r.metrics.wasted_gpu_hours == pytest.approx(DEFAULT_RESTART_OVERHEAD_S / 3600)


def test_work_since_the_last_checkpoint_is_lost() -> None:
    # checkpoints every 1000 s: at 3600 s of progress 3000 s are saved, 600 lost; resuming costs 60 s.
    cost = PreemptionCost(restart_overhead_s=60.0, checkpoint_interval_s=1000.0)
    r = simulate(_long_and_short(), ONE_GPU, "las", "none", preemption=cost)
    assert _times(r)["long"] == (0.0, 3700.0 + 60.0 + 7000.0)
    assert r.metrics.wasted_gpu_hours == pytest.approx((600.0 + 60.0) / 3600)


def test_a_job_that_cannot_checkpoint_restarts_from_scratch() -> None:
    r = simulate(_long_and_short(checkpointable=False), ONE_GPU, "las", "none")
    assert _times(r)["long"] == (0.0, 3700.0 + 10_000.0)  # no overhead: its start-up is in its duration
    assert r.metrics.preemptions == 1 and r.metrics.wasted_gpu_hours == pytest.approx(1.0)


def test_tiresias_demotes_and_promotes_a_starving_job() -> None:
    # 2 queues split at 100 GPU-s, promotion after waiting 2x the last run.
    # 0-100 A (Q0 -> Q1 at 100); 100-200 B preempts A, Q1 at 200 (same queue as A: no preemption);
    # 300: A has waited 200 = 2 x 100: promoted to Q0, preempts B; A resumes (10 s overhead, 200 left),
    # back in Q1 at 400, ends 510; B resumes at 510 (10 s overhead, 100 left): ends 620.
    jobs = [Job("A", 0.0, 1, duration_s=300.0), Job("B", 1.0, 1, duration_s=300.0)]
    r = simulate(jobs, ONE_GPU, Tiresias((100.0,), promote_knob=2.0), "none")
    assert _times(r) == {"A": (0.0, 510.0), "B": (100.0, 620.0)}
    assert r.metrics.preemptions == 2
    assert r.metrics.wasted_gpu_hours == pytest.approx(2 * DEFAULT_RESTART_OVERHEAD_S / 3600)


def test_tiresias_without_promotion_lets_the_first_queue_finish_first() -> None:
    jobs = [Job("A", 0.0, 1, duration_s=300.0), Job("B", 1.0, 1, duration_s=300.0)]
    r = simulate(jobs, ONE_GPU, Tiresias((100.0,), promote_knob=0.0), "none")
    # A to Q1 at 100, B runs 100-200, then both in Q1: B keeps the GPU and ends at 400; A resumes.
    assert _times(r) == {"A": (0.0, 400.0 + 10.0 + 200.0), "B": (100.0, 400.0)}


def test_gittins_learns_the_distribution_from_finished_jobs() -> None:
    # j1, j2 (50 s each) finish with no history: first-come first-served (2 fallbacks). From {50, 50}
    # the index at 0 GPU-s is 2/100 and at 100 GPU-s 0 (outlived every sample): j3 runs from 100, falls
    # to index 0 at 200 and j4 (index 0.02) preempts it; j3 resumes at 250 with 900 s left.
    jobs = [
        Job("j1", 0.0, 1, duration_s=50.0),
        Job("j2", 0.0, 1, duration_s=50.0),
        Job("j3", 100.0, 1, duration_s=1000.0),
        Job("j4", 150.0, 1, duration_s=50.0),
    ]
    r = simulate(jobs, ONE_GPU, Gittins(first_gpu_s=100.0, levels=4, min_samples=2), "none")
    assert _times(r) == {"j1": (0.0, 50.0), "j2": (50.0, 100.0), "j3": (100.0, 1160.0), "j4": (200.0, 250.0)}
    assert r.estimates.without == 2 and r.metrics.preemptions == 1


def test_the_victim_is_the_lowest_ranked_job_and_only_where_needed() -> None:
    # 2 nodes x 1 GPU: a (level 1 at 3600) and b (level 0, started later) run; c arrives: a is suspended.
    spec = ClusterSpec("2x1", tuple(NodeSpec(f"n{i}", 1, GpuSpec("A", 80.0)) for i in (1, 2)))
    jobs = [
        Job("a", 0.0, 1, duration_s=8000.0),
        Job("b", 3000.0, 1, duration_s=8000.0),
        Job("c", 4000.0, 1, duration_s=100.0),
    ]
    r = simulate(jobs, spec, Las(), "none")
    t = _times(r)
    assert t["c"] == (4000.0, 4100.0) and t["b"] == (3000.0, 11000.0)
    assert t["a"] == (0.0, 4100.0 + 10.0 + 4000.0)


def test_scheduler_exposes_preemption_to_every_clock() -> None:
    sched = Scheduler(ONE_GPU, Las(quantum_gpu_s=100.0), "none")
    sched.submit(0, Job("a", 0.0, 1, meta={"checkpointable": False}), now=0.0)
    assert sched.decide(0.0).started[0].jid == 0
    assert sched.next_event_s() == pytest.approx(100.0)  # a leaves level 0 then
    sched.submit(1, Job("b", 150.0, 1), now=150.0)
    decided = sched.decide(150.0)
    assert [(p.jid, p.gpu_ids, p.action) for p in decided.preempted] == [(0, (0,), "requeue")]
    assert [s.jid for s in decided.started] == [1]
    assert sched.slot(0).service_gpu_s == 150.0 and sched.slot(0).preemptions == 1
    with pytest.raises(ScheduleError, match="decide"):
        sched.schedule(151.0)
    with pytest.raises(ScheduleError, match="not running"):
        sched.preempt(0, 151.0)


def test_a_level_change_with_nobody_waiting_waits_for_the_next_pass() -> None:
    """No pass at a level change while nothing waits (it could decide nothing); the next pass ranks
    the job at its own instant, so the victims are those of a pass at every change."""
    two = ClusterSpec("1x2", (NodeSpec("n1", 2, GpuSpec("A100-80GB", 80.0)),))
    sched = Scheduler(two, Las(quantum_gpu_s=100.0), "none")
    sched.submit(0, Job("a", 0.0, 1), now=0.0)
    assert [s.jid for s in sched.decide(0.0).started] == [0]
    assert sched.next_event_s() == pytest.approx(100.0)  # a leaves level 0 then
    assert sched.next_pass_s() == math.inf  # ... which moves no decision: nothing waits
    sched.submit(1, Job("c", 250.0, 1), now=250.0)
    assert [s.jid for s in sched.decide(250.0).started] == [1]
    assert sched.next_pass_s() == math.inf
    sched.submit(2, Job("b", 380.0, 1), now=380.0)
    assert sched.next_pass_s() == pytest.approx(300.0)  # a job waits: a's change to level 3 is due
    decided = sched.decide(380.0)  # a is at level 3 by now, c at level 1: a is the victim
    assert [p.jid for p in decided.preempted] == [0] and [s.jid for s in decided.started] == [2]
    assert (sched.slot(0).level, sched.slot(1).level) == (3.0, 1.0)


def test_a_run_alone_costs_a_pass_at_its_start_and_its_end() -> None:
    sched = Scheduler(ONE_GPU, Las(quantum_gpu_s=10.0), "none")
    run = PreemptiveRun([Job("a", 0.0, 1, duration_s=100.0)], sched, PreemptionCost())
    run.loop()
    assert [e[1] for e in run.events] == ["start", "finish"] and run.events[-1][0] == 100.0
    assert run.passes == 2  # not one more per quantum it crossed


def test_preemptive_policies_need_an_exclusive_cluster() -> None:
    sharing = ClusterSpec("s", ONE_GPU.nodes, sharing=True)
    with pytest.raises(ScheduleError, match="exclusive"):
        simulate(_long_and_short(), sharing, "las", "none")


def test_non_preemptive_policies_decide_what_schedule_starts() -> None:
    a, b = Scheduler(ONE_GPU, "fifo", "easy"), Scheduler(ONE_GPU, "fifo", "easy")
    for s in (a, b):
        s.submit(0, Job("x", 0.0, 1, duration_s=5.0))
    assert a.decide(0.0).started == b.schedule(0.0) and a.decide(0.0).preempted == []


@pytest.mark.parametrize("policy", ["las:quantum=60", "tiresias:threshold=120", "gittins:first=30"])
def test_a_preemptive_run_makes_no_cyclic_collection_and_leaves_the_collector_on(policy: str) -> None:
    """As a non-preemptive run (sim/engine.py): the collector is off for the run (it allocates records
    at every start and preemption, and each collection would scan every job), on again after it. The
    set-up before the run may collect as a fifo run's does (with the collector on during the run, these
    runs collected 5-14 times)."""
    import gc

    jobs = [Job(f"j{i}", 7.0 * i, 1 + i % 2, duration_s=50.0 + 13 * (i % 17)) for i in range(400)]
    two = ClusterSpec("1x2", (NodeSpec("n1", 2, GpuSpec("A100-80GB", 80.0)),))

    def collections(name: str) -> tuple[int, int]:
        seen: list[str] = []

        def note(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                seen.append(phase)

        gc.collect()
        gc.callbacks.append(note)
        try:
            r = simulate(jobs, two, name, "none")
        finally:
            gc.callbacks.remove(note)
        return len(seen), r.metrics.preemptions

    assert gc.isenabled()
    plain, _ = collections("fifo")
    made, preemptions = collections(policy)
    assert gc.isenabled()
    assert preemptions > 100
    assert made <= plain + 1


@pytest.mark.parametrize(
    ("meta", "mode", "checkpointable"),
    [
        ({}, "checkpoint", True),
        ({"preempt": "suspend"}, "suspend", True),
        ({"preempt": "requeue"}, "requeue", False),
        ({"preempt": "never", "checkpointable": False}, "never", False),
        ({"checkpointable": False}, "requeue", False),
        ({"preempt": "sometimes"}, "checkpoint", True),  # not a mode: the default
        ({"class": "fine-tune"}, "checkpoint", True),
    ],
)
def test_a_jobs_preempt_mode_and_checkpointing_come_from_its_meta(
    meta: dict[str, object], mode: str, checkpointable: bool
) -> None:
    """`Job.preempt_mode` and `Job.checkpointable` are the rule the preemptive clocks read per job
    (gpuplan/preempt_modes.py, compiled): the same answers for the same meta."""
    from gpuplan.preempt_modes import checkpointable_of, preempt_mode_of

    job = Job("j", 0.0, 1, meta=dict(meta))
    assert (job.preempt_mode, job.checkpointable) == (mode, checkpointable)
    assert (preempt_mode_of(job.meta), checkpointable_of(job.meta)) == (mode, checkpointable)

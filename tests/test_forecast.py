"""The forecast (core/forecast.py) against the simulator's clock: from a random live state, if the running
jobs end at their expected ends and nothing new arrives, every job starts exactly when and where the
forecast said (every policy x backfill x placer, exclusive and sharing clusters), and ends when it said.
Preemptive policies (las, tiresias, gittins) are checked from a queue with nothing running, the live
state the simulator's preemptive loop starts from."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given

from forecast_cases import NOW_S, PREEMPTIVE, LiveCase, live_cases
from gpuplan.cluster import load_cluster
from gpuplan.core.booking import booked_mem_gb
from gpuplan.core.forecast import Deferred, forecast
from gpuplan.core.scheduler import Scheduler
from gpuplan.core.view import WaitReason
from gpuplan.model import Job
from gpuplan.sim.engine import RunningJob, simulate
from invariant_cases import BACKFILLS, INVARIANTS, PLACERS, POLICIES


def _live_scheduler(case: LiveCase, backfill: str) -> Scheduler:
    """The Scheduler as the simulator seeds it from a live state (sim/engine.py, `_Run.adopt`): waiting
    jobs by index, running ones after them; times from now."""
    s = Scheduler(case.cluster, case.policy, backfill, case.placer)
    order = sorted(range(len(case.waiting)), key=lambda i: (case.waiting[i].submit_s, i))
    for i in order:
        s.submit(i, case.waiting[i], book_mem_gb=booked_mem_gb(case.waiting[i], False))
    base = len(case.waiting)
    for k, (job, gpus, start, end) in enumerate(case.running):
        s.adopt(base + k, job, gpus, start - NOW_S, end - NOW_S, booked_mem_gb(job, False))
    return s


def _check_static(case: LiveCase, backfill: str) -> None:
    sched = _live_scheduler(case, backfill)
    fc = forecast(sched, 0.0)
    running = [RunningJob(j, g, s, e - NOW_S, e) for j, g, s, e in case.running]
    if not case.waiting:
        assert all(f.state == "running" for f in fc)
        return
    result = simulate(case.waiting, case.cluster, case.policy, backfill, case.placer,
                      running=running, now_s=NOW_S)  # fmt: skip
    by_id = {r.job_id: r for r in result.records}
    for i, job in enumerate(case.waiting):
        got, rec = fc[i], by_id[job.id]
        assert (got.start_s, got.gpu_ids) == (rec.start_s, rec.gpus), (i, got, rec)
        assert got.end_s == rec.end_s and got.end_s >= got.start_s, (i, got, rec)


def _check_preemptive(case: LiveCase, placer: str) -> None:
    jobs = [Job(j.id, 0.0, j.gpus, j.mem_gb, j.duration_s, j.est_duration_s, j.est_mem_gb,
                may_span_nodes=j.may_span_nodes, meta=j.meta) for j in case.waiting]  # fmt: skip
    if not jobs:
        return
    sched = Scheduler(case.cluster, case.policy, case.backfill, placer)
    for i, job in enumerate(jobs):
        sched.submit(i, job, booked_mem_gb(job, False), now=0.0)
    fc = forecast(sched, 0.0)
    result = simulate(jobs, case.cluster, case.policy, case.backfill, placer)
    by_id = {r.job_id: r for r in result.records}
    for i, job in enumerate(jobs):
        got, rec = fc[i], by_id[job.id]
        assert (got.start_s, got.end_s) == (rec.start_s, rec.end_s), (i, got, rec)


# Each drawn live state is checked under every backfill mode x placer (static policies) or every
# placer (preemptive ones ignore backfill): 250 x 9 + 120 x 3 cases, the drawing paid once per state.
@INVARIANTS(250)
@given(live_cases(policies=(*POLICIES, "fairshare")))
def test_forecast_is_the_simulated_schedule(case: LiveCase) -> None:
    for backfill in BACKFILLS:
        for placer in PLACERS:
            _check_static(replace(case, placer=placer), backfill)


@INVARIANTS(120)
@given(live_cases(policies=PREEMPTIVE))
def test_forecast_of_a_preemptive_policy_is_the_simulated_schedule(case: LiveCase) -> None:
    for placer in PLACERS:
        _check_preemptive(case, placer)


def test_backfill_ahead_is_forecast_and_explained() -> None:
    """The issue's case: A (4 GPUs, 8 s) and B (4 GPUs, 3 s) run; W1 (8 GPUs) and W2 (4 GPUs, 2 s)
    wait: EASY starts W2 at B's end, before W1, and the forecast says so and why."""
    s = Scheduler(load_cluster("8xA100-80GB"), "fifo", "easy", "first-fit")
    s.adopt(1, Job("A", 0, 4, requested_s=8), (0, 1, 2, 3), 0.0)
    s.adopt(2, Job("B", 0, 4, requested_s=3), (4, 5, 6, 7), 0.0)
    s.submit(3, Job("W1", 0.5, 8, requested_s=10))
    s.submit(4, Job("W2", 0.6, 4, requested_s=2))
    version = s.version
    fc = forecast(s, 1.0)
    assert s.version == version and s.waiting_count == 2  # the live scheduler is untouched
    assert (fc[4].start_s, fc[4].end_s, fc[4].gpu_ids) == (3.0, 5.0, (4, 5, 6, 7))
    assert (fc[3].start_s, fc[3].end_s, fc[3].reason, fc[4].reason) == (8.0, 18.0, "Resources", "Priority")
    assert [(f.jid, f.gpus, f.at_s, f.basis) for f in fc.waiting_for(3)] == [
        (4, 4, 5.0, "time limit"), (1, 4, 8.0, "time limit")
    ]  # fmt: skip
    assert fc.ahead(3) == [4]
    text = fc.explain(3)
    assert "job 4 frees 4 at 5 (its time limit), job 1 frees 4 at 8" in text
    assert "backfill starts 1 job(s) ranked after it ahead of it (4): 1 end by its start" in text


def test_deferred_and_held_jobs() -> None:
    """Dependencies enter the queue when their job ends, begin times when they come; held jobs never."""
    s = Scheduler(load_cluster("8xA100-80GB"), "fifo", "easy", "first-fit")
    s.adopt(1, Job("long", 0, 4, requested_s=30), (0, 1, 2, 3), 0.0)
    s.adopt(2, Job("short", 0, 4, requested_s=5), (4, 5, 6, 7), 0.0)
    fc = forecast(
        s, 1.0,
        deferred=[Deferred(4, Job("dep", 1, 2, requested_s=3), after=(2,)),
                  Deferred(5, Job("later", 1, 2, requested_s=3), begin_s=20.0),
                  Deferred(7, Job("dep-of-dep", 1, 2, requested_s=3), after=(4,))],
        held={6: "JobHeldUser"},
    )  # fmt: skip
    assert (fc[4].state, fc[4].reason, fc[4].start_s, fc[4].end_s) == ("deferred", "Dependency", 5.0, 8.0)
    assert (fc[7].start_s, fc[7].end_s) == (8.0, 11.0)
    assert (fc[5].reason, fc[5].start_s, fc[5].end_s) == ("BeginTime", 20.0, 23.0)
    assert (fc[6].state, fc[6].reason, fc[6].start_s) == ("held", "JobHeldUser", None)
    assert [(f.jid, f.at_s) for f in fc.waiting_for(4)] == [(2, 5.0)]
    assert "waits until job 2 ends at 5" in fc.explain(4)


def test_endless_jobs_and_rule_reasons() -> None:
    """A job behind a job that never ends has no expected start, and says which job it waits for; an
    eligibility rule's reason (a quota) wins over Resources."""
    s = Scheduler(load_cluster("8xA100-80GB"), "fifo", "easy", "first-fit")
    s.adopt(1, Job("endless", 0, 4), (0, 1, 2, 3), 0.0)
    s.submit(3, Job("big", 1, 8, requested_s=10))
    s.submit(4, Job("small", 1, 2, requested_s=10))
    s.wait_rules.append(
        lambda v, slot, now: (
            WaitReason("AssocGrpGRES", "quota: alice uses 4 of 4 GPUs") if slot.jid == 4 else None
        )
    )
    fc = forecast(s, 1.0)
    assert (fc[3].reason, fc[3].start_s, fc[3].end_s) == ("Resources", None, None)
    assert (fc[4].reason, fc[4].detail) == ("AssocGrpGRES", "quota: alice uses 4 of 4 GPUs")
    assert fc[1].end_s is None
    assert [f.jid for f in fc.waiting_for(3)] == [1]
    assert "no expected start" in fc.explain(3) and "quota: alice" in fc.explain(4)


def test_a_job_record_copy_carries_every_field() -> None:
    """`JobSlot.copy` (a fork's records) names each field: one added later must be added there too."""
    from dataclasses import fields

    from gpuplan.core.state import Need
    from gpuplan.core.view import JobSlot

    values = {
        "jid": 7,
        "job": Job("j", 1.0, 2),
        "gpus": 2,
        "mem_gb": 10.0,
        "plan_s": 30.0,
        "may_span": True,
        "key": (1.0, 7),
        "alloc": (3, 4),
        "start_s": 5.0,
        "expected_end_s": 35.0,
        "service_gpu_s": 6.0,
        "run_since_promotion_s": 7.0,
        "waiting_since_s": 8.0,
        "preemptions": 9,
        "suspended_on": (5,),
        "level": 2.0,
        "reservation": {0: 1},
        "need": Need(100.0, 1.0, None),
    }
    assert sorted(values) == sorted(f.name for f in fields(JobSlot)), "a new field: give it a value here"
    slot = JobSlot(**values)  # type: ignore[arg-type]
    copied = slot.copy()
    assert copied is not slot
    assert {f.name: getattr(copied, f.name) for f in fields(JobSlot)} == values

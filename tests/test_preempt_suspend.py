"""Preemption modes in the core, on schedules computed by hand: a job suspended in place (SIGSTOP)
keeps its GPU memory, so only a newcomer whose memory fits beside it may take its GPUs, and it resumes
on the same GPUs with nothing lost; `never` is never preempted."""

from __future__ import annotations

import pytest

from gpuplan.core.preemption import PreemptionCost
from gpuplan.core.preemptive import Las
from gpuplan.core.scheduler import Scheduler
from gpuplan.errors import ScheduleError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.preempt import PreemptiveRun

ONE_GPU = ClusterSpec("1x1", (NodeSpec("n1", 1, GpuSpec("A100-80GB", 80.0)),))


def _run(jobs: list[Job], quantum_gpu_s: float = 3600.0) -> PreemptiveRun:
    run = PreemptiveRun(jobs, Scheduler(ONE_GPU, Las(quantum_gpu_s), "none"), PreemptionCost())
    run.loop()
    state = run.sched.state
    assert state.idle_total == 1 and not state.suspended_n and not state.suspended_gb, "holds left behind"
    return run


def _times(run: PreemptiveRun) -> dict[str, tuple[float, float]]:
    return {r.job_id: (r.start_s, r.end_s) for r in run.records}


def _pair(long_mem: float | None, short_mem: float | None, mode: str = "suspend") -> list[Job]:
    return [
        Job("long", 0.0, 1, mem_gb=long_mem, duration_s=10_000.0, meta={"preempt": mode}),
        Job("short", 100.0, 1, mem_gb=short_mem, duration_s=100.0, meta={"preempt": mode}),
    ]


def test_a_suspended_job_keeps_its_memory_and_resumes_in_place_without_loss() -> None:
    # long (30 GB) runs until it leaves level 0 at 3600; short (40 GB) fits beside its 30 GB: long is
    # stopped in place, short runs 3600-3700, long resumes at 3700 with no overhead: 6400 s left.
    run = _run(_pair(30.0, 40.0))
    assert _times(run) == {"long": (0.0, 10_100.0), "short": (3600.0, 3700.0)}
    assert run.preemptions == 1 and run.wasted_gpu_s == 0.0
    assert run.events == [
        (0.0, "start", "long"),
        (3600.0, "preempt:suspend", "long"),
        (3600.0, "start", "short"),
        (3700.0, "finish", "short"),
        (3700.0, "resume", "long"),
        (10_100.0, "finish", "long"),
    ]


@pytest.mark.parametrize(("long_mem", "short_mem"), [(30.0, 60.0), (None, 10.0), (30.0, None)])
def test_a_newcomer_that_does_not_fit_beside_the_memory_preempts_nothing(
    long_mem: float | None, short_mem: float | None
) -> None:
    run = _run(_pair(long_mem, short_mem))
    assert _times(run) == {"long": (0.0, 10_000.0), "short": (10_000.0, 10_100.0)}
    assert run.preemptions == 0


def test_never_is_never_preempted_and_checkpoint_pays_the_overhead() -> None:
    assert _run(_pair(30.0, 40.0, "never")).preemptions == 0
    run = _run(_pair(30.0, 40.0, "checkpoint"))
    assert _times(run)["long"] == (0.0, 3700.0 + 10.0 + 6400.0)  # frees the GPU: any memory fits
    assert run.events[1] == (3600.0, "preempt:checkpoint", "long")
    assert run.events[4] == (3700.0, "start", "long"), "a checkpointed job restarts, it does not resume"


def test_a_suspended_job_preempts_the_job_beside_it_when_that_one_ranks_below() -> None:
    # quantum 100: A (30 GB) runs 0-150 (level 1 at 100); B (40 GB, level 0) arrives at 150 and runs
    # beside A's memory. B reaches level 2 at 350, above A's 1: B is stopped in place and A resumes
    # (level 1 -> 2 at 400, 3 at 500, above B's 2: they swap again). So they swap every 200 s while
    # both GPUs' memory stays put: A's progress 150, 300, 500, 700, 900, 1000 at 150, 500, 900, 1300,
    # 1700, 2000; B's 200, 400, 600, 800, 1000 at 350, 700, 1100, 1500, 1900.
    jobs = [
        Job("A", 0.0, 1, mem_gb=30.0, duration_s=1000.0, meta={"preempt": "suspend"}),
        Job("B", 150.0, 1, mem_gb=40.0, duration_s=1000.0, meta={"preempt": "suspend"}),
    ]
    run = _run(jobs, quantum_gpu_s=100.0)
    expected = [(0.0, "start", "A"), (150.0, "preempt:suspend", "A"), (150.0, "start", "B")]
    for t, out, back in [(350.0, "B", "A"), (500.0, "A", "B"), (700.0, "B", "A"), (900.0, "A", "B"),
                         (1100.0, "B", "A"), (1300.0, "A", "B"), (1500.0, "B", "A"), (1700.0, "A", "B")]:  # fmt: skip
        expected += [(t, "preempt:suspend", out), (t, "resume", back)]
    expected += [(1900.0, "finish", "B"), (1900.0, "resume", "A"), (2000.0, "finish", "A")]
    assert run.events == expected
    assert run.wasted_gpu_s == 0.0 and run.preemptions == 9


def test_withdrawing_a_suspended_job_frees_its_memory_and_an_agent_can_reseed_one() -> None:
    sched = Scheduler(ONE_GPU, Las(100.0), "none")
    sched.submit(0, Job("a", 0.0, 1, mem_gb=50.0, meta={"preempt": "suspend"}), now=0.0)
    sched.decide(0.0)
    assert sched.preempt(0, 10.0).action == "suspend"
    state = sched.state
    assert state.suspended_gb == {0: 50.0} and state.idle_total == 0
    assert state.fits_beside_suspended(0, 30.0) and not state.fits_beside_suspended(0, 31.0)
    sched.withdraw(0)
    assert state.idle_total == 1 and not state.suspended_n
    # a restarted agent: the job waits suspended on GPU 0 with 250 GPU-s attained (level 2)
    sched.submit_suspended(1, Job("b", 0.0, 1, mem_gb=50.0, meta={"preempt": "suspend"}), (0,), now=20.0)
    sched.restore_progress(1, 250.0, 250.0, 3, now=20.0)
    assert sched.slot(1).level == 2.0 and sched.slot(1).preemptions == 3
    sched.submit(2, Job("c", 20.0, 1, mem_gb=40.0), now=20.0)  # level 0, too big to fit beside b
    decided = sched.decide(20.0)
    assert decided.preempted == [] and [(s.jid, s.gpu_ids) for s in decided.started] == [(1, (0,))]
    assert not state.suspended_n, "resumed: its hold became the running job's booking"


def test_a_never_job_cannot_be_preempted_by_hand() -> None:
    sched = Scheduler(ONE_GPU, Las(100.0), "none")
    sched.submit(0, Job("a", 0.0, 1, meta={"preempt": "never"}), now=0.0)
    sched.decide(0.0)
    with pytest.raises(ScheduleError, match="never"):
        sched.preempt(0, 5.0)

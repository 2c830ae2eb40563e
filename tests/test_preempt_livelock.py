"""Preemptive clocks always end: jobs that preempt each other without progress (a LAS level at most half
the restart overhead, docs/preemption.md) make the simulator fail with a one-line error and the forecast
stop with no expected start or end for the jobs left, instead of hanging."""

from __future__ import annotations

import pytest

from gpuplan.core import preemption
from gpuplan.core.forecast import Deferred, forecast
from gpuplan.core.preemptive import Gittins, Las, Tiresias
from gpuplan.core.scheduler import Scheduler
from gpuplan.errors import ScheduleError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.engine import simulate

ONE_GPU = ClusterSpec("1x1", (NodeSpec("n1", 1, GpuSpec("A100-80GB", 80.0)),))
TWO = [Job("A", 0.0, 1, duration_s=100.0), Job("B", 0.0, 1, duration_s=100.0)]


@pytest.mark.parametrize("quantum_gpu_s", [0.5, 5.0])
def test_a_las_level_at_most_half_the_overhead_fails_instead_of_hanging(quantum_gpu_s: float) -> None:
    with pytest.raises(ScheduleError) as err:
        simulate(TWO, ONE_GPU, Las(quantum_gpu_s=quantum_gpu_s), "none")
    text = str(err.value)
    assert "\n" not in text and "without progress" in text and "half the restart overhead" in text
    assert f"las:quantum={quantum_gpu_s:g}" in text and "2 job(s) still unfinished" in text


def test_a_quantum_just_above_half_the_overhead_still_ends() -> None:
    """quantum 6 > 10 / 2: each run keeps 2 s of progress (12 s of service less 10 s of overhead)."""
    res = simulate(TWO, ONE_GPU, Las(quantum_gpu_s=6.0), "none")
    assert (res.metrics.makespan_s, res.metrics.preemptions) == (1090.0, 89)


@pytest.mark.parametrize(
    "policy",
    [Tiresias(thresholds_gpu_s=tuple(float(k) for k in range(1, 200))), Gittins(first_gpu_s=0.5)],
    ids=["tiresias-199-levels-of-1s", "gittins-first-0.5"],
)
def test_tiresias_and_gittins_with_tiny_quanta_end(policy: Tiresias | Gittins) -> None:
    """Their levels are finite (K queues, a 24-point grid): past the last, jobs of one level never
    preempt each other, so tiny quanta cost preemptions but the run ends."""
    res = simulate(TWO, ONE_GPU, policy, "none")
    assert {r.job_id for r in res.records} == {"A", "B"}
    assert 200.0 < res.metrics.makespan_s < 200.0 + 10.0 * (res.metrics.preemptions + 1)


def test_a_forecast_of_jobs_that_preempt_each_other_returns_and_says_why() -> None:
    s = Scheduler(ONE_GPU, Las(quantum_gpu_s=5.0), "none", "first-fit")
    s.submit(1, Job("A", 0.0, 1, requested_s=100.0), now=0.0)
    s.submit(2, Job("B", 0.0, 1, requested_s=100.0), now=0.0)
    fc = forecast(s, 0.0)
    assert "without the queue draining" in fc.stopped and "3000 scheduler passes" in fc.stopped
    assert s.waiting_count == 2  # the live scheduler is untouched
    for jid in (1, 2):
        assert fc[jid].end_s is None and fc[jid].detail == fc.stopped
    assert fc[1].start_s == 0.0  # what the forecast did see stays


def test_the_forecast_safety_net_leaves_jobs_it_did_not_reach_without_a_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 100 s job whose LAS level changes every 10 s, and a job that waits for it: with a net of 3
    passes per job and one job's worth (9 in all) the forecast stops at 90 s, before the first ends; the first keeps its
    start and has no expected end, the second has no expected start. Without the net both are known."""
    s = Scheduler(ONE_GPU, Las(quantum_gpu_s=10.0), "none", "first-fit")
    s.submit(1, Job("long", 0.0, 1, requested_s=100.0), now=0.0)
    after = [Deferred(2, Job("next", 0.0, 1, requested_s=5.0), after=(1,))]
    whole = forecast(s, 0.0, deferred=after)
    assert whole.stopped == "" and [(whole[j].start_s, whole[j].end_s) for j in (1, 2)] == [
        (0.0, 100.0), (100.0, 105.0)
    ]  # fmt: skip
    monkeypatch.setattr(preemption, "MAX_PASSES_PER_JOB", 3)
    cut = forecast(s, 0.0, deferred=after)
    assert cut.stopped.startswith("the forecast stopped at 90 s after 9 scheduler passes (3 per job)")
    assert (cut[1].start_s, cut[1].end_s, cut[1].detail) == (0.0, None, cut.stopped)
    assert (cut[2].start_s, cut[2].end_s, cut[2].detail) == (None, None, cut.stopped)

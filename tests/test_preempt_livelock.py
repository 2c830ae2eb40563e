"""Preemptive clocks always end. LAS levels at most half the restart overhead made two jobs preempt each
other without progress, forever (docs/preemption.md): the pass's lease stops that; and a safety net
(MAX_PASSES_PER_JOB) makes the simulator fail with a one-line error and a forecast stop with no
expected start or end for the jobs left, whatever a policy does."""

from __future__ import annotations

import pytest

from gpuplan.core import preemption
from gpuplan.core.forecast import forecast
from gpuplan.core.preemption import DEFAULT_RESTART_OVERHEAD_S, PreemptionCost
from gpuplan.core.preemptive import Gittins, Las, Tiresias
from gpuplan.core.scheduler import Scheduler
from gpuplan.errors import ScheduleError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.engine import simulate

ONE_GPU = ClusterSpec("1x1", (NodeSpec("n1", 1, GpuSpec("A100-80GB", 80.0)),))
TWO = [Job("A", 0.0, 1, duration_s=100.0), Job("B", 0.0, 1, duration_s=100.0)]


@pytest.mark.parametrize("quantum_gpu_s", [0.5, 5.0, 6.0])
def test_las_with_a_level_at_most_half_the_overhead_ends(quantum_gpu_s: float) -> None:
    """The lease: a job that resumes (10 s overhead) takes no GPUs from a job still within its own
    lease, so every resume keeps 10 s of progress; 200 s of work plus 10 s per resume, no GPU idle
    (unguarded, quantum 5 never ended and quantum 6 ended at 1,090 s after 89 preemptions)."""
    res = simulate(TWO, ONE_GPU, Las(quantum_gpu_s=quantum_gpu_s), "none")
    assert (res.metrics.makespan_s, res.metrics.preemptions) == (390.0, 19)
    assert res.metrics.makespan_s == 200.0 + DEFAULT_RESTART_OVERHEAD_S * res.metrics.preemptions


def test_the_lease_ends_with_the_victims_progress_paying_its_restart() -> None:
    cost = PreemptionCost()
    job = Job("A", 0.0, 1, duration_s=100.0)
    assert (cost.lease_s(job, resumed=False), cost.lease_s(job, resumed=True)) == (10.0, 20.0)
    assert PreemptionCost(checkpoint_interval_s=30.0).lease_s(job, resumed=True) == 40.0
    assert cost.lease_s(Job("S", 0.0, 1, duration_s=1.0, meta={"preempt": "suspend"}), resumed=True) == 0.0


def test_the_simulators_safety_net_fails_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preemption, "MAX_PASSES_PER_JOB", 2)
    with pytest.raises(ScheduleError) as err:
        simulate(TWO, ONE_GPU, Las(quantum_gpu_s=5.0), "none")
    text = str(err.value)
    assert "\n" not in text and "without progress" in text and "half the restart overhead" in text
    assert "las:quantum=5" in text and "6 scheduler passes (2 per job)" in text


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


def test_a_forecast_with_a_tiny_las_quantum_returns_the_simulated_ends() -> None:
    s = Scheduler(ONE_GPU, Las(quantum_gpu_s=5.0), "none", "first-fit")
    s.submit(1, Job("A", 0.0, 1, requested_s=100.0), now=0.0)
    s.submit(2, Job("B", 0.0, 1, requested_s=100.0), now=0.0)
    fc = forecast(s, 0.0)
    assert s.waiting_count == 2  # the live scheduler is untouched
    assert fc.stopped == "" and (fc[1].start_s, fc[2].start_s) == (0.0, 5.0)
    assert sorted((fc[1].end_s, fc[2].end_s)) == [375.0, 390.0]  # type: ignore[type-var]


def test_the_forecast_safety_net_leaves_jobs_it_did_not_reach_without_a_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 100 s job that may not be preempted, whose LAS level changes every 10 s, and a job that waits
    behind it (each change is a pass while a job waits, once the clock stops at every change: after the
    first the changes are quiet, and the clock would skip them): with a net of 3 passes per job and one
    job's worth (9 in all) the forecast stops at 90 s, before the first ends; the first keeps its start
    and has no expected end, the second has no expected start. Without the net both are known."""
    monkeypatch.setattr(preemption, "_skip_quiet", False)
    s = Scheduler(ONE_GPU, Las(quantum_gpu_s=10.0), "none", "first-fit")
    s.submit(1, Job("long", 0.0, 1, requested_s=100.0, meta={"preempt": "never"}), now=0.0)
    s.submit(2, Job("next", 0.0, 1, requested_s=5.0), now=0.0)
    whole = forecast(s, 0.0)
    assert whole.stopped == "" and [(whole[j].start_s, whole[j].end_s) for j in (1, 2)] == [
        (0.0, 100.0), (100.0, 105.0)
    ]  # fmt: skip
    monkeypatch.setattr(preemption, "MAX_PASSES_PER_JOB", 3)
    cut = forecast(s, 0.0)
    assert cut.stopped.startswith("the forecast stopped at 90 s after 9 scheduler passes (3 per job)")
    assert (cut[1].start_s, cut[1].end_s, cut[1].detail) == (0.0, None, cut.stopped)
    assert (cut[2].start_s, cut[2].end_s, cut[2].detail) == (None, None, cut.stopped)

"""The simulator's drivers gather the utilisation steps of a run in lists and move them to the Timeline's
arrays a batch at a time (sim/steps.py): the timeline of a run longer than a batch must be the one the
records imply, and the batches must give what `Timeline.add` at each step gives."""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate, pairwise

from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec
from gpuplan.sim.engine import simulate
from gpuplan.sim.result import Timeline
from gpuplan.sim.steps import Steps
from gpuplan.synth import synth_poisson


def test_the_timeline_of_a_run_of_many_batches_is_the_busy_gpus_the_records_give() -> None:
    spec = ClusterSpec("4x8", tuple(NodeSpec(f"n{i}", 8, GpuSpec("A100-80GB", 80.0)) for i in range(4)))
    result = simulate(synth_poisson(6000, seed=3, load=0.9, total_gpus=32), spec, "fifo", "easy")
    steps = list(result.util_timeline)
    assert len(steps) > 4096 + 100  # more than one batch of steps (steps._STEP_BATCH)
    # GPUs busy from each instant on: + at a start, - at an end (a pass at t sees t's ends and starts)
    deltas: dict[float, int] = {}
    for r in result.records:
        deltas[r.start_s] = deltas.get(r.start_s, 0) + len(r.gpus)
        deltas[r.end_s] = deltas.get(r.end_s, 0) - len(r.gpus)
    times = sorted(deltas)
    busy = list(accumulate(deltas[t] for t in times))
    assert steps[0] == (0.0, 0)  # the run's initial step: nothing runs before the first pass
    for (t, b), (t_next, b_next) in pairwise(steps[1:]):
        assert t < t_next and b != b_next  # a step only where the count moves
    for t, b in steps[1:]:
        assert b == busy[bisect_right(times, t) - 1]
    assert steps[-1][1] == 0


def test_steps_gathered_in_batches_are_the_steps_timeline_add_makes() -> None:
    """Two batches and a half of notes, some repeating the last count: `Steps` keeps a step only where
    the count moves, flushes a full batch on its own and the rest on `flush` (twice is harmless)."""
    notes = [(float(t), (t // 3) % 7) for t in range(3 * 4096 * 5 // 2)]
    expected = Timeline([(0.0, 0)])
    last = 0
    for t, busy in notes:
        if busy != last:
            expected.add(t, busy)
            last = busy
    got = Timeline([(0.0, 0)])
    steps = Steps(got)
    for t, busy in notes:
        steps.note(t, busy)
    assert 4096 < len(got) < len(expected)  # a full batch went on its own, the rest waits for `flush`
    steps.flush()
    steps.flush()
    assert list(got) == list(expected) and len(expected) > 2 * 4096

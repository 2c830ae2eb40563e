"""The run's columnar parts behind the public API: the utilization Timeline and the records' order."""

from __future__ import annotations

import pickle

from gpuplan.sim.metrics import occupied_gpu_seconds
from gpuplan.sim.result import JobRecord, Timeline, start_order


def test_a_timeline_reads_as_the_list_of_steps_it_holds() -> None:
    steps = [(0.0, 0), (1.5, 4), (3.0, 2)]
    tl = Timeline(steps)
    tl.add(4.0, 0)
    steps.append((4.0, 0))
    assert tl == steps and list(tl) == steps and len(tl) == 4
    assert tl[-1] == (4.0, 0) and tl[1:3] == steps[1:3] and tl.busy[-1] == 0
    tl[0] = (0.0, 1)
    assert tl[0] == (0.0, 1) and tl != steps
    assert pickle.loads(pickle.dumps(tl)) == tl  # sweeps ship results between processes
    assert occupied_gpu_seconds(tl, 5.0) == occupied_gpu_seconds(list(tl), 5.0) == 1.5 * 1 + 1.5 * 4 + 1.0 * 2


def test_start_order_is_start_then_job_id_and_stable() -> None:
    recs = [JobRecord(i, 0.0, s, s + 1, (0,)) for i, s in [("b", 2.0), ("a", 2.0), ("c", 1.0), ("a", 1.0)]]
    assert start_order(recs) == sorted(recs, key=lambda r: (r.start_s, r.job_id))
    assert [r.job_id for r in start_order(recs)] == ["a", "c", "a", "b"]

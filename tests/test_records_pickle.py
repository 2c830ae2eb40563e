"""The core's records keep every field through pickle and copy (sweeps send them to workers): JobSlot
and JobForecast have their own constructors (compiled, they are rebuilt through them)."""

from __future__ import annotations

import copy
import pickle
from dataclasses import fields

from gpuplan.core.forecast import JobForecast
from gpuplan.core.state import Need
from gpuplan.core.view import JobSlot
from gpuplan.model import Job


def _slot() -> JobSlot:
    return JobSlot(
        7, Job("j", 1.0, 2), 2, 40.0, 30.0, True, (1.0, 7), (3, 4), 5.0, 35.0, 6.0, 7.0, 8.0, 9, (5,), 2.0,
        {0: 1}, Need(250.0, 16.0, 0.5),
    )  # fmt: skip


def test_a_job_slot_keeps_every_field_through_pickle_and_deepcopy() -> None:
    slot = _slot()
    values = {f.name: getattr(slot, f.name) for f in fields(JobSlot)}
    for twin in (pickle.loads(pickle.dumps(slot)), copy.deepcopy(slot)):
        assert twin is not slot
        assert {f.name: getattr(twin, f.name) for f in fields(JobSlot)} == values


def test_a_need_keeps_its_fields_through_pickle_and_deepcopy() -> None:
    need = Need(250.0, 16.0, None)  # frozen and compiled: rebuilt through its constructor
    for twin in (pickle.loads(pickle.dumps(need)), copy.deepcopy(need)):
        assert twin == need and twin is not need


def test_a_job_forecast_keeps_every_field_through_pickle() -> None:
    fc = JobForecast(3, "waiting", 10.0, 20.0, (1, 2), 4, "Priority", "why", 9.0, (1,))
    twin = pickle.loads(pickle.dumps(fc))
    assert twin == fc and twin is not fc
    assert [getattr(twin, f.name) for f in fields(JobForecast)] == [
        3, "waiting", 10.0, 20.0, (1, 2), 4, "Priority", "why", 9.0, (1,)
    ]  # fmt: skip
    assert JobForecast(1, "held", reason="JobHeldUser").end_s is None  # the defaults hold


def test_a_forecast_explains_the_same_after_pickle() -> None:
    from gpuplan.core.forecast import forecast
    from gpuplan.core.scheduler import Scheduler
    from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec

    spec = ClusterSpec("1x8", (NodeSpec("n0", 8, GpuSpec("A100-80GB", 80.0)),))
    s = Scheduler(spec, "fifo", "easy")
    s.adopt(100, Job("r", 0.0, 8, requested_s=50.0), range(8), 0.0)
    for i in range(6):
        s.submit(i, Job(str(i), float(i), 1 + i % 4, requested_s=10.0 * (i + 1)), now=float(i))
    fc = forecast(s, 6.0)
    twin = pickle.loads(pickle.dumps(fc))
    assert any(fc.waiting_for(j) for j in range(6)), "no job waits for another: the test does not test it"
    for j in range(6):
        assert twin.waiting_for(j) == fc.waiting_for(j) and twin.explain(j) == fc.explain(j)

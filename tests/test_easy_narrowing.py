"""EASY's backfill scan narrows to the jobs that may still start (core/shapes.py, `_Scan` in
core/backfill.py): the decisions must be the plain scan's, job for job, GPU for GPU."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuplan.core import shapes
from gpuplan.core.forecast import forecast
from gpuplan.core.scheduler import Scheduler
from gpuplan.core.shapes import ShapeIndex
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.engine import simulate
from invariant_cases import INVARIANTS, Case, any_clusters, cases


def _plain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shapes, "INDEX_WAITING", False)  # the plain scan (the core may be compiled)


def _long_queue(case: Case, copies: int) -> list[Job]:
    """The case's jobs repeated, so that a pass scans well past its first few shapes."""
    jobs = []
    for k in range(copies):
        for j in case.jobs:
            jobs.append(dataclasses.replace(j, id=f"{j.id}.{k}", submit_s=j.submit_s + k * 0.5))
    return jobs


@INVARIANTS(150)
@given(case=cases(clusters=any_clusters(), backfills=("easy",), max_jobs=10), copies=st.integers(1, 6))
def test_the_narrowed_scan_simulates_as_the_plain_one(case: Case, copies: int) -> None:
    jobs = _long_queue(case, copies)
    args = (jobs, case.cluster, case.policy, "easy", case.placer)
    fast = simulate(*args, oracle=case.oracle)
    with pytest.MonkeyPatch.context() as mp:
        _plain(mp)
        plain = simulate(*args, oracle=case.oracle)
    assert fast.records == plain.records


def _queue(seed: int, waiting: int) -> Scheduler:
    spec = ClusterSpec("4x8", tuple(NodeSpec(f"n{i}", 8, GpuSpec("A100-80GB", 80.0)) for i in range(4)))
    rng = random.Random(seed)
    s = Scheduler(spec, "fifo", "easy", "first-fit")
    for k in range(8):
        s.adopt(
            10_000 + k, Job(f"r{k}", 0.0, 4, requested_s=rng.randint(10, 500)), range(4 * k, 4 * k + 4), 0.0
        )
    for i in range(waiting):
        job = Job(str(i), float(i), rng.choice([1, 1, 2, 4, 8]), requested_s=float(rng.randint(10, 3600)))
        s.submit(i, job, now=float(i))
    return s


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_forecast_of_a_long_queue_is_the_plain_scans_and_the_scan_narrowed(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    narrowed = []
    real = ShapeIndex.after

    def counting(self, *args):  # type: ignore[no-untyped-def]
        narrowed.append(args[-1])
        return real(self, *args)

    monkeypatch.setattr(ShapeIndex, "after", counting)
    fast = forecast(_queue(seed, 600), 600.0)
    assert narrowed, "no pass narrowed its scan: the test does not test it"
    _plain(monkeypatch)
    plain = forecast(_queue(seed, 600), 600.0)
    got = {j: (f.start_s, f.gpu_ids) for j, f in fast.jobs.items()}
    assert got == {j: (f.start_s, f.gpu_ids) for j, f in plain.jobs.items()}


def test_a_fork_copies_the_index_so_a_forecast_leaves_the_live_one_as_it_was() -> None:
    s = _queue(4, 300)
    live = s.waiting_shapes()
    assert live is not None and len(live) == 300
    first = forecast(s, 300.0)
    assert len(live) == 300 and s.waiting_shapes() is live  # the fork started its jobs, not these
    again = forecast(s, 300.0)
    assert {j: f.start_s for j, f in first.jobs.items()} == {j: f.start_s for j, f in again.jobs.items()}

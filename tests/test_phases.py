"""Start-up and init phases measured from a job's own samples (gpuplan.core.phases)."""

from __future__ import annotations

from gpuplan.core.phases import JobSample, Phases, phases_from_samples


def _samples(rows: list[tuple[float, float | None, float | None]]) -> list[JobSample]:
    return [JobSample(t, mem, util) for t, mem, util in rows]


def test_memory_then_busy_splits_startup_and_init() -> None:
    # start at 100; no memory until 104 (imports); memory but idle 104-110 (model build); busy from 110
    rows = [
        (101.0, 0.0, 0.0),
        (104.0, 2.0, 0.0),
        (107.0, 30.0, 1.0),
        (110.0, 30.0, 95.0),
        (113.0, 30.0, 99.0),
    ]
    assert phases_from_samples(100.0, _samples(rows)) == Phases(4.0, 6.0)


def test_order_and_samples_before_the_start_do_not_matter() -> None:
    rows = [(110.0, 30.0, 95.0), (90.0, 8.0, 90.0), (104.0, 2.0, 0.0)]
    assert phases_from_samples(100.0, _samples(rows)) == Phases(4.0, 6.0)


def test_never_busy_or_no_util_reported_leaves_init_unknown() -> None:
    assert phases_from_samples(0.0, _samples([(2.0, 4.0, 0.0), (5.0, 4.0, 3.0)])) == Phases(2.0, None)
    assert phases_from_samples(0.0, _samples([(2.0, 4.0, None)])) == Phases(2.0, None)


def test_no_memory_seen_means_nothing_is_known() -> None:
    assert phases_from_samples(0.0, _samples([(2.0, None, 50.0), (3.0, 0.0, 60.0)])) == Phases(None, None)
    assert phases_from_samples(0.0, []) == Phases(None, None)


def test_busy_in_the_first_sample_with_memory_is_no_init() -> None:
    assert phases_from_samples(0.0, _samples([(3.0, 10.0, 80.0)])) == Phases(3.0, 0.0)


def test_busy_threshold_is_a_parameter() -> None:
    rows = [(1.0, 4.0, 3.0), (2.0, 4.0, 20.0)]
    assert phases_from_samples(0.0, _samples(rows), busy_pct=2.0) == Phases(1.0, 0.0)
    assert phases_from_samples(0.0, _samples(rows)) == Phases(1.0, 1.0)


def test_busy_before_memory_showed_counts_as_no_init() -> None:
    rows = [(2.0, None, 50.0), (3.0, 5.0, 60.0)]
    assert phases_from_samples(0.0, _samples(rows)) == Phases(2.0, 0.0)

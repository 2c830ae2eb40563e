"""The online estimator: hand-computed estimates from finished jobs only (the simulator's no-leakage
property is in test_unknown_durations.py)."""

from __future__ import annotations

from gpuplan.core.estimates import Estimate, OnlineEstimator, job_name
from gpuplan.model import Job


def _job(i: int, gpus: int = 1, user: str = "", name: str = "", limit: float | None = None) -> Job:
    return Job(f"j{i}", float(i), gpus, duration_s=1.0, user=user, name=name, requested_s=limit)


def test_nothing_finished_means_no_estimate() -> None:
    assert OnlineEstimator().estimate(_job(0)) is None


def test_levels_from_most_specific_to_overall() -> None:
    est = OnlineEstimator(k=3, k_all=10)
    est.observe(_job(0, gpus=1, user="ann", name="train"), 100.0)
    est.observe(_job(1, gpus=1, user="ann", name="train"), 300.0)
    est.observe(_job(2, gpus=2, user="ann", name="eval"), 50.0)
    est.observe(_job(3, gpus=4, user="bob", name="x"), 1000.0)
    # same user and name: median of 100, 300
    assert est.estimate(_job(9, user="ann", name="train")) == Estimate(200.0, "user_name")
    # same user, new name: median of 100, 300, 50
    assert est.estimate(_job(9, user="ann", name="new")) == Estimate(100.0, "user")
    # unknown user, 2 GPUs: the 2-GPU runs (50)
    assert est.estimate(_job(9, gpus=2, user="cy")) == Estimate(50.0, "gpus")
    # no user, 8 GPUs never seen: everyone's median of 100, 300, 50, 1000
    assert est.estimate(_job(9, gpus=8)) == Estimate(200.0, "all")


def test_windows_keep_the_last_k_runs() -> None:
    est = OnlineEstimator(k=2, k_all=3)
    for i, d in enumerate((10.0, 20.0, 30.0, 40.0)):
        est.observe(_job(i), d)
    assert est.estimate(_job(9)) == Estimate(35.0, "gpus")  # last 2 of the 1-GPU runs: 30, 40
    assert est.estimate(_job(9, gpus=4)) == Estimate(30.0, "all")  # last 3: 20, 30, 40
    assert est.observed == 4


def test_estimate_never_exceeds_the_time_limit() -> None:
    est = OnlineEstimator()
    est.observe(_job(0), 500.0)
    assert est.estimate(_job(1, limit=120.0)) == Estimate(120.0, "gpus")


def test_job_name_of_swf_application() -> None:
    assert job_name(Job("a", 0.0, 1, meta={"app": 7})) == "app7"
    assert job_name(Job("a", 0.0, 1, name="n", meta={"app": 7})) == "n"


def test_gittins_table_by_hand() -> None:
    from gpuplan.core.preemptive import gittins_table, gpu_bucket

    # services 1, 1, 10 GPU-s; grid 0, 2. At 0: quantum to 2 finishes 2 of 3 for 1+1+2 = 4 GPU-s
    # expected (0.5), to 10 finishes all 3 for 12 (0.25): 0.5. At 2: only the 10 is left, 8 to go: 1/8.
    assert gittins_table([1.0, 1.0, 10.0], [0.0, 2.0]) == [0.5, 0.125]
    assert gittins_table([1.0], [0.0, 5.0]) == [1.0, 0.0]  # outlived every sample: index 0
    assert [gpu_bucket(g) for g in (1, 2, 3, 4, 5, 8, 9)] == [1, 2, 4, 4, 8, 8, 16]

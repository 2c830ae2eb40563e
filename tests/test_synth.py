"""Synthetic workloads: the article's scenario and the Poisson generator."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.model import Job
from gpuplan.synth import ARTICLE_MIX, synth_article, synth_poisson

MIN = 60.0
HOUR = 3600.0
CLASSES = {"short-high-mem", "long-moderate-mem", "very-long-low-mem"}
SEEDS = [0, 1, 2, 3, 7, 42]


@pytest.fixture(scope="module", params=SEEDS)
def article(request: pytest.FixtureRequest) -> list[Job]:
    return synth_article(request.param)


def test_article_size_and_kinds(article: list[Job]) -> None:
    assert len(article) == 80
    kinds = Counter(j.meta["kind"] for j in article)
    assert kinds == {"fine-tune": 50, "inference": 30}
    assert len({j.id for j in article}) == 80


def test_article_all_at_zero_and_gpus_in_range(article: list[Job]) -> None:
    assert all(j.submit_s == 0 for j in article)
    assert all(1 <= j.gpus <= 8 for j in article)
    assert len({j.gpus for j in article}) >= 3


def test_article_classes(article: list[Job]) -> None:
    assert {j.meta["class"] for j in article} == CLASSES
    for j in article:
        assert j.duration_s is not None and j.mem_gb is not None
        cls = j.meta["class"]
        if cls == "short-high-mem":
            assert j.duration_s < 30 * MIN and j.mem_gb >= 40, j
        elif cls == "long-moderate-mem":
            assert 30 * MIN <= j.duration_s <= 70 * MIN and 22 <= j.mem_gb <= 45, j
        else:
            assert j.duration_s >= 1.6 * HOUR and j.mem_gb <= 16, j
        assert j.mem_gb <= 80
        assert j.gpu_util_pct is not None and 0 <= j.gpu_util_pct <= 100


def test_article_class_counts_follow_the_mix(article: list[Job]) -> None:
    expected: Counter[tuple[str, str]] = Counter()
    for cls, n in ARTICLE_MIX:
        expected[(cls.name, cls.kind)] += n
    assert Counter((j.meta["class"], j.meta["kind"]) for j in article) == expected


def test_article_is_reproducible() -> None:
    assert synth_article(5) == synth_article(5)
    assert synth_article() == synth_article(0)
    assert synth_article(5) != synth_article(6)
    a, b = synth_article(5), synth_article(6)
    assert [j.duration_s for j in a] != [j.duration_s for j in b]


def test_article_order_is_mixed(article: list[Job]) -> None:
    assert len({j.meta["class"] for j in article[:20]}) >= 2
    # Not grouped: the class changes many times along the list.
    changes = sum(a.meta["class"] != b.meta["class"] for a, b in pairwise(article))
    assert changes >= 20


def test_article_estimates_are_predictions(article: list[Job]) -> None:
    pairs = [(j.est_duration_s, j.duration_s) for j in article]
    assert all(e is not None and e > 0 for e, _ in pairs)
    differ = sum(e != d for e, d in pairs)
    assert differ >= 0.9 * len(pairs)
    close = sum(0.5 <= e / d <= 2.0 for e, d in pairs)  # type: ignore[operator]
    assert close >= 0.95 * len(pairs)


def test_article_requested_covers_duration(article: list[Job]) -> None:
    for j in article:
        assert j.requested_s is not None and j.duration_s is not None
        assert j.requested_s >= j.duration_s
        assert j.requested_s % 1800 == 0


def test_poisson_count_and_submit_times() -> None:
    jobs = synth_poisson(300, seed=1, rate_per_h=20)
    assert len(jobs) == 300
    submits = [j.submit_s for j in jobs]
    assert submits[0] == 0
    assert all(a <= b for a, b in pairwise(submits))
    assert len({j.id for j in jobs}) == 300


def test_poisson_rate() -> None:
    jobs = synth_poisson(5000, seed=0, rate_per_h=60)
    mean_gap = (jobs[-1].submit_s - jobs[0].submit_s) / (len(jobs) - 1)
    assert mean_gap == pytest.approx(60.0, rel=0.05)


@pytest.mark.parametrize("load", [0.5, 0.9, 1.3])
@pytest.mark.parametrize("total_gpus", [8, 32])
def test_poisson_load(load: float, total_gpus: int) -> None:
    jobs = synth_poisson(3000, seed=11, load=load, total_gpus=total_gpus)
    span = jobs[-1].submit_s - jobs[0].submit_s
    offered = sum(j.gpus * j.duration_s for j in jobs)  # type: ignore[operator]
    assert offered / (total_gpus * span) == pytest.approx(load, rel=0.10)


def test_poisson_is_reproducible() -> None:
    assert synth_poisson(50, seed=3, rate_per_h=10) == synth_poisson(50, seed=3, rate_per_h=10)
    assert synth_poisson(50, seed=3, rate_per_h=10) != synth_poisson(50, seed=4, rate_per_h=10)


def test_poisson_gpu_mix() -> None:
    jobs = synth_poisson(2000, seed=2, rate_per_h=30, gpu_mix={1: 0.75, 4: 0.25})
    counts = Counter(j.gpus for j in jobs)
    assert set(counts) == {1, 4}
    assert counts[4] / len(jobs) == pytest.approx(0.25, abs=0.04)
    only_two = synth_poisson(200, seed=2, rate_per_h=30, gpu_mix={2: 1.0})
    assert {j.gpus for j in only_two} == {2}


def test_poisson_class_mix() -> None:
    (short_ft, _), (long_ft, _), *_ = ARTICLE_MIX
    jobs = synth_poisson(1000, seed=4, rate_per_h=30, mix=[(short_ft, 1.0), (long_ft, 3.0)])
    counts = Counter(j.meta["class"] for j in jobs)
    assert set(counts) == {"short-high-mem", "long-moderate-mem"}
    assert counts["long-moderate-mem"] / len(jobs) == pytest.approx(0.75, abs=0.05)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"rate_per_h": 10.0, "load": 0.9, "total_gpus": 8},
        {"rate_per_h": 0.0},
        {"rate_per_h": -5.0},
        {"load": 0.9},
        {"load": 0.0, "total_gpus": 8},
        {"load": -0.5, "total_gpus": 8},
    ],
)
def test_poisson_bad_rate_or_load(kwargs: dict[str, float]) -> None:
    with pytest.raises(GpuplanError):
        synth_poisson(10, **kwargs)  # type: ignore[arg-type]


def test_poisson_needs_a_job() -> None:
    with pytest.raises(GpuplanError, match="at least 1"):
        synth_poisson(0, rate_per_h=10)

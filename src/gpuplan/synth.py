"""Synthetic workloads: the article's 8xA100 scenario and a general Poisson generator.

Distributions and the reasons for them are in docs/scenario.md. Every generator is seeded: the same
seed gives the same jobs on every machine (numpy's PCG64).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpuplan.errors import GpuplanError
from gpuplan.model import Job

__all__ = [
    "ARTICLE_MIX",
    "SMALL_INFER",
    "JobClass",
    "synth_article",
    "synth_poisson",
    "synth_small_inference",
]

_MIN = 60.0
_HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class JobClass:
    """One kind of job: how many GPUs, how long, how much memory, how busy.

    Durations are log-normal around `median_s` with spread `sigma`, clipped to [min_s, max_s].
    """

    name: str
    kind: str  # "fine-tune" or "inference": what the job is
    gpus: Mapping[int, float]  # GPU count -> probability
    median_s: float
    sigma: float
    min_s: float
    max_s: float
    mem_gb: tuple[float, float]  # uniform range, per GPU
    util_pct: tuple[float, float]  # uniform range, busy % when alone

    def draw(self, rng: np.random.Generator, n: int) -> list[dict[str, float]]:
        counts = rng.choice(list(self.gpus), size=n, p=_normalised(self.gpus.values()))
        dur = np.clip(self.median_s * np.exp(rng.normal(0.0, self.sigma, n)), self.min_s, self.max_s)
        mem = rng.uniform(*self.mem_gb, n)
        util = rng.uniform(*self.util_pct, n)
        return [
            {
                "gpus": int(g),
                "duration_s": float(round(d)),
                "mem_gb": round(float(m), 1),
                "util": round(float(u)),
            }
            for g, d, m, u in zip(counts, dur, mem, util)
        ]


def _normalised(weights: Iterable[float]) -> np.ndarray:
    w = np.array(list(weights), dtype=np.float64)
    return w / w.sum()


# The article's three profile classes (docs/scenario.md says why these numbers).
SHORT_FT = JobClass("short-high-mem", "fine-tune", {1: 0.35, 2: 0.3, 4: 0.2, 8: 0.15},
                    12 * _MIN, 0.35, 5 * _MIN, 25 * _MIN, (50.0, 78.0), (85.0, 99.0))  # fmt: skip
SHORT_INFER = JobClass("short-high-mem", "inference", {1: 0.7, 2: 0.3},
                       10 * _MIN, 0.35, 4 * _MIN, 22 * _MIN, (40.0, 72.0), (75.0, 95.0))  # fmt: skip
LONG_FT = JobClass("long-moderate-mem", "fine-tune", {1: 0.45, 2: 0.35, 4: 0.15, 8: 0.05},
                   40 * _MIN, 0.3, 30 * _MIN, 70 * _MIN, (22.0, 45.0), (85.0, 99.0))  # fmt: skip
LONG_INFER = JobClass("very-long-low-mem", "inference", {1: 1.0},
                      2.0 * _HOUR, 0.2, 1.6 * _HOUR, 2.8 * _HOUR, (6.0, 16.0), (18.0, 40.0))  # fmt: skip

# Small online/batch inference (a 1-3B model, small batches): one GPU, a few GB, rarely busy. Not in the
# article's mix; `synth_small_inference` streams them in beside it (docs/mig.md).
SMALL_INFER = JobClass("small-low-mem", "inference", {1: 1.0},
                       8 * _MIN, 0.5, 2 * _MIN, 30 * _MIN, (4.0, 16.0), (10.0, 35.0))  # fmt: skip

# (class, jobs): 50 fine-tunes and 30 batch-inference jobs.
ARTICLE_MIX: tuple[tuple[JobClass, int], ...] = (
    (SHORT_FT, 26),
    (LONG_FT, 24),
    (SHORT_INFER, 24),
    (LONG_INFER, 6),
)


def synth_article(seed: int = 0) -> list[Job]:
    """The article's scenario: 50 fine-tunes + 30 batch-inference jobs, all submitted at t=0 in a
    shuffled (mixed) order, for one node of 8 A100-80GB."""
    rng = np.random.default_rng(seed)
    rows: list[tuple[JobClass, dict[str, float]]] = []
    for cls, n in ARTICLE_MIX:
        rows.extend((cls, r) for r in cls.draw(rng, n))
    order = rng.permutation(len(rows))
    return _jobs(1, [0.0] * len(rows), [rows[k] for k in order], rng)


def synth_small_inference(
    n_jobs: int, *, seed: int = 0, hours: float = 8.0, first_id: int = 1001
) -> list[Job]:
    """`n_jobs` small inference jobs (`SMALL_INFER`) arriving uniformly at random over the first `hours`,
    in submit order, ids from j{first_id}."""
    if n_jobs < 0 or not hours > 0:
        raise ValueError(f"n_jobs must be >= 0 and hours > 0, got {n_jobs}, {hours}")
    rng = np.random.default_rng([seed, 7])
    submit = np.sort(rng.uniform(0.0, hours * _HOUR, n_jobs)).round()
    rows = [(SMALL_INFER, r) for r in SMALL_INFER.draw(rng, n_jobs)]
    return _jobs(first_id, [float(t) for t in submit], rows, rng)


def synth_poisson(
    n_jobs: int,
    *,
    seed: int = 0,
    rate_per_h: float | None = None,
    load: float | None = None,
    total_gpus: int | None = None,
    mix: Sequence[tuple[JobClass, float]] | None = None,
    gpu_mix: Mapping[int, float] | None = None,
    tail_alpha: float | None = None,
) -> list[Job]:
    """A general workload: Poisson arrivals, classes drawn from `mix` (class, weight).

    `tail_alpha` makes durations heavy-tailed: each class's median times a Pareto factor of shape
    alpha (median 1, no upper clip below 30 days); 1 < alpha < 2 gives the infinite-variance tails
    measured in real clusters. None keeps the clipped log-normal classes.

    Give either `rate_per_h` (arrivals per hour) or `load` with `total_gpus` (offered GPU-time over
    capacity; 0.9 keeps a cluster busy without an endless queue). `gpu_mix` overrides every class's
    GPU-count distribution.

    Raises:
        GpuplanError: neither or both of rate_per_h and load, or a non-positive value.
    """
    if n_jobs < 1:
        raise GpuplanError(f"n_jobs = {n_jobs}: give at least 1 job")
    rng = np.random.default_rng(seed)
    classes = mix or [(c, float(n)) for c, n in ARTICLE_MIX]
    if gpu_mix is not None:
        classes = [(_with_gpus(c, gpu_mix), w) for c, w in classes]
    picks = rng.choice(len(classes), size=n_jobs, p=_normalised([w for _, w in classes]))
    rows: list[tuple[JobClass, dict[str, float]]] = [(classes[k][0], {}) for k in picks]
    for k, (cls, _) in enumerate(classes):
        idx = np.flatnonzero(picks == k)
        for i, r in zip(idx, cls.draw(rng, len(idx))):
            rows[i] = (cls, r)
    if tail_alpha is not None:
        _pareto_durations(rows, tail_alpha, rng)
    rate = _arrival_rate(rows, rate_per_h, load, total_gpus)
    submit = np.cumsum(rng.exponential(_HOUR / rate, n_jobs))
    submit -= submit[0]
    return _jobs(1, np.round(submit, 3).tolist(), rows, rng)


_TAIL_CAP_S = 30 * 24 * _HOUR


def _pareto_durations(rows, alpha: float, rng: np.random.Generator) -> None:  # type: ignore[no-untyped-def]
    """Replace each row's duration by its class median x a Pareto(alpha) factor of median 1."""
    if not alpha > 0:
        raise GpuplanError(f"--tail {alpha}: the Pareto shape must be > 0 (1.1 to 2 for heavy tails)")
    factor = (1.0 - rng.uniform(0.0, 1.0, len(rows))) ** (-1.0 / alpha) / 2.0 ** (1.0 / alpha)
    for (cls, r), f in zip(rows, factor):
        r["duration_s"] = float(round(min(max(cls.median_s * f, cls.min_s), _TAIL_CAP_S)))


def _arrival_rate(rows, rate_per_h, load, total_gpus) -> float:  # type: ignore[no-untyped-def]
    if (rate_per_h is None) == (load is None):
        raise GpuplanError("give exactly one of --rate (jobs per hour) and --load (with the cluster's GPUs)")
    if rate_per_h is not None:
        if rate_per_h <= 0:
            raise GpuplanError(f"--rate {rate_per_h}: must be > 0 jobs per hour")
        return float(rate_per_h)
    if load is None or load <= 0 or not total_gpus:
        raise GpuplanError(f"--load {load}: must be > 0, with a cluster to size it against")
    gpu_h_per_job = float(np.mean([r["gpus"] * r["duration_s"] for _, r in rows])) / _HOUR
    return load * total_gpus / gpu_h_per_job


def _with_gpus(cls: JobClass, gpu_mix: Mapping[int, float]) -> JobClass:
    return JobClass(cls.name, cls.kind, dict(gpu_mix), cls.median_s, cls.sigma, cls.min_s, cls.max_s,
                    cls.mem_gb, cls.util_pct)  # fmt: skip


def _jobs(first: int, submit_s: Sequence[float], rows, rng: np.random.Generator) -> list[Job]:  # type: ignore[no-untyped-def]
    """Jobs from drawn rows, with an estimate (~20 % error), a loose user limit and a user each."""
    n = len(rows)
    noise = np.exp(rng.normal(0.0, 0.2, n))  # a decent predictor: ~20 % error
    slack = rng.uniform(1.5, 4.0, n)  # users' limits are loose
    mem_pad = rng.uniform(1.0, 1.1, n)
    users = rng.integers(1, 9, n)
    jobs = []
    for i, ((cls, r), t) in enumerate(zip(rows, submit_s)):
        dur = r["duration_s"]
        jobs.append(
            Job(
                id=f"j{first + i:03d}",
                submit_s=float(t),
                gpus=int(r["gpus"]),
                mem_gb=r["mem_gb"],
                duration_s=dur,
                est_duration_s=float(round(dur * noise[i])),
                est_mem_gb=round(float(min(r["mem_gb"] * mem_pad[i], 80.0)), 1),
                requested_s=float(np.ceil(dur * slack[i] / 1800.0) * 1800.0),
                user=f"u{int(users[i])}",
                name=f"{cls.kind}-{cls.name}",
                gpu_util_pct=r["util"],
                meta={"class": cls.name, "kind": cls.kind},
            )
        )
    return jobs

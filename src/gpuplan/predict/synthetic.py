"""A synthetic job history where users behave consistently, to test and demonstrate predictors.

Each user runs a few projects (`llama-ft-p2`: a model family, a task, a project number). A project
has its own typical duration, GPU count and per-GPU memory; each run varies around them (log-normal),
and some runs fail early. Users set time limits loosely, and some always ask for the 24 h maximum. The
arrivals are Poisson. The same seed gives the same jobs everywhere (numpy's PCG64).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuplan.errors import GpuplanError
from gpuplan.model import Job

__all__ = ["synth_history"]

_H = 3600.0
# family -> per-GPU memory (GiB) of a training run
_FAMILIES: dict[str, float] = {
    "resnet50": 12.0, "bert": 16.0, "vit": 20.0, "gpt2": 24.0,
    "whisper": 14.0, "t5": 30.0, "llama": 60.0, "sd": 22.0,
}  # fmt: skip
# task -> (median duration s, GPU counts, memory factor, GPU busy %, queue)
_TASKS: dict[str, tuple[float, tuple[int, ...], float, float, str]] = {
    "train": (3 * _H, (4, 8), 1.0, 95.0, "long"),
    "ft": (1 * _H, (1, 2, 4), 1.1, 90.0, "long"),
    "eval": (600.0, (1,), 0.6, 60.0, "short"),
    "infer": (1800.0, (1, 2), 0.5, 40.0, "short"),
    "sweep": (1200.0, (1,), 0.8, 85.0, "short"),
}
_MAX_LIMIT_S = 24 * _H
_FAIL_SHARE = 0.08


@dataclass(frozen=True, slots=True)
class _Project:
    user: str
    name: str
    queue: str
    util_pct: float
    duration_s: float  # typical run
    gpus: int
    mem_gb: float
    limit_s: float


def _projects(rng: np.random.Generator, users: int) -> list[_Project]:
    families, tasks = list(_FAMILIES), list(_TASKS)
    out = []
    for u in range(users):
        max_limit = rng.random() < 0.3  # this user always asks for the maximum
        for p in range(int(rng.integers(2, 7))):
            fam, task = families[rng.integers(len(families))], tasks[rng.integers(len(tasks))]
            median_s, gpu_choices, mem_factor, util, queue = _TASKS[task]
            mem_gb = min(_FAMILIES[fam] * mem_factor * math.exp(rng.normal(0, 0.15)), 78.0)
            duration_s = median_s * math.exp(rng.normal(0, 0.8))
            gpus = int(gpu_choices[rng.integers(len(gpu_choices))])
            slack = float(rng.uniform(1.5, 4.0))
            limit = (
                _MAX_LIMIT_S if max_limit else min(math.ceil(duration_s * slack / 1800) * 1800, _MAX_LIMIT_S)
            )
            out.append(
                _Project(
                    f"user{u:02d}", f"{fam}-{task}-p{p}", queue, util, duration_s, gpus, mem_gb, float(limit)
                )
            )
    return out


def synth_history(
    n_jobs: int, *, seed: int = 0, users: int = 40, load: float = 0.9, total_gpus: int = 32
) -> list[Job]:
    """`n_jobs` finished jobs of `users` users, arriving at `load` × `total_gpus` GPUs of work.

    Raises:
        GpuplanError: n_jobs or users below 1, or a load that is not positive.
    """
    if n_jobs < 1 or users < 1 or not load > 0:
        raise GpuplanError(
            f"synth_history: need n_jobs >= 1, users >= 1, load > 0 (got {n_jobs}, {users}, {load})"
        )
    rng = np.random.default_rng(seed)
    projects = _projects(rng, users)
    weights = rng.pareto(1.2, len(projects)) + 0.05  # a few projects run most of the jobs
    picks = rng.choice(len(projects), size=n_jobs, p=weights / weights.sum())
    dur_noise = np.exp(rng.normal(0, 0.35, n_jobs))
    failed = rng.random(n_jobs) < _FAIL_SHARE
    fail_at = rng.uniform(0.01, 0.3, n_jobs)
    mem_noise = np.exp(rng.normal(0, 0.08, n_jobs))
    runs = []
    for i, k in enumerate(picks):
        p = projects[k]
        d = p.duration_s * float(dur_noise[i]) * (float(fail_at[i]) if failed[i] else 1.0)
        runs.append((p, max(round(d), 1), bool(failed[i]), min(p.mem_gb * float(mem_noise[i]), 80.0)))
    gpu_s = sum(p.gpus * d for p, d, _, _ in runs)
    rate_per_s = load * total_gpus * n_jobs / gpu_s
    submit = np.cumsum(rng.exponential(1.0 / rate_per_s, n_jobs))
    submit -= submit[0]
    return [
        Job(
            id=f"h{i:06d}",
            submit_s=float(t),
            gpus=p.gpus,
            mem_gb=round(mem_gb, 2),
            duration_s=float(min(duration_s, p.limit_s)),  # the limit kills a run that goes over it
            requested_s=p.limit_s,
            user=p.user,
            name=p.name,
            gpu_util_pct=p.util_pct,
            meta={"queue": p.queue, "state": "FAILED" if failed_run else "COMPLETED"},
        )
        for i, (t, (p, duration_s, failed_run, mem_gb)) in enumerate(zip(np.round(submit, 1).tolist(), runs))
    ]

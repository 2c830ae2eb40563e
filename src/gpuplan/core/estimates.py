"""Duration estimates learned online, only from jobs that have already finished.

A scheduler that does not know how long jobs run can still learn it as it goes: every job that ends
tells how long it took, and a job submitted later is estimated from those. `OnlineEstimator` is fed by
the clock that drives a Scheduler (the simulator, the local agent, the Slurm loop): `observe` when a job
ends, `estimate` when one is submitted. It never sees a job before it has ended, so no job's estimate
can depend on its own duration or on a later job's (tests/test_estimates.py checks that property).

Levels, most specific first (the rolling median of `predict/`'s `rolling-median`, Helios' approach,
extended with the job's request for traces that carry no user or name):

- `user_name`: median of the last `k` runs of the same user and job name;
- `user`: median of the last `k` runs of the same user;
- `gpus`: median of the last `k_gpus` runs that asked for as many GPUs;
- `all`: median of the last `k_all` runs of anyone.

A level counts only when the job has that key (a trace without users skips the first two). An
estimate never exceeds the job's own time limit (`requested_s`): the job is killed there anyway.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import NamedTuple

from gpuplan.model import Job

__all__ = ["ESTIMATE_LEVELS", "Estimate", "OnlineEstimator", "job_name"]

ESTIMATE_LEVELS: tuple[str, ...] = ("user_name", "user", "gpus", "all")


def job_name(job: Job) -> str:
    """The job's name, or for SWF logs its application number (meta `app`) as `app<N>`."""
    if job.name:
        return job.name
    app = job.meta.get("app")
    return f"app{app}" if app is not None and app != "" else ""


class Estimate(NamedTuple):
    """An estimated duration and the level of history it came from (one of ESTIMATE_LEVELS)."""

    duration_s: float
    level: str


def _median(values: deque[float]) -> float:
    s = sorted(values)
    m = len(s) // 2
    return s[m] if len(s) % 2 else 0.5 * (s[m - 1] + s[m])


class OnlineEstimator:
    """Rolling medians of finished jobs' run times, by user+name, user, GPU count and overall.

    Args:
        k: runs the user+name, user and GPU-count medians take (default 5, as rolling-median).
        k_all: runs the overall median takes (default 50).
    """

    def __init__(self, k: int = 5, k_all: int = 50) -> None:
        self.k = k
        self.k_all = k_all
        self._windows: dict[tuple[str, Hashable], deque[float]] = {}
        self.observed = 0

    def _keys(self, job: Job) -> list[tuple[str, Hashable]]:
        keys: list[tuple[str, Hashable]] = []
        if job.user:
            name = job_name(job)
            if name:
                keys.append(("user_name", (job.user, name)))
            keys.append(("user", job.user))
        keys.append(("gpus", job.gpus))
        keys.append(("all", None))
        return keys

    def observe(self, job: Job, duration_s: float) -> None:
        """A job ended after running `duration_s` seconds (what the clock measured, not its trace value)."""
        for key in self._keys(job):
            w = self._windows.get(key)
            if w is None:
                w = self._windows[key] = deque(maxlen=self.k_all if key[0] == "all" else self.k)
            w.append(float(duration_s))
        self.observed += 1

    def estimate(self, job: Job) -> Estimate | None:
        """The job's estimated duration from the jobs observed so far (None before any has ended)."""
        for key in self._keys(job):
            w = self._windows.get(key)
            if w:
                value = _median(w)
                if job.requested_s is not None:
                    value = min(value, job.requested_s)
                return Estimate(value, key[0])
        return None

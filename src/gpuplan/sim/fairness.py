"""Per-user figures of a run and Jain's fairness index over users.

Jain's index of values x_1..x_n is (sum x)^2 / (n * sum x^2): 1 when every user gets the same, 1/n
when one user gets everything. gpuplan computes it over the users' mean bounded slowdowns (each >= 1),
so 1 means every user's jobs were slowed down alike by waiting, whoever floods the queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["BSLD_BOUND_S", "jain_index", "user_figures"]

BSLD_BOUND_S = 10.0  # bounded slowdown: run times below this count as this


class JobRecordLike(Protocol):
    """What the figures read of a `sim.result.JobRecord`."""

    submit_s: float
    start_s: float
    end_s: float
    gpus: tuple[int, ...]
    user: str


def jain_index(values: Sequence[float]) -> float | None:
    """Jain's fairness index of `values` (None for no values; 1.0 when all are zero)."""
    if not values:
        return None
    total = sum(values)
    squares = sum(v * v for v in values)
    return 1.0 if squares == 0 else total * total / (len(values) * squares)


def user_figures(records: Sequence[JobRecordLike]) -> list[dict[str, Any]]:
    """Per user (by name; empty when no record names a user): jobs, GPU-hours, mean wait (s) and mean
    bounded slowdown (10 s bound)."""
    if not any(r.user for r in records):
        return []
    acc: dict[str, list[float]] = {}
    for r in records:
        run = r.end_s - r.start_s
        a = acc.setdefault(r.user, [0, 0.0, 0.0, 0.0])
        a[0] += 1
        a[1] += len(r.gpus) * run / 3600.0
        a[2] += r.start_s - r.submit_s
        a[3] += max((r.end_s - r.submit_s) / max(run, BSLD_BOUND_S), 1.0)
    return [
        {
            "user": u,
            "jobs": int(n),
            "gpu_hours": gpu_h,
            "mean_wait_s": wait / n,
            "mean_bounded_slowdown": bsld / n,
        }
        for u, (n, gpu_h, wait, bsld) in sorted(acc.items())
    ]

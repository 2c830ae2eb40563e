"""Per-user figures of a run and Jain's fairness index over users.

Jain's index of values x_1..x_n is (sum x)^2 / (n * sum x^2): 1 when every user gets the same, 1/n
when one user gets everything. gpuplan computes it over the users' mean bounded slowdowns (each >= 1),
so 1 means every user's jobs were slowed down alike by waiting, whoever floods the queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuplan.sim.columns import RecordColumns, RecordLike

__all__ = ["BSLD_BOUND_S", "jain_index", "user_figures"]

BSLD_BOUND_S = 10.0  # bounded slowdown: run times below this count as this


def jain_index(values: Sequence[float]) -> float | None:
    """Jain's fairness index of `values` (None for no values; 1.0 when all are zero)."""
    if not values:
        return None
    total = sum(values)
    squares = sum(v * v for v in values)
    return 1.0 if squares == 0 else total * total / (len(values) * squares)


def user_figures(records: Sequence[RecordLike] | RecordColumns) -> list[dict[str, Any]]:
    """Per user (by name; empty when no record names a user): jobs, GPU-hours, mean wait (s) and mean
    bounded slowdown (10 s bound). `records`: the records, or their columns (sim/columns.py; a result
    gives its own with `SimResult.record_columns`).

    By columns, with the float operations of a loop over the records in their order: each record's
    terms as that loop computes them, summed per user in record order (`np.bincount` adds its weights
    one after the other), so the figures are the same to the last bit."""
    import numpy as np

    from gpuplan.sim.columns import RecordColumns

    columns = records if isinstance(records, RecordColumns) else RecordColumns(records)
    if not any(columns.users):
        return []
    codes, k = columns.user_codes, len(columns.users)
    submit, start, end = columns.submit_s, columns.start_s, columns.end_s
    run = end - start
    jobs = np.bincount(codes, minlength=k).tolist()
    gpu_h = np.bincount(codes, columns.widths() * run / 3600.0, k).tolist()
    wait = np.bincount(codes, start - submit, k).tolist()
    bsld = np.bincount(codes, np.maximum((end - submit) / np.maximum(run, BSLD_BOUND_S), 1.0), k).tolist()
    return [
        {
            "user": u,
            "jobs": jobs[i],
            "gpu_hours": gpu_h[i],
            "mean_wait_s": wait[i] / jobs[i],
            "mean_bounded_slowdown": bsld[i] / jobs[i],
        }
        for u, i in sorted(zip(columns.users, range(k)))
    ]

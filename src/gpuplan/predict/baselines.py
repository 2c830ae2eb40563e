"""Simple predictors: the user's time limit, the median of the history, and Helios' rolling median."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpuplan.model import Job
from gpuplan.predict.base import Predictor, register_predictor, target_values
from gpuplan.predict.history import STAT_NAMES, PastRecords, history_stats

__all__ = [
    "GlobalMedianPredictor",
    "LimitPredictor",
    "RollingMedianPredictor",
    "past_stats",
    "rolling_median",
]


@register_predictor
class LimitPredictor(Predictor):
    """The user's time limit `requested_s` (NaN where a job has none). Jobs carry no memory limit, so for
    the memory target it predicts nothing (NaN everywhere)."""

    name = "limit"
    description = "the user's time limit (requested_s), where present"
    needs_history = False

    def _fit(self, history: list[Job]) -> None:
        pass

    def _predict(self, jobs: list[Job], past: list[Job] | None) -> np.ndarray:
        if self.target != "duration":
            return np.full(len(jobs), np.nan)
        return np.array([np.nan if j.requested_s is None else j.requested_s for j in jobs], dtype=float)


@register_predictor
class GlobalMedianPredictor(Predictor):
    """The median of the target over the whole fitted history, the same for every job."""

    name = "global-median"
    description = "the median over the history, the same for every job"

    def _fit(self, history: list[Job]) -> None:
        self.median_ = float(np.median(target_values(history, self.target)))

    def _predict(self, jobs: list[Job], past: list[Job] | None) -> np.ndarray:
        return np.full(len(jobs), self.median_)


def past_stats(
    predictor: Predictor, jobs: list[Job], past: list[Job] | None, k: int, records: PastRecords
) -> np.ndarray:
    """History statistics of `jobs` (STAT_NAMES columns) as a fitted predictor sees them.

    With `past` None, the fitted `records` count as ended before every job (less any record of a job
    in `jobs`, which counts only once it ended before a job's submit); otherwise only `past` and `jobs`
    count, each record once it ended.
    """
    if past is None:
        ids = {j.id for j in jobs}
        return history_stats(jobs, predictor.target, before_all=records.without(ids), online=jobs, k=k)
    return history_stats(jobs, predictor.target, online=[*past, *jobs], k=k)


@register_predictor
class RollingMedianPredictor(Predictor):
    """Helios' approach: the median of the last k finished runs of the same (user, job name), else of
    the same user, else of the last k_all jobs of anyone, else the history's median.

    Params:
        k: how many recent runs the medians take (default 5).
    """

    name = "rolling-median"
    description = "median of the last k runs of the same (user, name), else user, else everyone"
    param_names = ("k",)

    def __init__(self, target: str = "duration", **params: Any) -> None:
        super().__init__(target, **params)
        self.k = int(params.get("k", 5))

    def _fit(self, history: list[Job]) -> None:
        self.records_ = PastRecords.from_jobs(history, self.target)
        self.median_ = float(np.median(target_values(history, self.target)))

    def _predict(self, jobs: list[Job], past: list[Job] | None) -> np.ndarray:
        stats = past_stats(self, jobs, past, self.k, self.records_)
        return rolling_median(stats, self.median_)

    def feature_names(self) -> list[str]:
        return ["user", "name"]


def rolling_median(stats: np.ndarray, fallback: float, stat: str = "median") -> np.ndarray:
    """The most specific `stat` (median, max, ...) known per row of `stats`, else `fallback`."""
    col = {n: i for i, n in enumerate(STAT_NAMES)}
    out = np.full(len(stats), fallback)
    for level in ("all", "user", "user_name"):  # most specific last: it wins
        have = stats[:, col[f"{level}_n"]] > 0
        out[have] = stats[have, col[f"{level}_{stat}"]]
    return out

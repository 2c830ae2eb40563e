"""Gradient boosting on the job record and its past: scikit-learn's HistGradientBoostingRegressor with
the quantile loss, on log(1 + target).

A quantile is unchanged by a monotone transform, so the model of log(1 + y) at quantile q gives the
q-quantile of y. Duration defaults to the median (q = 0.5, which also minimises the mean absolute
error); memory to q = 0.95, so that under-predicting (a job that would run out of memory) is rare.
For memory the q-quantile is then calibrated on the most recent fifth of the history (split conformal):
predictions are scaled up until at most `max_under` of those held-out jobs are under-predicted.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gpuplan.model import Job
from gpuplan.predict.base import PredictError, Predictor, register_predictor, target_values
from gpuplan.predict.baselines import past_stats, rolling_median
from gpuplan.predict.features import FeatureEncoder
from gpuplan.predict.history import PastRecords, history_stats

__all__ = ["DEFAULT_QUANTILE", "DEFAULT_RESIDUAL", "MIN_TRAIN", "GbmPredictor"]

DEFAULT_QUANTILE: dict[str, float] = {"duration": 0.5, "memory": 0.95}
DEFAULT_MAX_UNDER: dict[str, float | None] = {"duration": None, "memory": 0.03}
# Learn the correction to the rolling median (1) or the value itself (0): the correction was better for
# duration (NASA MAE 601 s vs 611 s), the value far better for memory (Alibaba: 1.9 % of jobs
# under-predicted vs 5.5 %, as its memory is a function of a request the model sees); docs/predict.md.
DEFAULT_RESIDUAL: dict[str, int] = {"duration": 1, "memory": 0}
MIN_TRAIN = 500
"""Below this many finished jobs the model is not trained: it predicts the rolling median instead (for a
quantile above 0.75, the largest of the recent values)."""
_CALIBRATION_SHARE = 0.2
_MIN_CALIBRATION = 200  # fewer finished jobs than this: no held-out calibration


def _one_thread() -> Any:
    """One OpenMP thread: on small, shared machines (CI runners) more threads made fitting ~9x slower,
    and one thread gives the same model on every machine."""
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

    return threadpool_limits(limits=1)


@register_predictor
class GbmPredictor(Predictor):
    """Gradient-boosted quantile regression on the record (GPUs, time limit, queue, submit hour and
    day, user, name tokens, requests in meta) and its past (count, last value and median of the same
    (user, name), user and everyone, from jobs that ended before the submit).

    Params:
        quantile: the quantile predicted (default 0.5 for duration, 0.95 for memory).
        max_under: the share of held-out jobs that may be under-predicted after calibration (memory
            default 0.03; None: no calibration).
        k: recent runs the history medians take (default 5).
        max_iter, learning_rate, max_leaf_nodes, min_samples_leaf: passed to the regressor (defaults
            60, 0.15, 15, 20: as accurate as larger models on the traces of docs/predict.md, and
            faster).
        max_train: train on at most this many of the most recently finished jobs (default 50,000).
        seed: random state of the regressor (default 0).
        residual: 1 learns the correction to the rolling median (default for duration); 0 learns the
            value itself (default for memory).
    """

    name = "gbm"
    description = "gradient-boosted quantile regression on the record and its past"
    param_names = (
        "quantile", "max_under", "k", "max_iter", "learning_rate", "max_leaf_nodes", "min_samples_leaf",
        "max_train", "seed", "residual",
    )  # fmt: skip

    def __init__(self, target: str = "duration", **params: Any) -> None:
        super().__init__(target, **params)
        self.quantile = float(params.get("quantile", DEFAULT_QUANTILE[self.target]))
        if not 0.0 < self.quantile < 1.0:
            raise PredictError(f"gbm: quantile {self.quantile} is not valid: give a number between 0 and 1")
        self.max_under = params.get("max_under", DEFAULT_MAX_UNDER[self.target])
        self.k = int(params.get("k", 5))
        self.max_train = int(params.get("max_train", 50_000))
        self.factor_ = 1.0
        self.model_: Any = None
        self.encoder_ = FeatureEncoder(self.target)

    def _regressor(self) -> Any:
        from sklearn.ensemble import HistGradientBoostingRegressor  # type: ignore[import-untyped]

        p = self.params
        return HistGradientBoostingRegressor(
            loss="quantile",
            quantile=self.quantile,
            max_iter=int(p.get("max_iter", 60)),
            learning_rate=float(p.get("learning_rate", 0.15)),
            max_leaf_nodes=int(p.get("max_leaf_nodes", 15)),
            min_samples_leaf=int(p.get("min_samples_leaf", 20)),
            categorical_features=np.array(self.encoder_.categorical, dtype=bool),
            early_stopping=False,
            random_state=int(p.get("seed", 0)),
        )

    def _fit(self, history: list[Job]) -> None:
        self.records_ = PastRecords.from_jobs(history, self.target)
        y_all = target_values(history, self.target)
        self.median_ = float(np.median(y_all))
        self.max_ = float(np.max(y_all))
        if len(history) < MIN_TRAIN:
            self.model_ = None  # too little to learn from: rolling median
            return
        # the most recent jobs, by end time; features of each come from the jobs that ended before it
        keep = set(self.records_.ids[-self.max_train :])
        train = [j for j in history if j.id in keep]
        stats = history_stats(train, self.target, online=history, k=self.k)
        x = self.encoder_.fit_transform(train, stats)
        # the model learns the correction to the rolling median: a tree cannot copy a feature, it can
        # only approximate it step by step, so starting from the median keeps what it already knows
        y = np.log1p(target_values(train, self.target)) - self._base(stats)
        with _one_thread():
            self.factor_ = self._calibration(train, x, y)
            self.model_ = self._regressor().fit(x, y)

    def _calibration(self, train: list[Job], x: np.ndarray, y: np.ndarray) -> float:
        """How much to scale predictions so at most `max_under` of the latest jobs are under-predicted."""
        if self.max_under is None or len(train) < _MIN_CALIBRATION:
            return 1.0
        ends = {rid: r for r, rid in enumerate(self.records_.ids)}
        order = np.argsort([ends[j.id] for j in train], kind="stable")
        cut = int(len(order) * (1.0 - _CALIBRATION_SHARE))
        fit_rows, cal_rows = order[:cut], order[cut:]
        model = self._regressor().fit(x[fit_rows], y[fit_rows])
        ratio = np.exp(y[cal_rows] - model.predict(x[cal_rows]))  # truth / prediction, of 1 + value
        return max(1.0, float(np.quantile(ratio, 1.0 - float(self.max_under), method="higher")))

    def _predict(self, jobs: list[Job], past: list[Job] | None) -> np.ndarray:
        stats = past_stats(self, jobs, past, self.k, self.records_)
        if self.model_ is None:  # too little history: the rolling median, or for a high quantile the
            # largest recent value, so a memory estimate stays on the safe side
            if self.quantile > 0.75:
                return rolling_median(stats, self.max_, "max")
            return rolling_median(stats, self.median_)
        x = self.encoder_.transform(jobs, stats)
        with _one_thread():
            raw = self.model_.predict(x) + self._base(stats)
        return np.maximum(np.expm1(raw + math.log(self.factor_)), 0.0)

    def _base(self, stats: np.ndarray) -> np.ndarray:
        if not self.params.get("residual", DEFAULT_RESIDUAL[self.target]):
            return np.zeros(len(stats))
        return np.log1p(rolling_median(stats, self.median_))

    def feature_names(self) -> list[str]:
        return list(self.encoder_.columns) if self.model_ is not None else ["user", "name"]

"""The features the boosted model learns from: what a job's record says at submit, plus its history.

Only fields known when a job is submitted are used: GPUs, the time limit, the queue, the submit time,
user and name, and the resource requests some readers keep in meta. Fields that describe how the job
ran (meta `state`, `start_s`, `end_s`, `wait_s`, `phase`, `exit_code`, `max_rss_gb`, ...) are never
features: they are known only after the job ran.
"""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter
from collections.abc import Sequence

import numpy as np

from gpuplan.model import Job
from gpuplan.predict.history import STAT_NAMES, job_name

__all__ = ["CATEGORY_META", "NUMERIC_META", "TOKEN_BUCKETS", "FeatureEncoder", "name_tokens"]

# Requests that readers keep in meta (Alibaba, Helios, SWF, sacct); all known at submit.
NUMERIC_META: tuple[str, ...] = (
    "cpu_milli",
    "memory_mib",
    "gpu_share",
    "cpu_num",
    "node_num",
    "nodes",
    "requested_procs",
    "requested_mem_kb",
)
# Categorical feature -> the meta keys that hold it (the first one present wins).
CATEGORY_META: dict[str, tuple[str, ...]] = {
    "queue": ("queue", "partition", "vc"),
    "qos": ("qos",),
    "account": ("account",),
    "group": ("group",),
}
TOKEN_BUCKETS = 32
_MAX_CATEGORIES = 250  # HistGradientBoostingRegressor takes category codes below max_bins (255)
_TOKEN = re.compile(r"[a-z][a-z0-9]*")
_DAY_S = 86400.0
_LIMIT_LEVELS = ("user_name", "user")


def name_tokens(name: str) -> list[str]:
    """Word tokens of a job name: `llama-ft_v3.run-0042` gives llama, ft, v3, run (numbers dropped)."""
    return _TOKEN.findall(name.lower())


def _bucket(token: str) -> int:
    return zlib.crc32(token.encode()) % TOKEN_BUCKETS  # stable across runs, unlike hash()


def _number(v: object) -> float:
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return math.nan


def _log1p(v: float) -> float:
    return math.log1p(v) if v >= 0 else math.nan  # NaN stays NaN (comparisons with NaN are false)


def _category(job: Job, feature: str) -> str | None:
    if feature == "user":
        return job.user or None
    for key in CATEGORY_META[feature]:
        v = job.meta.get(key)
        if v is not None and v != "":
            return str(v)
    return None


class FeatureEncoder:
    """Turns jobs plus their history statistics into a numeric matrix.

    `fit` learns the category codes (the most frequent values of the training jobs) and which columns
    carry information (a column that no training job fills is dropped). `columns` and `categorical`
    describe the result.
    """

    CATEGORIES: tuple[str, ...] = ("user", *CATEGORY_META)

    def __init__(self, target: str = "duration") -> None:
        self.target = target
        self.codes: dict[str, dict[str, int]] = {}
        self.columns: list[str] = []
        self.categorical: list[bool] = []
        self._keep: np.ndarray = np.zeros(0, dtype=int)

    def fit_transform(self, jobs: Sequence[Job], stats: np.ndarray) -> np.ndarray:
        for feature in self.CATEGORIES:
            counts = Counter(c for j in jobs if (c := _category(j, feature)) is not None)
            self.codes[feature] = {v: i for i, (v, _) in enumerate(counts.most_common(_MAX_CATEGORIES))}
        full, names, cats = self._matrix(jobs, stats)
        informative = [i for i in range(full.shape[1]) if not np.all(np.isnan(full[:, i]))]
        informative = [i for i in informative if not (names[i].startswith("tok_") and not full[:, i].any())]
        self._keep = np.array(informative, dtype=int)
        self.columns = [names[i] for i in informative]
        self.categorical = [cats[i] for i in informative]
        return full[:, self._keep]

    def transform(self, jobs: Sequence[Job], stats: np.ndarray) -> np.ndarray:
        return self._matrix(jobs, stats)[0][:, self._keep]

    def _matrix(self, jobs: Sequence[Job], stats: np.ndarray) -> tuple[np.ndarray, list[str], list[bool]]:
        n = len(jobs)
        names = ["gpus", "requested_s", "may_span_nodes", "hour_of_day", "day_of_week"]
        base = np.empty((n, len(names)))
        for i, j in enumerate(jobs):
            req = math.log1p(j.requested_s) if j.requested_s is not None else math.nan
            day = j.submit_s / _DAY_S
            base[i] = (j.gpus, req, float(j.may_span_nodes), 24.0 * (day % 1.0), math.floor(day) % 7)
        meta = np.array([[_log1p(_number(j.meta.get(k))) for k in NUMERIC_META] for j in jobs])
        cat = np.array([[self._code(j, f) for f in self.CATEGORIES] for j in jobs], dtype=float)
        tokens = np.zeros((n, TOKEN_BUCKETS))
        for i, j in enumerate(jobs):
            for t in name_tokens(job_name(j)):
                tokens[i, _bucket(t)] += 1.0
        hist = np.log1p(stats)
        # how much of its time limit the job's past runs used (a tree cannot divide two features)
        col = {name: i for i, name in enumerate(STAT_NAMES)}
        used = np.column_stack([hist[:, col[f"{lvl}_median"]] - base[:, 1] for lvl in _LIMIT_LEVELS])
        if self.target != "duration":  # memory has no limit to compare with
            used[:] = np.nan
        full = np.hstack([base, meta.reshape(n, -1), cat.reshape(n, -1), tokens, hist, used])
        names = [
            *names,
            *NUMERIC_META,
            *self.CATEGORIES,
            *(f"tok_{b}" for b in range(TOKEN_BUCKETS)),
            *STAT_NAMES,
            *(f"{lvl}_median_over_limit" for lvl in _LIMIT_LEVELS),
        ]
        cats = [False] * (5 + len(NUMERIC_META)) + [True] * len(self.CATEGORIES)
        cats += [False] * (TOKEN_BUCKETS + len(STAT_NAMES) + len(_LIMIT_LEVELS))
        return full, names, cats

    def _code(self, job: Job, feature: str) -> float:
        c = _category(job, feature)
        code = self.codes.get(feature, {}).get(c) if c is not None else None
        return math.nan if code is None else float(code)

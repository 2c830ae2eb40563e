"""Evaluation without leakage: train on the past, predict the next jobs in submit order.

The trace, in submit order, is cut into `chunks` equal parts. The first is warm-up (history only).
Before each later chunk, a fresh model is fitted on the jobs that ENDED before the chunk's first submit;
it then predicts every job of the chunk, with history features from the records that ended before each
job's own submit. So no prediction uses the job's own record or any later one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuplan.model import Job
from gpuplan.predict.base import TARGETS, PredictError, check_target, get_predictor, job_end_s, target_values

__all__ = [
    "DEFAULT_PREDICTORS",
    "FLOOR",
    "EvalReport",
    "PredictorScore",
    "ProgressFn",
    "evaluate",
    "online_predictions",
    "score",
]

DEFAULT_PREDICTORS: tuple[str, ...] = ("limit", "global-median", "rolling-median", "gbm")
FLOOR: dict[str, float] = {"duration": 1.0, "memory": 0.1}
"""Values below this (1 s, 0.1 GiB) count as this in MdAPE and the within-2x share (no division by 0)."""
ProgressFn = Callable[[int, str], None]  # (steps done, what)


@dataclass(slots=True)
class PredictorScore:
    """How one predictor did on the scored jobs of one trace.

    Attributes:
        predictor: its name.
        jobs: scored jobs (known, uncensored truth, after the warm-up chunk).
        coverage: share of those it predicted (`limit` has none where a job has no limit).
        mae: mean absolute error, in the target's unit (s or GiB), over the predicted jobs.
        mdape_pct: median absolute percentage error, |pred - truth| / truth, in percent.
        within_2x: share with truth / 2 <= prediction <= 2 x truth.
        under: share predicted below the truth (for memory: jobs that would run out of memory).
        fit_s, predict_s: seconds spent fitting and predicting, all chunks together.
    """

    predictor: str
    jobs: int
    coverage: float
    mae: float | None
    mdape_pct: float | None
    within_2x: float | None
    under: float | None
    fit_s: float = 0.0
    predict_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(slots=True)
class EvalReport:
    """The comparison of predictors on one trace and target.

    `predictions` maps each predictor to one value per input job (in the order given to `evaluate`),
    NaN for warm-up jobs; `scored` marks the jobs the scores are computed on.
    """

    target: str
    unit: str
    jobs: int
    warmup_jobs: int
    chunks: int
    scores: list[PredictorScore]
    features: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    predictions: dict[str, np.ndarray] = field(default_factory=dict)
    scored: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def score_of(self, predictor: str) -> PredictorScore | None:
        return next((s for s in self.scores if s.predictor == predictor), None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "unit": self.unit,
            "jobs": self.jobs,
            "warmup_jobs": self.warmup_jobs,
            "scored_jobs": int(self.scored.sum()),
            "chunks": self.chunks,
            "scores": [s.as_dict() for s in self.scores],
            "features": self.features,
            "notes": self.notes,
        }


def score(pred: np.ndarray, truth: np.ndarray, target: str, predictor: str = "") -> PredictorScore:
    """Scores of predictions against the truth (NaN truths are left out; NaN predictions lower coverage)."""
    known = ~np.isnan(truth)
    pred, truth = pred[known], truth[known]
    have = ~np.isnan(pred)
    n, m = len(truth), int(have.sum())
    if not m:
        return PredictorScore(predictor, n, 0.0, None, None, None, None)
    p, t = pred[have], truth[have]
    floor = FLOOR[target]
    pf, tf = np.maximum(p, floor), np.maximum(t, floor)
    return PredictorScore(
        predictor,
        n,
        m / n if n else 0.0,
        float(np.mean(np.abs(p - t))),
        float(100.0 * np.median(np.abs(pf - tf) / tf)),
        float(np.mean((pf >= tf / 2) & (pf <= 2 * tf))),
        float(np.mean(p < t)),
    )


def _chunk_bounds(n: int, chunks: int) -> list[int]:
    return [round(n * c / chunks) for c in range(chunks + 1)]


def online_predictions(
    jobs: Sequence[Job],
    target: str,
    predictor: str,
    *,
    chunks: int = 10,
    params: dict[str, Any] | None = None,
    progress: ProgressFn | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Predictions for every job after the warm-up chunk, each from a model fitted only on jobs that
    ended before its chunk began, with history features from records that ended before its submit.

    Args:
        jobs: the trace, in any order (predictions come back in this order).
        target: "duration" or "memory".
        predictor: a registered predictor name.
        chunks: parts of the trace; the model is refitted before each part after the first.
        params: keyword arguments of the predictor.
        progress: called with (1, what) after each chunk.

    Returns:
        (predictions, info): NaN for warm-up jobs and chunks with no finished history; info holds
        `fit_s`, `predict_s` and the last fitted model's `features`.
    """
    check_target(target)
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
    ordered = [jobs[i] for i in order]
    ends = np.array([np.inf if (e := job_end_s(j)) is None else e for j in ordered])
    truth = target_values(ordered, target)
    out = np.full(len(jobs), np.nan)
    info: dict[str, Any] = {"fit_s": 0.0, "predict_s": 0.0, "features": [], "empty_chunks": 0}
    bounds = _chunk_bounds(len(ordered), chunks)
    for c in range(1, chunks):
        lo, hi = bounds[c], bounds[c + 1]
        if lo >= hi:
            continue
        t_fit = ordered[lo].submit_s
        prefix = slice(0, lo)
        done = np.flatnonzero((ends[prefix] < t_fit) & ~np.isnan(truth[prefix]))
        model = get_predictor(predictor, target, **(params or {}))
        if len(done) or not model.needs_history:
            t0 = time.perf_counter()
            model.fit([ordered[i] for i in done])
            t1 = time.perf_counter()
            pred = model.predict(ordered[lo:hi], past=ordered[:lo])
            info["fit_s"] += t1 - t0
            info["predict_s"] += time.perf_counter() - t1
            info["features"] = model.feature_names()
            for k, i in enumerate(range(lo, hi)):
                out[order[i]] = pred[k]
        else:
            info["empty_chunks"] += 1
        if progress is not None:
            progress(1, f"{predictor}: chunk {c}/{chunks - 1}")
    return out, info


def evaluate(
    jobs: Sequence[Job],
    target: str,
    predictors: Sequence[str] = DEFAULT_PREDICTORS,
    *,
    chunks: int = 10,
    params: dict[str, dict[str, Any]] | None = None,
    progress: ProgressFn | None = None,
) -> EvalReport:
    """Compare predictors on one trace, in submit order, without leakage (see the module doc).

    Scored jobs are those after the warm-up chunk whose truth is known and not censored.

    Raises:
        PredictError: fewer than 2 chunks, or no job with a known value of the target.
        UnknownNameError: an unknown predictor or target.
    """
    check_target(target)
    if chunks < 2:
        raise PredictError(f"chunks = {chunks}: give at least 2 (the first one is warm-up)")
    for name in predictors:
        get_predictor(name, target)  # unknown names fail before any work
    truth = target_values(jobs, target)
    if np.isnan(truth).all():
        field_name = TARGETS[target][0]
        raise PredictError(
            f"no job has a known {field_name} (of {len(jobs)} jobs): nothing to evaluate {target} "
            f"predictions against"
        )
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
    warm = _chunk_bounds(len(jobs), chunks)[1]
    scored = np.zeros(len(jobs), dtype=bool)
    scored[order[warm:]] = True
    scored &= ~np.isnan(truth)
    report = EvalReport(target, TARGETS[target][2], len(jobs), warm, chunks, [], scored=scored)
    for name in predictors:
        pred, info = online_predictions(
            jobs, target, name, chunks=chunks, params=(params or {}).get(name), progress=progress
        )
        s = score(np.where(scored, pred, np.nan), np.where(scored, truth, np.nan), target, name)
        s.fit_s, s.predict_s = round(info["fit_s"], 3), round(info["predict_s"], 3)
        report.scores.append(s)
        report.predictions[name] = pred
        report.features[name] = info["features"]
        if info["empty_chunks"]:
            report.notes.append(
                f"{name}: {info['empty_chunks']} chunk(s) had no finished job before them: not predicted"
            )
    report.notes.extend(_notes(jobs, target, report))
    return report


def _notes(jobs: Sequence[Job], target: str, report: EvalReport) -> list[str]:
    notes = []
    censored = sum(1 for j in jobs if j.meta.get("censored"))
    if censored:
        notes.append(f"{censored} censored jobs (durations are lower bounds): neither scored nor learnt from")
    if not any(j.user for j in jobs):
        notes.append(
            "no job has a user: per-user history is empty; rolling-median uses everyone's recent jobs"
        )
    if target == "duration" and not any(j.requested_s is not None for j in jobs):
        notes.append("no job has a time limit (requested_s): `limit` predicts nothing")
    if target == "memory":
        notes.append("`limit` has nothing to say about memory (jobs carry no memory limit)")
    return notes

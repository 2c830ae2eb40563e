"""The predictor seam: one abstract `Predictor`, the targets it can predict, a registry by name.

A predictor learns from finished jobs (`fit(history)`) and predicts a value per job (`predict(jobs)`):
a duration in seconds or a per-GPU memory in GiB. Every predictor computes its history features from
records that ENDED before the job's submit (see `gpuplan.predict.history`), so it can be run on a trace
in submit order without seeing a job's own record or a later one.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Self

import numpy as np

from gpuplan.errors import GpuplanError, UnknownNameError
from gpuplan.model import Job

__all__ = [
    "TARGETS",
    "ModelFileError",
    "PredictError",
    "Predictor",
    "check_target",
    "get_predictor",
    "is_censored",
    "job_end_s",
    "predictor_names",
    "register_predictor",
    "target_value",
    "target_values",
]

# target name -> (Job field with the truth, Job field an estimate fills, unit)
TARGETS: dict[str, tuple[str, str, str]] = {
    "duration": ("duration_s", "est_duration_s", "s"),
    "memory": ("mem_gb", "est_mem_gb", "GiB"),
}


class PredictError(GpuplanError):
    """A prediction that cannot be made: no usable history, an unknown target, a bad parameter."""


class ModelFileError(PredictError):
    """A model file that cannot be used: missing, foreign, damaged or written by another version."""


def check_target(target: str) -> str:
    """`target` if it is one of TARGETS.

    Raises:
        UnknownNameError: another name; the message lists the valid ones.
    """
    if target not in TARGETS:
        raise UnknownNameError("prediction target", target, list(TARGETS))
    return target


def is_censored(job: Job) -> bool:
    """A job whose recorded duration is only a lower bound (still running when the trace ended)."""
    return bool(job.meta.get("censored"))


def target_value(job: Job, target: str) -> float | None:
    """The true value of `target` for one job, or None when unknown, censored (a lower bound), or
    when the job never ran (no duration: a memory figure of such a job is a request, not a use)."""
    value = getattr(job, TARGETS[target][0])
    if value is None or job.duration_s is None or is_censored(job):
        return None
    return float(value)


def target_values(jobs: Sequence[Job], target: str) -> np.ndarray:
    """True values of `target` per job, NaN where unknown or censored."""
    return np.array([_nan(target_value(j, target)) for j in jobs], dtype=float)


def _nan(v: float | None) -> float:
    return math.nan if v is None else v


def _meta_s(job: Job, key: str) -> float | None:
    v = job.meta.get(key)
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def job_end_s(job: Job) -> float | None:
    """When the job's record became history: meta `end_s`, else meta `start_s` + duration, else
    submit + duration (the job started at once: exact for traces whose submit times are start times).

    None when the job has no known end (never ran, still running, duration unknown).
    """
    if is_censored(job) or job.duration_s is None:
        return None
    end = _meta_s(job, "end_s")
    if end is not None:
        return max(end, job.submit_s)
    start = _meta_s(job, "start_s")
    return (start if start is not None and start >= job.submit_s else job.submit_s) + job.duration_s


class Predictor(ABC):
    """Predicts one target (`duration` or `memory`) per job from the history it was fitted on.

    Subclasses set `name` and `description`, and implement `_fit` and `_predict`. `params` are the
    constructor's keyword arguments, kept so that a saved model can say how it was made.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    needs_history: ClassVar[bool] = True
    param_names: ClassVar[tuple[str, ...]] = ()

    def __init__(self, target: str = "duration", **params: Any) -> None:
        self.target = check_target(target)
        unknown = sorted(set(params) - set(self.param_names))
        if unknown:
            valid = ", ".join(self.param_names) or "none"
            raise PredictError(f"{self.name}: unknown parameter(s) {', '.join(unknown)}; valid: {valid}")
        self.params = dict(params)
        self.training_size = 0
        self.fitted = False

    def fit(self, history: Sequence[Job]) -> Self:
        """Learn from finished jobs (those with a known, uncensored target); returns self.

        Raises:
            PredictError: no job of `history` has a known value of the target.
        """
        known = [j for j in history if target_value(j, self.target) is not None]
        if not known and self.needs_history:
            field = TARGETS[self.target][0]
            raise PredictError(
                f"{self.name}: no job in the history ({len(history)} jobs) has a known {field}: "
                f"nothing to learn {self.target} from; give finished jobs"
            )
        self._fit(known)
        self.training_size = len(known)
        self.fitted = True
        return self

    def predict(self, jobs: Sequence[Job], past: Sequence[Job] | None = None) -> np.ndarray:
        """One prediction per job (NaN where this predictor has none, e.g. `limit` without a limit).

        Duration predictions never exceed the job's time limit (`requested_s`), where it has one.

        Args:
            jobs: the jobs to predict, any order.
            past: records the history features may use (each only for jobs submitted after it ended);
                None: the fitted history, taken as ended before every job. The jobs' own records count
                too, once they have ended before a job's submit.

        Raises:
            PredictError: the predictor has not been fitted.
        """
        if not self.fitted:
            raise PredictError(f"{self.name}: predict() before fit(): fit it on a history first")
        if not jobs:
            return np.zeros(0)
        pred = np.asarray(self._predict(list(jobs), None if past is None else list(past)), dtype=float)
        if self.target == "duration":  # a job is killed at its time limit: it never runs longer
            limits = np.array([np.inf if j.requested_s is None else j.requested_s for j in jobs])
            pred = np.minimum(pred, limits)
        return pred

    @abstractmethod
    def _fit(self, history: list[Job]) -> None: ...

    @abstractmethod
    def _predict(self, jobs: list[Job], past: list[Job] | None) -> np.ndarray: ...

    def feature_names(self) -> list[str]:
        """The inputs the fitted predictor uses (for the model file header)."""
        return []


_PREDICTORS: dict[str, type[Predictor]] = {}


def register_predictor(cls: type[Predictor]) -> type[Predictor]:
    """Add a predictor class to the registry under its `name` (usable as a decorator)."""
    _PREDICTORS[cls.name] = cls
    return cls


def predictor_names() -> list[str]:
    return list(_PREDICTORS)


def get_predictor(name: str, target: str = "duration", **params: Any) -> Predictor:
    """A new, unfitted predictor by name.

    Raises:
        UnknownNameError: no predictor has this name (the message lists them), or an unknown target.
    """
    try:
        cls = _PREDICTORS[name]
    except KeyError:
        raise UnknownNameError("predictor", name, predictor_names()) from None
    return cls(target, **params)

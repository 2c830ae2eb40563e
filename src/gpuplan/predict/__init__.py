"""Predict each job's duration and GPU memory from history, and schedule with the predictions.

Predictors share one interface (`fit(history) -> self`, `predict(jobs) -> array`) and a registry by
name: `limit`, `global-median`, `rolling-median`, `gbm`. `evaluate` compares them on a trace without
leakage; `compare_schedules` simulates policies with oracle, predicted and limit durations;
`save_model` / `load_model` / `apply_model` keep a fitted model in a file. See docs/predict.md.
"""

from gpuplan.predict.base import (
    TARGETS,
    ModelFileError,
    PredictError,
    Predictor,
    get_predictor,
    job_end_s,
    predictor_names,
    register_predictor,
    target_values,
)

# Predictors register themselves on import (one module each).
# isort: split
from gpuplan.predict.baselines import GlobalMedianPredictor, LimitPredictor, RollingMedianPredictor
from gpuplan.predict.evaluate import (
    DEFAULT_PREDICTORS,
    EvalReport,
    PredictorScore,
    evaluate,
    online_predictions,
)
from gpuplan.predict.gbm import GbmPredictor
from gpuplan.predict.history import PastRecords, history_stats, job_name
from gpuplan.predict.modelfile import ModelHeader, apply_model, load_model, read_header, save_model
from gpuplan.predict.schedule import DEFAULT_POLICIES, ScheduleReport, ScheduleRun, compare_schedules
from gpuplan.predict.synthetic import synth_history

__all__ = [
    "DEFAULT_POLICIES",
    "DEFAULT_PREDICTORS",
    "TARGETS",
    "EvalReport",
    "GbmPredictor",
    "GlobalMedianPredictor",
    "LimitPredictor",
    "ModelFileError",
    "ModelHeader",
    "PastRecords",
    "PredictError",
    "Predictor",
    "PredictorScore",
    "RollingMedianPredictor",
    "ScheduleReport",
    "ScheduleRun",
    "apply_model",
    "compare_schedules",
    "evaluate",
    "get_predictor",
    "history_stats",
    "job_end_s",
    "job_name",
    "load_model",
    "online_predictions",
    "predictor_names",
    "read_header",
    "register_predictor",
    "save_model",
    "synth_history",
    "target_values",
]

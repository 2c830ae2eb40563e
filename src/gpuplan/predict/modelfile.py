"""Model files: a fitted predictor behind a readable header.

Layout: the line `gpuplan-predict-model`, one line of JSON (the header), then the pickled predictor.
The header is read and checked before anything is unpickled, so a file from another program is
refused without running any of it, and a file from another gpuplan or scikit-learn version is refused
with the command that makes a new one. Unpickling runs code: load only model files you made.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from gpuplan.model import Job
from gpuplan.predict.base import TARGETS, ModelFileError, Predictor

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "ModelHeader",
    "apply_model",
    "load_model",
    "read_header",
    "save_model",
]

FORMAT = "gpuplan-predict-model"
FORMAT_VERSION = 1
_MAGIC = FORMAT.encode() + b"\n"
_MAX_HEADER = 1 << 20


def _gpuplan_version() -> str:
    from gpuplan import __version__

    return __version__


def _sklearn_version() -> str | None:
    try:
        return version("scikit-learn")
    except PackageNotFoundError:  # pragma: no cover - a declared dependency
        return None


@dataclasses.dataclass(slots=True, frozen=True)
class ModelHeader:
    """What a model file says about itself, readable without unpickling it."""

    format_version: int
    gpuplan_version: str
    sklearn_version: str | None
    target: str
    model: str
    params: dict[str, Any]
    features: list[str]
    training_size: int
    fitted_at: str
    history: str

    def as_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, **dataclasses.asdict(self)}


def _refit_hint(path: Path, header: dict[str, Any] | None = None) -> str:
    h = header or {}
    return (
        f"make a new one with `gpuplan predict fit HISTORY --target {h.get('target', 'duration')} "
        f"--model {h.get('model', 'gbm')} --out {path}`"
    )


def save_model(predictor: Predictor, path: str | Path, history: str = "") -> ModelHeader:
    """Write a fitted predictor to `path` with its header; returns the header.

    Raises:
        ModelFileError: the predictor is not fitted, or the file cannot be written.
    """
    path = Path(path)
    if not predictor.fitted:
        raise ModelFileError(f"{path}: the {predictor.name} predictor is not fitted: fit it before saving")
    header = ModelHeader(
        format_version=FORMAT_VERSION,
        gpuplan_version=_gpuplan_version(),
        sklearn_version=_sklearn_version(),
        target=predictor.target,
        model=predictor.name,
        params=_jsonable(predictor.params),
        features=predictor.feature_names(),
        training_size=predictor.training_size,
        fitted_at=datetime.now(UTC).isoformat(timespec="seconds"),
        history=history,
    )
    try:
        with path.open("wb") as f:
            f.write(_MAGIC)
            f.write(json.dumps(header.as_dict(), sort_keys=True).encode() + b"\n")
            pickle.dump(predictor, f, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError as e:
        raise ModelFileError(f"{path}: cannot write the model file ({e.strerror or e})") from e
    return header


def _jsonable(params: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v if isinstance(v, str | int | float | bool) or v is None else repr(v) for k, v in params.items()
    }


def read_header(path: str | Path) -> ModelHeader:
    """The header of a model file, checked against this gpuplan (nothing is unpickled).

    Raises:
        ModelFileError: no such file; not a gpuplan model file (foreign); a damaged header; or a file
            made by another model-file format, gpuplan or scikit-learn version (stale). The message
            names the file and gives the command that makes a new one.
    """
    path = Path(path)
    with _open(path) as f:
        return _header(path, f)


def _open(path: Path) -> Any:
    if not path.is_file():
        raise ModelFileError(f"{path}: no such model file; {_refit_hint(path)}")
    try:
        return path.open("rb")
    except OSError as e:
        raise ModelFileError(f"{path}: cannot read the model file ({e.strerror or e})") from e


def _header(path: Path, f: Any) -> ModelHeader:
    if f.read(len(_MAGIC)) != _MAGIC:
        raise ModelFileError(
            f"{path}: not a gpuplan model file (it does not start with {FORMAT!r}); {_refit_hint(path)}"
        )
    line = f.readline(_MAX_HEADER)
    try:
        raw = json.loads(line)
        fields = {k: raw[k] for k in (fl.name for fl in dataclasses.fields(ModelHeader))}
    except (ValueError, KeyError, TypeError) as e:
        raise ModelFileError(f"{path}: the model file's header is damaged ({e}); {_refit_hint(path)}") from e
    header = ModelHeader(**fields)
    _check_versions(path, header)
    return header


def _check_versions(path: Path, h: ModelHeader) -> None:
    now = {
        "model-file format": FORMAT_VERSION,
        "gpuplan": _gpuplan_version(),
        "scikit-learn": _sklearn_version(),
    }
    then = {
        "model-file format": h.format_version,
        "gpuplan": h.gpuplan_version,
        "scikit-learn": h.sklearn_version,
    }
    stale = [f"{k} {then[k]} (this is {now[k]})" for k in now if then[k] != now[k]]
    if stale:
        raise ModelFileError(
            f"{path}: stale model file, made with {', '.join(stale)}; {_refit_hint(path, dataclasses.asdict(h))}"
        )
    if h.target not in TARGETS:
        raise ModelFileError(f"{path}: unknown target {h.target!r} in the header; {_refit_hint(path)}")


def load_model(path: str | Path) -> tuple[ModelHeader, Predictor]:
    """Read a model file written by `save_model`.

    Raises:
        ModelFileError: as `read_header`, or a file cut off or damaged after its header.
    """
    path = Path(path)
    with _open(path) as f:
        header = _header(path, f)
        hint = _refit_hint(path, dataclasses.asdict(header))
        try:
            predictor = pickle.load(f)
        except Exception as e:  # a cut-off or damaged pickle raises many kinds of error
            raise ModelFileError(
                f"{path}: the model file is damaged or cut off ({type(e).__name__}: {e}); {hint}"
            ) from e
    if not isinstance(predictor, Predictor) or predictor.name != header.model:
        raise ModelFileError(f"{path}: the model file does not hold a {header.model} predictor; {hint}")
    return header, predictor


def apply_model(jobs: Sequence[Job], model_path: str | Path) -> list[Job]:
    """Copies of `jobs` with `est_duration_s` or `est_mem_gb` (the model's target) set to its prediction.

    History features use the model's training history, and the jobs' own records once they ended
    before a job's submit. A job without a prediction (e.g. `limit` and no time limit) keeps its
    estimate.

    Raises:
        ModelFileError: see `load_model`.
    """
    header, predictor = load_model(model_path)
    field = TARGETS[header.target][1]
    pred = predictor.predict(list(jobs))
    out = []
    for job, p in zip(jobs, pred.tolist()):
        copy = dataclasses.replace(job, meta=dict(job.meta))
        if np.isfinite(p):
            setattr(copy, field, float(p))
        out.append(copy)
    return out

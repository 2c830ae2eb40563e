"""How jobs that share one GPU slow each other down: the rate model the simulator uses, and its calibration.

A job has three phases: start-up (process start, imports: CPU work, never slowed), init (model build
before its GPU loop: slowed by a factor 1 + init_stretch while any other job shares its GPU) and its GPU
phase. In its GPU phase, a job i whose neighbours j are also in their GPU phase runs at

    slowdown_i = 1 + Σ_j max(0, alpha + beta · u_j · (1 + gamma · (1 − u_i)))
    rate_i     = 1 / slowdown_i

where u is a job's busy fraction (0..1) during its GPU phase, alone. beta says how much a busy neighbour
costs, gamma how much more it costs a latency-bound job (one with a low u_i, whose many short kernels
queue behind the neighbour's), and alpha (negative when fitted on the H200 data) is a threshold: a
neighbour that is rarely busy costs nothing. `InterferenceModel.from_colocation` fits the four numbers to
measured pairs; `InterferenceModel.default()` ships the fit on the H200 file. See docs/interference.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeAlias

import numpy as np
from numpy.typing import NDArray

from gpuplan.errors import InputError

__all__ = [
    "CalibrationReport",
    "ColocationError",
    "InterferenceModel",
    "PairFit",
    "format_report",
    "run_phase_util_pct",
    "simulate_pair",
]

# Fitted by InterferenceModel.from_colocation on ../shared/data/h200/colocation.json (one NVIDIA H200,
# measured 2026-11-30, 4 pairs), the three-phase job model (docs/interference.md): see
# docs/interference.md for the errors (in-sample and leave-one-pair-out).
DEFAULT_ALPHA = -0.24652494570468517
DEFAULT_BETA = 1.3932596107651798
DEFAULT_GAMMA = 1.9254878689455492
DEFAULT_INIT_STRETCH = 0.6662650752428716

MODEL_FORM = (
    "GPU phase: slowdown_i = 1 + sum_j max(0, alpha + beta * u_j * (1 + gamma * (1 - u_i))), rate = 1/slowdown; "
    "init phase: rate = 1 / (1 + init_stretch) while sharing"
)
PARAMETER_NAMES = ("alpha", "beta", "gamma", "init_stretch")

# Search box of the fit; the H200 fit and every leave-one-out fit lie well inside it.
_BOUNDS: tuple[tuple[float, float], ...] = ((-1.0, 2.0), (0.0, 5.0), (0.0, 10.0))
_COARSE_POINTS = 25  # per parameter, first pass over the whole box
_ZOOM_POINTS = 9  # per parameter, each refining pass
_ZOOM_PASSES = 60
_ZOOM_SHRINK = 0.6

FloatArray: TypeAlias = NDArray[np.float64]


class ColocationError(InputError):
    """A colocation file that cannot be used for calibration: names the file, the key and what was expected."""

    def __init__(
        self,
        path: str | Path,
        key: str,
        problem: str,
        expected: str,
        value: object = None,
        line: int | None = None,
    ) -> None:
        super().__init__(str(path), line, key, value, expected, reason=problem)
        where = f"{path}:{line}" if line is not None else str(path)
        self.args = (f"{where}: {key}: {problem} (expected {expected})",)


@dataclass(frozen=True, slots=True)
class InterferenceModel:
    """Progress rate of a job that shares a GPU, from its own and its neighbours' solo busy percent.

    Attributes:
        alpha: per-neighbour offset (negative: a threshold below which a neighbour costs nothing).
        beta: cost of a 100 % busy neighbour to a compute-bound job, above alpha.
        gamma: how much more a latency-bound job (own busy % near 0) suffers than a compute-bound one.
        init_stretch: a job's init phase takes 1 + init_stretch times as long while another job shares
            its GPU (0: init never slowed).
    """

    alpha: float
    beta: float
    gamma: float
    init_stretch: float = 0.0

    DEFAULT_UTIL_PCT: ClassVar[float] = 100.0  # a job of unknown util is assumed to be a busy neighbour

    def rate(self, util_pct: float, neighbour_utils_pct: Sequence[float]) -> float:
        """Progress rate in (0, 1] of a job sharing a GPU; 1.0 with no neighbours.

        Args:
            util_pct: the job's mean GPU busy % when run alone (clipped to 0..100; NaN means unknown).
            neighbour_utils_pct: the solo busy % of every other job on the same GPU.
        """
        if not neighbour_utils_pct:
            return 1.0
        return 1.0 / (1.0 + self._excess(util_pct, neighbour_utils_pct))

    def init_rate(self, shared: bool) -> float:
        """Progress rate of a job in its init phase: 1 alone, 1 / (1 + init_stretch) while sharing its GPU."""
        return 1.0 / (1.0 + self.init_stretch) if shared else 1.0

    def slowdown(self, util_pct: float, neighbour_utils_pct: Sequence[float]) -> float:
        """Instantaneous slowdown (>= 1) of a job sharing a GPU: 1 / `rate`."""
        if not neighbour_utils_pct:
            return 1.0
        return 1.0 + self._excess(util_pct, neighbour_utils_pct)

    def _excess(self, util_pct: float, neighbour_utils_pct: Sequence[float]) -> float:
        # Hot path of the simulator: plain floats, no numpy, one pass over the neighbours.
        own = util_pct if 0.0 <= util_pct <= 100.0 else _clip_pct(util_pct)
        per_pct = self.beta * (1.0 + self.gamma * (1.0 - own / 100.0)) / 100.0
        excess = 0.0
        for u in neighbour_utils_pct:
            term = self.alpha + per_pct * (u if 0.0 <= u <= 100.0 else _clip_pct(u))
            if term > 0.0:
                excess += term
        return excess

    @property
    def parameters(self) -> dict[str, float]:
        """The four coefficients by name."""
        return {
            "alpha": self.alpha,
            "beta": self.beta,
            "gamma": self.gamma,
            "init_stretch": self.init_stretch,
        }

    @classmethod
    def default(cls) -> InterferenceModel:
        """The model fitted on the H200 colocation measurements (see DEFAULT_ALPHA and docs/interference.md)."""
        return cls(DEFAULT_ALPHA, DEFAULT_BETA, DEFAULT_GAMMA, DEFAULT_INIT_STRETCH)

    @classmethod
    def from_colocation(cls, path: str | Path) -> tuple[InterferenceModel, CalibrationReport]:
        """Fit the model to a colocation JSON file (schema: ../shared/data/README.md, h200/colocation.json).

        First init_stretch, in closed form: how much longer each paired job took to reach its timed loop
        (pair wall_s − run_s against solo wall_s − run_s), per second of its solo init_s (least squares,
        at least 0). Then each measured pair is simulated piecewise (both jobs start at 0; job k starts its
        loop after its start-up, solo wall_s − init_s − run_s, and its init stretched by 1 + init_stretch;
        each loop runs at the modelled rate while the other is also in its loop, alone otherwise) and the
        squared error of predicted vs measured slowdowns is minimised by a deterministic grid search.

        Raises:
            ColocationError: the file is unreadable, not JSON, or a key is missing or holds a bad value
                (the message names the key and what it should hold).
        """
        data = _load(Path(path))
        params = _fit(data.pairs)
        return cls(*params), _report(str(path), data, params)


@dataclass(frozen=True, slots=True)
class PairFit:
    """One measured pair: measured vs predicted slowdown of each job, and the leave-one-pair-out prediction.

    Errors are predicted − measured (abs) and |predicted − measured| / measured (rel). The loo_* fields
    come from a fit on every other pair (None when the file has a single pair).
    """

    a: str
    b: str
    measured_a: float
    measured_b: float
    predicted_a: float
    predicted_b: float
    abs_error_a: float
    abs_error_b: float
    rel_error_a: float
    rel_error_b: float
    loo_predicted_a: float | None
    loo_predicted_b: float | None
    loo_rel_error_a: float | None
    loo_rel_error_b: float | None


@dataclass(frozen=True, slots=True)
class CalibrationReport:
    """How well the fitted model reproduces the measured pairs, and how well it generalises.

    Attributes:
        source: the colocation file.
        model_form: the formula fitted.
        parameters: alpha, beta, gamma, init_stretch.
        utils_pct: run-phase busy % used for each kind (see `run_phase_util_pct`).
        rows: one per measured pair, in file order.
        rmse: root mean square of predicted − measured slowdown over every job of every pair.
        max_rel_error: the largest |predicted − measured| / measured.
        loo_rmse, loo_max_rel_error, loo_mean_rel_error: the same for leave-one-pair-out predictions
            (None with a single pair).
    """

    source: str
    model_form: str
    parameters: dict[str, float]
    utils_pct: dict[str, float]
    rows: tuple[PairFit, ...]
    rmse: float
    max_rel_error: float
    loo_rmse: float | None
    loo_max_rel_error: float | None
    loo_mean_rel_error: float | None


@dataclass(frozen=True, slots=True)
class _Solo:
    startup_s: float
    init_s: float
    run_s: float
    util_pct: float

    @property
    def pre_s(self) -> float:
        """Solo seconds from process start to the timed loop."""
        return self.startup_s + self.init_s


@dataclass(frozen=True, slots=True)
class _Pair:
    a: str
    b: str
    solo_a: _Solo
    solo_b: _Solo
    slowdown_a: float
    slowdown_b: float
    pre_a_s: float  # measured seconds from process start to the loop, in the pair (wall_s_a − run_s_a)
    pre_b_s: float


@dataclass(frozen=True, slots=True)
class _Colocation:
    solo: dict[str, _Solo]
    pairs: tuple[_Pair, ...]


def run_phase_util_pct(solo_record: Mapping[str, Any]) -> float:
    """Busy % of a job during its timed loop, from a `solo` record of a colocation file.

    `mean_gpu_util` is averaged over the whole wall window, init included, while the GPU is busy almost
    only in the run phase; so the run-phase busy % is mean_gpu_util · wall_s / run_s, capped at 100.

    Raises:
        KeyError: a key among mean_gpu_util, wall_s, run_s is absent.
        ValueError: run_s is not positive.
    """
    run_s = float(solo_record["run_s"])
    if not run_s > 0.0:
        raise ValueError(f"run_s must be > 0, got {run_s!r}")
    return min(100.0, float(solo_record["mean_gpu_util"]) * float(solo_record["wall_s"]) / run_s)


def simulate_pair(
    start_a_s: float, work_a_s: float, rate_a: float, start_b_s: float, work_b_s: float, rate_b: float
) -> tuple[float, float]:
    """Slowdowns (run time together / run time alone) of two jobs whose run phases partly overlap.

    Job a starts its run phase at start_a_s and needs work_a_s seconds of solo progress; it advances at
    rate_a while b is also in its run phase and at rate 1 otherwise; likewise b.
    """
    sa, sb = _pair_slowdowns(start_a_s, work_a_s, np.float64(rate_a), start_b_s, work_b_s, np.float64(rate_b))
    return float(sa), float(sb)


def _pair_slowdowns(
    start_a: float, work_a: float, rate_a: Any, start_b: float, work_b: float, rate_b: Any
) -> tuple[Any, Any]:
    """Vectorised over rate arrays: slowdowns of a and b (see `simulate_pair`)."""
    if start_a > start_b:
        slow_b, slow_a = _pair_slowdowns(start_b, work_b, rate_b, start_a, work_a, rate_a)
        return slow_a, slow_b
    lead = start_b - start_a
    if work_a <= lead:  # a is done before b starts: no overlap
        return np.ones_like(rate_a), np.ones_like(rate_b)
    left_a = work_a - lead  # a's work still to do when b starts
    t_a, t_b = left_a / rate_a, work_b / rate_b  # time each would need if both ran to the end together
    a_first = t_a <= t_b
    end_a = np.where(a_first, start_b + t_a, start_b + t_b + (left_a - rate_a * t_b))
    end_b = np.where(a_first, start_b + t_a + (work_b - rate_b * t_a), start_b + t_b)
    return (end_a - start_a) / work_a, (end_b - start_b) / work_b


def _rates(params: Sequence[Any], u_self: float, u_other: float) -> Any:
    alpha, beta, gamma = params[:3]
    return 1.0 / (1.0 + np.maximum(0.0, alpha + beta * u_other * (1.0 + gamma * (1.0 - u_self))))


def _loop_start_s(solo: _Solo, stretch: float) -> float:
    """When a paired job (both started at 0, sharing throughout) reaches its loop: start-up, stretched init."""
    return solo.startup_s + solo.init_s * (1.0 + stretch)


def _predict(params: Sequence[Any], stretch: float, pair: _Pair) -> tuple[Any, Any]:
    ua, ub = pair.solo_a.util_pct / 100.0, pair.solo_b.util_pct / 100.0
    return _pair_slowdowns(
        _loop_start_s(pair.solo_a, stretch),
        pair.solo_a.run_s,
        _rates(params, ua, ub),
        _loop_start_s(pair.solo_b, stretch),
        pair.solo_b.run_s,
        _rates(params, ub, ua),
    )


def _sse(params: Sequence[Any], stretch: float, pairs: Sequence[_Pair]) -> Any:
    total: Any = 0.0
    for pair in pairs:
        pred_a, pred_b = _predict(params, stretch, pair)
        total = total + (pred_a - pair.slowdown_a) ** 2 + (pred_b - pair.slowdown_b) ** 2
    return total


def _fit_stretch(pairs: Sequence[_Pair]) -> float:
    """Least squares of (pair pre − solo pre) = stretch · solo init_s over every job of every pair, at least 0."""
    num = den = 0.0
    for pair in pairs:
        for solo, pre_s in ((pair.solo_a, pair.pre_a_s), (pair.solo_b, pair.pre_b_s)):
            num += (pre_s - solo.pre_s) * solo.init_s
            den += solo.init_s * solo.init_s
    return max(0.0, num / den) if den > 0.0 else 0.0


def _fit(pairs: Sequence[_Pair]) -> tuple[float, float, float, float]:
    """init_stretch in closed form, then alpha, beta, gamma by least squares over the search box: a coarse
    grid, then grids zooming in on the best point."""
    stretch = _fit_stretch(pairs)
    lo = np.array([b[0] for b in _BOUNDS])
    hi = np.array([b[1] for b in _BOUNDS])
    best = _grid_argmin(pairs, stretch, [np.linspace(lo[i], hi[i], _COARSE_POINTS) for i in range(3)])
    span = (hi - lo) / (_COARSE_POINTS - 1)
    offsets = np.linspace(-2.0, 2.0, _ZOOM_POINTS)
    for _ in range(_ZOOM_PASSES):
        axes = [np.clip(best[i] + span[i] * offsets, lo[i], hi[i]) for i in range(3)]
        best = _grid_argmin(pairs, stretch, axes)
        span = span * _ZOOM_SHRINK
    return float(best[0]), float(best[1]), float(best[2]), stretch


def _grid_argmin(pairs: Sequence[_Pair], stretch: float, axes: list[FloatArray]) -> FloatArray:
    grid = [g.ravel() for g in np.meshgrid(*axes, indexing="ij")]
    k = int(np.argmin(_sse(grid, stretch, pairs)))  # first minimum on ties: deterministic
    return np.array([g[k] for g in grid])


def _report(source: str, data: _Colocation, params: tuple[float, float, float, float]) -> CalibrationReport:
    loo = _leave_one_out(data.pairs)
    rows = tuple(
        _pair_fit(pair, params, None if loo is None else loo[i]) for i, pair in enumerate(data.pairs)
    )
    measured = [m for r in rows for m in (r.measured_a, r.measured_b)]
    predicted = [p for r in rows for p in (r.predicted_a, r.predicted_b)]
    rel = [e for r in rows for e in (r.rel_error_a, r.rel_error_b)]
    loo_pred = None if loo is None else [p for pair_pred in loo for p in pair_pred]
    loo_rel = None if loo_pred is None else [abs(p - m) / m for p, m in zip(loo_pred, measured, strict=True)]
    return CalibrationReport(
        source=source,
        model_form=MODEL_FORM,
        parameters=dict(zip(PARAMETER_NAMES, params, strict=True)),
        utils_pct={kind: solo.util_pct for kind, solo in data.solo.items()},
        rows=rows,
        rmse=_rmse(predicted, measured),
        max_rel_error=max(rel),
        loo_rmse=None if loo_pred is None else _rmse(loo_pred, measured),
        loo_max_rel_error=None if loo_rel is None else max(loo_rel),
        loo_mean_rel_error=None if loo_rel is None else sum(loo_rel) / len(loo_rel),
    )


def _leave_one_out(pairs: Sequence[_Pair]) -> list[tuple[float, float]] | None:
    """Prediction for each pair from a fit on all the others (None with fewer than two pairs)."""
    if len(pairs) < 2:
        return None
    out = []
    for i, pair in enumerate(pairs):
        params = _fit([p for j, p in enumerate(pairs) if j != i])
        pred_a, pred_b = _predict(params, params[3], pair)
        out.append((float(pred_a), float(pred_b)))
    return out


def _pair_fit(
    pair: _Pair, params: tuple[float, float, float, float], loo: tuple[float, float] | None
) -> PairFit:
    pred_a, pred_b = (float(x) for x in _predict(params, params[3], pair))
    return PairFit(
        a=pair.a,
        b=pair.b,
        measured_a=pair.slowdown_a,
        measured_b=pair.slowdown_b,
        predicted_a=pred_a,
        predicted_b=pred_b,
        abs_error_a=pred_a - pair.slowdown_a,
        abs_error_b=pred_b - pair.slowdown_b,
        rel_error_a=abs(pred_a - pair.slowdown_a) / pair.slowdown_a,
        rel_error_b=abs(pred_b - pair.slowdown_b) / pair.slowdown_b,
        loo_predicted_a=None if loo is None else loo[0],
        loo_predicted_b=None if loo is None else loo[1],
        loo_rel_error_a=None if loo is None else abs(loo[0] - pair.slowdown_a) / pair.slowdown_a,
        loo_rel_error_b=None if loo is None else abs(loo[1] - pair.slowdown_b) / pair.slowdown_b,
    )


def _rmse(predicted: Sequence[float], measured: Sequence[float]) -> float:
    return math.sqrt(sum((p - m) ** 2 for p, m in zip(predicted, measured, strict=True)) / len(measured))


def _clip_pct(u: float) -> float:
    if u != u:  # NaN: unknown
        return InterferenceModel.DEFAULT_UTIL_PCT
    return min(max(u, 0.0), 100.0)


# --- reading a colocation file -------------------------------------------------------------------------

_POSITIVE = "a number > 0"
_NON_NEGATIVE = "a number >= 0"
_PERCENT = "a number from 0 to 100"


def _load(path: Path) -> _Colocation:
    """Parse and check a colocation file; every failure is a ColocationError naming the key."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ColocationError(
            path, "(file)", f"cannot read: {reason}", "a readable colocation JSON file"
        ) from e
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ColocationError(
            path, "(document)", f"not JSON: {e.msg}", "a JSON object with keys solo and pairs", line=e.lineno
        ) from e
    root = _object(path, "(document)", doc)
    solo_doc = _object(path, "solo", _get(path, root, "solo", "", "an object of kind -> solo record"))
    solo = {kind: _solo(path, f"solo.{kind}", rec) for kind, rec in solo_doc.items()}
    if not solo:
        raise ColocationError(path, "solo", "is empty", "at least one kind with a solo record")
    pairs = tuple(_pair(path, f"pairs[{i}]", rec, solo) for i, rec in enumerate(_pairs_list(path, root)))
    return _Colocation(solo, pairs)


def _pairs_list(path: Path, root: dict[str, Any]) -> list[Any]:
    pairs = _get(path, root, "pairs", "", "a list of measured pairs")
    if not isinstance(pairs, list) or not pairs:
        raise ColocationError(
            path, "pairs", "is not a non-empty list", "a list of measured pairs", value=pairs
        )
    return pairs


def _solo(path: Path, where: str, rec: Any) -> _Solo:
    rec = _object(path, where, rec)
    wall_s = _number(path, rec, where, "wall_s", _POSITIVE, lambda x: x > 0)
    run_s = _number(path, rec, where, "run_s", _POSITIVE, lambda x: x > 0)
    init_s = _number(path, rec, where, "init_s", _NON_NEGATIVE, lambda x: x >= 0)
    util = _number(path, rec, where, "mean_gpu_util", _PERCENT, lambda x: 0 <= x <= 100)
    if init_s + run_s > wall_s:
        raise ColocationError(
            path,
            f"{where}.wall_s",
            f"value {wall_s!r} is less than init_s + run_s",
            "at least init_s + run_s",
        )
    util_run = run_phase_util_pct({"mean_gpu_util": util, "wall_s": wall_s, "run_s": run_s})
    return _Solo(wall_s - init_s - run_s, init_s, run_s, util_run)


def _pair(path: Path, where: str, rec: Any, solo: dict[str, _Solo]) -> _Pair:
    rec = _object(path, where, rec)
    a, b = (_kind(path, rec, where, key, solo) for key in ("a", "b"))
    slow_a = _number(path, rec, where, "slowdown_a", _POSITIVE, lambda x: x > 0)
    slow_b = _number(path, rec, where, "slowdown_b", _POSITIVE, lambda x: x > 0)
    pre_a, pre_b = (_pair_pre_s(path, rec, where, side) for side in ("a", "b"))
    return _Pair(a, b, solo[a], solo[b], slow_a, slow_b, pre_a, pre_b)


def _pair_pre_s(path: Path, rec: dict[str, Any], where: str, side: str) -> float:
    """Measured seconds from process start to the loop of one side of a pair: wall_s_x − run_s_x."""
    wall_s = _number(path, rec, where, f"wall_s_{side}", _POSITIVE, lambda x: x > 0)
    run_s = _number(path, rec, where, f"run_s_{side}", _POSITIVE, lambda x: x > 0)
    if run_s > wall_s:
        raise ColocationError(
            path,
            f"{where}.wall_s_{side}",
            f"value {wall_s!r} is less than run_s_{side}",
            f"at least run_s_{side}",
        )
    return wall_s - run_s


def _kind(path: Path, rec: dict[str, Any], where: str, key: str, solo: dict[str, _Solo]) -> str:
    expected = f"one of the kinds in solo: {', '.join(sorted(solo))}"
    value = _get(path, rec, key, where, expected)
    if not isinstance(value, str) or value not in solo:
        raise ColocationError(path, f"{where}.{key}", f"value {value!r} names no kind", expected, value=value)
    return value


def _number(
    path: Path, rec: dict[str, Any], where: str, key: str, expected: str, ok: Callable[[float], bool]
) -> float:
    value = _get(path, rec, key, where, expected)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ColocationError(
            path, f"{where}.{key}", f"value {value!r} is not a number", expected, value=value
        )
    if not (math.isfinite(value) and ok(value)):
        raise ColocationError(
            path, f"{where}.{key}", f"value {value!r} is out of range", expected, value=value
        )
    return float(value)


def _get(path: Path, rec: dict[str, Any], key: str, where: str, expected: str) -> Any:
    if key not in rec:
        raise ColocationError(path, f"{where}.{key}" if where else key, "missing", expected)
    return rec[key]


def _object(path: Path, where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        kind = type(value).__name__
        raise ColocationError(path, where, f"is a {kind}, not an object", "a JSON object", value=value)
    return value


# --- plain-text report -------------------------------------------------------------------------------


def format_report(report: CalibrationReport) -> str:
    """The calibration as a plain-text table: parameters, one line per job of each pair, summary errors."""
    params = "  ".join(f"{k}={v:.4f}" for k, v in report.parameters.items())
    utils = "  ".join(f"{k}={v:.1f}" for k, v in report.utils_pct.items())
    pair_w = max([4] + [len(f"{r.a} + {r.b}") for r in report.rows])
    job_w = max([3] + [2 + len(k) for r in report.rows for k in (r.a, r.b)])
    lines = [
        f"interference calibration from {report.source}",
        f"model: {report.model_form}",
        f"parameters: {params}",
        f"run-phase busy %: {utils}",
        "",
        f"{'pair':<{pair_w}}  {'job':<{job_w}} {'measured':>8} {'predicted':>9} {'abs err':>8} "
        f"{'rel err':>8} {'LOO pred':>8} {'LOO rel':>8}",
    ]
    for row in report.rows:
        lines.extend(_row_lines(row, pair_w, job_w))
    lines += ["", f"RMSE {report.rmse:.4f}   max relative error {_pct(report.max_rel_error)}"]
    if report.loo_rmse is not None:
        lines.append(
            f"leave-one-pair-out: RMSE {report.loo_rmse:.4f}   max relative error "
            f"{_pct(report.loo_max_rel_error)}   mean relative error {_pct(report.loo_mean_rel_error)}"
        )
    return "\n".join(lines) + "\n"


def _row_lines(row: PairFit, pair_w: int, job_w: int) -> list[str]:
    sides = (
        (f"a {row.a}", row.measured_a, row.predicted_a, row.abs_error_a, row.rel_error_a, row.loo_predicted_a,
         row.loo_rel_error_a),
        (f"b {row.b}", row.measured_b, row.predicted_b, row.abs_error_b, row.rel_error_b, row.loo_predicted_b,
         row.loo_rel_error_b),
    )  # fmt: skip
    out = []
    for i, (job, meas, pred, err, rel, loo_pred, loo_rel) in enumerate(sides):
        loo_txt = f"{'-':>8} {'-':>8}" if loo_pred is None else f"{loo_pred:>8.3f} {_pct(loo_rel):>8}"
        label = f"{row.a} + {row.b}" if i == 0 else ""
        out.append(
            f"{label:<{pair_w}}  {job:<{job_w}} {meas:>8.3f} {pred:>9.3f} {err:>+8.3f} {_pct(rel):>8} {loo_txt}"
        )
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100.0 * x:.1f}%"

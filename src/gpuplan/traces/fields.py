"""Job fields as trace files spell them, and the conversion of raw values into them.

The converters are pure: they take one CSV cell or one JSON value and either return the field's value or
raise `FieldError`, which names the field, the raw value, what was expected and a short reason. Readers
add the file and line (`FieldError.located`). Every rule lives here so all formats agree on what a
valid job is.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from gpuplan.errors import InputError
from gpuplan.model import Job

__all__ = [
    "BOOL_FIELDS",
    "FALSE_WORDS",
    "FLOAT_FIELDS",
    "JOB_FIELDS",
    "PHASE_FIELDS",
    "PLAUSIBLE_MAX",
    "REPORTED_FIELDS",
    "REQUIRED_FIELDS",
    "TIME_FIELDS",
    "TIME_UNITS",
    "TRUE_WORDS",
    "FieldError",
    "cell_text",
    "check_plausible",
    "job_from_json",
    "job_from_texts",
    "job_record",
    "loads_object",
    "to_seconds",
]

JOB_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Job))
REQUIRED_FIELDS: tuple[str, ...] = ("id", "submit_s", "gpus")
TIME_FIELDS: tuple[str, ...] = (
    "submit_s",
    "duration_s",
    "est_duration_s",
    "requested_s",
    "startup_s",
    "init_s",
)
PHASE_FIELDS: tuple[str, ...] = ("startup_s", "init_s")
FLOAT_FIELDS: tuple[str, ...] = (
    *TIME_FIELDS,
    "mem_gb",
    "est_mem_gb",
    "gpu_util_pct",
    "cpu_milli",
    "host_mem_gb",
    "gpu_share",
)
# Beyond these a value is a unit or typing mistake, not a job: an error that names the field.
MAX_TIME_S = 100 * 365.25 * 86400  # 100 years
MAX_MEM_GB = 10_000.0  # 10 TB on one GPU
MAX_GPUS = 1_000_000
PLAUSIBLE_MAX: dict[str, tuple[float, str]] = {
    **{
        f: (MAX_TIME_S, "at most 100 years (3.16e9 s); a wrong time unit? see --time-unit")
        for f in TIME_FIELDS
    },
    "mem_gb": (MAX_MEM_GB, "at most 10 TB (10000 GB) per GPU; memory is in GB per GPU"),
    "est_mem_gb": (MAX_MEM_GB, "at most 10 TB (10000 GB) per GPU; memory is in GB per GPU"),
    "gpus": (MAX_GPUS, "at most 1,000,000 GPUs"),
    "cpu_milli": (1e9, "at most 1e9 milli-cores (a million cores); CPU is in thousandths of a core"),
    "host_mem_gb": (1e6, "at most 1e6 GiB (a petabyte) of host memory; it is in GiB"),
}
# Fields listed in TraceResult.missing_fields when no job of the file has a value for them.
REPORTED_FIELDS: tuple[str, ...] = (
    "mem_gb",
    "duration_s",
    "est_duration_s",
    "est_mem_gb",
    "requested_s",
    "user",
    "name",
    "gpu_util_pct",
)
# Unit name -> (multiplier, divisor) to seconds; dividing keeps 1500 ms == 1.5 s exact.
TIME_UNITS: dict[str, tuple[int, int]] = {"s": (1, 1), "ms": (1, 1000), "min": (60, 1), "h": (3600, 1)}

_EXPECTED: dict[str, str] = {
    "id": "a non-empty job id",
    "gpus": "an integer >= 1",
    "mem_gb": "a finite number of GiB >= 0",
    "est_mem_gb": "a finite number of GiB >= 0",
    "gpu_util_pct": "a percent from 0 to 100",
    "cpu_milli": "a finite number of milli-cores >= 0 (thousandths of a core)",
    "host_mem_gb": "a finite number of GiB >= 0",
    "gpu_share": "a share of one GPU, above 0 and at most 1",
    "may_span_nodes": "true or false",
    "duration_includes_sharing": "true or false",
    "meta": "a JSON object",
    "user": "a string",
    "name": "a string",
    "command": "a string",
}
_JSON_KINDS: dict[str, tuple[type, str]] = {
    "may_span_nodes": (bool, "not true/false"),
    "duration_includes_sharing": (bool, "not true/false"),
    "meta": (dict, "not an object"),
}
BOOL_FIELDS: tuple[str, ...] = ("may_span_nodes", "duration_includes_sharing")
TRUE_WORDS = {"true", "t", "yes", "y", "1"}
FALSE_WORDS = {"false", "f", "no", "n", "0", ""}
_DEFAULTS: dict[str, Any] = {
    f.name: (f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default)
    for f in dataclasses.fields(Job)
}


def _expected(field: str, unit: str = "s") -> str:
    if field in TIME_FIELDS:
        return "a finite number of seconds >= 0" if unit == "s" else f"a finite number >= 0 (unit {unit})"
    return _EXPECTED[field]


class FieldError(Exception):
    """One bad value of one field; readers turn it into an `InputError` with file and line."""

    def __init__(self, field: str, value: object, what: str, expected: str = "", reason: str = "") -> None:
        self.field = field
        self.value = value
        self.what = what
        self.expected = expected or _expected(field)
        self.reason = reason or f"{field}: {what}"
        super().__init__(f"{self.reason}: value {value!r} (expected {self.expected})")

    def located(self, path: str, line: int, column: str | None = None) -> InputError:
        """The same error as an `InputError` at `path:line`; `column` defaults to the field name."""
        return InputError(path, line, column or self.field, self.value, self.expected, reason=self.reason)


def to_seconds(value: float, unit: str) -> float:
    """`value` given in `unit` (a key of TIME_UNITS) as seconds."""
    mul, div = TIME_UNITS[unit]
    return value * mul / div if div != 1 else value * mul


def _checked_float(field: str, value: float, raw: object, expected: str = "") -> float:
    if math.isnan(value) or math.isinf(value):
        raise FieldError(field, raw, "not finite", expected)
    if value < 0:
        raise FieldError(field, raw, "negative", expected)
    if field == "gpu_util_pct" and value > 100:
        raise FieldError(field, raw, "above 100", expected)
    if field == "gpu_share" and not 0 < value <= 1:
        raise FieldError(field, raw, "not in (0, 1]", expected)
    return value


def check_plausible(job: Job) -> None:
    """Every time, memory and GPU count of `job` is within PLAUSIBLE_MAX.

    Raises:
        FieldError: the first field beyond its plausible maximum (e.g. submit_s 1e300).
    """
    for field, (limit, expected) in PLAUSIBLE_MAX.items():
        value = getattr(job, field)
        if value is not None and value > limit:
            raise FieldError(field, value, "beyond any plausible value", expected)


def _checked_gpus(value: int, raw: object) -> int:
    if value == 0:
        expected = "an integer >= 1; 0 GPUs is a CPU-only job, which has no place in a GPU trace"
        raise FieldError("gpus", raw, "0 (CPU-only job)", expected)
    if value < 0:
        raise FieldError("gpus", raw, "negative")
    return value


# ---- CSV cells ------------------------------------------------------------------------------------


def _float_text(field: str, text: str, unit: str) -> float | None:
    s = text.strip()
    expected = _expected(field, unit)
    if not s:
        if field in REQUIRED_FIELDS:
            raise FieldError(field, text, "missing", expected)
        return None
    try:
        value = float(s)
    except ValueError:
        raise FieldError(field, text, "not a number", expected) from None
    if field in TIME_FIELDS:
        # Check before scaling so the message is about the value as written; check again after,
        # because a huge value in hours overflows to inf.
        value = to_seconds(_checked_float(field, value, text, expected), unit)
    return _checked_float(field, value, text, expected)


def _gpus_text(text: str) -> int:
    s = text.strip()
    if not s:
        raise FieldError("gpus", text, "missing")
    try:
        return _checked_gpus(int(s), text)
    except ValueError:
        pass
    try:
        value = float(s)
    except ValueError:
        value = math.nan
    if not value.is_integer():
        raise FieldError("gpus", text, "not an integer")
    return _checked_gpus(int(value), text)


def _bool_text(field: str, text: str) -> bool:
    s = text.strip().lower()
    if s in TRUE_WORDS:
        return True
    if s in FALSE_WORDS:
        return False
    raise FieldError(field, text, "not true/false")


def _meta_text(text: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        value = loads_object(text)
    except ValueError:
        raise FieldError("meta", text, "bad JSON") from None
    if not isinstance(value, dict):
        raise FieldError("meta", text, "not a JSON object")
    return value


def _value_from_text(field: str, text: str, unit: str) -> Any:
    if field in FLOAT_FIELDS:
        return _float_text(field, text, unit)
    if field == "gpus":
        return _gpus_text(text)
    if field in BOOL_FIELDS:
        return _bool_text(field, text)
    if field == "meta":
        return _meta_text(text)
    if field == "id" and not text.strip():
        raise FieldError("id", text, "missing")
    return text


def job_from_texts(texts: dict[str, str], units: dict[str, str] | None = None) -> Job:
    """Build a Job from CSV cells keyed by Job field name, checked in the order of `texts`.

    Args:
        texts: field name -> cell text; an empty cell leaves an optional field at its default.
        units: time field -> unit name (TIME_UNITS); fields not named are in seconds.

    Raises:
        FieldError: the first bad or missing value.
    """
    units = units or {}
    values: dict[str, Any] = {}
    for field, text in texts.items():
        value = _value_from_text(field, text, units.get(field, "s"))
        if value is not None:
            values[field] = value
    for field in REQUIRED_FIELDS:
        if field not in values:
            raise FieldError(field, "", "missing")
    _check_phases(values)
    return Job(**values)


# ---- JSON values ----------------------------------------------------------------------------------


class _DuplicateKeyError(ValueError):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKeyError(f"duplicate key {key!r}")
        obj[key] = value
    return obj


def loads_object(text: str) -> Any:
    """`json.loads` that rejects duplicate keys; every failure is a ValueError.

    Raises:
        ValueError: not JSON, a duplicate key, a number too long, or nesting too deep.
    """
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _float_json(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FieldError(field, value, "not a number")
    try:
        number = float(value)
    except OverflowError:
        raise FieldError(field, value, "not finite") from None
    return _checked_float(field, number, value)


def _gpus_json(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return _checked_gpus(value, value)
    if isinstance(value, float) and value.is_integer():
        return _checked_gpus(int(value), value)
    raise FieldError("gpus", value, "not an integer")


def _id_json(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise FieldError("id", value, "not a string", "a non-empty string or integer job id")
    if not value.strip():
        raise FieldError("id", value, "missing")
    return value


def _value_from_json(field: str, value: Any) -> Any:
    if value is None:
        if field in REQUIRED_FIELDS:
            raise FieldError(field, value, "missing")
        return None
    if field in FLOAT_FIELDS:
        return _float_json(field, value)
    if field == "gpus":
        return _gpus_json(value)
    if field == "id":
        return _id_json(value)
    kind, what = _JSON_KINDS.get(field, (str, "not a string"))
    if not isinstance(value, kind):
        raise FieldError(field, value, what)
    return value


def job_from_json(obj: dict[str, Any]) -> Job:
    """Build a Job from one decoded JSON object whose keys are Job field names.

    Raises:
        FieldError: an unknown key, or the first bad or missing value.
    """
    for key in obj:
        if key not in JOB_FIELDS:
            expected = f"only Job field names as keys: {', '.join(JOB_FIELDS)}"
            raise FieldError(key, obj[key], "an unknown key", expected, reason=f"unknown key {key!r}")
    values: dict[str, Any] = {}
    for field, raw in obj.items():
        value = _value_from_json(field, raw)
        if value is not None:
            values[field] = value
    for field in REQUIRED_FIELDS:
        if field not in values:
            raise FieldError(field, None, "missing")
    _check_phases(values)
    return Job(**values)


def _check_phases(values: dict[str, Any]) -> None:
    """startup_s + init_s must fit in duration_s (when the three are given)."""
    duration = values.get("duration_s")
    phases = [values[f] for f in PHASE_FIELDS if f in values]
    if duration is None or not phases or sum(phases) <= duration:
        return
    field = "init_s" if "init_s" in values else "startup_s"
    raise FieldError(
        field,
        values[field],
        "startup_s + init_s exceed duration_s",
        f"startup_s + init_s at most duration_s ({duration!r} s): they are parts of the job's duration",
    )


# ---- writing --------------------------------------------------------------------------------------


def job_record(job: Job) -> dict[str, Any]:
    """The job's fields as a dict in field order, leaving out those at their default (None, "", False, {}).

    id, submit_s and gpus are always present.
    """
    record: dict[str, Any] = {}
    for field in JOB_FIELDS:
        value = getattr(job, field)
        if field in REQUIRED_FIELDS or value != _DEFAULTS[field]:
            record[field] = value
    return record


def cell_text(field: str, value: Any) -> str:
    """One CSV cell for a Job field value; floats use `repr` so reading them back is exact."""
    if value is None:
        return ""
    if field == "meta":
        return json.dumps(value, ensure_ascii=False, allow_nan=False) if value else ""
    if field in BOOL_FIELDS:
        return "true" if value else "false"
    if field in FLOAT_FIELDS:
        return repr(float(value))
    return str(value)

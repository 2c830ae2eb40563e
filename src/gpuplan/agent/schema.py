"""The agent's request schema: every field of every op, checked at the protocol boundary.

`validate(obj)` turns one decoded JSON request into a plain dict whose fields all have the declared
type, range and size (defaults filled in), or raises `RequestError` naming the op, the field, the
offending value and the valid range. Handlers (agent/requests.py) see only validated requests, so
no value from a client reaches SQLite, the Scheduler or the launcher unchecked.

Ranges (docs/agent.md, "Requests"): every integer is a JSON integer (not a float, not a boolean)
within +-(2^53 - 1), exact in JavaScript and in SQLite's signed 64-bit INTEGER; job ids are
1..2^53 - 1. Numbers are finite. Strings have no NUL byte and a bounded length; lists and the
environment a bounded size. Unknown fields are refused, so a misspelled option is never ignored.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.model import PREEMPT_MODES

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "JOB_ID_MAX",
    "MAX_COMMAND",
    "MAX_ENV_BYTES",
    "MAX_ENV_VALUE",
    "MAX_ENV_VARS",
    "MAX_GPUS",
    "MAX_IDS",
    "MAX_MEM_GB",
    "MAX_NAME",
    "MAX_ORDER",
    "MAX_PATH",
    "MAX_TIME_S",
    "OPS",
    "RequestError",
    "check_job_id",
    "validate",
]

INT_MAX = 2**53 - 1
INT_MIN = -INT_MAX
JOB_ID_MAX = INT_MAX
MAX_GPUS = 4096
MAX_MEM_GB = 1.0e6
MAX_TIME_S = 1.0e9  # about 31 years
MAX_COMMAND = 65536
MAX_NAME = 256
MAX_PATH = 4096
MAX_IDS = 10000
MAX_ORDER = 100000
MAX_ENV_VARS = 4096
MAX_ENV_BYTES = 1024 * 1024
MAX_ENV_VALUE = 131072
"""The limits above are public: front-ends (the dashboard's request models) bound their fields by them."""
_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")


class RequestError(GpuplanError):
    """A request the agent refuses before handling it: the message names the field and the range."""


@dataclass(frozen=True, slots=True)
class _Field:
    check: Callable[[str, Any], Any]
    default: Any = None
    required: bool = False


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 48 else text[:45] + "..."


def _int(lo: int, hi: int) -> Callable[[str, Any], int]:
    def check(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RequestError(f"{name}: expected an integer {lo}..{hi}, got {_show(value)}")
        if not lo <= value <= hi:
            raise RequestError(f"{name}: {_show(value)} is out of range (valid: {lo}..{hi})")
        return value

    return check


def _number(hi: float, optional: bool = True) -> Callable[[str, Any], float | None]:
    def check(name: str, value: Any) -> float | None:
        if value is None and optional:
            return None
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or not 0 < value <= hi:
            raise RequestError(f"{name}: expected a number > 0 and <= {hi:g}, got {_show(value)}")
        return float(value)

    return check


def _str(most: int, least: int = 0) -> Callable[[str, Any], str]:
    def check(name: str, value: Any) -> str:
        if not isinstance(value, str):
            raise RequestError(f"{name}: expected a string, got {_show(value)}")
        if not least <= len(value) <= most:
            raise RequestError(f"{name}: {len(value)} characters (valid: {least}..{most})")
        if "\0" in value:
            raise RequestError(f"{name}: contains a NUL character")
        return value

    return check


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise RequestError(f"{name}: expected true or false, got {_show(value)}")
    return value


def _job_id_or_none(name: str, value: Any) -> int | None:
    return None if value is None else check_job_id(name, value)


def check_job_id(name: str, value: Any) -> int:
    """A job id: an integer 1..JOB_ID_MAX (raises RequestError naming `name` otherwise)."""
    return _int(1, JOB_ID_MAX)(name, value)


def _ids(name: str, value: Any) -> list[int]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_IDS:
        raise RequestError(f"{name}: expected a list of 1..{MAX_IDS} job ids, got {_show(value)}")
    ids = [check_job_id(f"{name}[{i}]", v) for i, v in enumerate(value)]
    return list(dict.fromkeys(ids))  # each job once, in the order given


def _order(name: str, value: Any) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_ORDER:
        raise RequestError(f"{name}: expected a list of at most {MAX_ORDER} plan ids, got {_show(value)}")
    return [_str(MAX_NAME, 1)(f"{name}[{i}]", v) for i, v in enumerate(value)]


def _env(name: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_ENV_VARS:
        raise RequestError(
            f"{name}: expected an object of at most {MAX_ENV_VARS} strings, got {_show(value)}"
        )
    total = 0
    for k, v in value.items():
        _str(1024, 1)(f"{name} key", k)
        if "=" in k:
            raise RequestError(f"{name}: variable name {_show(k)} contains '='")
        _str(MAX_ENV_VALUE)(f"{name}[{k!r}]", v)
        total += len(k) + len(v) + 2
    if total > MAX_ENV_BYTES:
        raise RequestError(f"{name}: {total} characters in all (valid: at most {MAX_ENV_BYTES})")
    return dict(value)


def _command(name: str, value: Any) -> str:
    text = _str(MAX_COMMAND)(name, value)
    if not text.strip():
        raise RequestError("empty command; give it after --, e.g. gpuplan submit -- python train.py")
    return text


def _cwd(name: str, value: Any) -> str:
    text = _str(MAX_PATH, 1)(name, value)
    if not text.startswith("/"):
        raise RequestError(f"{name}: {_show(text)} is not an absolute path")
    return text


def _preempt(name: str, value: Any) -> str:
    if value is None:
        return "suspend"
    if value not in PREEMPT_MODES:
        raise RequestError(f"--preempt {_show(value)}: valid: {', '.join(PREEMPT_MODES)}")
    return str(value)


def _request_id(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _REQUEST_ID.fullmatch(value):
        raise RequestError(
            f"{name}: expected 1..64 letters, digits, '-', '_', '.', ':' (a uuid), got {_show(value)}"
        )
    return value


_JOB_IDS = {"ids": _Field(_ids), "id": _Field(_job_id_or_none)}
_COMMON = {"request_id": _Field(_request_id)}
OPS: dict[str, dict[str, _Field]] = {
    "submit": {
        "command": _Field(_command, required=True),
        "gpus": _Field(_int(1, MAX_GPUS), 1),
        "mem_gb": _Field(_number(MAX_MEM_GB)),
        "time_limit_s": _Field(_number(MAX_TIME_S)),
        "name": _Field(_str(MAX_NAME), ""),
        "priority": _Field(_int(INT_MIN, INT_MAX), 0),
        "after_id": _Field(_job_id_or_none),
        "hold": _Field(_bool, False),
        "cwd": _Field(_cwd, "/"),
        "env": _Field(_env, dict),
        "preempt": _Field(_preempt, "suspend"),
    },
    "cancel": _JOB_IDS,
    "hold": _JOB_IDS,
    "release": _JOB_IDS,
    "requeue": _JOB_IDS,
    "show": {"id": _Field(check_job_id, required=True)},
    "apply": {"order": _Field(_order, required=True)},
    "queue": {},
    "status": {},
    "stop": {"kill_jobs": _Field(_bool, False)},
    "reload": {},
}
"""Every op and its fields; `request_id` (a client's uuid) is accepted on every op."""


def validate(obj: Any) -> dict[str, Any]:
    """The request with every field checked and defaults filled in (`op` included).

    Raises:
        RequestError: not an object, an unknown op, an unknown or missing field, or a value of the
            wrong type, range or size (the message names the op, the field and the valid values).
    """
    if not isinstance(obj, dict):
        raise RequestError(f'bad request: expected a JSON object with "op", got {_show(obj)}')
    op = obj.get("op")
    if not isinstance(op, str) or op not in OPS:
        raise RequestError(f"unknown op {_show(op)}; valid: {', '.join(sorted(OPS))}")
    spec = {**OPS[op], **_COMMON}
    unknown = sorted(str(k) for k in obj if k != "op" and k not in spec)
    if unknown:
        raise RequestError(
            f"{op}: unknown field(s) {', '.join(map(_show, unknown))}; valid: {', '.join(spec)}"
        )
    out: dict[str, Any] = {"op": op}
    for name, f in spec.items():
        if name not in obj:
            if f.required:
                raise RequestError(f"{op}: missing field {name!r}")
            out[name] = f.default() if callable(f.default) else f.default
            continue
        try:
            out[name] = f.check(name, obj[name])
        except RequestError as e:
            raise RequestError(f"{op}: {e}") from None
    if OPS[op] is _JOB_IDS:
        if (out["ids"] is None) == (out["id"] is None):
            raise RequestError(f"{op}: give at least one job id, as 'ids' (a list) or 'id', not both")
        out["ids"] = out["ids"] or [out["id"]]
    return out

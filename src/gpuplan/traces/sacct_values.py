"""The values of Slurm's accounting output, parsed one cell at a time: durations, limits, times, counts,
sizes, TRES strings, states and exit codes (pure; each `cell_*` raises `BadValue` with the value, what
was expected and why, and the reader adds file, line and column), and the format's constants (the
columns to ask for, the commands, what each state means). Shared by the `sacct -P` reader
(traces/sacct.py, traces/sacct_text.py), its Arrow path and the `sacct --json` reader."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from gpuplan.traces.fields import MAX_GPUS, MAX_MEM_GB, MAX_TIME_S

__all__ = [
    "ACTIVE_STATES",
    "EXPECT_AT_MOST_DURATION",
    "EXPECT_AT_MOST_GPUS",
    "EXPECT_AT_MOST_MEM",
    "EXPECT_AT_MOST_TIME",
    "EXPECT_TIME",
    "EXPECT_TRES",
    "JOBID_RE",
    "MAX_EPOCH_S",
    "NO_LIMIT",
    "NO_NODES",
    "NO_TIME",
    "SACCT_COLUMNS",
    "SACCT_COMMAND",
    "SACCT_JSON_COMMAND",
    "STATE_MEANINGS",
    "TRES_RE",
    "Alloc",
    "BadValue",
    "cell_alloc",
    "cell_duration",
    "cell_exit_code",
    "cell_limit",
    "cell_optional_count",
    "cell_optional_size",
    "cell_state",
    "cell_time",
    "cell_usage",
    "parse_duration",
    "parse_size",
    "parse_tres",
]

NO_TIME = frozenset({"", "None", "Unknown", "N/A", "NONE", "UNKNOWN"})
NO_LIMIT = {"UNLIMITED": "UNLIMITED", "INFINITE": "UNLIMITED", "Partition_Limit": "Partition_Limit"}
_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
# Numbers have at most 15 digits: int() refuses 4300 digits and float() overflows long before.
_DURATION_RE = re.compile(r"(?:(?:(\d{1,9})-)?(\d{1,12}):)?(\d{1,12}):(\d{1,12})(?:\.(\d{1,6}))?", re.ASCII)
JOBID_RE = re.compile(
    r"(\d{1,15})(?:_(\d{1,15}|\[[0-9,%:\-]+\]))?(?:\+(\d{1,15}))?(?:\.([A-Za-z0-9_]+(?:\+\d+)?))?", re.ASCII
)
TRES_RE = re.compile(r"[^=,\s]+=[^=,\s]+(?:,[^=,\s]+=[^=,\s]+)*", re.ASCII)
_SIZE_RE = re.compile(r"(\d{1,15}(?:\.\d{1,9})?)([KMGTP]?)", re.ASCII)
_COUNT_RE = re.compile(r"\d{1,15}", re.ASCII)
_STATE_RE = re.compile(r"([A-Z][A-Z_]*)(?: by (\d+))?", re.ASCII)
_EXIT_RE = re.compile(r"\d+:\d+", re.ASCII)

_EXPECT_DURATION = "a duration [D-]HH:MM:SS, MM:SS or MM:SS.mmm (minutes and seconds below 60)"
_EXPECT_LIMIT = f"{_EXPECT_DURATION}, UNLIMITED or Partition_Limit"
EXPECT_TIME = "a time such as 2026-11-30T00:38:02 (read as UTC), None or Unknown"
EXPECT_TRES = "TRES items NAME=VALUE separated by commas, e.g. billing=1,cpu=1,gres/gpu=2,node=1"
_EXPECT_COUNT = "a whole number >= 0"
_EXPECT_SIZE = "a size such as 218280K, 1.50G or 0 (units K, M, G, T, P; none means bytes)"
# Beyond these a value is a typing or unit mistake, not a job (the same bounds as every other reader).
MAX_EPOCH_S = 4_102_444_800.0  # 2100-01-01T00:00:00 UTC
EXPECT_AT_MOST_DURATION = "a duration of at most 100 years (36524 days)"
EXPECT_AT_MOST_TIME = "a time before the year 2100"
EXPECT_AT_MOST_GPUS = f"at most {MAX_GPUS:,} GPUs per job"
EXPECT_AT_MOST_MEM = (
    f"at most 10 TB ({MAX_MEM_GB:.0f} GB) of GPU memory per GPU (gres/gpumem is the job's total)"
)


class BadValue(Exception):
    """A bad cell: its value, what was expected and a short reason; the caller adds file, line, column."""

    def __init__(self, value: object, expected: str, what: str) -> None:
        super().__init__(what)
        self.value = value
        self.expected = expected
        self.what = what


# ---- value parsers (pure; each raises BadValue) -------------------------------------------------------


def parse_duration(text: str) -> float:
    """Seconds in a Slurm duration: `MM:SS`, `HH:MM:SS`, `D-HH:MM:SS`, each with an optional `.mmm`.

    Raises:
        ValueError: any other text, a negative duration, or minutes/seconds of 60 or more.
    """
    try:
        return cell_duration(text)
    except BadValue as e:
        raise ValueError(f"{text!r}: {e.what} (expected {e.expected})") from None


def cell_duration(text: str) -> float:
    if len(text) == 8 and text[2] == ":" == text[5]:  # HH:MM:SS, as sacct prints Elapsed
        digits = text[:2] + text[3:5] + text[6:]
        if digits.isascii() and digits.isdigit() and text[3:5] < "60" and text[6:] < "60":
            return float(int(text[:2]) * 3600 + int(text[3:5]) * 60 + int(text[6:]))
    s = text.strip()
    m = _DURATION_RE.fullmatch(s)
    if m is None:
        raise BadValue(text, _EXPECT_DURATION, "negative" if s.startswith("-") else "not a duration")
    days, hours, minutes, seconds, frac = m.groups()
    if int(minutes) >= 60 or int(seconds) >= 60 or (days is not None and int(hours) >= 24):
        raise BadValue(text, _EXPECT_DURATION, "out of range")
    total = int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + int(seconds)
    if total > MAX_TIME_S:
        raise BadValue(text, EXPECT_AT_MOST_DURATION, "absurd duration")
    return total + float(f"0.{frac}") if frac else float(total)


def cell_limit(text: str) -> float | None:
    s = text.strip()
    if not s or s in NO_LIMIT:
        return None
    try:
        return cell_duration(s)
    except BadValue as e:
        raise BadValue(text, _EXPECT_LIMIT, e.what) from None


def cell_time(text: str) -> float | None:
    if len(text) == 19 and text[10] == "T" and "1970" <= text[:4] < "2100":  # as sacct prints, no zone
        try:
            return (datetime.fromisoformat(text) - _EPOCH).total_seconds()
        except (ValueError, TypeError):
            pass  # the general path says what is wrong
    s = text.strip()
    if s in NO_TIME:
        return None
    if s.isascii() and s.isdigit() and len(s) <= 15:  # SLURM_TIME_FORMAT=%s
        value = float(int(s))
    else:
        try:
            dt = datetime.fromisoformat(s)
            value = (dt - (_EPOCH if dt.tzinfo is None else _EPOCH_UTC)).total_seconds()
        except (ValueError, OverflowError):
            raise BadValue(text, EXPECT_TIME, "not a time") from None
    if value < 0:
        raise BadValue(text, EXPECT_TIME + ", not before 1970", "before 1970")
    if value >= MAX_EPOCH_S:
        raise BadValue(text, EXPECT_AT_MOST_TIME, "absurd time")
    return value


def _count(text: str, expected: str = _EXPECT_COUNT) -> int:
    s = text.strip()
    if _COUNT_RE.fullmatch(s):
        return int(s)
    raise BadValue(
        text, expected, "negative" if s.startswith("-") and s[1:].isdigit() else "not a whole number"
    )


def cell_optional_count(text: str) -> int | None:
    return _count(text) if text.strip() else None


def parse_size(text: str) -> int:
    """Bytes in a Slurm size such as `218280K`, `62.50G` or `0` (no unit means bytes).

    Raises:
        ValueError: any other text.
    """
    try:
        return _size(text)
    except BadValue as e:
        raise ValueError(f"{text!r}: {e.what} (expected {e.expected})") from None


def _size(text: str) -> int:
    s = text.strip()
    m = _SIZE_RE.fullmatch(s)
    if m is None:
        raise BadValue(text, _EXPECT_SIZE, "negative" if s.startswith("-") else "not a size")
    return round(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


def cell_optional_size(text: str) -> int | None:
    return _size(text) if text.strip() else None


def parse_tres(text: str) -> dict[str, str]:
    """The items of a TRES string such as `billing=1,cpu=1,gres/gpu=2,node=1`, in order.

    Raises:
        ValueError: an item without '=' or with an empty name or value.
    """
    try:
        return _tres_items(text)
    except BadValue as e:
        raise ValueError(f"{text!r}: {e.what} (expected {e.expected})") from None


def _tres_items(text: str) -> dict[str, str]:
    s = text.strip()
    if not s:
        return {}
    if TRES_RE.fullmatch(s) is None:
        raise BadValue(text, EXPECT_TRES, "bad TRES")
    return dict(item.split("=", 1) for item in s.split(","))


@dataclass(slots=True, frozen=True)
class Alloc:
    """The GPU and node counts of an AllocTRES/ReqTRES string."""

    empty: bool
    gpus: int
    nodes: int | None
    gpu_types: tuple[tuple[str, int], ...]
    shares: bool  # gres/shard or gres/mps without a whole GPU
    cpus: int | None = None  # cpu=N: CPUs of the allocation (all nodes)
    mem_bytes: int | None = None  # mem=SIZE: its memory (all nodes)

    @property
    def cpu_milli(self) -> float | None:
        """Job.cpu_milli of its CPUs (None when the TRES gives none)."""
        return self.cpus * 1000.0 if self.cpus else None

    @property
    def host_mem_gb(self) -> float | None:
        """Job.host_mem_gb of its memory (None when the TRES gives none)."""
        return self.mem_bytes / (1 << 30) if self.mem_bytes else None


def cell_alloc(text: str) -> Alloc:
    items = _tres_items(text)
    untyped: int | None = None
    typed: list[tuple[str, int]] = []
    nodes: int | None = None
    cpus: int | None = None
    mem: int | None = None
    shares = False
    for name, value in items.items():
        if name == "cpu":
            cpus = _count(value, EXPECT_TRES + " (CPU counts are whole numbers >= 0)")
        elif name == "mem":
            mem = _size(value)
        elif name == "gres/gpu":
            untyped = _count(value, EXPECT_TRES + " (GPU counts are whole numbers >= 0)")
        elif name.startswith("gres/gpu:"):
            typed.append((name[9:], _count(value, EXPECT_TRES + " (GPU counts are whole numbers >= 0)")))
        elif name == "node":
            nodes = _count(value, EXPECT_TRES + " (node counts are whole numbers >= 0)")
        elif name.split(":", 1)[0] in ("gres/shard", "gres/mps"):
            shares = shares or value.strip() not in ("0", "")
    # Slurm prints the total and each type (gres/gpu=2,gres/gpu:a100=2): the total wins.
    gpus = untyped if untyped is not None else sum(n for _, n in typed)
    if gpus > MAX_GPUS:
        raise BadValue(text, EXPECT_AT_MOST_GPUS, "absurd GPU count")
    return Alloc(not items, gpus, nodes, tuple(typed), shares, cpus, mem)


def cell_usage(text: str) -> tuple[int | None, float | None]:
    """(gres/gpumem in bytes, gres/gpuutil in percent) of a TRESUsageInMax string, None when absent."""
    items = _tres_items(text)
    mem = items.get("gres/gpumem")
    util = items.get("gres/gpuutil")
    mem_bytes = _size(mem) if mem is not None else None
    if util is None:
        return mem_bytes, None
    try:
        pct = float(util)
    except ValueError:
        pct = -1.0
    if not 0 <= pct < float("inf"):
        raise BadValue(text, EXPECT_TRES + " (gres/gpuutil a percent >= 0)", "bad gres/gpuutil")
    return mem_bytes, pct


def cell_state(text: str) -> tuple[str, str]:
    s = text.strip()
    m = _STATE_RE.fullmatch(s)
    if m is None:
        raise BadValue(text, "a Slurm job state such as COMPLETED, FAILED or 'CANCELLED by 0'", "not a state")
    return m.group(1), s


def cell_exit_code(text: str) -> str:
    s = text.strip()
    if s and _EXIT_RE.fullmatch(s) is None:
        raise BadValue(text, "CODE:SIGNAL, e.g. 0:0, 3:0 or 0:11", "not an exit code")
    return s


# ---- the sacct output format (shared by the -P and --json readers) ----------------------------------

SACCT_COLUMNS: tuple[str, ...] = (
    "JobID",
    "JobIDRaw",
    "JobName",
    "User",
    "Account",
    "Partition",
    "State",
    "ExitCode",
    "Submit",
    "Start",
    "End",
    "Elapsed",
    "Timelimit",
    "AllocTRES",
    "ReqTRES",
    "AllocNodes",
    "NodeList",
    "MaxRSS",
    "TRESUsageInMax",
)


SACCT_COMMAND = f"sacct -a -P -S 2026-01-01 -E now -o {','.join(SACCT_COLUMNS)}"


SACCT_JSON_COMMAND = "sacct -a --json -S 2026-01-01 -E now"


STATE_MEANINGS: dict[str, str] = {
    "COMPLETED": "ran to the end with exit code 0",
    "FAILED": "ended with a non-zero exit code or a signal (meta exit_code 'code:signal')",
    "TIMEOUT": "killed at its time limit: the work was cut short, so the need was longer than duration_s",
    "CANCELLED": "cancelled by a user or an admin (sacct prints 'CANCELLED by UID'), running or pending",
    "OUT_OF_MEMORY": "killed for going over its memory limit",
    "NODE_FAIL": "a node it ran on failed",
    "PREEMPTED": "preempted by a higher-priority job: the work was cut short",
    "BOOT_FAIL": "a node failed to boot, so it never really ran",
    "DEADLINE": "cancelled at its --deadline",
    "PENDING": "still queued when sacct ran: never started",
    "RUNNING": "still running when sacct ran: duration unknown, meta elapsed_s is a lower bound",
    "SUSPENDED": "suspended when sacct ran: duration unknown",
    "REQUEUED": "requeued; it runs again under the same id",
}


ACTIVE_STATES = frozenset({"RUNNING", "SUSPENDED", "REQUEUED", "RESIZING", "COMPLETING", "CONFIGURING"})


NO_NODES = frozenset({"", "None assigned", "(null)"})

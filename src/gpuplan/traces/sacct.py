"""Slurm accounting traces: `sacct --parsable2` text (format "sacct") and `sacct --json` ("sacct-json").

What to run (docs/formats.md, section "Slurm sacct", says more):

    sacct -a -P -S 2026-01-01 -E now -o JobID,JobIDRaw,JobName,User,Account,Partition,State,ExitCode,\
Submit,Start,End,Elapsed,Timelimit,AllocTRES,ReqTRES,AllocNodes,NodeList,MaxRSS,TRESUsageInMax

One job per allocation row: an array task (`123_4`) or a heterogeneous component (`14+0`) is a job of
its own. Step rows (`123.batch`, `123.extern`, `123.0`, `14+0.batch`) are folded into their job: their
peak MaxRSS and TRESUsageInMax become the job's usage. Jobs without GPUs are left out and counted under
`skipped`; jobs that never started are kept with `duration_s` None and `meta["never_started"]`.
Slurm prints times in the cluster's local time without a zone: they are read as UTC.

Parsing is pure: text in, jobs out. The exact text reader works on chunks of rows, column by column, and
parses each distinct cell text once (TRES strings, limits and states repeat); a chunk with a problem is
read again row by row, so every error names its line. Large plain files first go through pyarrow, which
splits the rows and folds the steps, and which hands the file to the exact reader at the first thing it
cannot vouch for. See docs/formats.md, "Speed", for both and for measured times.
"""

from __future__ import annotations

import gc
import gzip
import re
import sys
import zlib
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import repeat
from pathlib import Path
from typing import IO, Any

from gpuplan.errors import InputError
from gpuplan.model import Job
from gpuplan.traces._fields import JOB_FIELDS, MAX_GPUS, MAX_MEM_GB, MAX_TIME_S, REPORTED_FIELDS
from gpuplan.traces._rows import HEAD_BYTES, clip, ignored_option_warnings
from gpuplan.traces.base import (
    ReadOptions,
    TraceError,
    TraceReader,
    TraceResult,
    TruncatedTraceError,
    register_reader,
)

__all__ = [
    "SACCT_COLUMNS",
    "SACCT_COMMAND",
    "SACCT_JSON_COMMAND",
    "STATE_MEANINGS",
    "SacctReader",
    "parse_duration",
    "parse_size",
    "parse_tres",
]

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

# What each final state says about the run; kept as meta["state"] on every job.
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

_CPU_ONLY = "no GPUs (CPU-only job)"
_SHARES_ONLY = "GPU shares only (gres/shard or gres/mps, no whole GPU)"
_ACTIVE_STATES = frozenset({"RUNNING", "SUSPENDED", "REQUEUED", "RESIZING", "COMPLETING", "CONFIGURING"})
_NO_TIME = frozenset({"", "None", "Unknown", "N/A", "NONE", "UNKNOWN"})
_NO_LIMIT = {"UNLIMITED": "UNLIMITED", "INFINITE": "UNLIMITED", "Partition_Limit": "Partition_Limit"}
_NO_NODES = frozenset({"", "None assigned", "(null)"})
_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_GIB = float(1 << 30)
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
_MEMO_LIMIT = 1 << 16
_MAX_IDS_SHOWN = 5
_MAX_SAMPLES = 5

# Numbers have at most 15 digits: int() refuses 4300 digits and float() overflows long before.
_DURATION_RE = re.compile(r"(?:(?:(\d{1,9})-)?(\d{1,12}):)?(\d{1,12}):(\d{1,12})(?:\.(\d{1,6}))?", re.ASCII)
_JOBID_RE = re.compile(
    r"(\d{1,15})(?:_(\d{1,15}|\[[0-9,%:\-]+\]))?(?:\+(\d{1,15}))?(?:\.([A-Za-z0-9_]+(?:\+\d+)?))?", re.ASCII
)
_TRES_RE = re.compile(r"[^=,\s]+=[^=,\s]+(?:,[^=,\s]+=[^=,\s]+)*", re.ASCII)
_SIZE_RE = re.compile(r"(\d{1,15}(?:\.\d{1,9})?)([KMGTP]?)", re.ASCII)
_COUNT_RE = re.compile(r"\d{1,15}", re.ASCII)
_STATE_RE = re.compile(r"([A-Z][A-Z_]*)(?: by (\d+))?", re.ASCII)
_EXIT_RE = re.compile(r"\d+:\d+", re.ASCII)

_EXPECT_DURATION = "a duration [D-]HH:MM:SS, MM:SS or MM:SS.mmm (minutes and seconds below 60)"
_EXPECT_LIMIT = f"{_EXPECT_DURATION}, UNLIMITED or Partition_Limit"
_EXPECT_TIME = "a time such as 2026-11-30T00:38:02 (read as UTC), None or Unknown"
_EXPECT_TRES = "TRES items NAME=VALUE separated by commas, e.g. billing=1,cpu=1,gres/gpu=2,node=1"
_EXPECT_COUNT = "a whole number >= 0"
_EXPECT_SIZE = "a size such as 218280K, 1.50G or 0 (units K, M, G, T, P; none means bytes)"
# Beyond these a value is a typing or unit mistake, not a job (the same bounds as every other reader).
_MAX_EPOCH_S = 4_102_444_800.0  # 2100-01-01T00:00:00 UTC
_EXPECT_AT_MOST_DURATION = "a duration of at most 100 years (36524 days)"
_EXPECT_AT_MOST_TIME = "a time before the year 2100"
_EXPECT_AT_MOST_GPUS = f"at most {MAX_GPUS:,} GPUs per job"
_EXPECT_AT_MOST_MEM = (
    f"at most 10 TB ({MAX_MEM_GB:.0f} GB) of GPU memory per GPU (gres/gpumem is the job's total)"
)


class _Bad(Exception):
    """A bad cell: its value, what was expected and a short reason; the caller adds file, line, column."""

    def __init__(self, value: object, expected: str, what: str) -> None:
        super().__init__(what)
        self.value = value
        self.expected = expected
        self.what = what


# ---- value parsers (pure; each raises _Bad) -------------------------------------------------------


def parse_duration(text: str) -> float:
    """Seconds in a Slurm duration: `MM:SS`, `HH:MM:SS`, `D-HH:MM:SS`, each with an optional `.mmm`.

    Raises:
        ValueError: any other text, a negative duration, or minutes/seconds of 60 or more.
    """
    try:
        return _duration(text)
    except _Bad as e:
        raise ValueError(f"{text!r}: {e.what} (expected {e.expected})") from None


def _duration(text: str) -> float:
    if len(text) == 8 and text[2] == ":" == text[5]:  # HH:MM:SS, as sacct prints Elapsed
        digits = text[:2] + text[3:5] + text[6:]
        if digits.isascii() and digits.isdigit() and text[3:5] < "60" and text[6:] < "60":
            return float(int(text[:2]) * 3600 + int(text[3:5]) * 60 + int(text[6:]))
    s = text.strip()
    m = _DURATION_RE.fullmatch(s)
    if m is None:
        raise _Bad(text, _EXPECT_DURATION, "negative" if s.startswith("-") else "not a duration")
    days, hours, minutes, seconds, frac = m.groups()
    if int(minutes) >= 60 or int(seconds) >= 60 or (days is not None and int(hours) >= 24):
        raise _Bad(text, _EXPECT_DURATION, "out of range")
    total = int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + int(seconds)
    if total > MAX_TIME_S:
        raise _Bad(text, _EXPECT_AT_MOST_DURATION, "absurd duration")
    return total + float(f"0.{frac}") if frac else float(total)


def _limit(text: str) -> float | None:
    s = text.strip()
    if not s or s in _NO_LIMIT:
        return None
    try:
        return _duration(s)
    except _Bad as e:
        raise _Bad(text, _EXPECT_LIMIT, e.what) from None


def _time(text: str) -> float | None:
    if len(text) == 19 and text[10] == "T" and "1970" <= text[:4] < "2100":  # as sacct prints, no zone
        try:
            return (datetime.fromisoformat(text) - _EPOCH).total_seconds()
        except (ValueError, TypeError):
            pass  # the general path says what is wrong
    s = text.strip()
    if s in _NO_TIME:
        return None
    if s.isascii() and s.isdigit() and len(s) <= 15:  # SLURM_TIME_FORMAT=%s
        value = float(int(s))
    else:
        try:
            dt = datetime.fromisoformat(s)
            value = (dt - (_EPOCH if dt.tzinfo is None else _EPOCH_UTC)).total_seconds()
        except (ValueError, OverflowError):
            raise _Bad(text, _EXPECT_TIME, "not a time") from None
    if value < 0:
        raise _Bad(text, _EXPECT_TIME + ", not before 1970", "before 1970")
    if value >= _MAX_EPOCH_S:
        raise _Bad(text, _EXPECT_AT_MOST_TIME, "absurd time")
    return value


def _count(text: str, expected: str = _EXPECT_COUNT) -> int:
    s = text.strip()
    if _COUNT_RE.fullmatch(s):
        return int(s)
    raise _Bad(text, expected, "negative" if s.startswith("-") and s[1:].isdigit() else "not a whole number")


def _optional_count(text: str) -> int | None:
    return _count(text) if text.strip() else None


def parse_size(text: str) -> int:
    """Bytes in a Slurm size such as `218280K`, `62.50G` or `0` (no unit means bytes).

    Raises:
        ValueError: any other text.
    """
    try:
        return _size(text)
    except _Bad as e:
        raise ValueError(f"{text!r}: {e.what} (expected {e.expected})") from None


def _size(text: str) -> int:
    s = text.strip()
    m = _SIZE_RE.fullmatch(s)
    if m is None:
        raise _Bad(text, _EXPECT_SIZE, "negative" if s.startswith("-") else "not a size")
    return round(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


def _optional_size(text: str) -> int | None:
    return _size(text) if text.strip() else None


def parse_tres(text: str) -> dict[str, str]:
    """The items of a TRES string such as `billing=1,cpu=1,gres/gpu=2,node=1`, in order.

    Raises:
        ValueError: an item without '=' or with an empty name or value.
    """
    try:
        return _tres_items(text)
    except _Bad as e:
        raise ValueError(f"{text!r}: {e.what} (expected {e.expected})") from None


def _tres_items(text: str) -> dict[str, str]:
    s = text.strip()
    if not s:
        return {}
    if _TRES_RE.fullmatch(s) is None:
        raise _Bad(text, _EXPECT_TRES, "bad TRES")
    return dict(item.split("=", 1) for item in s.split(","))


@dataclass(slots=True, frozen=True)
class _Alloc:
    """The GPU and node counts of an AllocTRES/ReqTRES string."""

    empty: bool
    gpus: int
    nodes: int | None
    gpu_types: tuple[tuple[str, int], ...]
    shares: bool  # gres/shard or gres/mps without a whole GPU


def _alloc(text: str) -> _Alloc:
    items = _tres_items(text)
    untyped: int | None = None
    typed: list[tuple[str, int]] = []
    nodes: int | None = None
    shares = False
    for name, value in items.items():
        if name == "gres/gpu":
            untyped = _count(value, _EXPECT_TRES + " (GPU counts are whole numbers >= 0)")
        elif name.startswith("gres/gpu:"):
            typed.append((name[9:], _count(value, _EXPECT_TRES + " (GPU counts are whole numbers >= 0)")))
        elif name == "node":
            nodes = _count(value, _EXPECT_TRES + " (node counts are whole numbers >= 0)")
        elif name.split(":", 1)[0] in ("gres/shard", "gres/mps"):
            shares = shares or value.strip() not in ("0", "")
    # Slurm prints the total and each type (gres/gpu=2,gres/gpu:a100=2): the total wins.
    gpus = untyped if untyped is not None else sum(n for _, n in typed)
    if gpus > MAX_GPUS:
        raise _Bad(text, _EXPECT_AT_MOST_GPUS, "absurd GPU count")
    return _Alloc(not items, gpus, nodes, tuple(typed), shares)


def _usage(text: str) -> tuple[int | None, float | None]:
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
        raise _Bad(text, _EXPECT_TRES + " (gres/gpuutil a percent >= 0)", "bad gres/gpuutil")
    return mem_bytes, pct


def _state(text: str) -> tuple[str, str]:
    s = text.strip()
    m = _STATE_RE.fullmatch(s)
    if m is None:
        raise _Bad(text, "a Slurm job state such as COMPLETED, FAILED or 'CANCELLED by 0'", "not a state")
    return m.group(1), s


def _exit_code(text: str) -> str:
    s = text.strip()
    if s and _EXIT_RE.fullmatch(s) is None:
        raise _Bad(text, "CODE:SIGNAL, e.g. 0:0, 3:0 or 0:11", "not an exit code")
    return s


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: reading makes millions of objects that hold no cycles, and the
    collector would rescan all of them again and again (about 3x slower)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Memo(dict[str, Any]):
    """Parses each distinct cell text once; a bad text raises every time and is not stored."""

    def __init__(self, parse: Callable[[str], Any]) -> None:
        super().__init__()
        self.parse = parse

    def __missing__(self, text: str) -> Any:
        if len(self) >= _MEMO_LIMIT:
            self.clear()
        value = self[text] = self.parse(text)
        return value


# ---- the text reader ------------------------------------------------------------------------------

_ALIASES = {name.lower(): name for name in SACCT_COLUMNS}


@dataclass(slots=True)
class _Columns:
    """Header positions by canonical column name, the labels as the file spells them, and extras."""

    header_text: str
    width: int
    index: dict[str, int]
    labels: dict[str, str]
    extras: list[tuple[int, str]]

    def label(self, name: str) -> str:
        return self.labels.get(name, name)


def _columns(path: Path, line: int, text: str) -> _Columns:
    names = [n.strip() for n in text.split("|")]
    width = len(names)
    if names[-1] == "" and width > 1:  # `sacct -p` ends every line with '|'
        names = names[:-1]
    where = f"{path}:{line}: header"
    if any(not n for n in names):
        raise TraceError(f"{where}: an empty column name in {clip(text)!r}; give the header sacct prints")
    index: dict[str, int] = {}
    labels: dict[str, str] = {}
    extras: list[tuple[int, str]] = []
    for i, name in enumerate(names):
        canonical = _ALIASES.get(name.lower())
        if canonical in index or name in (label for _, label in extras):
            raise TraceError(f"{where}: column {name!r} appears twice")
        if canonical is None:
            extras.append((i, name))
        else:
            index[canonical] = i
            labels[canonical] = name
    _check_required(where, index, names)
    return _Columns(text, width, index, labels, extras)


def _check_required(where: str, index: dict[str, int], names: list[str]) -> None:
    missing = [c for c in ("JobID", "Submit") if c not in index]
    if "Elapsed" not in index and not {"Start", "End"} <= set(index):
        missing.append("Elapsed (or Start and End)")
    if "AllocTRES" not in index and "ReqTRES" not in index:
        missing.append("AllocTRES (or ReqTRES)")
    if missing:
        raise TraceError(
            f"{where}: required sacct column(s) {', '.join(missing)} missing; the header has: "
            f"{', '.join(names)}. Run: {SACCT_COMMAND}"
        )


_MISSING_COLUMN_NOTES = {
    "Timelimit": "requested_s unknown",
    "User": "user unknown",
    "JobName": "name unknown",
    "State": "no meta state",
    "TRESUsageInMax": "mem_gb and gpu_util_pct unknown",
    "AllocNodes": "node count taken from TRES node=",
}


class _Collector:
    """The jobs of one file: unique ids, rejected rows counted per reason, jobs left out, usage folding.

    It follows `RowSink` (same skipped counts, samples and missing fields) without its per-field scans
    of every job, which cost seconds on a million jobs.
    """

    def __init__(self, path: Path, skip_bad: bool, usage_column: str = "TRESUsageInMax") -> None:
        self.path = path
        self.usage_column = usage_column  # where the GPU memory peaks come from, for errors
        self.skip_bad = skip_bad
        self.jobs: list[Job] = []
        self.skipped: Counter[str] = Counter()
        self.samples: list[str] = []
        self.seen: set[str] = set()
        self.places = array("q")  # the line (text) or record index (JSON) of each kept job
        self.index: dict[str, int] | None = None  # job id -> position in jobs, built at the first duplicate
        # Peaks over each job's rows, by job id: MaxRSS bytes, gres/gpumem bytes, gres/gpuutil percent.
        self.rss: dict[str, int] = {}
        self.gpumem: dict[str, int] = {}
        self.gpuutil: dict[str, float] = {}
        self.left_out: dict[str, list[str]] = {}
        self.dropped: set[str] = set()  # ids of rows skipped or left out, so their steps are not orphans
        self.never_started = 0
        self.remainders = 0
        self.active = 0
        self.gave_mem = self.gave_util = False

    def keep(self, job: Job, where: int) -> int | None:
        """Keep the job; when its id was seen before, keep nothing and return where it was first.

        A set and an array of line numbers, rather than a dict of ids to lines: a million jobs, much less
        memory, and memory is most of the time on a machine where page faults are slow.
        """
        if job.id in self.seen:
            if self.index is None:
                self.index = {j.id: k for k, j in enumerate(self.jobs)}
            return self.places[self.index[job.id]]
        self.seen.add(job.id)
        if self.index is not None:
            self.index[job.id] = len(self.jobs)
        self.jobs.append(job)
        self.places.append(where)
        self.count_unfinished(job)
        return None

    def count_unfinished(self, job: Job) -> None:
        """Count a kept job that never started or is still running, for the notes."""
        if "never_started" in job.meta:
            self.never_started += 1
            self.remainders += "array_pending_remainder" in job.meta
        elif "elapsed_s" in job.meta:
            self.active += 1

    def reject(self, error: InputError) -> None:
        """Count a bad row under its reason, or raise it when skip_bad is off."""
        if not self.skip_bad:
            raise error
        self.skipped[error.reason] += 1
        if len(self.samples) < _MAX_SAMPLES:
            self.samples.append(f"skipped {error}")

    def leave_out(self, reason: str, job_id: str) -> None:
        """Count a job that is valid but has no place in a GPU trace (not an error, even without skip_bad)."""
        self.left_out.setdefault(reason, []).append(job_id)
        self.dropped.add(job_id)

    def add_usage(self, job_id: str, rss: int | None, gpumem: int | None, gpuutil: float | None) -> None:
        """Fold one row's usage into its job's peaks."""
        pairs: tuple[tuple[dict[str, Any], float | None], ...] = (
            (self.rss, rss),
            (self.gpumem, gpumem),
            (self.gpuutil, gpuutil),
        )
        for peaks, value in pairs:
            if value is not None and value > peaks.get(job_id, -1):
                peaks[job_id] = value

    def add_usage_columns(
        self, keys: list[str], rss: list[int | None] | None, gpu: list[tuple[int | None, float | None]] | None
    ) -> None:
        """Fold a chunk's usage: per row its job id, MaxRSS and (gpumem, gpuutil)."""
        if rss is not None:
            peaks = self.rss
            for key, value in zip(keys, rss):
                if value is not None and value > peaks.get(key, -1):
                    peaks[key] = value
        if gpu is not None:
            for key, (gpumem, gpuutil) in zip(keys, gpu):
                self.add_usage(key, None, gpumem, gpuutil)

    def result(self, fmt: str, notes: list[str]) -> TraceResult:
        """The TraceResult; jobs left out are counted in `skipped` under their reason.

        Raises:
            TraceError: no GPU job at all.
        """
        orphans = self._fold_usage()
        left = {reason: len(ids) for reason, ids in self.left_out.items()}
        if not self.jobs:
            self._no_jobs(left)
        for reason, ids in self.left_out.items():
            shown = ", ".join(ids[:_MAX_IDS_SHOWN]) + (", ..." if len(ids) > _MAX_IDS_SHOWN else "")
            notes.append(f"{len(ids)} job(s) left out, {reason}: {shown} (counted in `skipped`)")
        if orphans:
            notes.append(f"{orphans} job(s) with step rows but no allocation row: their usage is ignored")
        if self.never_started:
            notes.append(
                f"{self.never_started} job(s) never started (cancelled or pending; {self.remainders} pending "
                "array remainder(s)): kept with duration_s None and meta never_started, not runnable history"
            )
        rejected = sum(self.skipped.values())
        notes += self.samples
        if rejected > len(self.samples):
            notes.append(
                f"... {rejected - len(self.samples)} more skipped rows; counts per reason in `skipped`"
            )
        censored = []
        if self.active:
            censored.append(
                f"{self.active} job(s) still running or suspended: duration_s None, meta elapsed_s is a lower bound"
            )
        skipped = dict(self.skipped) | left
        return TraceResult(self.jobs, skipped, notes, str(self.path), fmt, self._missing(), censored=censored)

    def _no_jobs(self, left: dict[str, int]) -> None:
        if left:
            rejected = f", {dict(self.skipped)} rejected" if self.skipped else ""
            raise TraceError(f"{self.path}: the trace holds no GPU job ({left}{rejected})")
        total = sum(self.skipped.values())
        why = f"all {total} rows were skipped: {dict(self.skipped)}" if total else "no job rows"
        raise TraceError(f"{self.path}: the trace holds no valid job ({why})")

    def _fold_usage(self) -> int:
        """Apply the usage peaks to the jobs; returns how many jobs had usage rows but no allocation row."""
        rss, gpumem, gpuutil = self.rss, self.gpumem, self.gpuutil
        if not (rss or gpumem or gpuutil):
            return 0
        absurd: list[int] = []
        for k, job in enumerate(self.jobs):
            if rss and job.id in rss:
                job.meta["max_rss_gb"] = rss.pop(job.id) / _GIB
            if gpumem and job.id in gpumem:
                # gres/gpumem is taken as the job's total over its GPUs (docs/formats.md)
                total_gb = gpumem.pop(job.id) / _GIB
                if total_gb / max(1, job.gpus) > MAX_MEM_GB:
                    absurd.append(k)
                    self._absurd_memory(k, total_gb)
                    continue
                job.meta["gpumem_max_gb"] = total_gb
                job.mem_gb = total_gb / job.gpus
                self.gave_mem = True
            if gpuutil and job.id in gpuutil:
                util = gpuutil.pop(job.id)
                job.meta["gpuutil_max_pct"] = util
                job.gpu_util_pct = min(100.0, util / job.gpus)
                self.gave_util = True
        for k in reversed(absurd):  # only with skip_bad: else the first one raised
            self.dropped.add(self.jobs[k].id)
            del self.jobs[k]
            del self.places[k]
        return len((rss.keys() | gpumem.keys() | gpuutil.keys()) - self.dropped)

    def _absurd_memory(self, k: int, total_gb: float) -> None:
        """Reject job k, whose steps' gres/gpumem is beyond any GPU (raised unless skip_bad)."""
        job = self.jobs[k]
        value = f"gres/gpumem={total_gb:.0f}G over {job.gpus} GPU(s) of job {job.id} (its step rows)"
        json = self.usage_column != "TRESUsageInMax"  # JSON places are record indexes, not lines
        line, column = (
            (None, f"jobs[{self.places[k]}].{self.usage_column}")
            if json
            else (self.places[k], self.usage_column)
        )
        error = InputError(str(self.path), line, column, value, _EXPECT_AT_MOST_MEM, "absurd GPU memory")
        self.reject(error)

    def _missing(self) -> list[str]:
        """Reported fields no job gives; each scan stops at the first job that has a value."""
        never = {"est_duration_s", "est_mem_gb"}  # sacct has no estimates; GPU usage comes from folding
        never |= {
            f for f, given in (("mem_gb", self.gave_mem), ("gpu_util_pct", self.gave_util)) if not given
        }
        return [
            f
            for f in JOB_FIELDS
            if f in REPORTED_FIELDS and (f in never or all(getattr(j, f) in (None, "") for j in self.jobs))
        ]


_CHUNK_BYTES = 1 << 20
_ALLOC_VALUES = (
    "Submit",
    "Start",
    "End",
    "Elapsed",
    "Timelimit",
    "AllocTRES",
    "ReqTRES",
    "AllocNodes",
    "State",
    "ExitCode",
)
_EXPECT_ID = "a job id: 123, array task 123_4, pending array 123_[5-9%2], het 14+0, step 123.batch"
_TEXT_VALUES = ("User", "JobName", "Partition", "Account", "JobIDRaw", "NodeList")
_TRES_ITEMS = r"[^=,\s]+=[^=,\s]+(?:,[^=,\s]+=[^=,\s]+)*"
_TRES_COLUMN_RE = re.compile(rf"(?:{_TRES_ITEMS})?(?:\n(?:{_TRES_ITEMS})?)*", re.ASCII)
_JOBIDS_RE = re.compile(rf"{_JOBID_RE.pattern}(?:\n{_JOBID_RE.pattern})*", re.ASCII)


class _TextParser:
    """Turns `sacct -P` rows into jobs (allocation rows) and usage (every row), a chunk of rows at a time.

    A chunk is parsed column by column: one C-level `map` per column over a memo of parsed values (or one
    regex over a whole column), then one loop assembles the jobs. A chunk with any problem (a bad value,
    a wrong field count, a blank or repeated header line) is parsed again one row at a time by the same
    code, so the error names the line and the column, and skip_bad skips just that row. Parsing has no
    effect on the collector; `commit` applies a parsed chunk.
    """

    def __init__(self, path: Path, cols: _Columns, out: _Collector) -> None:
        self.path = path
        self.cols = cols
        self.out = out
        self.column = "JobID"  # the column being parsed, for error messages
        self.repeated = 0
        index = cols.index
        self.i_id = index["JobID"]
        self.i_start, self.i_end = index.get("Start"), index.get("End")
        self.i_limit = index.get("Timelimit")
        self.i_rss, self.i_usage = index.get("MaxRSS"), index.get("TRESUsageInMax")
        self.memos: dict[str, _Memo] = {
            "Submit": _Memo(_time),
            "Start": _Memo(_time),
            "End": _Memo(_time),
            "Elapsed": _Memo(_duration),
            "Timelimit": _Memo(_limit),
            "AllocTRES": _Memo(_alloc),
            "ReqTRES": _Memo(_alloc),
            "AllocNodes": _Memo(_optional_count),
            "State": _Memo(_state),
            "ExitCode": _Memo(_exit_code),
            "MaxRSS": _Memo(_optional_size),
        }
        self.assemble = self._assembler()

    # -- chunks and rows

    def chunk(self, first: int, lines: list[str], terminated: bool) -> None:
        """Parse consecutive lines starting at line `first`; `terminated`: the last one ends with a newline."""
        rows = [line.split("|") for line in lines]
        if rows and set(map(len, rows)) == {self.cols.width} and self.cols.header_text not in lines:
            try:
                parsed = self._parse(rows, range(first, first + len(rows)))
            except _Bad:
                pass
            else:
                self.commit(*parsed)
                return
        last = len(lines) - 1
        for k, (body, cells) in enumerate(zip(lines, rows)):
            self._row(first + k, body, cells, terminated or k < last)

    def _row(self, number: int, body: str, cells: list[str], terminated: bool) -> None:
        if not body or body.isspace():
            return
        if body == self.cols.header_text:
            self.repeated += 1  # the outputs of several sacct runs in one file
            return
        try:
            if len(cells) != self.cols.width:
                raise _width_error(self.path, number, self.cols, body, len(cells), terminated)
            parsed = self._parse([cells], [number])
        except _Bad as bad:
            error = _located(self.path, number, terminated, self.cols.label(self.column), bad)
            self.out.reject(error)
            self.out.dropped.add(cells[self.i_id])
            return
        except InputError as e:
            self.out.reject(e)
            return
        self.commit(*parsed)

    def commit(
        self, numbers: Sequence[int], rows: Sequence[Sequence[str]], jobs: Iterable[Job], usage: Any
    ) -> None:
        """Keep the parsed jobs (or leave them out, or reject duplicates) and fold the usage."""
        out = self.out
        seen, kept, places = out.seen, out.jobs, out.places
        for number, cells, job in zip(numbers, rows, jobs):
            if job.gpus == 0:
                out.leave_out(_SHARES_ONLY if self._shares(cells) else _CPU_ONLY, job.id)
                continue
            if job.id not in seen and out.index is None:  # `out.keep` inlined: once per job
                seen.add(job.id)
                kept.append(job)
                places.append(number)
                if "never_started" in job.meta or "elapsed_s" in job.meta:
                    out.count_unfinished(job)
                continue
            first = out.keep(job, number)
            if first is not None:
                expected = (
                    f"a unique job id; line {first} already has it (was sacct run with -D/--duplicates?)"
                )
                label = self.cols.label("JobID")
                out.reject(InputError(str(self.path), number, label, job.id, expected, "JobID: duplicate"))
        if usage is not None:
            out.add_usage_columns(*usage)

    def _shares(self, cells: Sequence[str]) -> bool:
        return any(
            self.memos[c][cells[self.cols.index[c]]].shares
            for c in ("AllocTRES", "ReqTRES")
            if c in self.cols.index
        )

    # -- parsing (raises _Bad with self.column set; no effects) and assembling (never raises)

    def _parse(
        self, rows: list[list[str]], numbers: Sequence[int]
    ) -> tuple[Sequence[int], list[list[str]], Iterable[Job], Any]:
        ids = [cells[self.i_id] for cells in rows]
        at_steps = [k for k, x in enumerate(ids) if "." in x]
        keys = ids
        if at_steps:
            self._check_step_ids([ids[k] for k in at_steps])
            keys = [x.partition(".")[0] for x in ids]
        usage = self._usage(rows, keys)
        if at_steps:
            is_step = set(at_steps)
            at_jobs = [k for k in range(len(rows)) if k not in is_step]
            rows, ids, numbers = (
                [rows[k] for k in at_jobs],
                [ids[k] for k in at_jobs],
                [numbers[k] for k in at_jobs],
            )
        if not rows:
            return numbers, rows, [], usage
        return numbers, rows, self.jobs(rows, list(zip(*rows))), usage

    def jobs(
        self,
        rows: Sequence[Sequence[str]],
        columns: Sequence[Sequence[str]],
        parsed: dict[str, list[Any]] | None = None,
    ) -> Iterable[Job]:
        """The jobs of allocation rows, given also as columns; parses eagerly, assembles lazily.

        Args:
            parsed: values already parsed for some columns (the Arrow path's times), by column name.

        Raises:
            _Bad: a bad value, with `self.column` naming its column.
        """
        ids = columns[self.i_id]
        id_metas = self._ids(ids)
        parsed = parsed or {}
        values = [parsed[name] if name in parsed else self._values(name, columns) for name in _ALLOC_VALUES]
        self._check_times(columns, values)
        texts = [self._texts(name, columns) for name in _TEXT_VALUES]
        return map(self.assemble, rows, ids, id_metas, *values, *texts)

    def _check_step_ids(self, ids: list[str]) -> None:
        if _JOBIDS_RE.fullmatch("\n".join(ids)) is None:
            self.column = "JobID"
            bad = next((x for x in ids if _JOBID_RE.fullmatch(x) is None), ids[0])
            raise _Bad(bad, _EXPECT_ID, "not a job id")

    def _ids(self, ids: Sequence[str]) -> Iterable[dict[str, Any] | None]:
        self.column = "JobID"
        joined = "".join(ids)
        if joined.isascii() and joined.isdigit() and "" not in ids:  # plain ids only: the common case
            return repeat(None)
        if joined.isascii():
            special = [k for k, x in enumerate(ids) if not x.isdigit()]
        else:
            special = [k for k, x in enumerate(ids) if not (x.isascii() and x.isdigit())]
        metas: list[dict[str, Any] | None] = [None] * len(ids)
        for k in special:
            metas[k] = _id_meta(ids[k])
        return metas

    def _values(self, name: str, columns: Sequence[Sequence[str]]) -> Iterable[Any]:
        i = self.cols.index.get(name)
        if i is None:
            return repeat(None)
        self.column = name
        return list(map(self.memos[name].__getitem__, columns[i]))

    def _texts(self, name: str, columns: Sequence[Sequence[str]]) -> Iterable[str]:
        i = self.cols.index.get(name)
        if i is None:
            return repeat("")
        if name == "JobIDRaw":
            return columns[i]
        return map(sys.intern, columns[i])  # one shared string per distinct user, name, node list

    def _check_times(self, columns: Sequence[Sequence[str]], values: list[Any]) -> None:
        submit, start, end = values[0], values[1], values[2]
        if None in submit:
            self.column = "Submit"
            raise _Bad(columns[self.cols.index["Submit"]][submit.index(None)], _EXPECT_TIME, "missing")
        if "Elapsed" in self.cols.index:
            return
        elapsed = [None if s is None or e is None else e - s for s, e in zip(start, end)]
        if any(x is not None and x < 0 for x in elapsed):
            self.column = "End"
            k = next(k for k, x in enumerate(elapsed) if x is not None and x < 0)
            raise _Bad(columns[self.i_end][k], "an End time not before Start", "before Start")  # type: ignore[index]
        values[3] = elapsed

    def _usage(self, rows: list[list[str]], keys: list[str]) -> Any:
        """(job ids, MaxRSS bytes or None, (gpumem, gpuutil) or None) per row; None when nothing to fold."""
        rss = gpu = None
        if self.i_rss is not None:
            self.column = "MaxRSS"
            rss = list(map(self.memos["MaxRSS"].__getitem__, [cells[self.i_rss] for cells in rows]))
        if self.i_usage is not None:
            gpu = self._gpu_usage([cells[self.i_usage] for cells in rows])
        if rss is None and gpu is None:
            return None
        return keys, rss, gpu

    def _gpu_usage(self, cells: list[str]) -> list[tuple[int | None, float | None]] | None:
        self.column = "TRESUsageInMax"
        joined = "\n".join(cells)
        if _TRES_COLUMN_RE.fullmatch(joined) is None:
            bad = next((t for t in cells if t and _TRES_RE.fullmatch(t) is None), cells[0])
            raise _Bad(bad, _EXPECT_TRES, "bad TRES")
        if "gres/gpu" not in joined:
            return None
        return [_usage(t) if "gres/gpu" in t else (None, None) for t in cells]

    def _assembler(self) -> Callable[..., Job]:
        """The function that builds one Job from a row's parsed values; it never raises.

        A closure over this header's column positions: this runs once per job, so it avoids attribute
        lookups and calls (a third of the reading time).
        """
        i_limit = self.i_limit
        has_start, has_end = self.i_start is not None, self.i_end is not None
        extras = tuple(self.cols.extras)
        active, no_nodes, no_limit = _ACTIVE_STATES, _NO_NODES, _NO_LIMIT

        def assemble(
            cells: list[str],
            job_id: str,
            id_meta: dict[str, Any] | None,
            submit: float,
            start: float | None,
            end: float | None,
            elapsed: float | None,
            limit: float | None,
            alloc_tres: _Alloc | None,
            req_tres: _Alloc | None,
            nodes: int | None,
            state: tuple[str, str] | None,
            exit_code: str | None,
            user: str,
            name: str,
            partition: str,
            account: str,
            raw_id: str,
            nodelist: str,
        ) -> Job:
            if alloc_tres is None or (alloc_tres.empty and req_tres is not None):
                alloc: _Alloc = req_tres  # type: ignore[assignment]
            else:
                alloc = alloc_tres
            if not nodes and alloc.nodes:
                nodes = alloc.nodes
            st = None if state is None else state[0]
            if raw_id == job_id:
                raw_id = job_id  # one string object, not two
            # One dict display for the usual keys (no resizing as keys are added), then drop the empty ones.
            meta: dict[str, Any] = {
                "state": st,
                "exit_code": exit_code,
                "start_s": start,
                "end_s": end,
                "nodes": nodes,
                "partition": partition,
                "account": account,
                "job_id_raw": raw_id,
                "nodelist": nodelist,
            }
            if (
                st is None
                or not exit_code
                or start is None
                or end is None
                or nodes is None
                or not partition
                or not account
                or not raw_id
                or nodelist in no_nodes
            ):
                meta = {k: v for k, v in meta.items() if v is not None and v != "" and v not in no_nodes}
            if id_meta is not None:
                meta.update(id_meta)
            if state is not None and state[1] != st:
                meta["state_raw"] = state[1]
            if has_start:
                started = start is not None
            else:
                started = st != "PENDING" and not (alloc_tres and alloc_tres.empty)
            duration = None
            if not started or "array_pending_remainder" in meta:
                meta["never_started"] = True
            elif (end is None and has_end) or st in active:
                meta["elapsed_s"] = elapsed or 0.0  # still running: a lower bound
            else:
                duration = elapsed
            if limit is None and i_limit is not None and cells[i_limit].strip() in no_limit:
                meta["timelimit"] = no_limit[cells[i_limit].strip()]
            if alloc.gpu_types:
                meta["gpu_types"] = dict(alloc.gpu_types)
            for i, key in extras:
                if cells[i]:
                    meta[key] = cells[i]
            return Job(
                id=job_id,
                submit_s=submit,
                gpus=alloc.gpus,
                duration_s=duration,
                requested_s=limit,
                user=user,
                name=name,
                may_span_nodes=nodes is not None and nodes > 1,
                meta=meta,
            )

        return assemble


def _id_meta(text: str) -> dict[str, Any]:
    m = _JOBID_RE.fullmatch(text)
    if m is None:
        raise _Bad(text, _EXPECT_ID, "not a job id")
    base, task, het, step = m.groups()
    if step is not None:
        raise _Bad(text, "an allocation row id (steps follow their job's row)", "a step")
    meta: dict[str, Any] = {}
    if task is not None:
        meta["array_job_id"] = base
        if task.startswith("["):
            meta["array_task_spec"] = task[1:-1]
            meta["array_pending_remainder"] = True
        else:
            meta["array_task_id"] = int(task)
    if het is not None:
        meta["het_job_id"] = base
        meta["het_job_offset"] = int(het)
    return meta


_TRUNCATED = "a complete row; the file ends in the middle of it (no newline at the end), so it looks cut off"


def _located(path: Path, line: int, terminated: bool, column: str | None, bad: _Bad) -> InputError:
    reason = f"{column}: {bad.what}" if column else bad.what
    value = clip(bad.value) if isinstance(bad.value, str) else bad.value
    if not terminated:
        expected = f"{bad.expected}; {_TRUNCATED}"
        return TruncatedTraceError(str(path), line, column, value, expected, "truncated last line")
    return InputError(str(path), line, column, value, bad.expected, reason)


def _width_error(path: Path, line: int, cols: _Columns, body: str, n: int, terminated: bool) -> InputError:
    if n < cols.width:
        by_position = {i: cols.labels[c] for c, i in cols.index.items()} | dict(cols.extras)
        column = by_position.get(n, f"#{n + 1}")
        if not terminated:
            return TruncatedTraceError(str(path), line, column, clip(body), _TRUNCATED, "truncated last line")
    else:
        column = f"#{cols.width + 1} (beyond the header)"
    expected = (
        f"{cols.width} '|'-separated fields as in the header, got {n} "
        "(a '|' inside a job name shifts the fields: rename the job or leave JobName out)"
    )
    return InputError(str(path), line, column, clip(body), expected, "wrong number of fields")


def _open_binary(path: Path) -> IO[bytes]:
    try:
        if _is_gzip(path):
            return gzip.open(path, "rb")  # type: ignore[return-value]
        return path.open("rb")
    except OSError as e:
        raise TraceError(f"{path}: cannot open the trace file: {e.strerror or e}") from e


def _is_gzip(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(2) == b"\x1f\x8b"


def _decoded(path: Path, first: int, block: list[bytes]) -> str:
    try:
        text = b"".join(block).decode("utf-8")
    except UnicodeDecodeError:
        for k, raw in enumerate(block):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                value = clip(raw.decode("utf-8", errors="replace"))
                raise InputError(str(path), first + k, None, value, "UTF-8 text", "not UTF-8") from e
        raise  # unreachable: some line failed to decode
    return text.removeprefix("\ufeff") if first == 1 else text


def _chunks(path: Path) -> Iterator[tuple[int, list[str], bool]]:
    """(first line number, lines without their line endings, whether the last one ended with a newline).

    Raises:
        TraceError: an unreadable file; TruncatedTraceError: gzip data cut off; InputError: not UTF-8.
    """
    with _open_binary(path) as f:
        first = 1
        while True:
            try:
                block = f.readlines(_CHUNK_BYTES)
            except (EOFError, zlib.error, gzip.BadGzipFile) as e:
                expected = f"complete gzip data ({e})"
                raise TruncatedTraceError(str(path), None, None, "", expected, "truncated last line") from e
            except OSError as e:
                raise TraceError(f"{path}: cannot read the trace file: {e.strerror or e}") from e
            if not block:
                return
            text = _decoded(path, first, block)
            terminated = text.endswith("\n")
            lines = text.split("\n")
            if terminated:
                lines.pop()
            if "\r" in text:
                lines = [line.rstrip("\r") for line in lines]
            yield first, lines, terminated
            first += len(block)


def _head_text(path: Path, head: str) -> str:
    """The first bytes of the file as text, decompressed when it is gzip (detection never raises)."""
    if not head.startswith("\x1f\ufffd") and path.suffix.lower() != ".gz":
        return head
    try:
        with gzip.open(path, "rb") as f:
            return f.read(HEAD_BYTES).decode("utf-8", errors="replace").removeprefix("\ufeff")
    except (OSError, EOFError, zlib.error):
        return ""


def _first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), "")


def _read_text(path: Path, options: ReadOptions, fmt: str) -> TraceResult:
    """Read a `sacct -P` file: through Arrow when it is large and clean, else (or then) exactly."""
    from gpuplan.traces import sacct_arrow

    if sacct_arrow.worth_it(path):
        try:
            return sacct_arrow.read_arrow(path, options, fmt)
        except sacct_arrow.Fallback:
            pass  # the exact reader below reads it again and names any problem by its line
    return _read_exact(path, options, fmt)


def _read_exact(path: Path, options: ReadOptions, fmt: str) -> TraceResult:
    out = _Collector(path, options.skip_bad)
    parser: _TextParser | None = None
    for first, lines, terminated in _chunks(path):
        rest = 0
        if parser is None:
            header_at = next((k for k, line in enumerate(lines) if line and not line.isspace()), None)
            if header_at is None:
                continue
            cols = _columns(path, first + header_at, lines[header_at])
            parser = _TextParser(path, cols, out)
            rest = header_at + 1
        parser.chunk(first + rest, lines[rest:] if rest else lines, terminated)
    if parser is None:
        raise TraceError(f"{path}: the file is empty (no header, no job rows). Run: {SACCT_COMMAND}")
    return out.result(fmt, _text_notes(options, fmt, parser))


def _text_notes(options: ReadOptions, fmt: str, parser: _TextParser) -> list[str]:
    notes = ignored_option_warnings(options, fmt)
    if parser.repeated:
        notes.append(f"{parser.repeated} repeated header line(s) skipped (several sacct outputs in one file)")
    absent = [f"{c} ({what})" for c, what in _MISSING_COLUMN_NOTES.items() if c not in parser.cols.index]
    if absent:
        notes.append(f"sacct column(s) absent: {'; '.join(absent)}")
    return notes


@register_reader
class SacctReader(TraceReader):
    """Reads `sacct --parsable2` (`-P`) output; see `SACCT_COMMAND` for the columns to ask for."""

    name = "sacct"
    description = "Slurm accounting: `sacct -a -P -o JobID,...,AllocTRES,...` text (steps folded)"
    priority = 20

    def detect(self, path: Path, head: str) -> bool:
        first = _first_line(_head_text(path, head))
        if "|" not in first:
            return False
        names = {n.strip().lower() for n in first.split("|")}
        return "jobid" in names and bool(names & {"state", "elapsed", "submit", "alloctres", "reqtres"})

    def read(self, path: Path, options: ReadOptions) -> TraceResult:
        with _gc_paused():
            return _read_text(path, options, self.name)

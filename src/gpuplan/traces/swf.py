"""Standard Workload Format (SWF v2.2) traces, as in the Parallel Workloads Archive.

One job per line, 18 whitespace-separated numbers, -1 where a value is unknown; header lines start with
`;` (`; MaxProcs: 128`). SWF logs come from CPU machines: each processor is read as one GPU slot, so the
classic HPC arrival and size mixes can be simulated (docs/formats.md, "SWF").
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from gpuplan.errors import InputError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.traces.base import (
    ReadOptions,
    TraceError,
    TraceReader,
    TraceResult,
    TruncatedTraceError,
    register_reader,
)
from gpuplan.traces.rows import RowSink, clip, ignored_option_warnings, read_lines

__all__ = ["SLOT_MODEL", "SWF_FIELDS", "SWF_STATUS", "SwfReader"]

# The 18 fields of SWF v2.2, in order, and whether each is an integer (else any number).
SWF_FIELDS: tuple[tuple[str, bool], ...] = (
    ("job number", True),
    ("submit time", False),
    ("wait time", False),
    ("run time", False),
    ("allocated processors", True),
    ("average CPU time", False),
    ("used memory", False),
    ("requested processors", True),
    ("requested time", False),
    ("requested memory", False),
    ("status", True),
    ("user id", True),
    ("group id", True),
    ("application", True),
    ("queue", True),
    ("partition", True),
    ("preceding job", True),
    ("think time", False),
)
_N = len(SWF_FIELDS)
# SWF status codes; 2-4 are the parts of a checkpointed job.
SWF_STATUS: dict[int, str] = {
    0: "failed",
    1: "completed",
    2: "partial",
    3: "partial, last, completed",
    4: "partial, last, failed",
    5: "cancelled",
}
SLOT_MODEL = "CPU slot"
# Meta key per optional field index (0-based), kept when the value is known.
_META: dict[int, str] = {
    2: "wait_s",
    5: "avg_cpu_s",
    6: "used_mem_kb",
    7: "requested_procs",
    9: "requested_mem_kb",
    12: "group",
    13: "app",
    14: "queue",
    15: "partition",
    16: "preceding_job",
    17: "think_time_s",
}
# The largest MaxProcs/MaxNodes taken: above every machine in the archive, small enough to model.
_MAX_SIZE = 2**20
_SKIP_RUNTIME = "run time unknown (-1)"
_SKIP_PROCS = "no processors (allocated and requested are 0 or -1)"
_KEY = re.compile(r"([A-Za-z][A-Za-z0-9]*):\s*(.*)")
_DATA = re.compile(r"\s*-?\d+(\.\d*)?(\s+-?\d+(\.\d*)?){17}\s*")


def _label(index: int) -> str:
    return f"{index + 1} ({SWF_FIELDS[index][0]})"


def _column(field_name: str) -> str:
    return _label(0) if field_name == "id" else field_name


# ---- header ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Header:
    """The `; Key: value` lines; a `;` line without a key continues the previous value (a long Note)."""

    entries: list[tuple[str, str, int]] = field(default_factory=list)
    _open: bool = False

    def add(self, line: int, text: str) -> None:
        body = text.strip()
        match = _KEY.fullmatch(body)
        if match:
            self.entries.append((match[1], match[2].strip(), line))
            self._open = True
        elif body and self._open:
            key, value, first = self.entries[-1]
            self.entries[-1] = (key, f"{value} {body}".strip(), first)
        else:
            self._open = False

    def get(self, key: str) -> tuple[str, int] | None:
        for k, value, line in self.entries:
            if k.lower() == key.lower():
                return value, line
        return None

    def all(self, key: str) -> list[str]:
        return [value for k, value, _ in self.entries if k.lower() == key.lower()]


def _header_int(path: Path, header: _Header, key: str) -> int | None:
    found = header.get(key)
    if found is None:
        return None
    value, line = found
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= _MAX_SIZE:
        expected = f"a positive integer up to {_MAX_SIZE}"
        raise InputError(str(path), line, f"header {key}", value, expected, f"header {key}")
    return number


@dataclass(slots=True)
class _Machine:
    """What the header says about the machine: the cluster it becomes and the largest job it can run."""

    cluster: ClusterSpec | None
    max_procs: int | None
    notes: list[str]


def _machine(path: Path, header: _Header) -> _Machine:
    nodes = _header_int(path, header, "MaxNodes")
    procs = _header_int(path, header, "MaxProcs")
    found = header.get("Computer")
    name = f"{found[0]} ({path.name})" if found and found[0] else path.name
    notes: list[str] = []
    if procs is None:
        if nodes is None:
            return _Machine(None, None, ["the header gives neither MaxProcs nor MaxNodes: no cluster"])
        procs = nodes
        notes.append(f"the header gives MaxNodes ({nodes}) but no MaxProcs: assuming 1 processor per node")
    per_node = 1
    if nodes is not None and nodes != procs:
        if procs % nodes == 0:
            per_node = procs // nodes
        else:
            notes.append(
                f"MaxProcs {procs} is not a multiple of MaxNodes {nodes}: the cluster is {procs} "
                "one-slot nodes"
            )
    slot = GpuSpec(SLOT_MODEL, 1.0)
    count = procs // per_node
    width = len(str(count))
    spec = tuple(NodeSpec(f"n{i:0{width}d}", per_node, slot) for i in range(1, count + 1))
    return _Machine(ClusterSpec(name, spec), procs, notes)


def _header_notes(header: _Header) -> tuple[list[str], list[str]]:
    """Warnings and censoring notes from the header: its time origin and its Notes."""
    warnings: list[str] = []
    censored: list[str] = []
    version = header.get("Version")
    if version and not version[0].startswith("2"):
        warnings.append(f"header Version {version[0]!r}: this reader follows SWF 2.2")
    start = header.get("UnixStartTime")
    if start:
        try:
            when = datetime.fromtimestamp(int(start[0]), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            zone = header.get("TimeZoneString")
            where = f", local time zone {zone[0]}" if zone else ""
            warnings.append(f"times count seconds from UnixStartTime {start[0]} ({when}{where})")
        except (ValueError, OverflowError, OSError):
            warnings.append(f"header UnixStartTime {start[0]!r} is not a Unix time; ignored")
    for note in header.all("Note"):
        warnings.append(f"header note: {note}")
        lowered = note.lower()
        if "submit" in lowered and "start time" in lowered:
            censored.append(
                f"the header says the submit times are start times ({note!r}): the trace holds no "
                "queueing delays, so submit_s is when each job started"
            )
    return warnings, censored


# ---- rows -----------------------------------------------------------------------------------------


def _number(path: Path, line: int, index: int, token: str) -> float | int | None:
    """One field: its value, or None for -1 (unknown)."""
    is_int = SWF_FIELDS[index][1]
    try:
        value: float | int = int(token)
    except ValueError:
        try:
            value = float(token)
        except ValueError:
            value = math.nan
        if is_int and not (math.isfinite(value) and value.is_integer()):
            raise _bad(path, line, index, token, "not an integer") from None
        if not math.isfinite(value):
            raise _bad(path, line, index, token, "not a number") from None
        value = int(value) if is_int else value
    if value == -1:
        return None
    if value < 0:
        raise _bad(path, line, index, token, "negative")
    return value


def _bad(path: Path, line: int, index: int, token: str, what: str) -> InputError:
    name, is_int = SWF_FIELDS[index]
    kind = "an integer" if is_int else "a number"
    if index in (0, 1):
        expected = "an integer job number >= 1" if index == 0 else "a number of seconds >= 0"
    else:
        expected = f"{kind} >= 0, or -1 when unknown"
    return InputError(str(path), line, _label(index), token, expected, f"{name}: {what}")


def _fields(path: Path, line: int, text: str) -> list[Any]:
    """The 18 values of a data line (None where -1), or InputError."""
    tokens = text.split()
    if len(tokens) != _N:
        if len(tokens) < _N and not text.endswith(("\n", "\r")):
            expected = f"{_N} fields; the file ends in the middle of this line, so it looks cut off"
            raise TruncatedTraceError(str(path), line, None, clip(text), expected, "truncated last line")
        expected = f"{_N} whitespace-separated SWF fields, got {len(tokens)}"
        raise InputError(str(path), line, None, clip(text), expected, "wrong number of fields")
    try:
        # Fast path: nearly every SWF line is 18 integers >= -1.
        ints = list(map(int, tokens))
    except ValueError:
        ints = [-2]
    if min(ints) >= -1:
        values: list[Any] = [None if v == -1 else v for v in ints]
    else:
        values = [_number(path, line, i, t) for i, t in enumerate(tokens)]
    if values[0] is None or values[0] < 1:
        raise _bad(path, line, 0, tokens[0], "missing" if values[0] is None else "0")
    if values[1] is None:
        raise _bad(path, line, 1, tokens[1], "missing")
    if values[10] is not None and values[10] not in SWF_STATUS:
        codes = ", ".join(f"{k} {v}" for k, v in SWF_STATUS.items())
        raise InputError(str(path), line, _label(10), tokens[10], f"-1 or a status code ({codes})", "status")
    return values


def _processors(values: list[Any]) -> tuple[int, bool]:
    """(processors, taken from the request) or (0, False) when neither count is known."""
    if values[4]:
        return values[4], False
    if values[7]:
        return values[7], True
    return 0, False


def _job(path: Path, line: int, values: list[Any], max_procs: int | None) -> Job:
    procs, requested = _processors(values)
    if max_procs is not None and procs > max_procs:
        column = _label(7 if requested else 4)
        expected = f"at most MaxProcs = {max_procs} processors (the header's machine size)"
        raise InputError(str(path), line, column, str(procs), expected, "more processors than MaxProcs")
    meta: dict[str, Any] = {k: values[i] for i, k in _META.items() if values[i] is not None}
    if values[10] is not None:
        meta["status"] = SWF_STATUS[values[10]]
    if requested:
        meta["procs_from"] = "requested"
    return Job(
        id=str(values[0]),
        submit_s=float(values[1]),
        gpus=procs,
        duration_s=float(values[3]),
        requested_s=None if values[8] is None else float(values[8]),
        user="" if values[11] is None else str(values[11]),
        may_span_nodes=procs > 1,
        meta=meta,
    )


def _skip_reason(values: list[Any]) -> str | None:
    if values[3] is None:
        return _SKIP_RUNTIME
    if _processors(values)[0] == 0:
        return _SKIP_PROCS
    return None


# ---- reader ---------------------------------------------------------------------------------------


def _looks_like_swf(head: str) -> bool:
    keys = {"maxjobs", "maxrecords", "maxprocs", "maxnodes", "unixstarttime"}
    for text in head.splitlines():
        body = text.strip()
        if not body:
            continue
        if body.startswith(";"):
            match = _KEY.fullmatch(body[1:].strip())
            if match and match[1].lower() in keys:
                return True
            continue
        return _DATA.fullmatch(text) is not None
    return False


def _finish(
    path: Path, sink: RowSink, fmt: str, notes: list[str], dropped: Counter[str], what: str
) -> TraceResult:
    """The sink's result plus the rows skipped by design (not errors), each reason counted and said."""
    if not sink.jobs and dropped:
        bad = dict(sink.skipped)
        raise TraceError(
            f"{path}: the trace holds no usable job (skipped: {dict(dropped)}{f', invalid: {bad}' if bad else ''})"
        )
    said = [f"{n} {what} skipped: {reason}" for reason, n in dropped.items()]
    result = sink.result(fmt, notes + said)
    for reason, n in dropped.items():
        result.skipped[reason] = result.skipped.get(reason, 0) + n
    return result


@register_reader
class SwfReader(TraceReader):
    """Reads Standard Workload Format v2.2 logs: one processor is one GPU slot; the header sizes the cluster."""

    name = "swf"
    description = "Standard Workload Format v2.2 (Parallel Workloads Archive); a processor is one GPU slot"
    priority = 5

    def detect(self, path: Path, head: str) -> bool:
        return path.suffix.lower() == ".swf" or _looks_like_swf(head)

    def read(self, path: Path, options: ReadOptions) -> TraceResult:
        sink = RowSink(path, options.skip_bad)
        header = _Header()
        machine: _Machine | None = None
        dropped: Counter[str] = Counter()
        from_request = 0
        for line, text in read_lines(path):
            body = text.strip()
            if body.startswith(";") or not body:
                if machine is None:
                    header.add(line, body[1:])
                continue
            if machine is None:
                machine = _machine(path, header)
            try:
                values = _fields(path, line, text)
            except InputError as e:
                sink.reject(e)
                continue
            reason = _skip_reason(values)
            if reason:
                dropped[reason] += 1
                continue
            from_request += _processors(values)[1]
            sink.add(line, partial(_job, path, line, values, machine.max_procs), _column)
        if machine is None:
            raise TraceError(f"{path}: the file holds no job line (only header comments or nothing)")
        warnings, censored = _header_notes(header)
        notes = ignored_option_warnings(options, self.name) + machine.notes + warnings
        if from_request:
            notes.append(f"{from_request} jobs have no allocated processors: their requested count is used")
        result = _finish(path, sink, self.name, notes, dropped, "jobs")
        result.cluster = machine.cluster
        result.censored = censored + _status_notes(result.jobs)
        return result


def _status_notes(jobs: list[Job]) -> list[str]:
    cancelled = sum(1 for j in jobs if j.meta.get("status") == "cancelled")
    if not cancelled:
        return []
    return [f"{cancelled} cancelled jobs (status 5): their run time ends at the cancellation"]

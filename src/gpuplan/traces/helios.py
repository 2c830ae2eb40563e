"""Helios-style job logs (SenseTime's Helios traces, Hu et al., SC '21): one CSV row per Slurm job.

Columns `job_id, user, vc, gpu_num, cpu_num, node_num, state, submit_time, start_time, end_time,
duration` (and `jobname` when present); times are date-times (`2020-04-01 00:00:05`) or Unix seconds.
See docs/formats.md, "Helios CSV".
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from gpuplan.errors import InputError
from gpuplan.model import Job
from gpuplan.traces.base import ReadOptions, TraceError, TraceReader, TraceResult, register_reader
from gpuplan.traces.rows import (
    CsvRecord,
    RowSink,
    checked_header,
    csv_records,
    header_names,
    header_record,
    ignored_option_warnings,
    row_cells,
)

__all__ = ["HELIOS_COLUMNS", "HeliosReader", "parse_helios_time"]

HELIOS_COLUMNS: tuple[str, ...] = (
    "job_id",
    "user",
    "vc",
    "jobname",
    "gpu_num",
    "cpu_num",
    "node_num",
    "state",
    "submit_time",
    "start_time",
    "end_time",
    "duration",
)
_REQUIRED = ("job_id", "gpu_num", "submit_time")
_TIMES = ("submit_time", "start_time", "end_time")
_SKIP_CPU = "CPU-only job (gpu_num 0)"
_TIME_EXPECTED = "a date-time such as 2020-04-01 00:00:05 (UTC unless it has an offset) or Unix seconds >= 0"


def parse_helios_time(text: str) -> float | None:
    """Seconds since the Unix epoch of a Helios time cell; None when empty.

    Takes Unix seconds (`1585699205`) or an ISO date-time (`2020-04-01 00:00:05`, `2020-04-01T00:00:05`);
    a date-time without an offset is read as UTC (only differences matter to the simulator).

    Raises:
        ValueError: anything else, a negative or non-finite number.
    """
    s = text.strip()
    if not s:
        return None
    try:
        value = float(s)
    except ValueError:
        moment = datetime.fromisoformat(s)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        value = moment.timestamp()
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{s!r} is not a time >= 0")
    return value


def _time(path: Path, line: int, column: str, text: str) -> float | None:
    try:
        return parse_helios_time(text)
    except (ValueError, OverflowError, OSError):
        raise InputError(str(path), line, column, text, _TIME_EXPECTED, f"{column}: not a time") from None


def _count(path: Path, line: int, column: str, text: str) -> int | None:
    s = text.strip()
    if not s:
        return None
    try:
        value = int(s)
    except ValueError:
        try:
            number = float(s)
        except ValueError:
            number = math.nan
        value = int(number) if math.isfinite(number) and number.is_integer() else -1
    if value < 0:
        raise InputError(str(path), line, column, text, "an integer >= 0", f"{column}: not an integer >= 0")
    return value


def _duration(path: Path, line: int, text: str) -> float | None:
    s = text.strip()
    if not s:
        return None
    try:
        value = float(s)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise InputError(str(path), line, "duration", text, "a number of seconds >= 0", "duration: invalid")
    return value


@dataclass(slots=True)
class _Row:
    """The checked values of one row."""

    cells: dict[str, str]
    submit_s: float = 0.0
    gpus: int = 0
    times: dict[str, float | None] = field(default_factory=dict)
    counts: dict[str, int | None] = field(default_factory=dict)
    duration_s: float | None = None


def _checked(path: Path, line: int, cells: dict[str, str]) -> _Row:
    row = _Row(cells)
    if not cells["job_id"].strip():
        raise InputError(str(path), line, "job_id", cells["job_id"], "a non-empty job id", "job_id: missing")
    for column in ("gpu_num", "cpu_num", "node_num"):
        row.counts[column] = _count(path, line, column, cells.get(column, ""))
    gpus = row.counts["gpu_num"]
    if gpus is None:
        raise InputError(str(path), line, "gpu_num", cells["gpu_num"], "an integer >= 0", "gpu_num: missing")
    for column in _TIMES:
        row.times[column] = _time(path, line, column, cells.get(column, ""))
    submit = row.times["submit_time"]
    if submit is None:
        raise InputError(str(path), line, "submit_time", "", _TIME_EXPECTED, "submit_time: missing")
    row.gpus, row.submit_s = gpus, submit
    _check_order(path, line, row)
    row.duration_s = _duration(path, line, cells.get("duration", ""))
    return row


def _check_order(path: Path, line: int, row: _Row) -> None:
    before = "submit_time"
    for column in ("start_time", "end_time"):
        t = row.times[column]
        if t is None:
            continue
        earlier = row.times[before]
        if earlier is not None and t < earlier:
            expected = f"a time >= {before} {row.cells[before].strip()!r}"
            raise InputError(
                str(path), line, column, row.cells[column], expected, f"{column}: before {before}"
            )
        before = column


def _job(row: _Row, extras: list[str]) -> Job:
    c, t = row.cells, row.times
    duration = row.duration_s
    if duration is None and t["start_time"] is not None and t["end_time"] is not None:
        duration = t["end_time"] - t["start_time"]
    meta: dict[str, Any] = {}
    for column, key in (("vc", "queue"), ("state", "state")):
        if c.get(column, "").strip():
            meta[key] = c[column].strip()
    for column in ("cpu_num", "node_num"):
        if row.counts[column] is not None:
            meta[column] = row.counts[column]
    for column, key in (("start_time", "start_s"), ("end_time", "end_s")):
        if t[column] is not None:
            meta[key] = t[column]
    meta.update({k: c[k] for k in extras if c[k].strip()})
    return Job(
        id=c["job_id"].strip(),
        submit_s=row.submit_s,
        gpus=row.gpus,
        duration_s=duration,
        user=c.get("user", "").strip(),
        name=c.get("jobname", "").strip(),
        may_span_nodes=(row.counts["node_num"] or 0) > 1,
        meta=meta,
        cpu_milli=float(cpus) * 1000.0 if (cpus := row.counts.get("cpu_num")) else None,
    )


def _checked_header(path: Path, rec: CsvRecord) -> list[str]:
    return checked_header(path, rec, _REQUIRED, f"Helios columns: {','.join(HELIOS_COLUMNS)}")


@dataclass(slots=True)
class _Read:
    sink: RowSink
    dropped: Counter[str] = field(default_factory=Counter)


def _read_row(path: Path, header: list[str], extras: list[str], rec: CsvRecord, state: _Read) -> None:
    try:
        cells = dict(zip(header, row_cells(path, header, rec), strict=True))
        row = _checked(path, rec.line, cells)
    except InputError as e:
        state.sink.reject(e)
        return
    if row.gpus == 0:
        state.dropped[_SKIP_CPU] += 1
        return
    state.sink.add(rec.line, partial(_job, row, extras), lambda f: "job_id" if f == "id" else f)


def _censored(jobs: list[Job]) -> list[str]:
    """Mark the jobs still running at the trace end; notes on every job without a duration."""
    running = [j for j in jobs if j.duration_s is None and "start_s" in j.meta]
    for job in running:
        job.meta["censored"] = True
    never = sum(1 for j in jobs if j.duration_s is None and "start_s" not in j.meta)
    notes = []
    if running:
        notes.append(
            f"{len(running)} jobs started but have no end time or duration (running at the trace end): "
            "duration unknown (None), meta censored=True"
        )
    if never:
        notes.append(f"{never} jobs never started (no start_time, no duration): duration unknown (None)")
    return notes


@register_reader
class HeliosReader(TraceReader):
    """Reads Helios-style CSV job logs; `vc` becomes meta queue, `node_num > 1` a multi-node job."""

    name = "helios"
    description = "Helios-style CSV (job_id,user,vc,gpu_num,...,submit_time,start_time,end_time,duration)"
    priority = 5

    def detect(self, path: Path, head: str) -> bool:
        names = header_names(head) or []
        return {"job_id", "vc", "gpu_num", "submit_time"} <= set(names)

    def read(self, path: Path, options: ReadOptions) -> TraceResult:
        records = csv_records(path)
        header = _checked_header(path, header_record(path, records))
        extras = [h for h in header if h not in HELIOS_COLUMNS]
        notes = ignored_option_warnings(options, self.name)
        if extras:
            notes.append(f"{len(extras)} unknown column(s) kept in each job's meta: {', '.join(extras)}")
        state = _Read(RowSink(path, options.skip_bad))
        for rec in records:
            if not rec.is_blank:
                _read_row(path, header, extras, rec, state)
        if not state.sink.jobs and state.dropped:
            raise TraceError(f"{path}: the trace holds no GPU job (skipped: {dict(state.dropped)})")
        said = [f"{n} jobs skipped: {reason}" for reason, n in state.dropped.items()]
        result = state.sink.result(self.name, notes + said)
        for reason, n in state.dropped.items():
            result.skipped[reason] = result.skipped.get(reason, 0) + n
        result.censored = _censored(result.jobs)
        return result

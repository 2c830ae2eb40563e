"""gpuplan's own JSON Lines trace format: one JSON object per line, keys are Job field names."""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import partial
from pathlib import Path

from gpuplan.errors import InputError
from gpuplan.model import Job
from gpuplan.traces.base import ReadOptions, TraceReader, TraceResult, TruncatedTraceError, register_reader
from gpuplan.traces.fastjsonl import fast_jsonl_jobs
from gpuplan.traces.fields import job_from_json, loads_object
from gpuplan.traces.rows import (
    RowSink,
    atomic_writer,
    checked_records,
    clip,
    ignored_option_warnings,
    read_lines,
)

__all__ = ["JsonlReader", "write_jsonl"]

_EXTENSIONS = (".jsonl", ".ndjson")


def _why(error: ValueError) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg} at char {error.colno}"
    return str(error)


def _job_from_line(path: Path, line: int, text: str) -> Job:
    try:
        obj = loads_object(text)
    except ValueError as e:
        if not text.endswith("\n"):
            expected = (
                "a complete JSON object; the last line ends without a newline, so the file looks cut off"
            )
            raise TruncatedTraceError(
                str(path), line, None, clip(text), expected, "truncated last line"
            ) from e
        raise InputError(str(path), line, None, clip(text), f"a JSON object ({_why(e)})", "bad JSON") from e
    if not isinstance(obj, dict):
        raise InputError(
            str(path), line, None, clip(text), "a JSON object, one per line", "not a JSON object"
        )
    return job_from_json(obj)


@register_reader
class JsonlReader(TraceReader):
    """Reads gpuplan's JSONL traces; blank lines are allowed, everything else must be a valid job."""

    name = "jsonl"
    description = "gpuplan's own JSON Lines: one object per line, keys are Job field names"
    priority = 10

    def detect(self, path: Path, head: str) -> bool:
        if path.suffix.lower() in _EXTENSIONS:
            return True
        first = next((line for line in head.splitlines() if line.strip()), "")
        return first.lstrip().startswith("{")

    def read(self, path: Path, options: ReadOptions) -> TraceResult:
        sink = RowSink(path, options.skip_bad)
        fast = fast_jsonl_jobs(path)
        if fast is not None:  # a clean file, read by columns; else line by line, naming any bad line
            sink.jobs = fast
            return sink.result(self.name, ignored_option_warnings(options, self.name))
        for line, text in read_lines(path):
            if text.strip():
                sink.add(line, partial(_job_from_line, path, line, text))
        return sink.result(self.name, ignored_option_warnings(options, self.name))


def write_jsonl(jobs: Iterable[Job], path: str | Path) -> None:
    """Write jobs as gpuplan JSONL, one object per line; fields at their default are left out.

    Reading the file back gives equal jobs (meta must hold JSON values: str, number, bool, None, list, dict).

    Raises:
        TraceError: a job the reader would reject (duplicate id, gpus < 1, NaN ...), meta that is not
            JSON, or the file cannot be written.
    """
    path = Path(path)
    records = checked_records(jobs, path)
    with atomic_writer(path) as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n")

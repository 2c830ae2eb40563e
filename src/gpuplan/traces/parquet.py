"""gpuplan's own trace schema as Parquet: one column per Job field (as in gpuplan CSV), read and written with polars.

polars is imported only when a Parquet file is read or written, so `gpuplan --help` stays fast.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

from gpuplan.model import Job
from gpuplan.traces._fields import JOB_FIELDS, REQUIRED_FIELDS, FieldError, job_from_json, loads_object
from gpuplan.traces._rows import RowSink, checked_records, clip, ignored_option_warnings
from gpuplan.traces.base import ReadOptions, TraceError, TraceReader, TraceResult, register_reader

__all__ = ["PARQUET_TYPES", "ParquetReader", "write_parquet"]

_MAGIC = b"PAR1"
# The Parquet (polars) type of each Job field as written; the reader accepts any type whose values pass
# the same checks as JSON values (an integer column for a float field, for example).
PARQUET_TYPES: dict[str, str] = {
    "id": "String",
    "submit_s": "Float64",
    "gpus": "Int64",
    "mem_gb": "Float64",
    "duration_s": "Float64",
    "est_duration_s": "Float64",
    "est_mem_gb": "Float64",
    "requested_s": "Float64",
    "user": "String",
    "name": "String",
    "gpu_util_pct": "Float64",
    "command": "String",
    "may_span_nodes": "Boolean",
    "meta": "String",  # a JSON object as text, like the CSV cell
}


def _polars() -> Any:
    try:
        import polars
    except ImportError as e:
        raise TraceError("Parquet traces need polars: pip install polars") from e
    return polars


def _frame(path: Path) -> Any:
    """The file as a polars DataFrame.

    Raises:
        TraceError: not a Parquet file, cut off, or unreadable.
    """
    pl = _polars()
    try:
        with path.open("rb") as f:
            start = f.read(len(_MAGIC))
            f.seek(max(path.stat().st_size - len(_MAGIC), 0))
            end = f.read(len(_MAGIC))
    except OSError as e:
        raise TraceError(f"{path}: cannot open the trace file: {e.strerror or e}") from e
    if not start:
        raise TraceError(f"{path}: the file is empty (no job rows)")
    if start != _MAGIC:
        raise TraceError(f"{path}: not a Parquet file (it does not start with {_MAGIC!r})")
    if end != _MAGIC or path.stat().st_size < 3 * len(_MAGIC):
        raise TraceError(f"{path}: the Parquet footer is missing: the file looks cut off")
    try:
        return pl.read_parquet(path)
    except (Exception, pl.exceptions.PanicException) as e:
        # polars (Rust) raises its own errors, OSError or a panic on a corrupt file; all mean the same.
        raise TraceError(
            f"{path}: not a readable Parquet file ({type(e).__name__}: {clip(str(e), 200)})"
        ) from e


def _checked_columns(path: Path, columns: list[str]) -> None:
    unknown = [c for c in columns if c not in JOB_FIELDS]
    if unknown:
        raise TraceError(
            f"{path}: unknown column(s) {unknown}; valid columns: {', '.join(JOB_FIELDS)} "
            "(gpuplan Parquet uses Job field names, see docs/formats.md)"
        )
    missing = [c for c in REQUIRED_FIELDS if c not in columns]
    if missing:
        raise TraceError(f"{path}: required column(s) {missing} missing; the file has: {', '.join(columns)}")


def _meta(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if not value.strip():
        return None
    try:
        return loads_object(value)
    except ValueError:
        raise FieldError("meta", value, "bad JSON") from None


def _row_job(row: dict[str, Any]) -> Job:
    obj = {k: v for k, v in row.items() if v is not None}
    if "meta" in obj:
        meta = _meta(obj["meta"])
        if meta is None:
            del obj["meta"]
        else:
            obj["meta"] = meta
    return job_from_json(obj)


@register_reader
class ParquetReader(TraceReader):
    """Reads gpuplan Parquet traces: columns named after Job fields, `id`, `submit_s`, `gpus` required.

    Error locations give the data row (1 = the first row) where text formats give the line.
    """

    name = "parquet"
    description = "gpuplan's own schema as Parquet (columns named after Job fields)"
    priority = 10

    def detect(self, path: Path, head: str) -> bool:
        return path.suffix.lower() in (".parquet", ".pq") or head.startswith(_MAGIC.decode())

    def read(self, path: Path, options: ReadOptions) -> TraceResult:
        frame = _frame(path)
        _checked_columns(path, list(frame.columns))
        sink = RowSink(path, options.skip_bad)
        for number, row in enumerate(frame.iter_rows(named=True), start=1):
            sink.add(number, partial(_row_job, row))
        return sink.result(self.name, ignored_option_warnings(options, self.name))


def _cell(column: str, value: Any) -> Any:
    if column == "meta":
        return json.dumps(value, ensure_ascii=False, allow_nan=False) if value else None
    if column in ("user", "name", "command") and value == "":
        return None
    return value


def write_parquet(jobs: Iterable[Job], path: str | Path) -> None:
    """Write jobs as gpuplan Parquet: id, submit_s, gpus and every field some job sets (PARQUET_TYPES).

    Reading the file back gives equal jobs (meta must hold plain JSON values; it is stored as JSON text).

    Raises:
        TraceError: a job the readers would reject (duplicate id, gpus < 1, NaN ...), meta that is not
            JSON, polars missing, or the file cannot be written.
    """
    path = Path(path)
    records = checked_records(jobs, path)
    pl = _polars()
    columns = [f for f in JOB_FIELDS if any(f in r for r in records)]
    data = {c: [_cell(c, r.get(c)) for r in records] for c in columns}
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        frame = pl.DataFrame(data, schema={c: getattr(pl, PARQUET_TYPES[c]) for c in columns})
        frame.write_parquet(tmp)
        os.replace(tmp, path)
    except OSError as e:
        raise TraceError(f"{path}: cannot write the trace file: {e.strerror or e}") from e
    except (pl.exceptions.PolarsError, OverflowError, TypeError, ValueError) as e:
        raise TraceError(f"{path}: cannot write the jobs as Parquet: {e}") from e
    finally:
        tmp.unlink(missing_ok=True)

"""gpuplan's own trace schema as Parquet: one column per Job field (as in gpuplan CSV), via pyarrow.

pyarrow is imported only when a Parquet file is read or written, so `gpuplan --help` stays fast. (polars
was tried first: on some damaged files it aborts the whole process, which no caller can catch.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

from gpuplan.cluster import cluster_from_toml, cluster_to_toml
from gpuplan.model import ClusterSpec, Job
from gpuplan.traces.base import ReadOptions, TraceError, TraceReader, TraceResult, register_reader
from gpuplan.traces.fastcsv import jobs_from_arrow, release_arrow_memory
from gpuplan.traces.fields import JOB_FIELDS, REQUIRED_FIELDS, FieldError, job_from_json, loads_object
from gpuplan.traces.rows import RowSink, checked_records, clip, ignored_option_warnings

__all__ = ["CLUSTER_KEY", "PARQUET_TYPES", "ParquetReader", "write_parquet"]

_MAGIC = b"PAR1"
# The Parquet (Arrow) type of each Job field as written; the reader accepts any type whose values pass
# the same checks as JSON values (an integer column for a float field, for example).
CLUSTER_KEY = b"gpuplan.cluster"  # Parquet metadata key: the cluster TOML of the trace, if any
PARQUET_TYPES: dict[str, str] = {
    "id": "string",
    "submit_s": "float64",
    "gpus": "int64",
    "mem_gb": "float64",
    "duration_s": "float64",
    "est_duration_s": "float64",
    "est_mem_gb": "float64",
    "requested_s": "float64",
    "user": "string",
    "name": "string",
    "gpu_util_pct": "float64",
    "command": "string",
    "may_span_nodes": "bool",
    "duration_includes_sharing": "bool",
    "startup_s": "float64",
    "init_s": "float64",
    "meta": "string",  # a JSON object as text, like the CSV cell
}


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as e:
        raise TraceError("Parquet traces need pyarrow: pip install pyarrow") from e
    return pyarrow, pyarrow.parquet


def _check_framing(path: Path) -> None:
    """The file starts and ends with the Parquet magic bytes, so it is Parquet and not cut off."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            start = f.read(len(_MAGIC))
            f.seek(max(size - len(_MAGIC), 0))
            end = f.read(len(_MAGIC))
    except OSError as e:
        raise TraceError(f"{path}: cannot open the trace file: {e.strerror or e}") from e
    if not start:
        raise TraceError(f"{path}: the file is empty (no job rows)")
    if start != _MAGIC:
        raise TraceError(f"{path}: not a Parquet file (it does not start with {_MAGIC!r})")
    if end != _MAGIC or size < 3 * len(_MAGIC):
        raise TraceError(f"{path}: the Parquet footer is missing: the file looks cut off")


def _table(path: Path) -> tuple[Any, bytes | None]:
    """The file as an Arrow table, and the cluster TOML in its metadata.

    Raises:
        TraceError: not a Parquet file, cut off, damaged, or unreadable.
    """
    _check_framing(path)
    pa, pq = _pyarrow()
    try:
        with pq.ParquetFile(path) as f:
            table = f.read()
        table.validate(full=True)  # a damaged page can hold text that is not UTF-8
        return table, (table.schema.metadata or {}).get(CLUSTER_KEY)
    except (pa.ArrowException, OSError, ValueError, MemoryError) as e:
        # A damaged file surfaces as ArrowInvalid, OSError or a text decoding error; all mean the same.
        why = f"{type(e).__name__}: {clip(' '.join(str(e).split()), 200)}"
        raise TraceError(f"{path}: not a readable Parquet file, it may be damaged ({why})") from e


def _checked_columns(path: Path, columns: list[str]) -> None:
    twice = sorted({c for c in columns if columns.count(c) > 1})
    if twice:
        raise TraceError(f"{path}: column(s) {twice} appear more than once")
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
        table, cluster = _table(path)
        _checked_columns(path, list(table.column_names))
        sink = RowSink(path, options.skip_bad)
        fast = jobs_from_arrow(table)  # clean columns at C speed; else row by row, naming the bad row
        if fast is not None:
            sink.jobs = fast
            del table
            release_arrow_memory()
        else:
            for number, row in enumerate(table.to_pylist(), start=1):
                sink.add(number, partial(_row_job, row))
        result = sink.result(self.name, ignored_option_warnings(options, self.name))
        if cluster is not None:
            text = cluster.decode("utf-8", errors="replace")
            result.cluster = cluster_from_toml(text, f"{path}: metadata {CLUSTER_KEY.decode()}")
        return result


def _cell(column: str, value: Any) -> Any:
    if column == "meta":
        return json.dumps(value, ensure_ascii=False, allow_nan=False) if value else None
    if column in ("user", "name", "command") and value == "":
        return None
    return value


def write_parquet(jobs: Iterable[Job], path: str | Path, cluster: ClusterSpec | None = None) -> None:
    """Write jobs as gpuplan Parquet: id, submit_s, gpus and every field some job sets (PARQUET_TYPES).

    Reading the file back gives equal jobs (meta must hold plain JSON values; it is stored as JSON text)
    and, when `cluster` is given, that cluster (a cluster TOML file in the metadata key `gpuplan.cluster`).

    Raises:
        TraceError: a job the readers would reject (duplicate id, gpus < 1, NaN ...), meta that is not
            JSON, pyarrow missing, or the file cannot be written.
    """
    path = Path(path)
    records = checked_records(jobs, path)
    pa, pq = _pyarrow()
    columns = [f for f in JOB_FIELDS if any(f in r for r in records)]
    data = {c: [_cell(c, r.get(c)) for r in records] for c in columns}
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        schema = pa.schema([(c, pa.type_for_alias(PARQUET_TYPES[c])) for c in columns])
        if cluster is not None:
            schema = schema.with_metadata({CLUSTER_KEY: cluster_to_toml(cluster).encode("utf-8")})
        pq.write_table(pa.Table.from_pydict(data, schema=schema), tmp)
        os.replace(tmp, path)
    except OSError as e:
        raise TraceError(f"{path}: cannot write the trace file: {e.strerror or e}") from e
    except (pa.ArrowException, OverflowError, TypeError, ValueError) as e:
        raise TraceError(f"{path}: cannot write the jobs as Parquet: {e}") from e
    finally:
        tmp.unlink(missing_ok=True)

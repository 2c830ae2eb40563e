"""Job traces: read them from gpuplan's own JSONL/CSV or from foreign CSVs; write JSONL or CSV.

`read_trace` picks the format from the file name and first lines unless told; formats are readers
registered by name (`reader_names()`), see docs/formats.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from gpuplan.cluster import cluster_to_toml, load_cluster
from gpuplan.model import ClusterSpec, Job
from gpuplan.traces.base import (
    FIELD_ALIASES,
    TIME_UNITS,
    ReadOptions,
    TraceError,
    TraceReader,
    TraceResult,
    TruncatedTraceError,
    detect_reader,
    get_reader,
    parse_time_unit,
    reader_names,
    register_reader,
)
from gpuplan.traces.csvgeneric import RECOGNIZED_COLUMNS, GenericCsvReader, parse_column_map
from gpuplan.traces.jsonl import JsonlReader, write_jsonl
from gpuplan.traces.owncsv import OwnCsvReader, write_csv
from gpuplan.traces.rows import check_text_encoding, read_head

# Foreign formats register themselves on import (one module each). Add new ones below this line.
# isort: split
from gpuplan.traces.alibaba import AlibabaGpuReader  # noqa: F401
from gpuplan.traces.helios import HeliosReader  # noqa: F401
from gpuplan.traces.parquet import ParquetReader, write_parquet  # noqa: F401
from gpuplan.traces.sacct import SacctReader  # noqa: F401
from gpuplan.traces.sacct_json import SacctJsonReader  # noqa: F401
from gpuplan.traces.swf import SwfReader  # noqa: F401

__all__ = [
    "FIELD_ALIASES",
    "RECOGNIZED_COLUMNS",
    "TIME_UNITS",
    "GenericCsvReader",
    "JsonlReader",
    "OwnCsvReader",
    "ReadOptions",
    "TraceError",
    "TraceReader",
    "TraceResult",
    "TruncatedTraceError",
    "cluster_file_for",
    "get_reader",
    "parse_column_map",
    "parse_time_unit",
    "read_trace",
    "reader_names",
    "register_reader",
    "write_csv",
    "write_jsonl",
    "write_trace",
]

_WRITERS: dict[str, Callable[[Iterable[Job], Path], None]] = {
    ".jsonl": write_jsonl,
    ".ndjson": write_jsonl,
    ".csv": write_csv,
    ".parquet": write_parquet,
}


def _detected(path: Path) -> TraceReader:
    head = read_head(path)
    if not head.strip():
        raise TraceError(f"{path}: the file is empty (no job rows)")
    reader = detect_reader(path, head)
    if reader is None:
        formats = ", ".join(reader_names())
        raise TraceError(
            f"{path}: cannot tell the trace format from its name and first line; "
            f"give one of: {formats} (docs/formats.md)"
        )
    return reader


def read_trace(path: str | Path, fmt: str | None = None, options: ReadOptions | None = None) -> TraceResult:
    """Read a job trace file.

    Args:
        path: the trace file.
        fmt: a format name (`reader_names()`); None detects it from the extension and the first line.
        options: column map, time units and skip_bad; defaults read strictly, in seconds.

    Returns:
        The jobs in file order, with skipped-row counts, warnings and the fields the file lacks.

    Raises:
        TraceError: no such file, an empty file, a format that cannot be detected, a bad header,
            or no valid job.
        UnknownNameError: `fmt` is not a registered format.
        InputError: an invalid row (file:line, column, value); `TruncatedTraceError` when the last
            row is cut off. Use `ReadOptions(skip_bad=True)` to skip and count such rows instead.
    """
    path = Path(path)
    options = options or ReadOptions()
    reader = get_reader(fmt) if fmt is not None else None
    if not path.exists():
        raise TraceError(f"{path}: no such trace file")
    if not path.is_file():
        raise TraceError(f"{path}: not a file (give the path of a trace file)")
    check_text_encoding(path)
    result = (reader or _detected(path)).read(path, options)
    beside = cluster_file_for(path)
    if result.cluster is None and beside.is_file():
        result.cluster = load_cluster(str(beside))
        result.warnings.append(f"cluster from {beside} (written beside the trace by `gpuplan convert`)")
    return result


def cluster_file_for(path: str | Path) -> Path:
    """The cluster file that goes with a trace file: `jobs.jsonl` -> `jobs.cluster.toml`."""
    path = Path(path)
    return path.with_name(f"{path.stem}.cluster.toml")


def write_trace(jobs: Iterable[Job], path: str | Path, cluster: ClusterSpec | None = None) -> Path | None:
    """Write jobs as gpuplan JSONL (`.jsonl`, `.ndjson`), CSV (`.csv`) or Parquet, by the extension.

    With `cluster`, the trace keeps it: in the Parquet metadata, else as a cluster file beside the
    trace (`cluster_file_for`), which `read_trace` picks up.

    Returns:
        The cluster file written beside the trace, if any.

    Raises:
        TraceError: another extension, a job the readers would reject, or the file cannot be written.
    """
    path = Path(path)
    writer = _WRITERS.get(path.suffix.lower())
    if writer is None:
        raise TraceError(
            f"{path}: cannot tell the output format; use one of the extensions {', '.join(_WRITERS)}"
        )
    if writer is write_parquet:
        write_parquet(jobs, path, cluster)
        return None
    writer(jobs, path)
    if cluster is None:
        return None
    beside = cluster_file_for(path)
    try:
        beside.write_text(cluster_to_toml(cluster), encoding="utf-8")
    except OSError as e:
        raise TraceError(f"{beside}: cannot write the trace's cluster file: {e.strerror or e}") from e
    return beside

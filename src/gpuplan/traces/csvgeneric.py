"""Foreign CSV traces: columns recognised by common names, or named with `--map FIELD=COLUMN,...`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from gpuplan.model import Job
from gpuplan.traces.base import (
    ReadOptions,
    TraceError,
    TraceReader,
    TraceResult,
    canonical_field,
    register_reader,
    split_pairs,
)
from gpuplan.traces.fields import TIME_FIELDS, job_from_texts
from gpuplan.traces.rows import (
    CsvRecord,
    RowSink,
    csv_records,
    header_names,
    header_record,
    read_head,
    row_cells,
)

__all__ = ["RECOGNIZED_COLUMNS", "GenericCsvReader", "normalize_column", "parse_column_map"]

# Job field -> column names that mean it, compared after `normalize_column`; the first present wins.
RECOGNIZED_COLUMNS: dict[str, tuple[str, ...]] = {
    "id": ("id", "job_id", "jobid", "job"),
    "submit_s": ("submit_s", "submit", "submit_time", "submission_time"),
    "duration_s": ("duration_s", "duration", "runtime", "run_time", "elapsed"),
    "gpus": ("gpus", "num_gpu", "num_gpus", "gpu_num", "gpu_count", "ngpus"),
    "mem_gb": ("mem_gb", "gpu_mem", "gpu_mem_gb", "gpu_memory_gb"),
    "est_duration_s": ("est_duration_s", "est_duration", "estimate"),
    "est_mem_gb": ("est_mem_gb", "est_mem"),
    "requested_s": ("requested_s", "time_limit", "timelimit", "walltime"),
    "user": ("user", "user_name", "username"),
    "name": ("name", "job_name", "jobname"),
    "gpu_util_pct": ("gpu_util_pct", "gpu_util", "util"),
    "command": ("command", "cmd"),
    "may_span_nodes": ("may_span_nodes", "multi_node"),
    "duration_includes_sharing": ("duration_includes_sharing",),
    "startup_s": ("startup_s", "startup"),
    "init_s": ("init_s", "init"),
}
_DELIMITERS = (",", "\t", ";")
_MAX_LISTED = 10


def normalize_column(name: str) -> str:
    """A header name as recognition compares it: stripped, lower case, runs of spaces/hyphens as '_'."""
    return re.sub(r"[\s\-]+", "_", name.strip().lower())


def parse_column_map(text: str) -> dict[str, str]:
    """Parse a `--map` value such as 'submit=submit_time,duration=runtime,gpus=num_gpu'.

    Keys are Job field names or their short names (submit, duration, est_duration, requested, mem,
    est_mem, gpu_util); values are column names of the file, used as written.

    Raises:
        TraceError: bad syntax, or two keys for one field.
        UnknownNameError: an unknown field; the message lists the valid ones.
    """
    mapped: dict[str, str] = {}
    for key, column in split_pairs(text, "--map", "submit=submit_time,gpus=num_gpu"):
        field = canonical_field(key)
        if field in mapped:
            raise TraceError(f"--map: field {field} is given twice in {text!r}")
        mapped[field] = column
    return mapped


def _delimiter(path: Path, first_line: str) -> str:
    if path.suffix.lower() == ".tsv":
        return "\t"
    counts = [(first_line.count(d), -i) for i, d in enumerate(_DELIMITERS)]
    best = max(counts)
    return _DELIMITERS[-best[1]] if best[0] else ","


@dataclass(slots=True)
class _Plan:
    """Which column holds which field, and what the reader must tell the user about it."""

    header: list[str]
    columns: dict[str, int]  # Job field -> column index, in column order
    extras: list[tuple[int, str]]  # (column index, meta key) of columns no field uses
    warnings: list[str]
    not_provided: tuple[str, ...]

    def label(self, field: str) -> str:
        """The file's column for a field, for messages."""
        return self.header[self.columns[field]] if field in self.columns else field


def _mapped_column(where: str, header: list[str], field: str, column: str) -> int:
    stripped = [h.strip() for h in header]
    if column.strip() in stripped:
        return stripped.index(column.strip())
    normalized = [normalize_column(h) for h in header]
    if normalize_column(column) in normalized:
        return normalized.index(normalize_column(column))
    raise TraceError(f"{where}: --map {field}={column}: no such column; the header has: {', '.join(header)}")


def _recognized(header: list[str], taken: dict[str, int]) -> tuple[dict[str, int], list[str]]:
    normalized = [normalize_column(h) for h in header]
    used = set(taken.values())
    found: dict[str, int] = {}
    notes: list[str] = []
    for field, names in RECOGNIZED_COLUMNS.items():
        if field in taken:
            continue
        hits = [i for name in names for i, n in enumerate(normalized) if n == name and i not in used]
        if hits:
            found[field] = hits[0]
            used.add(hits[0])
        if len(hits) > 1:
            others = ", ".join(repr(header[i]) for i in hits[1:])
            notes.append(
                f"columns {header[hits[0]]!r} and {others} all look like {field}; "
                f"using {header[hits[0]]!r} (choose another with --map {field}=COLUMN)"
            )
    return found, notes


def _extras(header: list[str], used: set[int]) -> list[tuple[int, str]]:
    extras: list[tuple[int, str]] = []
    for i, name in enumerate(header):
        if i in used:
            continue
        key = name.strip() or f"column{i + 1}"
        extras.append((i, key if key not in {k for _, k in extras} else f"{key}#{i + 1}"))
    return extras


def _substitutes(columns: dict[str, int]) -> tuple[list[str], tuple[str, ...]]:
    notes: list[str] = []
    if "id" not in columns:
        notes.append(
            "no id column: job ids are the data row numbers 1, 2, 3, ... (give one with --map id=COLUMN)"
        )
    if "submit_s" not in columns:
        notes.append("no submit-time column: every job submits at time 0 (give one with --map submit=COLUMN)")
    return notes, tuple(f for f in ("id", "submit_s") if f not in columns)


def _plan(where: str, header: list[str], options: ReadOptions) -> _Plan:
    taken = {f: _mapped_column(where, header, f, c) for f, c in options.column_map.items()}
    found, notes = _recognized(header, taken)
    columns = dict(sorted({**taken, **found}.items(), key=lambda item: item[1]))
    if "gpus" not in columns:
        names = ", ".join(RECOGNIZED_COLUMNS["gpus"])
        raise TraceError(
            f"{where}: no GPU-count column (looked for {names}); the header has: "
            f"{', '.join(header)}; name it with --map gpus=COLUMN"
        )
    extras = _extras(header, set(columns.values()))
    if extras:
        shown = ", ".join(k for _, k in extras[:_MAX_LISTED]) + (", ..." if len(extras) > _MAX_LISTED else "")
        notes.append(f"{len(extras)} unrecognised column(s) kept in each job's meta: {shown}")
    more_notes, not_provided = _substitutes(columns)
    return _Plan(header, columns, extras, notes + more_notes, not_provided)


def _row_job(path: Path, plan: _Plan, units: dict[str, str], rec: CsvRecord, row_number: int) -> Job:
    cells = row_cells(path, plan.header, rec)
    texts = {f: cells[i].strip() for f, i in plan.columns.items()}
    if "id" not in texts:
        texts = {"id": str(row_number), **texts}
    texts.setdefault("submit_s", "0")
    job = job_from_texts(texts, units)
    job.meta = {key: cells[i] for i, key in plan.extras if cells[i].strip()}
    return job


@register_reader
class GenericCsvReader(TraceReader):
    """Reads foreign CSV/TSV traces; the delimiter (comma, tab, semicolon) is taken from the header."""

    name = "generic-csv"
    description = "any CSV/TSV with a header; columns recognised by common names or given with --map"
    priority = -10

    def detect(self, path: Path, head: str) -> bool:
        if path.suffix.lower() in (".csv", ".tsv"):
            return True
        first = head.splitlines()[0] if head else ""
        names = header_names(first, _delimiter(path, first)) or []
        known = {n for names_ in RECOGNIZED_COLUMNS.values() for n in names_}
        return len(names) > 1 and any(normalize_column(n) in known for n in names)

    def read(self, path: Path, options: ReadOptions) -> TraceResult:
        first = _first_line(path)
        records = csv_records(path, _delimiter(path, first))
        rec = header_record(path, records)
        plan = _plan(f"{path}:{rec.line}", [c.strip() for c in rec.cells or []], options)
        units = {f: options.unit_for(f) for f in TIME_FIELDS}
        sink = RowSink(path, options.skip_bad)
        for row_number, rec in enumerate((r for r in records if not r.is_blank), start=1):
            sink.add(rec.line, partial(_row_job, path, plan, units, rec, row_number), plan.label)
        return sink.result(self.name, plan.warnings, plan.not_provided)


def _first_line(path: Path) -> str:
    return next((line for line in read_head(path).splitlines() if line.strip()), "")

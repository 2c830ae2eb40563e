"""gpuplan's own CSV trace format: a header of Job field names, one job per row, meta as a JSON cell."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from pathlib import Path

from gpuplan.model import Job
from gpuplan.traces.base import ReadOptions, TraceError, TraceReader, TraceResult, register_reader
from gpuplan.traces.fastcsv import fast_own_csv_jobs
from gpuplan.traces.fields import JOB_FIELDS, REQUIRED_FIELDS, cell_text, job_from_texts
from gpuplan.traces.rows import (
    CsvRecord,
    RowSink,
    atomic_writer,
    checked_records,
    csv_records,
    header_names,
    header_record,
    ignored_option_warnings,
    row_cells,
)

__all__ = ["OwnCsvReader", "write_csv"]


def _checked_header(path: Path, rec: CsvRecord) -> list[str]:
    names = [c.strip() for c in rec.cells or []]
    where = f"{path}:{rec.line}: header"
    unknown = [n for n in names if n not in JOB_FIELDS]
    if unknown:
        raise TraceError(
            f"{where}: unknown column(s) {unknown}; valid columns: {', '.join(JOB_FIELDS)} "
            "(for a foreign CSV use the generic-csv format, with --map if needed)"
        )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TraceError(f"{where}: column(s) {twice} appear more than once")
    missing = [n for n in REQUIRED_FIELDS if n not in names]
    if missing:
        raise TraceError(f"{where}: required column(s) {missing} missing; the header has: {', '.join(names)}")
    return names


def _quoted(cell: str) -> str:
    # csv.writer with a "\n" line end leaves a lone "\r" unquoted, which no reader gets back.
    if any(c in cell for c in ',"\r\n'):
        return '"' + cell.replace('"', '""') + '"'
    return cell


def _row_job(path: Path, header: list[str], rec: CsvRecord) -> Job:
    return job_from_texts(dict(zip(header, row_cells(path, header, rec), strict=True)))


@register_reader
class OwnCsvReader(TraceReader):
    """Reads gpuplan's CSV traces: exact Job field names in the header, `id`, `submit_s`, `gpus` required."""

    name = "csv"
    description = "gpuplan's own CSV: a header of Job field names, one job per row"
    priority = 10

    def detect(self, path: Path, head: str) -> bool:
        names = header_names(head)
        return names is not None and set(REQUIRED_FIELDS) <= set(names) <= set(JOB_FIELDS)

    def read(self, path: Path, options: ReadOptions) -> TraceResult:
        records = csv_records(path)
        header = _checked_header(path, header_record(path, records))
        sink = RowSink(path, options.skip_bad)
        fast = fast_own_csv_jobs(path, header)
        if fast is not None:  # a clean file, read by columns; else row by row, naming any bad line
            sink.jobs = fast
            return sink.result(self.name, ignored_option_warnings(options, self.name))
        for rec in records:
            if not rec.is_blank:
                sink.add(rec.line, partial(_row_job, path, header, rec))
        return sink.result(self.name, ignored_option_warnings(options, self.name))


def write_csv(jobs: Iterable[Job], path: str | Path) -> None:
    """Write jobs as gpuplan CSV; columns are id, submit_s, gpus and every field some job sets.

    Reading the file back gives equal jobs (meta must hold plain JSON values).

    Raises:
        TraceError: a job the reader would reject (duplicate id, gpus < 1, NaN ...), meta that is not
            JSON, or the file cannot be written.
    """
    path = Path(path)
    records = checked_records(jobs, path)
    columns = [f for f in JOB_FIELDS if any(f in r for r in records)]
    with atomic_writer(path) as f:
        f.write(",".join(columns) + "\n")
        for record in records:
            f.write(",".join(_quoted(cell_text(c, record.get(c))) for c in columns) + "\n")

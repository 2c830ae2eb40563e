"""Reading trace files line by line and gathering jobs, skipped rows and warnings; shared by the readers.

Line numbers are 1-based physical lines of the file. Files are decoded as UTF-8 line by line, so a
decoding error is reported on its exact line; a leading byte-order mark is dropped.
"""

from __future__ import annotations

import csv
import gc
import gzip
import json
import os
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import IO, Any

from gpuplan.errors import InputError
from gpuplan.model import Job
from gpuplan.traces.base import ReadOptions, TraceError, TraceResult, TruncatedTraceError
from gpuplan.traces.fields import (
    JOB_FIELDS,
    REPORTED_FIELDS,
    FieldError,
    check_plausible,
    job_from_json,
    job_record,
)

__all__ = [
    "CsvRecord",
    "RowSink",
    "atomic_writer",
    "check_text_encoding",
    "checked_records",
    "clip",
    "csv_records",
    "gc_paused",
    "head_text",
    "header_names",
    "header_record",
    "ignored_option_warnings",
    "is_gzip",
    "open_binary",
    "read_head",
    "read_lines",
    "row_cells",
]

HEAD_BYTES = 4096
_MAX_SAMPLES = 5


def clip(text: str, limit: int = 80) -> str:
    """`text` without its line ending, cut to `limit` characters for an error message."""
    text = text.rstrip("\r\n")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _open(path: Path) -> IO[bytes]:
    try:
        return path.open("rb")
    except OSError as e:
        raise TraceError(f"{path}: cannot open the trace file: {e.strerror or e}") from e


_WIDE_BOMS = (  # longest first: the UTF-32 LE mark starts with the UTF-16 LE one
    (b"\xff\xfe\x00\x00", "UTF-32", "UTF-32LE"),
    (b"\x00\x00\xfe\xff", "UTF-32", "UTF-32BE"),
    (b"\xff\xfe", "UTF-16", "UTF-16LE"),
    (b"\xfe\xff", "UTF-16", "UTF-16BE"),
)


def check_text_encoding(path: Path) -> None:
    """Refuse a UTF-16 or UTF-32 text file up front, with the command that converts it.

    Such a file would otherwise fail on its first line with a row of mangled bytes. A UTF-8 byte-order
    mark is fine (readers skip it); binary formats (Parquet) are not checked.

    Raises:
        TraceError: the file starts with a UTF-16/32 byte-order mark, or its first bytes are every
            other one NUL (UTF-16 without a mark).
    """
    with _open(path) as f:
        head = f.read(512)
    if head.startswith(b"PAR1"):
        return
    found = next(((enc, codec) for bom, enc, codec in _WIDE_BOMS if head.startswith(bom)), None)
    how = "it starts with a {} byte-order mark"
    if found is None and len(head) >= 8 and head.count(0) >= len(head) // 3:
        odd_nuls = head[1::2].count(0) >= head[0::2].count(0)
        found, how = ("UTF-16", "UTF-16LE" if odd_nuls else "UTF-16BE"), "every other byte is NUL, as in {}"
    if found is None:
        return
    enc, codec = found
    out = path.with_name(f"{path.stem}-utf8{path.suffix}")
    raise TraceError(
        f"{path}: the file is {enc} text ({how.format(codec)}), not UTF-8: convert it with "
        f"`iconv -f {codec} -t UTF-8 {path} > {out}` (or save it as UTF-8)"
    )


def read_head(path: Path, size: int = HEAD_BYTES) -> str:
    """The first `size` bytes of the file as text (undecodable bytes replaced), for format detection.

    Raises:
        TraceError: the file cannot be opened.
    """
    with _open(path) as f:
        return f.read(size).decode("utf-8", errors="replace").removeprefix("\ufeff")


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (line number, text with its line ending) for each physical line.

    Raises:
        TraceError: the file cannot be opened.
        InputError: a line is not UTF-8 (fatal even with skip_bad: the rest of the file is suspect).
    """
    with _open(path) as f:
        for number, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                value = clip(raw.decode("utf-8", errors="replace"))
                raise InputError(str(path), number, None, value, "UTF-8 text", reason="not UTF-8") from e
            yield number, (text.removeprefix("\ufeff") if number == 1 else text)


@dataclass(slots=True)
class CsvRecord:
    """One CSV record: the line it starts on, its cells (None when the quoting is broken) and why."""

    line: int
    cells: list[str] | None
    error: str = ""
    unterminated: bool = False  # it ends the file without a newline, or inside an open quote

    @property
    def is_blank(self) -> bool:
        return self.cells is not None and all(not c.strip() for c in self.cells) and len(self.cells) <= 1


class _LineSource:
    """Feeds decoded lines to csv.reader, remembering the last line number and whether it ended."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.line = 0
        self.ended = True
        self.exhausted = False

    def __iter__(self) -> Iterator[str]:
        for number, text in read_lines(self.path):
            self.line = number
            self.ended = text.endswith(("\n", "\r"))
            yield text
        self.exhausted = True


def csv_records(path: Path, delimiter: str = ",") -> Iterator[CsvRecord]:
    """Yield the CSV records of a file with the line each starts on; broken quoting yields cells=None.

    Raises:
        TraceError, InputError: as `read_lines`.
    """
    source = _LineSource(path)
    reader = csv.reader(iter(source), delimiter=delimiter, strict=True)
    start = 1
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            # csv.reader drops the rest of the bad line and starts afresh on the next one.
            yield CsvRecord(start, None, str(e), unterminated=source.exhausted)
        else:
            yield CsvRecord(start, cells, unterminated=not source.ended)
        start = source.line + 1


def header_names(head: str, delimiter: str = ",") -> list[str] | None:
    """The stripped column names of the first line of `head`, or None when it is not CSV."""
    lines = head.splitlines()
    if not lines:
        return None
    try:
        return [c.strip() for c in next(csv.reader([lines[0]], delimiter=delimiter, strict=True))]
    except (csv.Error, StopIteration):
        return None


def header_record(path: Path, records: Iterator[CsvRecord]) -> CsvRecord:
    """The first non-blank record of a CSV file: its header.

    Raises:
        TraceError: the file has no line at all, or broken quoting in the header.
    """
    for rec in records:
        if rec.cells is None:
            raise TraceError(f"{path}:{rec.line}: the header line is not valid CSV ({rec.error})")
        if not rec.is_blank:
            return rec
    raise TraceError(f"{path}: the file is empty (no header, no job rows)")


def _truncated(path: Path, rec: CsvRecord, column: str | None, value: str) -> TruncatedTraceError:
    return TruncatedTraceError(
        str(path),
        rec.line,
        column,
        value,
        "a complete row; the file ends in the middle of it, so it looks cut off",
        reason="truncated last line",
    )


def row_cells(path: Path, header: list[str], rec: CsvRecord) -> list[str]:
    """The cells of a data record, checked against the header width.

    Raises:
        TruncatedTraceError: the last record is cut off.
        InputError: broken quoting or the wrong number of fields.
    """
    if rec.cells is None:
        if rec.unterminated:
            raise _truncated(path, rec, None, "")
        expected = "valid CSV: a quoted cell must be closed and then followed by a delimiter"
        raise InputError(str(path), rec.line, None, rec.error, expected, reason="bad CSV")
    cells = rec.cells
    if len(cells) < len(header):
        missing = header[len(cells)]
        if rec.unterminated:
            raise _truncated(path, rec, missing, ",".join(cells))
        expected = f"{len(header)} fields as in the header, got {len(cells)} (no {missing!r})"
        raise InputError(
            str(path), rec.line, missing, clip(",".join(cells)), expected, "wrong number of fields"
        )
    if len(cells) > len(header):
        column = f"#{len(header) + 1} (beyond the header)"
        expected = f"{len(header)} fields as in the header, got {len(cells)}"
        raise InputError(
            str(path), rec.line, column, clip(cells[len(header)]), expected, "wrong number of fields"
        )
    return cells


def checked_header(path: Path, rec: CsvRecord, required: Sequence[str], expected: str) -> list[str]:
    """The header's column names; a TraceError when a required one is missing or a name repeats.

    Args:
        expected: what the format's header holds, for the message (e.g. "Helios columns: a,b,c").
    """
    names = [c.strip() for c in rec.cells or []]
    missing = [c for c in required if c not in names]
    if missing:
        raise TraceError(
            f"{path}:{rec.line}: header: column(s) {missing} missing; {expected}; "
            f"the header has: {','.join(names)}"
        )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TraceError(f"{path}:{rec.line}: header: column(s) {twice} appear more than once")
    return names


class RowSink:
    """Collects the jobs of one file: rejects duplicate ids, counts skipped rows, builds the result."""

    def __init__(self, path: Path, skip_bad: bool) -> None:
        self.path = path
        self.skip_bad = skip_bad
        self.jobs: list[Job] = []
        self.skipped: Counter[str] = Counter()
        self._samples: list[str] = []
        self._id_lines: dict[str, int] = {}

    def add(self, line: int, build: Callable[[], Job], column: Callable[[str], str] = str) -> None:
        """Build the job of `line` and keep it, or reject the row.

        Args:
            line: the row's first line.
            build: makes the Job; may raise FieldError or InputError.
            column: the file's column name for a Job field, used in messages.

        Raises:
            InputError: the row is invalid and skip_bad is off.
        """
        try:
            try:
                job = build()
                check_plausible(job)
            except FieldError as e:
                raise e.located(str(self.path), line, column(e.field)) from None
            self._keep(job, line, column("id"))
        except InputError as e:
            self.reject(e)

    def _keep(self, job: Job, line: int, id_column: str) -> None:
        first = self._id_lines.get(job.id)
        if first is not None:
            expected = f"a unique id; line {first} already has it"
            raise InputError(str(self.path), line, id_column, job.id, expected, reason="id: duplicate")
        self._id_lines[job.id] = line
        self.jobs.append(job)

    def reject(self, error: InputError) -> None:
        """Count a bad row under its reason, or raise it when skip_bad is off."""
        if not self.skip_bad:
            raise error
        self.skipped[error.reason] += 1
        if len(self._samples) < _MAX_SAMPLES:
            self._samples.append(f"skipped {error}")

    def result(self, fmt: str, warnings: list[str], not_provided: tuple[str, ...] = ()) -> TraceResult:
        """The TraceResult of the file.

        Args:
            fmt: the reader's name.
            warnings: the reader's own warnings; the first skipped rows are added after them.
            not_provided: fields the reader substituted (e.g. ids from row numbers).

        Raises:
            TraceError: no valid job at all.
        """
        total = sum(self.skipped.values())
        if not self.jobs:
            why = f"all {total} rows were skipped: {dict(self.skipped)}" if total else "no job rows"
            raise TraceError(f"{self.path}: the trace holds no valid job ({why})")
        notes = list(warnings) + self._samples
        if total > len(self._samples):
            notes.append(
                f"... {total - len(self._samples)} more skipped rows; counts per reason in `skipped`"
            )
        missing = [f for f in JOB_FIELDS if f in not_provided or self._none_given(f)]
        return TraceResult(self.jobs, dict(self.skipped), notes, str(self.path), fmt, missing)

    def _none_given(self, field: str) -> bool:
        if field not in REPORTED_FIELDS or getattr(self.jobs[0], field) not in (None, ""):
            return False  # the usual answer for a given field, without a pass over the jobs
        values = list(map(attrgetter(field), self.jobs))  # C speed: a million jobs in milliseconds
        return values.count(None) + values.count("") == len(values)


def ignored_option_warnings(options: ReadOptions, fmt: str) -> list[str]:
    """Warnings for options a fixed-schema format does not use."""
    notes = []
    if options.column_map:
        notes.append(f"column map ignored: the {fmt} format has fixed field names")
    if options.time_unit != "s":
        notes.append(f"time unit ignored: the {fmt} format stores seconds")
    return notes


@contextmanager
def atomic_writer(path: Path) -> Iterator[IO[str]]:
    """A text file that replaces `path` only when the block succeeds (no half-written traces).

    Raises:
        TraceError: the file cannot be written.
    """
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("w", encoding="utf-8", newline="") as f:
            yield f
        os.replace(tmp, path)
    except OSError as e:
        raise TraceError(f"{path}: cannot write the trace file: {e.strerror or e}") from e
    finally:
        tmp.unlink(missing_ok=True)


def _checked_record(job: Job, path: Path) -> dict[str, Any]:
    record = job_record(job)
    try:
        check_plausible(job_from_json(record))
        json.dumps(record.get("meta", {}), allow_nan=False)
    except FieldError as e:
        raise TraceError(f"{path}: cannot write job {job.id!r}: {e}") from e
    except (TypeError, ValueError) as e:
        raise TraceError(f"{path}: cannot write job {job.id!r}: meta is not plain JSON: {e}") from e
    return record


def checked_records(jobs: Iterable[Job], path: Path) -> list[dict[str, Any]]:
    """The records (`job_record`) of jobs about to be written, each one a job the readers accept.

    Raises:
        TraceError: no jobs, a duplicate id, or a job the readers would reject (gpus < 1, NaN, ...).
    """
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    for job in jobs:
        record = _checked_record(job, path)
        if str(record["id"]) in seen:
            raise TraceError(f"{path}: cannot write: job id {job.id!r} appears twice")
        seen.add(str(record["id"]))
        records.append(record)
    if not records:
        raise TraceError(f"{path}: no jobs to write (readers reject a trace without jobs)")
    return records


# ---- opening trace files --------------------------------------------------------------------------


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: reading makes millions of objects that hold no cycles, and the
    collector would rescan all of them again and again (about 3x slower)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def open_binary(path: Path) -> IO[bytes]:
    try:
        if is_gzip(path):
            return gzip.open(path, "rb")  # type: ignore[return-value]
        return path.open("rb")
    except OSError as e:
        raise TraceError(f"{path}: cannot open the trace file: {e.strerror or e}") from e


def is_gzip(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(2) == b"\x1f\x8b"


def head_text(path: Path, head: str) -> str:
    """The first bytes of the file as text, decompressed when it is gzip (detection never raises)."""
    if not head.startswith("\x1f\ufffd") and path.suffix.lower() != ".gz":
        return head
    try:
        with gzip.open(path, "rb") as f:
            return f.read(HEAD_BYTES).decode("utf-8", errors="replace").removeprefix("\ufeff")
    except (OSError, EOFError, zlib.error):
        return ""

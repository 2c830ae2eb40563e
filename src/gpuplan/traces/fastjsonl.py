"""A columnar fast path for gpuplan's JSONL: pyarrow.json parses and types whole columns at C speed.

As with the CSV fast path (`fastcsv.py`), it only accepts a file it can prove clean by the exact
line-by-line reader's rules (`fields.job_from_json`): one object per line, only Job field names as
keys, each value of its field's JSON type, no key twice. On anything else (a bad value, an unknown
key, a `meta` object, two objects on a line, an object over two lines, invalid UTF-8) it returns
None and the exact reader runs, so every error still names its file, line, field and value.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gpuplan.model import Job
from gpuplan.traces.fastcsv import jobs_from_arrow, release_arrow_memory
from gpuplan.traces.fields import BOOL_FIELDS, FLOAT_FIELDS, JOB_FIELDS, REQUIRED_FIELDS

__all__ = ["fast_jsonl_jobs"]

_BOM = b"\xef\xbb\xbf"
_WHITESPACE = b" \t\r\n"
# The exact reader reads one object per line; pyarrow reads on over line ends. So the file must hold no
# two objects on one line, and every line must start an object: then no object spans two lines either
# (a value that starts a line would be an object or list, which no field of the schema takes).
_TWO_ON_A_LINE = re.compile(rb"\}[ \t\r]*\{")
_LINE_NOT_AN_OBJECT = re.compile(rb"\n(?!\{)")  # a blank or indented line: the slower general check
_NOT_ONE_OBJECT = re.compile(rb"(?m)^(?![ \t\r]*$)(?![ \t]*\{.*\}[ \t\r]*$)")
_OBJECT_START = re.compile(rb"(?m)^[ \t]*\{")
_ID_IS_NUMBER = "Column(/id) changed from string to number"


def fast_jsonl_jobs(path: Path) -> list[Job] | None:
    """All jobs of a clean gpuplan JSONL file in file order, or None (use the exact reader)."""
    try:
        import pyarrow as pa
        import pyarrow.json as pajson
    except ImportError:  # pragma: no cover - pyarrow is a dependency; stay correct without it
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None  # the exact reader reports it
    data = data.removeprefix(_BOM)
    lines = _object_lines(data)
    if lines is None:
        return None
    table = _table(data, pa, pajson)
    del data
    if table is None or table.num_rows != lines or not _valid_utf8(table, pa):
        return None
    jobs = jobs_from_arrow(_given_columns(table))
    del table
    release_arrow_memory()
    return jobs


def _object_lines(data: bytes) -> int | None:
    """The number of lines, if every non-blank line of the file holds exactly one `{...}`, else None."""
    end = len(data)
    while end and data[end - 1] in _WHITESPACE:
        end -= 1
    if not end or _TWO_ON_A_LINE.search(data) is not None:
        return None
    if data.startswith(b"{") and _LINE_NOT_AN_OBJECT.search(data, 0, end) is None:
        return data.count(b"\n", 0, end) + 1  # the usual file: no blank or indented line
    if _NOT_ONE_OBJECT.search(data) is not None:
        return None
    return sum(1 for _ in _OBJECT_START.finditer(data))


def _schema(pa: Any, id_type: Any) -> Any:
    def field_type(name: str) -> Any:
        if name == "id":
            return id_type
        if name in FLOAT_FIELDS or name == "gpus":
            return pa.float64()
        if name in BOOL_FIELDS:
            return pa.bool_()
        return pa.string()

    # `meta` is left out on purpose: a row with it is an unexpected field, so the exact reader runs.
    return pa.schema([(f, field_type(f)) for f in JOB_FIELDS if f != "meta"])


def _table(data: bytes, pa: Any, pajson: Any) -> Any:
    """The file as a typed Arrow table (integer ids as their decimal text), or None."""
    for id_type in (pa.string(), pa.int64()):
        try:
            table = pajson.read_json(
                pa.BufferReader(data),
                read_options=pajson.ReadOptions(use_threads=False, block_size=1 << 24),
                parse_options=pajson.ParseOptions(
                    explicit_schema=_schema(pa, id_type), unexpected_field_behavior="error"
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError, ValueError) as e:
            if _ID_IS_NUMBER in str(e) and id_type == pa.string():
                continue  # every id may be an integer, which the exact reader turns into its text
            return None
        if id_type != pa.string():
            table = table.set_column(0, "id", table.column("id").cast(pa.string()))
        return table
    return None


def _valid_utf8(table: Any, pa: Any) -> bool:
    """Whether every string is UTF-8 (pyarrow.json does not check; the exact reader names the line)."""
    try:
        for column in table.columns:
            if pa.types.is_string(column.type):
                column.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _given_columns(table: Any) -> Any:
    """The table without the columns no row gave (their jobs keep the field's default)."""
    n = table.num_rows
    return table.select(
        [f for f in table.column_names if f in REQUIRED_FIELDS or table.column(f).null_count < n]
    )

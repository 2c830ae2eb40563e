"""A columnar fast path for gpuplan's JSONL: pyarrow.json parses and types whole columns at C speed.

As with the CSV fast path (`fastcsv.py`), it only accepts a file it can prove clean by the exact
line-by-line reader's rules (`fields.job_from_json`): one object per line, only Job field names as
keys, each value of its field's JSON type, no key twice. On anything else (a bad value, an unknown
key, two objects on a line, an object over two lines, invalid UTF-8, a `meta` key whose values are
of several kinds across rows, or `meta` in a file with blank or indented lines) it returns None and
the exact reader runs, so every error still names its file, line, field and value.
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
    if table is None or table.num_rows != lines or not _valid_utf8(table, pa):
        return None
    if any(f not in JOB_FIELDS for f in table.column_names):
        return None  # an unknown key: the exact reader names it
    metas: list[dict[str, Any] | None] | None = None
    if "meta" in table.column_names:
        metas = _metas(data, table.column("meta"), pa)
        if metas is None:
            return None
        table = table.drop_columns(["meta"])
    del data
    jobs = jobs_from_arrow(_given_columns(table))
    del table
    release_arrow_memory()
    if jobs is not None and metas is not None:
        for job, meta in zip(jobs, metas, strict=True):
            if meta is not None:
                job.meta = meta
    return jobs


def _metas(data: bytes, column: Any, pa: Any) -> list[dict[str, Any] | None] | None:
    """Each row's `meta` object (None: no meta) as the exact reader makes it, or None when unsure.

    pyarrow has checked every meta (objects only, no key twice at any depth, UTF-8), but its struct
    would give each row every key any row has; so the objects are parsed again from their lines, in a
    usual file only (a line per row, no blank or indented line)."""
    if pa.types.is_null(column.type):
        return [None] * len(column)
    if not pa.types.is_struct(column.type) or not data.startswith(b"{"):
        return None
    if _LINE_NOT_AN_OBJECT.search(data, 0, _content_end(data)) is not None:
        return None
    loads = _loads()
    check = _has_float(column.type, pa)  # no float anywhere: no integer can have become one
    given = column.is_valid().to_numpy(zero_copy_only=False).tolist()
    out: list[dict[str, Any] | None] = []
    view, start = memoryview(data), 0
    find = data.find
    for has_meta in given:
        end = find(b"\n", start)
        if end < 0:
            end = len(data)
        if has_meta:
            try:
                meta = loads(view[start:end])["meta"]
            except (ValueError, KeyError, TypeError):
                return None
            if not isinstance(meta, dict) or (check and not _plain_numbers(meta)):
                return None
            out.append(meta)
        else:
            out.append(None)
        start = end + 1
    return out


_BIG = float(2**63)


def _has_float(t: Any, pa: Any) -> bool:
    """Whether pyarrow typed some value of the meta objects as a float (at any depth)."""
    if pa.types.is_floating(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_float(t.field(i).type, pa) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_float(t.value_type, pa)
    return False


def _plain_numbers(value: Any) -> bool:
    """No float that may be an integer too big for 64 bits (orjson reads those as floats, json.loads
    as ints: the exact reader then decides)."""
    if type(value) is float:
        return not (abs(value) >= _BIG and value.is_integer())
    if isinstance(value, dict):
        return all(map(_plain_numbers, value.values()))
    if isinstance(value, list):
        return all(map(_plain_numbers, value))
    return True


def _loads() -> Any:
    """orjson's parser when installed (the same objects as json.loads for what pyarrow accepted; it
    refuses NaN, and `_plain_numbers` catches integers beyond 64 bits); else json's."""
    try:
        import orjson
    except ImportError:  # pragma: no cover - orjson is a dependency
        import json

        return lambda b: json.loads(bytes(b))
    return orjson.loads


def _object_lines(data: bytes) -> int | None:
    """The number of lines, if every non-blank line of the file holds exactly one `{...}`, else None."""
    end = _content_end(data)
    if not end or _TWO_ON_A_LINE.search(data) is not None:
        return None
    if data.startswith(b"{") and _LINE_NOT_AN_OBJECT.search(data, 0, end) is None:
        return data.count(b"\n", 0, end) + 1  # the usual file: no blank or indented line
    if _NOT_ONE_OBJECT.search(data) is not None:
        return None
    return sum(1 for _ in _OBJECT_START.finditer(data))


def _content_end(data: bytes) -> int:
    """Where the file's content ends: the trailing blank lines and spaces left out."""
    end = len(data)
    while end and data[end - 1] in _WHITESPACE:
        end -= 1
    return end


def _schema(pa: Any, id_type: Any) -> Any:
    def field_type(name: str) -> Any:
        if name == "id":
            return id_type
        if name in FLOAT_FIELDS or name == "gpus":
            return pa.float64()
        if name in BOOL_FIELDS:
            return pa.bool_()
        return pa.string()

    # `meta` is left out: pyarrow infers its type (and any unknown key's, which sends the file to the
    # exact reader); `_metas` makes the objects.
    return pa.schema([(f, field_type(f)) for f in JOB_FIELDS if f != "meta"])


def _table(data: bytes, pa: Any, pajson: Any) -> Any:
    """The file as a typed Arrow table (integer ids as their decimal text), or None."""
    for id_type in (pa.string(), pa.int64()):
        try:
            table = pajson.read_json(
                pa.BufferReader(data),
                read_options=pajson.ReadOptions(use_threads=False, block_size=1 << 24),
                parse_options=pajson.ParseOptions(
                    explicit_schema=_schema(pa, id_type), unexpected_field_behavior="infer"
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

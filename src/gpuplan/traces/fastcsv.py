"""A columnar fast path for gpuplan's own CSV: pyarrow parses and checks whole columns at C speed.

It only accepts a file it can prove clean by the same rules as the exact row-by-row reader
(`fields.py`); on anything unusual it returns None and the exact reader runs, so every error still
names its file, line, column and value.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
from pathlib import Path
from typing import Any

from gpuplan.model import Job, SharedMeta
from gpuplan.traces.fields import (
    BOOL_FIELDS,
    FALSE_WORDS,
    FLOAT_FIELDS,
    PHASE_FIELDS,
    PLAUSIBLE_MAX,
    REQUIRED_FIELDS,
    TRUE_WORDS,
    loads_object,
)

__all__ = ["fast_own_csv_jobs", "jobs_from_arrow", "release_arrow_memory"]

_SLICE_ROWS = 1 << 16  # rows whose Python values are made at once

_STRING_FIELDS = ("id", "user", "name", "command", "meta", *BOOL_FIELDS)


def fast_own_csv_jobs(path: Path, header: list[str]) -> list[Job] | None:
    """All jobs of a clean own-format CSV in file order, or None (use the exact reader)."""
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv
    except ImportError:  # pragma: no cover - pyarrow is a dependency; stay correct without it
        return None
    if any(f in PHASE_FIELDS for f in header):
        return None  # the exact reader checks startup_s + init_s against duration_s row by row
    types = {f: pa.float64() for f in header if f in (*FLOAT_FIELDS, "gpus")}
    types.update({f: pa.string() for f in header if f in _STRING_FIELDS})
    try:
        table = pacsv.read_csv(
            path,
            # one thread: Arrow's pool took more CPU (0.6-0.9 s against 0.35-0.54 s for 1M rows in a fresh
            # process, much of it in the kernel) and no less wall time on a 2-core machine
            read_options=pacsv.ReadOptions(use_threads=False, block_size=1 << 24),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types=types, strings_can_be_null=False, null_values=[""], include_columns=header
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError):
        return None
    if table.num_rows == 0 or table.column_names != header:
        return None
    jobs = jobs_from_arrow(table, text_bools=True)
    del table
    release_arrow_memory()
    return jobs


def jobs_from_arrow(table: Any, text_bools: bool = False) -> list[Job] | None:
    """All jobs of an Arrow table whose columns are Job field names (own CSV, Parquet), in row order,
    or None when some value is not provably clean by the exact readers' rules (then read row by row).

    Numeric columns may be any integer or float type; strings may be null (the field's default);
    `text_bools`: true/false columns are text (CSV) rather than Arrow booleans (Parquet). Whole columns
    are checked at once; the Python values are then made a slice of rows at a time, so only one
    slice's lists live beside the jobs (the peak memory of reading is the jobs and the table)."""
    import pyarrow as pa

    names = table.column_names
    n = table.num_rows
    if n == 0 or any(f in PHASE_FIELDS for f in names):
        return None  # the exact reader checks startup_s + init_s against duration_s row by row
    typed: dict[str, Any] = {}
    for name in names:
        column = _typed(name, table.column(name), text_bools, pa)
        if column is None or not _clean_column(name, column):
            return None
        typed[name] = column
    jobs: list[Job] = []
    metas: dict[str, SharedMeta] = {}
    was_enabled = gc.isenabled()
    gc.disable()  # millions of new values and jobs would trigger many useless collections
    try:
        for offset in range(0, n, _SLICE_ROWS):
            rows = min(_SLICE_ROWS, n - offset)
            columns: dict[str, list[Any]] = {}
            for name, column in typed.items():
                values = _values(name, column.slice(offset, rows), metas)
                if values is None:
                    return None
                columns[name] = values
            jobs.extend(_jobs(columns, rows))
        return jobs
    finally:
        if was_enabled:
            gc.enable()


def release_arrow_memory() -> None:
    """Give the memory Arrow's allocator keeps after a read back to the system (a million-row table
    leaves about 200 MB of freed pages in its pool otherwise). Call it once the table is dropped."""
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        return
    pa.default_memory_pool().release_unused()


def _typed(name: str, column: Any, text_bools: bool, pa: Any) -> Any:
    """The column in the type its checks expect (float64 numbers, non-null strings), or None."""
    t = column.type
    if name in (*FLOAT_FIELDS, "gpus"):
        if not (pa.types.is_floating(t) or pa.types.is_integer(t)):
            return None
        try:
            return column if pa.types.is_float64(t) else column.cast(pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
    if name in BOOL_FIELDS and not text_bools:
        return column.fill_null(False) if pa.types.is_boolean(t) else None
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        return None
    if column.null_count:
        return None if name == "id" else column.fill_null("")
    return column


def _clean_column(name: str, column: Any) -> bool:
    """Whether every number and id of the column passes the exact reader's rules (checked at C speed;
    true/false texts and meta are checked as their values are made)."""
    import pyarrow.compute as pc

    if name in FLOAT_FIELDS or name == "gpus":
        if column.null_count and (name in REQUIRED_FIELDS or name == "gpus"):
            return False
        if column.null_count == len(column):
            return True
        if not pc.all(pc.is_finite(column)).as_py() or pc.min(column).as_py() < 0:
            return False
        if name == "gpu_util_pct" and pc.max(column).as_py() > 100:
            return False
        if name == "gpu_share" and (pc.max(column).as_py() > 1 or pc.min(column).as_py() <= 0):
            return False  # the exact reader names the row
        if name in PLAUSIBLE_MAX and pc.max(column).as_py() > PLAUSIBLE_MAX[name][0]:
            return False  # the exact reader names the row
        if name == "gpus":
            return pc.min(column).as_py() >= 1 and pc.all(pc.equal(column, pc.floor(column))).as_py()  # type: ignore[no-any-return]
        return True
    if name == "id":
        # no Python scalar to compare with: pyarrow would import pandas for it (about 0.4 s)
        if pc.min(pc.utf8_length(pc.utf8_trim_whitespace(column))).as_py() == 0:
            return False
        return _ascending(column) or pc.count_distinct(column).as_py() == len(column)  # type: ignore[no-any-return]
    return True


def _ascending(column: Any) -> bool:
    """Whether the strings strictly ascend by length, then bytes ("j9" < "j10"): then no two are equal,
    known without hashing them (a million ids in trace order: 3 ms against count_distinct's 0.24 s)."""
    import pyarrow.compute as pc

    if len(column) < 2:
        return True
    before, after = column.slice(0, len(column) - 1), column.slice(1)
    shorter, longer = pc.binary_length(before), pc.binary_length(after)
    later = pc.or_(pc.greater(longer, shorter), pc.and_(pc.equal(longer, shorter), pc.greater(after, before)))
    return pc.all(later).as_py() is True


def _values(name: str, column: Any, metas: dict[str, SharedMeta]) -> list[Any] | None:
    """One slice of a checked column as Python values, or None when a true/false text or a meta
    object is not valid."""
    import pyarrow as pa

    if name in FLOAT_FIELDS or name == "gpus":
        if name == "gpus":
            return _numbers(column.cast(pa.int64())).tolist()  # type: ignore[no-any-return]
        if column.null_count == 0:
            return _shared_floats(column)
        return column.to_pylist()  # type: ignore[no-any-return]
    if name == "id":
        return column.to_pylist()  # type: ignore[no-any-return]
    if name in BOOL_FIELDS and pa.types.is_boolean(column.type):
        return column.to_pylist()  # type: ignore[no-any-return]
    if name == "meta":
        shared = _shared_metas(column, metas)
        if shared is not None:
            return shared
    values = _shared_strings(column)
    if name in BOOL_FIELDS:
        lowered = [v.strip().lower() for v in values]
        if any(v not in TRUE_WORDS and v not in FALSE_WORDS for v in lowered):
            return None
        return [v in TRUE_WORDS for v in lowered]
    if name == "meta":
        return _metas(values, metas)
    return values


def _shared_floats(column: Any) -> list[float]:
    """The numbers (a float64 column without nulls) as Python floats, one object per distinct value
    when they repeat a lot (time limits, memory sizes, utilizations: 24 bytes a job each saved); -0.0
    stays apart from 0.0."""
    import numpy as np
    import pyarrow as pa

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    values = _numbers(array)
    if len(array) < 64 or np.signbit(values).any():
        return values.tolist()  # type: ignore[no-any-return]
    head = array.slice(0, 4096)
    if len(head.unique()) * 2 > len(head):
        return values.tolist()  # type: ignore[no-any-return]  # as distinct as submit times: no hashing all
    encoded = array.dictionary_encode()  # hashed, in C: no sort of the column
    if len(encoded.dictionary) * 4 > len(array):
        return values.tolist()  # type: ignore[no-any-return]
    return _objects(encoded.dictionary.to_pylist())[_numbers(encoded.indices)].tolist()  # type: ignore[no-any-return]


def _numbers(column: Any) -> Any:
    """A numeric Arrow array (or chunked array) as a numpy array: without nulls, the view of its values
    buffer that `to_numpy` gives too, but without the pandas import pyarrow's `to_numpy` makes on first
    use (about 0.4 s of reading a trace, and nothing of pandas is needed)."""
    import numpy as np
    import pyarrow as pa

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    t = array.type
    if array.null_count or not (pa.types.is_integer(t) or pa.types.is_float64(t)):
        return array.to_numpy(zero_copy_only=False)
    dtype = np.dtype(str(t))  # "double", "int32", ...: numpy's names too
    return np.frombuffer(array.buffers()[1], dtype, len(array), array.offset * dtype.itemsize)


def _objects(values: list[Any]) -> Any:
    """A numpy array of these Python objects, as they are (dicts too)."""
    import numpy as np

    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _shared_strings(column: Any) -> list[str]:
    """The column's strings, one Python object per distinct value (user, name, meta repeat a lot:
    a million rows of a few users take a few strings, not a million)."""
    import numpy as np
    import pyarrow as pa

    encoded = column.combine_chunks().dictionary_encode() if isinstance(column, pa.ChunkedArray) else column
    if not isinstance(encoded, pa.DictionaryArray) or len(encoded.dictionary) * 4 > len(encoded):
        return column.to_pylist()  # type: ignore[no-any-return]
    uniq = np.array(encoded.dictionary.to_pylist(), dtype=object)
    return uniq[_numbers(encoded.indices)].tolist()  # type: ignore[no-any-return]


def _shared_metas(column: Any, parsed: dict[str, SharedMeta]) -> list[dict[str, Any]] | None:
    """Each row's meta when the column has few distinct texts, each a flat JSON object: each text parsed
    once (`parsed` keeps them across slices) into the one `SharedMeta` its rows share, given to the rows
    by columns. None when some text is empty, nested or not an object (then `_metas` goes row by row:
    those rows get their own dicts, or the exact reader names the bad row)."""
    import pyarrow as pa

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    encoded = array.dictionary_encode()
    texts = encoded.dictionary.to_pylist()
    if len(texts) * 4 > len(array):
        return None
    objects: list[SharedMeta] = []
    for text in texts:
        shared = parsed.get(text)
        if shared is None:
            if not text.strip():
                return None
            try:
                obj = loads_object(text)
            except ValueError:
                return None
            if not isinstance(obj, dict) or any(isinstance(x, (dict, list)) for x in obj.values()):
                return None
            shared = parsed[text] = SharedMeta(obj)
        objects.append(shared)
    return _objects(objects)[_numbers(encoded.indices)].tolist()  # type: ignore[no-any-return]


def _metas(values: list[str], parsed: dict[str, SharedMeta]) -> list[dict[str, Any]] | None:
    """Each row's meta object: each distinct flat text parsed once (`parsed` keeps them across slices)
    into one read-only `SharedMeta` its rows share; an empty cell or a nested object is the row's own
    dict."""
    out: list[dict[str, Any]] = []
    for v in values:
        shared = parsed.get(v)
        if shared is not None:
            out.append(shared)
            continue
        if not v.strip():
            out.append({})
            continue
        try:
            obj = loads_object(v)
        except ValueError:
            return None
        if not isinstance(obj, dict):
            return None
        if any(isinstance(x, (dict, list)) for x in obj.values()):
            out.append(obj)  # nested: parsed per row, so no two jobs share a value
            continue
        parsed[v] = SharedMeta(obj)
        out.append(parsed[v])
    return out


def _jobs(columns: dict[str, list[Any]], n: int) -> list[Job]:
    """Jobs from clean columns, built positionally at C speed (a missing column takes the default)."""
    args: list[Any] = []
    for f in dataclasses.fields(Job):
        if f.name in columns:
            args.append(columns[f.name])
        elif f.name == "meta":
            args.append([{} for _ in range(n)])  # a fresh dict per job
        else:
            args.append(itertools.repeat(f.default, n))
    was_enabled = gc.isenabled()
    gc.disable()  # a million new objects would trigger many useless collections
    try:
        return list(map(Job, *args))
    finally:
        if was_enabled:
            gc.enable()

"""Per-job schedules in machine-readable form: inline in `--json`, or JSONL for large traces.

A row says where and when one job ran: `job_id`, `submit_s`, `start_s`, `end_s` (seconds from the first
submit) and `gpus` (labels `node/gpuK`, see `SimResult.gpu_labels`). Drivers that run jobs for real (the
local agent, Slurm) are checked against these rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from json.encoder import encode_basestring_ascii
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuplan.errors import GpuplanError
from gpuplan.sim.result import SimResult

if TYPE_CHECKING:
    from gpuplan.sim.columns import RecordColumns

__all__ = ["INLINE_MAX_ROWS", "inline_schedules", "jsonl_lines", "schedule_rows", "write_schedule_jsonl"]

INLINE_MAX_ROWS = 50_000
"""Most job rows (jobs x runs) `--json` carries inline (about 5 MB of JSON); above, use --schedule-out."""


def schedule_rows(result: SimResult) -> list[dict[str, Any]]:
    """One row per job of one run, in start order (ties by job id)."""
    labels = result.gpu_labels
    return [
        {
            "job_id": r.job_id,
            "submit_s": r.submit_s,
            "start_s": r.start_s,
            "end_s": r.end_s,
            "gpus": [labels[g] for g in r.gpus],
        }
        for r in result.records
    ]


def _run_fields(result: SimResult) -> dict[str, Any]:
    return {
        "policy": result.policy,
        "backfill": result.backfill,
        "placer": result.placer,
        "oracle": result.oracle,
    }


def inline_schedules(results: Sequence[SimResult]) -> bool:
    """Whether the runs' schedules are small enough to go inline in `--json`."""
    return sum(len(r.records) for r in results) <= INLINE_MAX_ROWS


def jsonl_lines(result: SimResult) -> Iterator[str]:
    """The run's rows as JSONL lines, streamed: the text of `json.dumps({**run fields, **row})` for
    each row of `schedule_rows` (tests/test_cli_schedule.py compares the two). The lines come from
    `_jsonl_chunks`, the text `write_schedule_jsonl` writes."""
    for chunk in _jsonl_chunks(result):
        lines = memoryview(chunk).tobytes().decode("ascii").split("\n")
        yield from (line + "\n" for line in lines[:-1])  # every line ends with one; json escapes the rest


def _jsonl_chunks(result: SimResult) -> Iterator[Any]:
    """The run's JSONL text, a slice of rows at a time, each an ASCII buffer of whole lines (json.dumps
    escapes every other character). Built by columns in Arrow (C) from the run's record columns
    (`SimResult.record_columns`): each row joins pieces encoded once (the run's fields, the text of
    each distinct GPU set) with its id's and times' texts, so a million rows cost a small share of a
    pass (Python's float repr alone took about 0.5 s a column)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    head = json.dumps(_run_fields(result))[:-1] + ', "job_id": '
    labels = [json.dumps(label) for label in result.gpu_labels]
    columns = result.record_columns()
    sets = pa.array([", ".join([labels[i] for i in g]) for g in columns.gpu_sets], pa.string())
    ids = columns.job_ids()
    for offset in range(0, len(ids), _SLICE_ROWS):
        rows = slice(offset, offset + _SLICE_ROWS)
        gpus = pc.take(sets, pa.array(columns.set_codes[rows]))
        submit, start, end = _time_texts(result, columns, rows)
        lines = pc.binary_join_element_wise(
            head, *_id_texts(ids[rows]),
            ', "submit_s": ', *submit, ', "start_s": ', *start, ', "end_s": ', *end,
            ', "gpus": [', gpus, "]}\n",
            "",
        )  # fmt: skip
        yield _text_of(lines)


_SLICE_ROWS = 1 << 16
_TIMES = (attrgetter("submit_s"), attrgetter("start_s"), attrgetter("end_s"))
_JSON_SAFE = r"^[ !#-\[\]-~]*$"  # printable ASCII but '"' and '\': json.dumps keeps such a string as it is


def _time_texts(result: SimResult, columns: RecordColumns, rows: slice) -> list[tuple[Any, Any]]:
    """The texts of the rows' submit, start and end times: from the columns when every time is a
    float, else (a time given as an int: json writes "3", not "3.0") from the records' own values."""
    if columns.exact_floats:
        return [_float_texts(c[rows]) for c in (columns.submit_s, columns.start_s, columns.end_s)]
    records = result.records[rows]
    return [_value_texts(list(map(get, records))) for get in _TIMES]


def _text_of(lines: Any) -> memoryview:
    """The bytes of an Arrow string array's values, one after the other (no nulls): its data buffer
    between its first and its last offset."""
    import numpy as np

    offsets = np.frombuffer(lines.buffers()[1], np.int32, len(lines) + 1, lines.offset * 4)
    return memoryview(lines.buffers()[2])[int(offsets[0]) : int(offsets[-1])]


def _value_texts(values: list[Any]) -> tuple[Any, Any]:
    """json.dumps' text of each value: `_float_texts` when all are floats, else each its own."""
    import numpy as np
    import pyarrow as pa

    if set(map(type, values)) <= {float}:
        return _float_texts(np.array(values, np.float64))
    return pa.array(list(map(json.dumps, values)), pa.string()), ""


def _float_texts(numbers: Any) -> tuple[Any, Any]:
    """json.dumps' text of each float of `numbers` (a float64 array), as two Arrow string arrays to
    join (a number and its suffix).

    Finite floats are cast in Arrow, whose text has the same shortest round-trip digits as Python's
    repr; repr's own form is kept where the two differ in form: ".0" after a whole number (the
    suffix), and a value repr writes with an exponent (below 1e-4 or from 1e16 on) or that Arrow
    writes with one (from about 1e10 on) is json's text of it (repr), as are inf and nan."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    finite = np.isfinite(numbers)
    whole = finite & (numbers == np.floor(numbers))  # float.is_integer
    texts = pc.cast(pa.array(numbers), pa.string())
    size = np.abs(numbers)
    odd = ~finite | (size >= 1e16) | ((size < 1e-4) & (size != 0.0))
    odd |= pc.match_substring(texts, "e").to_numpy(zero_copy_only=False)
    if odd.any():
        picked = np.flatnonzero(odd)
        repr_texts = pa.array([json.dumps(float(numbers[i])) for i in picked], pa.string())
        texts = pc.replace_with_mask(texts, pa.array(odd), repr_texts)
        whole &= ~odd
    return texts, pc.take(pa.array(["", ".0"], pa.string()), pa.array(whole.view(np.int8)))


def _id_texts(values: list[Any]) -> tuple[Any, ...]:
    """json.dumps' text of each id, as Arrow string arrays (and quotes) to join: a string of printable
    ASCII without a quote or a backslash in quotes as it is, any other id as json.dumps escapes it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if set(map(type, values)) <= {str}:
        ids = pa.array(values, pa.string())
        if pc.all(pc.match_substring_regex(ids, _JSON_SAFE)).as_py():
            return '"', ids, '"'
        return (pa.array(list(map(encode_basestring_ascii, values)), pa.string()),)
    return (pa.array(list(map(json.dumps, values)), pa.string()),)


def write_schedule_jsonl(results: Sequence[SimResult], path: Path) -> int:
    """Write every run's schedule as JSONL, one row per job per run (the run's policy, backfill, placer
    and oracle flag on each row); returns the number of rows.

    Raises:
        GpuplanError: the file cannot be written (a missing folder that cannot be made, a read-only disk).
    """
    rows = 0
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            for result in results:
                for chunk in _jsonl_chunks(result):
                    f.write(chunk)
                rows += len(result.records)
    except OSError as e:
        raise GpuplanError(
            f"{path}: cannot write the schedule ({e.strerror}); choose another --schedule-out"
        ) from e
    return rows

"""Per-job schedules in machine-readable form: inline in `--json`, or JSONL for large traces.

A row says where and when one job ran: `job_id`, `submit_s`, `start_s`, `end_s` (seconds from the first
submit) and `gpus` (labels `node/gpuK`, see `SimResult.gpu_labels`). Drivers that run jobs for real (the
local agent, Slurm) are checked against these rows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from json.encoder import encode_basestring_ascii
from operator import attrgetter
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.sim.result import SimResult

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
    each row of `schedule_rows`, built by columns from pieces encoded once (the run's fields, the GPU
    labels of each distinct allocation), a slice of rows at a time, so a million rows cost a fraction
    of a pass (tests/test_cli_schedule.py compares the two)."""
    head = json.dumps(_run_fields(result))[:-1] + ", "
    labels = [json.dumps(label) for label in result.gpu_labels]
    allocs: dict[tuple[int, ...], str] = {}
    records = result.records
    for offset in range(0, len(records), _SLICE_ROWS):
        rows = records[offset : offset + _SLICE_ROWS]
        gpus = [
            allocs.get(g) or allocs.setdefault(g, ", ".join([labels[i] for i in g])) for g in map(_GPUS, rows)
        ]
        columns = zip(
            _id_texts(list(map(_JOB_ID, rows))),
            _float_texts(list(map(_SUBMIT, rows))),
            _float_texts(list(map(_START, rows))),
            _float_texts(list(map(_END, rows))),
            gpus,
            strict=True,
        )
        yield from (
            f'{head}"job_id": {i}, "submit_s": {sub}, "start_s": {start}, "end_s": {end}, "gpus": [{g}]}}\n'
            for i, sub, start, end, g in columns
        )


_SLICE_ROWS = 1 << 16
_JOB_ID, _GPUS = attrgetter("job_id"), attrgetter("gpus")
_SUBMIT, _START, _END = attrgetter("submit_s"), attrgetter("start_s"), attrgetter("end_s")


def _float_texts(values: list[Any]) -> Iterable[str]:
    """json.dumps' text of each value: the repr of a finite float (at C speed when all are), else
    json's own (an int, inf)."""
    if set(map(type, values)) <= {float} and all(map(math.isfinite, values)):
        return map(float.__repr__, values)
    return map(json.dumps, values)


def _id_texts(values: list[Any]) -> Iterable[str]:
    """json.dumps' text of each id: its ASCII-escaped string, as json.dumps gives a str."""
    if set(map(type, values)) <= {str}:
        return map(encode_basestring_ascii, values)
    return map(json.dumps, values)


def write_schedule_jsonl(results: Sequence[SimResult], path: Path) -> int:
    """Write every run's schedule as JSONL, one row per job per run (the run's policy, backfill, placer
    and oracle flag on each row); returns the number of rows.

    Raises:
        GpuplanError: the file cannot be written (a missing folder that cannot be made, a read-only disk).
    """
    rows = 0
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as f:
            for result in results:
                f.writelines(jsonl_lines(result))
                rows += len(result.records)
    except OSError as e:
        raise GpuplanError(
            f"{path}: cannot write the schedule ({e.strerror}); choose another --schedule-out"
        ) from e
    return rows

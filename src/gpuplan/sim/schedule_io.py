"""Per-job schedules in machine-readable form: inline in `--json`, or JSONL for large traces.

A row says where and when one job ran: `job_id`, `submit_s`, `start_s`, `end_s` (seconds from the first
submit) and `gpus` (labels `node/gpuK`, see `SimResult.gpu_labels`). Drivers that run jobs for real (the
local agent, Slurm) are checked against these rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.sim.result import SimResult

__all__ = ["INLINE_MAX_ROWS", "inline_schedules", "schedule_rows", "write_schedule_jsonl"]

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
                run = _run_fields(result)
                for row in schedule_rows(result):
                    f.write(json.dumps({**run, **row}) + "\n")
                    rows += 1
    except OSError as e:
        raise GpuplanError(
            f"{path}: cannot write the schedule ({e.strerror}); choose another --schedule-out"
        ) from e
    return rows

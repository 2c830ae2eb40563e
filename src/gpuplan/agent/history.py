"""The node's history: one line per finished job attempt in `$GPUPLAN_HOME/history.jsonl`, a normal
gpuplan JSONL trace (`gpuplan audit`, `gpuplan predict fit`; docs/agent.md, "History")."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpuplan.agent.store import Store, job_phases, job_profile
from gpuplan.model import Job
from gpuplan.traces.fields import job_record

__all__ = ["HISTORY_STATE", "append_history"]

HISTORY_STATE = {"done": "COMPLETED", "failed": "FAILED", "cancelled": "CANCELLED", "timeout": "TIMEOUT",
                 "preempted": "PREEMPTED", "requeued": "REQUEUED"}  # fmt: skip
"""The store's state of an ended attempt -> its history `meta.state` (sacct's words; OUT_OF_MEMORY
when it ended with a CUDA out-of-memory error)."""


def append_history(store: Store, path: Path, jid: int) -> None:
    """One line per finished attempt in history.jsonl (a gpuplan trace); written once."""
    row = store.job(jid)
    assert row is not None
    key = f"history:{jid}.{row.attempt}"
    if store.get_meta(key):
        return
    prof = job_profile(store.conn, jid, row.attempt)
    wall = (row.end_s - row.start_s) if row.start_s is not None and row.end_s is not None else None
    # the run time, not the wall time: suspended seconds are no run time for audit or predict
    duration = None if wall is None else (row.run_s if row.preemptions else wall)
    startup_s, init_s = (
        job_phases(store.conn, jid, row.attempt, row.start_s, duration)
        if row.start_s is not None and duration is not None
        else (None, None)
    )
    meta = {
        "state": "OUT_OF_MEMORY" if row.oom else HISTORY_STATE.get(row.state, row.state.upper()),
        "exit_code": row.exit_code,
        "attempt": row.attempt,
        "agent_job_id": jid,
        "gpu_ids": list(row.gpu_list),
        "declared_mem_gb": row.declared_mem_gb,
        "booked_mem_gb": row.mem_gb,
        "peak_mem_gb_per_gpu": {str(g): v for g, v in sorted(prof.peak_mem_gb.items())},
        "samples": prof.samples,
    }
    if row.preemptions:
        meta.update({"wall_s": wall, "suspended_s": row.suspended_s, "preemptions": row.preemptions,
                     "preempt": row.preempt, "attained_gpu_s": row.service_gpu_s})  # fmt: skip
    job = Job(
        id=str(jid) if row.attempt == 1 else f"{jid}.{row.attempt}",
        submit_s=row.submit_s,
        gpus=row.gpus,
        mem_gb=prof.max_peak_mem_gb,
        duration_s=duration if row.start_s is not None else None,
        requested_s=row.time_limit_s,
        user=row.user,
        name=row.name,
        gpu_util_pct=prof.mean_util_pct,
        command=row.command,
        startup_s=startup_s,
        init_s=init_s,
        meta=meta,
    )
    line = json.dumps(job_record(job), ensure_ascii=False, allow_nan=False) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # it names commands
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(line)  # flushed at close: survives the agent's crash (the store keeps the rest)
    store.set_meta(key, "1")

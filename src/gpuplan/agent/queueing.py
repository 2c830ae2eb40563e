"""How a job enters the agent's Scheduler queue, from its store row (which owns the job).

`JobQueue.queue_job` is the one way in (a submit, a release, a dependency met, a plan's rank, a
requeue, a preemption, recovery after a crash): it keeps the GPU-service the job attained, its
preemptions and when it started waiting. `requeue_job` makes a job wait again as its next attempt;
`release_dependents` queues the jobs whose dependency ended, and fails those whose dependency never
will.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from gpuplan.agent.store import FINAL_STATES, JobRow, Store
from gpuplan.model import Job

if TYPE_CHECKING:
    from gpuplan.agent.engine import Engine

__all__ = ["JobQueue", "core_job"]


def core_job(row: JobRow) -> Job:
    """The store row as the Scheduler's Job (its id is the store id)."""
    return Job(
        id=str(row.id),
        submit_s=row.submit_s,
        gpus=row.gpus,
        mem_gb=row.mem_gb,
        est_duration_s=row.est_duration_s,
        requested_s=row.time_limit_s,
        user=row.user,
        name=row.name,
        command=row.command,
        meta={"preempt": row.preempt},
    )


class JobQueue:
    """The store's jobs in and out of the Engine's queue."""

    def __init__(self, store: Store, engine: Engine) -> None:
        self.store = store
        self.engine = engine

    def queue_job(self, row: JobRow, now: float) -> None:
        """The one way a job (re)enters the Scheduler's queue (submit, release, a dependency met, a plan's
        rank, a requeue, a preemption, recovery): from its store row, which owns it, with the GPU-service
        it attained, its preemptions and the instant it started waiting; a suspended job waits on its
        own GPUs again."""
        job, since = core_job(row), row.stopped_at_s or row.submit_s
        if row.state == "suspended":
            self.engine.submit_suspended(row.id, job, row.gpu_list, since)
        else:
            self.engine.submit(row.id, job, now=since)
        self.engine.restore_progress(
            row.id, row.service_gpu_s, row.run_since_promotion_s, row.preemptions, now
        )

    def requeue_job(self, row: JobRow, mem_gb: float | None, reason: str, now: float) -> None:
        """The job waits again as attempt + 1, with the GPU-service it attained (preemptive policies)."""
        self.store.update_job(
            row.id, state="queued", attempt=row.attempt + 1, mem_gb=mem_gb, start_s=None, end_s=None,
            gpu_ids="", pid=None, pgid=None, exit_code=None, reason=reason, seg_start_s=None, run_s=0.0,
            suspended_s=0.0,
        )  # fmt: skip
        new = self.store.job(row.id)
        assert new is not None
        if self.deps_ok(new) is True:
            self.queue_job(new, now)

    def deps_ok(self, row: JobRow) -> bool | str:
        """True when the job may queue, False while its dependency runs, a reason when it never will."""
        if row.after_id is None:
            return True
        dep = self.store.job(row.after_id)
        if dep is None:
            return f"dependency {row.after_id} does not exist"
        if dep.state == "done":
            return True
        if dep.state in FINAL_STATES:
            return f"dependency {row.after_id} ended {dep.state}"
        return False

    def release_dependents(self, now: float) -> None:
        """Queue the waiting jobs whose dependency is done; fail those whose dependency never will be."""
        for row in self.store.conn.execute(
            "SELECT id FROM jobs WHERE state = 'queued' AND after_id IS NOT NULL"
        ).fetchall():
            jid = row[0]
            if self.engine.is_waiting(jid):
                continue
            job = self.store.job(jid)
            assert job is not None
            ok = self.deps_ok(job)
            if ok is True:
                self.queue_job(job, now)
            elif isinstance(ok, str):
                self.store.update_job(jid, state="failed", end_s=now, reason=ok)
                self.store.forget_env(jid)

    def estimate_s(self, name: str, command: str) -> float | None:
        """Median wall time of the last 20 completed runs with this name (else this command)."""
        for column, value in (("name", name), ("command", command)):
            if not value:
                continue
            rows = self.store.conn.execute(
                f"SELECT end_s - start_s FROM jobs WHERE state = 'done' AND {column} = ? "
                "AND start_s IS NOT NULL AND end_s IS NOT NULL ORDER BY id DESC LIMIT 20",
                (value,),
            ).fetchall()
            if rows:
                return float(statistics.median(r[0] for r in rows))
        return None

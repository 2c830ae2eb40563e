"""Recovery when an agent starts (after a stop or a crash): the store says what should be, the job
markers in /proc say what still runs (docs/agent.md, "Restarts").

Running and suspended jobs whose processes live are re-adopted (a suspended one is stopped again and
waits in place; one the old agent was stopping is killed at once); those that ended while the agent
was down are closed with the status their wrapper wrote; one marked running but never launched is
queued again (no job ever runs twice); attempts that ended preempted or requeued just before the crash
are queued again; the waiting jobs are queued, and finished attempts whose history line a crash may
have skipped get it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpuplan.agent import launcher
from gpuplan.agent.attempts import Attempts, Run
from gpuplan.agent.history import append_history
from gpuplan.agent.paths import AgentPaths
from gpuplan.agent.queueing import JobQueue, core_job
from gpuplan.agent.store import FINAL_STATES, JobRow, Store, job_profile

if TYPE_CHECKING:
    from gpuplan.agent.engine import Engine

__all__ = ["Recovery"]

log = logging.getLogger("gpuplan.agent")


class Recovery:
    """One agent's start-up: re-adopt, close, requeue and queue what the store holds."""

    def __init__(
        self,
        paths: AgentPaths,
        store: Store,
        engine: Engine,
        attempts: Attempts,
        queue: JobQueue,
        clock: Callable[[], float],
    ) -> None:
        self.paths = paths
        self.store = store
        self.engine = engine
        self.attempts = attempts
        self.queue = queue
        self.clock = clock

    def recover(self, priority: dict[int, int], rank: dict[int, int]) -> None:
        """Re-adopt running jobs whose processes live, close those that ended while the agent was down,
        requeue those it marked running but never launched, queue the waiting ones (with their
        `priority` and plan `rank`, kept in the two maps the agent's policy reads)."""
        now = self.clock()
        runs = self.attempts.runs
        live = self.attempts.live_jobs()
        for row in self.store.jobs(["running", "suspended"]):
            pids = live.get((row.id, row.attempt))
            if pids:
                self._adopt(row, pids)
            elif row.state == "suspended":
                run = Run(row.id, row.attempt, row.pid, row.pgid, row.gpu_list, row.start_s or now,
                          row.time_limit_s, run_before_s=row.run_s, suspended=True)  # fmt: skip
                run.exit_code = launcher.read_status_file(self.paths.job_dir(row.id))
                runs[row.id] = run
                self.attempts.finalize(run, now, vanished=True)
            elif row.pid is None:
                self.store.update_job(row.id, state="queued", start_s=None, gpu_ids="", reason="")
                log.info("job %d was never launched; queued again", row.id)
            else:
                code = launcher.read_status_file(self.paths.job_dir(row.id))
                run = Run(
                    row.id, row.attempt, row.pid, row.pgid, row.gpu_list, row.start_s or now, row.time_limit_s
                )
                run.exit_code = code
                run.seg_start_s, run.run_before_s = row.seg_start_s or run.start_s, row.run_s
                runs[row.id] = run
                self.engine.seed_running(row.id, core_job(row), row.gpu_list, run.start_s)
                end = launcher.ended_s(self.paths.job_dir(row.id))
                self.attempts.finalize(
                    run, now if end is None else max(run.seg_start_s, min(now, end)), vanished=True
                )
        for row in self.store.jobs(
            ["preempted", "requeued"]
        ):  # died between an attempt's end and its requeue
            append_history(self.store, self.paths.history, row.id)
            self.queue.requeue_job(row, row.mem_gb, f"{row.state}; requeued", now)
        for row in self.store.jobs(["queued", "held"]):
            priority[row.id] = row.priority
            if row.plan_rank is not None:
                rank[row.id] = row.plan_rank
            if row.state == "queued" and self.queue.deps_ok(row) is True:
                self.queue.queue_job(row, now)
        self.write_pending_history()

    def _adopt(self, row: JobRow, pids: set[int]) -> None:
        pgid = row.pgid
        if pgid is None:
            with contextlib.suppress(OSError):
                pgid = os.getpgid(min(pids))
        run = Run(
            row.id,
            row.attempt,
            row.pid or min(pids),
            pgid,
            row.gpu_list,
            row.start_s or self.clock(),
            row.time_limit_s,
            own=False,  # another agent process started it: not our child, waitpid cannot see it
        )
        now = self.clock()
        run.seg_start_s, run.run_before_s = row.seg_start_s or run.start_s, row.run_s
        if row.reason.startswith("stopping:"):
            run.stop_state = row.reason.removeprefix("stopping:")
            run.kill_at_s = now
        self.attempts.runs[row.id] = run
        self.store.update_job(row.id, pid=run.pid, pgid=pgid)
        job = core_job(row)
        log.info("re-adopted %s job %d (pgid %s) on GPUs %s", row.state, row.id, pgid, row.gpu_ids)
        run.suspended = row.state == "suspended"
        if run.stop_state and (run.suspended or run.stop_state == "preempt"):
            return  # already out of the Scheduler, dying: its GPUs wait for its processes (blocked)
        if run.suspended:
            # stop it again (the agent may have died between the store and the signal); the Scheduler
            # resumes it in place, or keeps it suspended, in its next pass
            if pgid is not None:
                launcher.signal_group(pgid, signal.SIGSTOP)
            peak = job_profile(self.store.conn, row.id, row.attempt).max_peak_mem_gb
            book = None if row.mem_gb is None else max(row.mem_gb, peak or 0.0)  # as observe_mem did
            self.engine.submit_suspended(row.id, job, row.gpu_list, row.stopped_at_s or now, book)
        else:
            if row.preemptions and pgid is not None and not run.stop_state:
                launcher.signal_group(pgid, signal.SIGCONT)  # died between "running" and SIGCONT
            self.engine.seed_running(row.id, job, row.gpu_list, run.seg_start_s)
        self.engine.restore_progress(
            row.id, row.service_gpu_s, row.run_since_promotion_s, row.preemptions, now
        )

    def write_pending_history(self) -> None:
        """Finished attempts whose history line a crash may have skipped (the meta key says which)."""
        for row in self.store.jobs(list(FINAL_STATES)):
            append_history(self.store, self.paths.history, row.id)

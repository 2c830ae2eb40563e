"""Carrying out a preemptive policy's decisions on live processes (docs/agent.md, "Preemption").

`suspend` SIGSTOPs a job's group in place (it keeps its GPU memory; the Scheduler still books it
there) and SIGCONT resumes it; `checkpoint` and `requeue` stop it as a cancel does (SIGTERM, grace,
SIGKILL) and queue it again once its processes are gone (agent/attempts.py). A start or resume on GPUs
that a stopped job's processes still hold waits (`Run.pending`) until they are gone.
"""

from __future__ import annotations

import json
import logging
import signal
from typing import TYPE_CHECKING

from gpuplan.agent import launcher
from gpuplan.agent.attempts import Attempts, Run
from gpuplan.agent.queueing import JobQueue
from gpuplan.agent.store import Store

if TYPE_CHECKING:
    from gpuplan.agent.engine import Engine

__all__ = ["Preemptions"]

log = logging.getLogger("gpuplan.agent")


class Preemptions:
    """Suspend, stop and resume the attempts a preemptive pass decided on."""

    def __init__(self, store: Store, engine: Engine, attempts: Attempts, queue: JobQueue) -> None:
        self.store = store
        self.engine = engine
        self.attempts = attempts
        self.queue = queue

    def preempt(self, jid: int, action: str, now: float) -> None:
        """Carry out the Scheduler's preemption of `jid` by `action` (suspend, checkpoint, requeue)."""
        run = self.attempts.runs[jid]
        if run.stop_state:  # already on its way out (cancel, time limit, a re-adopted preemption)
            self.engine.withdraw(jid)  # its GPUs wait for its processes (Attempts.blocked)
            return
        slot = self.engine.sched.slot(jid)
        progress = {"service_gpu_s": slot.service_gpu_s, "run_since_promotion_s": slot.run_since_promotion_s,
                    "preemptions": slot.preemptions, "stopped_at_s": now, "run_s": run.run_time_s(now)}  # fmt: skip
        self.store.log_event(now, -1, f"preempt:{action}", jid, json.dumps({"gpus": list(run.gpus)}))
        if run.pid is None:  # decided earlier, its launch still waiting: nothing runs yet
            self.engine.withdraw(jid)
            self.attempts.runs.pop(jid)
            self.store.update_job(jid, state="queued", start_s=None, seg_start_s=None, gpu_ids="", **progress)
            row = self.store.job(jid)
            assert row is not None
            self.queue.queue_job(row, now)
            return
        run.pending = False
        if action == "suspend":
            self.store.update_job(jid, state="suspended", seg_start_s=None, **progress)
            run.run_before_s, run.suspended = progress["run_s"], True
            if run.pgid is not None:
                launcher.signal_group(run.pgid, signal.SIGSTOP)
            log.info("job %d suspended in place on GPUs %s", jid, run.gpus)
            return
        self.engine.withdraw(jid)  # back in the queue once its processes are gone (Attempts.finalize)
        self.store.update_job(jid, **progress)
        run.run_before_s = progress["run_s"]
        self.attempts.stop_run(run, "preempt", now)
        log.info("job %d preempted (%s): stopping it", jid, action)

    def resume(self, run: Run, now: float) -> None:
        """SIGCONT a suspended job (after its GPUs are free of a preempted job's processes)."""
        if self.attempts.blocked(run.jid, run.gpus):
            run.pending = True
            return
        row = self.store.job(run.jid)
        assert row is not None
        stopped = now - (row.stopped_at_s if row.stopped_at_s is not None else now)
        self.store.update_job(run.jid, state="running", seg_start_s=now, suspended_s=row.suspended_s + stopped,
                              reason="")  # fmt: skip
        self.store.log_event(now, -1, "resume", run.jid, json.dumps({"gpus": list(run.gpus)}))
        run.suspended, run.pending, run.seg_start_s = False, False, now
        if run.pgid is not None:
            launcher.signal_group(run.pgid, signal.SIGCONT)

    def carry_out_pending(self, now: float) -> None:
        """Starts and resumes that waited for a preempted job's processes to leave their GPUs."""
        for run in [r for r in self.attempts.runs.values() if r.pending]:
            if self.attempts.blocked(run.jid, run.gpus):
                continue
            if run.suspended:
                self.resume(run, now)
            else:
                run.pending = False
                self.attempts.spawn(run, now)

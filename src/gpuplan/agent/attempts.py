"""The agent's running attempts: launch what the Scheduler starts, reap and watch the processes,
enforce time limits, stop a job (cancel, timeout, requeue, preemption by kill), and close an attempt
when its processes are gone (its final state, its history line, an OOM retry or a requeue).

Processes are started and signalled only through agent/launcher.py. `Attempts.runs` (job id -> `Run`)
is the agent's table of live attempts; agent/preempting.py, agent/recovery.py and agent/sampling.py
work on the same table.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuplan.agent import launcher
from gpuplan.agent.history import append_history
from gpuplan.agent.outcome import end_reason, final_state
from gpuplan.agent.paths import AgentPaths
from gpuplan.agent.queueing import JobQueue
from gpuplan.agent.store import JobRow, Store, job_profile

if TYPE_CHECKING:
    from gpuplan.agent.config import AgentConfig
    from gpuplan.agent.engine import Engine
    from gpuplan.agent.gpus import GpuBackend

__all__ = ["LIVENESS_S", "Attempts", "Run"]

log = logging.getLogger("gpuplan.agent")

LIVENESS_S = 0.25


@dataclass(slots=True)
class Run:
    """A running job as the loop tracks it."""

    jid: int
    attempt: int
    pid: int | None
    pgid: int | None
    gpus: tuple[int, ...]
    start_s: float
    time_limit_s: float | None
    exit_code: int | None = None
    stop_state: str = ""  # cancelled, timeout, requeue: why the agent stopped it
    kill_at_s: float | None = None
    peak_gb: dict[int, float] = field(default_factory=dict)
    own: bool = True  # launched by this process (its leader is our child: waitpid works)
    leader_done: bool = False
    seg_start_s: float = 0.0  # start of the current run segment (launch or last resume)
    run_before_s: float = 0.0  # seconds this attempt ran in earlier segments
    suspended: bool = False  # SIGSTOPped in place by a preemptive policy
    pending: bool = (
        False  # started or resumed by the scheduler, waiting for a preempted job to leave its GPUs
    )

    def run_time_s(self, now: float) -> float:
        """Seconds this attempt has run (suspended time excluded)."""
        if self.suspended or self.pid is None:
            return self.run_before_s
        return self.run_before_s + max(now - self.seg_start_s, 0.0)


class Attempts:
    """Launching, watching and closing the agent's attempts (one loop owns it)."""

    def __init__(
        self,
        config: AgentConfig,
        paths: AgentPaths,
        store: Store,
        engine: Engine,
        backend: GpuBackend,
        queue: JobQueue,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.paths = paths
        self.store = store
        self.engine = engine
        self.backend = backend
        self.queue = queue
        self.clock = clock
        self.runs: dict[int, Run] = {}
        self.reaped: dict[int, int] = {}
        self._next_live_s = 0.0

    # -- whose processes these are ----------------------------------------------------------------
    def live_jobs(self) -> dict[tuple[int, int], set[int]]:
        """Live processes of this agent's jobs; a multi-user agent's run as their submitters."""
        if not self.config.multi_user:
            return launcher.live_jobs(self.paths.home)
        rows = self.store.jobs(["running", "suspended"])
        return launcher.live_jobs(self.paths.home, owners={r.id: r.uid for r in rows})

    def run_as(self, row: JobRow) -> launcher.RunAs | None:
        """Who the job runs as: its submitter on a multi-user agent (None: the agent's own user).

        Raises:
            OSError: the submitter is unknown (a job is never started as root unless root submitted it).
        """
        if not self.config.multi_user:
            return None
        try:
            return launcher.RunAs.of_uid(row.uid)
        except KeyError:
            raise PermissionError(f"its submitter (uid {row.uid}) has no account on this node") from None

    def blocked(self, jid: int, gpus: tuple[int, ...]) -> bool:
        """Whether a job that left the Scheduler (preempted by kill, or cancelled while suspended)
        still has processes on `gpus`: a start or resume there waits until they are gone."""
        return any(
            r.jid != jid and r.stop_state and r.pid is not None and not self.engine.is_running(r.jid)
            and not set(r.gpus).isdisjoint(gpus)
            for r in self.runs.values()
        )  # fmt: skip

    # -- each round --------------------------------------------------------------------------------
    def reap(self) -> None:
        """Collect the exit status of job leaders that are this process's children (waitpid per pid,
        never -1: an embedding process keeps its other children's statuses)."""
        for run in self.runs.values():
            if run.pid is None or run.pid in self.reaped or run.exit_code is not None:
                continue
            try:
                pid, status = os.waitpid(run.pid, os.WNOHANG)
            except ChildProcessError:  # not our child (adopted): watched through its group instead
                run.own = False
                continue
            if pid:
                self.reaped[pid] = launcher.exit_code_from_status(status)

    def watch(self, now: float) -> None:
        """Close jobs whose processes are all gone; stop the remnants of a group whose leader exited.

        Cheap checks first: a leader that is this process's child and still running means the job
        runs; otherwise `killpg(pgid, 0)` failing means the whole group is gone. Only when a group
        still answers (leftovers, an adopted job, or zombies that a non-reaping init keeps) does one
        /proc pass (`live_jobs`, at most every 0.25 s) decide by the job markers.
        """
        gone: list[Run] = []
        unsure: list[Run] = []
        for run in self.runs.values():
            if run.pid is not None and run.pid in self.reaped:
                run.exit_code = self.reaped.pop(run.pid)
                run.leader_done = True
            if run.pid is None or (run.own and not run.leader_done):
                continue
            if run.pgid is None or not launcher.signal_group(run.pgid, 0):
                gone.append(run)
            else:
                unsure.append(run)
        if unsure and now >= self._next_live_s:
            live = self.live_jobs()
            self._next_live_s = now + LIVENESS_S
            for run in unsure:
                pids = live.get((run.jid, run.attempt), set())
                if not pids or all(launcher.is_zombie(pid) for pid in pids):
                    gone.append(run)
                elif run.own and run.kill_at_s is None:  # leftovers of a job whose main process ended
                    launcher.signal_group(run.pgid or run.pid or 0, signal.SIGTERM)
                    run.kill_at_s = now + self.config.grace_s
        for run in gone:
            if run.exit_code is None:
                run.exit_code = launcher.read_status_file(self.paths.job_dir(run.jid))
            self.finalize(run, now)

    def timers(self, now: float) -> None:
        """SIGKILL groups whose grace period is over; stop attempts that reached their time limit."""
        for run in list(self.runs.values()):
            if run.kill_at_s is not None and now >= run.kill_at_s and run.pgid is not None:
                launcher.signal_group(run.pgid, signal.SIGKILL)
            elif (  # suspended time does not count against the limit (as in Slurm)
                run.time_limit_s is not None and not run.stop_state and run.pid is not None
                and run.run_time_s(now) >= run.time_limit_s
            ):  # fmt: skip
                self.stop_run(run, "timeout", now)

    def stop_run(self, run: Run, why: str, now: float) -> None:
        """SIGTERM to the whole group now (then SIGCONT: a suspended group gets it too), SIGKILL after
        the grace period. A suspended job leaves the Scheduler at once; a job whose launch waits
        ends at once."""
        run.stop_state = why
        if run.pid is None:  # decided but never launched
            self.finalize(run, now, reason=f"{why} before it started")
            return
        if run.suspended and self.engine.is_waiting(run.jid):
            self.engine.withdraw(run.jid)  # its GPUs go to others once its processes are gone
        run.kill_at_s = now + self.config.grace_s
        self.store.update_job(run.jid, reason=f"stopping:{why}")
        if run.pgid is not None:
            launcher.signal_group(run.pgid, signal.SIGTERM)
            launcher.signal_group(run.pgid, signal.SIGCONT)

    # -- starting ----------------------------------------------------------------------------------
    def launch(self, jid: int, gpus: tuple[int, ...], now: float) -> None:
        """Start a job the Scheduler started on `gpus` (once a preempted job's processes left them)."""
        row = self.store.job(jid)
        assert row is not None
        # Commit "running" before the process exists: a crash in between finds no process and
        # queues the job again, so no job ever runs twice.
        self.store.update_job(
            jid,
            state="running",
            start_s=now,
            seg_start_s=now,
            gpu_ids=",".join(map(str, gpus)),
            pid=None,
            pgid=None,
            reason="",
        )
        run = Run(jid, row.attempt, None, None, gpus, now, row.time_limit_s, seg_start_s=now)
        self.runs[jid] = run
        if self.blocked(jid, gpus):
            run.pending = True
            return
        self.spawn(run, now)

    def spawn(self, run: Run, now: float) -> None:
        """Start the job's processes (its row already says running)."""
        jid, gpus = run.jid, run.gpus
        row = self.store.job(jid)
        assert row is not None
        if run.start_s != now:  # its launch waited for GPUs to empty: it starts now
            run.start_s = run.seg_start_s = now
            self.store.update_job(jid, start_s=now, seg_start_s=now)
        self.store.log_event(now, -1, "start", jid, json.dumps({"gpus": list(gpus), "attempt": row.attempt}))
        env = launcher.job_environment(
            row.env, self.paths.home, jid, row.attempt, gpus, self.backend.job_env(row.mem_gb or 0.0)
        )
        try:
            started = launcher.launch(row.command, row.cwd, env, self.paths.job_dir(jid),
                                      time_limit_s=row.time_limit_s, grace_s=self.config.grace_s,
                                      run_as=self.run_as(row))  # fmt: skip
        except OSError as e:
            log.warning("job %d failed to start: %s", jid, e)
            run.exit_code = 127
            self.finalize(run, now, reason=f"failed to start: {e}")
            return
        run.pid, run.pgid = started.pid, started.pgid
        self.store.update_job(jid, pid=started.pid, pgid=started.pgid)
        if not self._env_needed_again(row):
            self.store.forget_env(jid)

    def _env_needed_again(self, row: JobRow) -> bool:
        """Whether a later attempt may start on its own (an OOM retry, a checkpoint or requeue
        preemption): then the submitter's environment stays stored until the job ends."""
        may_preempt = self.engine.preemptive and row.preempt in ("checkpoint", "requeue")
        return row.attempt <= self.config.oom_retries or may_preempt

    # -- ending ------------------------------------------------------------------------------------
    def finalize(self, run: Run, now: float, vanished: bool = False, reason: str = "") -> None:
        """The job's processes are gone: record its end, its profile and its history line."""
        self.runs.pop(run.jid, None)
        if self.engine.is_running(run.jid):
            completed = run.exit_code == 0 and not run.stop_state
            self.engine.finish(run.jid, now, completed=completed)
        elif self.engine.is_waiting(run.jid):  # suspended, and its processes died
            self.engine.withdraw(run.jid)
        row = self.store.job(run.jid)
        assert row is not None
        job_dir = self.paths.job_dir(run.jid)
        oom = run.exit_code not in (None, 0) and launcher.is_oom(job_dir) and run.stop_state != "preempt"
        state = final_state(run.stop_state, run.exit_code, job_dir)
        if not reason:
            reason = end_reason(run.stop_state, run.exit_code, state, vanished, oom)
        run_s = row.run_s if run.stop_state == "preempt" else run.run_time_s(now)
        suspended_s = row.suspended_s + (now - (row.stopped_at_s or now) if run.suspended else 0.0)
        self.store.update_job(run.jid, state=state, end_s=now, exit_code=run.exit_code, oom=int(oom),
                              reason=reason, run_s=run_s, suspended_s=suspended_s)  # fmt: skip
        append_history(self.store, self.paths.history, run.jid)
        if state == "failed" and oom:
            self._maybe_requeue_oom(row, run)
        elif run.stop_state == "requeue":  # the GPU-time of its last run segment counts as attained
            seg_s = 0.0 if run.suspended or run.pid is None else max(now - run.seg_start_s, 0.0)
            attained = {"service_gpu_s": row.service_gpu_s + row.gpus * seg_s,
                        "run_since_promotion_s": row.run_since_promotion_s + seg_s}  # fmt: skip
            self.store.update_job(row.id, **attained)
            requeued = self.store.job(row.id)
            assert requeued is not None
            self.queue.requeue_job(requeued, row.mem_gb, "requeued by request", now)
        elif run.stop_state == "preempt":
            self.queue.requeue_job(row, row.mem_gb, f"preempted ({row.preempt}); requeued", now)
        else:
            self.store.forget_env(run.jid)  # the job ended for good: its environment goes

    def _maybe_requeue_oom(self, row: JobRow, run: Run) -> None:
        if row.attempt > self.config.oom_retries:
            self.store.update_job(
                row.id, reason=f"CUDA out of memory (attempt {row.attempt}; not retried again)"
            )
            return
        prof = job_profile(self.store.conn, row.id, row.attempt)
        seen = max([row.mem_gb or 0.0, prof.max_peak_mem_gb or 0.0, *run.peak_gb.values()])
        new_mem = round(seen * self.config.oom_factor + 0.49, 0) if seen > 0 else None
        why = self.engine.never_fits(row.gpus, new_mem)
        if why is not None:
            self.store.update_job(row.id, reason=f"CUDA out of memory; raised memory {why}: not retried")
            return
        self.queue.requeue_job(
            row, new_mem, f"CUDA out of memory at {seen:g} GB; requeued with {new_mem} GB", self.clock()
        )

"""The agent: one loop that serves the socket, launches what the Scheduler starts, watches the jobs,
samples the GPUs and records every job's profile (docs/agent.md).

`Agent.step(now)` does one round with an injected clock (tests drive it directly);
`gpuplan.agent.server` runs it on the wall clock, woken by requests, child exits and timers. The agent's own errors are logged and
never kill a job: jobs live in their own sessions and are re-adopted after a restart.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan.agent import launcher
from gpuplan.agent.engine import AgentPolicy, Engine, node_spec
from gpuplan.agent.gpus import GpuBackend, ProcReading, Snapshot, open_backend
from gpuplan.agent.history import append_history
from gpuplan.agent.outcome import end_reason, final_state
from gpuplan.agent.outlook import ForecastCache
from gpuplan.agent.paths import AgentPaths
from gpuplan.agent.store import FINAL_STATES, JobRow, Store, job_profile
from gpuplan.core.policies import Policy
from gpuplan.core.quotas import Quotas
from gpuplan.model import ClusterSpec, Job

__all__ = ["LIVENESS_S", "Agent", "AgentConfig"]

log = logging.getLogger("gpuplan.agent")

LIVENESS_S = 0.25
_USAGE_KEY = "fairshare_usage"  # store meta: {"t_s": when, "usage": {user: decayed GPU-s of ended runs}}


@dataclass(slots=True)
class AgentConfig:
    """How an agent runs (the `gpuplan agent start` options)."""

    home: Path
    gpus: str = "nvml"
    policy: str = "fifo"
    backfill: str = "easy"
    placer: str = "first-fit"
    sharing: bool = False
    max_jobs_per_gpu: int = 4
    sample_interval_s: float = 1.0
    retention_s: float = 30 * 86400.0  # finished jobs: rows, logs, jobs/ID/ (`--retention`)
    sample_retention_s: float = 7 * 86400.0  # GPU and job samples (`--sample-retention`)
    grace_s: float = 10.0
    oom_retries: int = 1
    oom_factor: float = 1.25
    predict: list[str] = field(default_factory=list)
    quantum_gpu_s: float | None = None  # preemptive policies: first level boundary (None: the policy's own)
    max_gpus_per_user: int | None = None
    max_jobs_per_user: int | None = None
    quotas_file: str | None = (
        None  # per-user quotas (agent/quotafile.py), reloaded on SIGHUP / `agent reload`
    )
    multi_user: bool = False  # root agent: every local user submits; each job runs as its submitter
    admin_group: str | None = None  # multi-user: members may steer every user's job (as root)
    run_dir: str | None = None  # where the socket lives when not in the home (/run/gpuplan)

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__slots__}
        out["home"] = str(self.home)
        return out


def _policy(config: AgentConfig) -> Policy | str:
    """The configured policy: by name, or a preemptive one with its own first level boundary."""
    if config.quantum_gpu_s is None:
        return config.policy
    from gpuplan.core.policies import preemptive_policy

    return preemptive_policy(config.policy, config.quantum_gpu_s)


@dataclass(slots=True)
class _Run:
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


class Agent:
    """The agent's state and its request handlers. Not thread-safe: one loop owns it."""

    def __init__(
        self,
        config: AgentConfig,
        clock: Callable[[], float] = time.time,
        backend: GpuBackend | None = None,
        policy: Policy | None = None,
    ) -> None:
        """`policy`: a policy object to use instead of `config.policy`'s default one (an embedding
        program's own parameters, e.g. `Las(quantum_gpu_s=60)`)."""
        self.config = config
        self.clock = clock
        self.paths = AgentPaths(config.home, None if config.run_dir is None else Path(config.run_dir))
        self.paths.create(shared=config.multi_user)
        self.store = Store(self.paths.db)
        self.backend = backend or open_backend(config.gpus, set_id=str(self.paths.home))
        self.devices = self.backend.devices()
        spec = node_spec(self.devices, config.sharing, config.max_jobs_per_gpu)
        self.priority: dict[int, int] = {}
        self.rank: dict[int, int] = {}
        self.engine = Engine(
            spec,
            AgentPolicy(policy or _policy(config), self.priority, self.rank),
            config.backfill,
            config.placer,
            self.load_quotas(),
        )
        self._write_node_toml(spec)
        self.runs: dict[int, _Run] = {}
        self.reaped: dict[int, int] = {}
        self.stopping = False
        self.reload_requested = False  # SIGHUP: read the quota file again at the next round
        self.kill_jobs_on_stop = False
        self._next_sample_s = 0.0
        self._next_prune_s = 0.0
        self._next_live_s = 0.0
        self._foreign_peak: dict[int, float] = {}
        self.external: list[ProcReading] = []  # GPU processes the agent did not start, as last sampled
        self.predictors = list(config.predict)
        self.forecasts = ForecastCache()  # `queue` and `show` after no change reuse the last forecast
        self._restore_usage()
        self.recover()

    def _write_node_toml(self, spec: ClusterSpec) -> None:
        """node.toml: this node as a cluster file, for `gpuplan audit history.jsonl --cluster node.toml`."""
        node = spec.nodes[0]
        text = (
            f'name = "{spec.name}"\nsharing = {str(spec.sharing).lower()}\nmax_jobs_per_gpu = {spec.max_jobs_per_gpu}\n\n'
            f'[[nodes]]\nname = "{node.name}"\ngpus = {node.gpus}\ngpu_model = "{node.gpu.model}"\n'
            f"gpu_mem_gb = {node.gpu.mem_gb:g}\n"
        )
        self.paths.node_toml.write_text(text, encoding="utf-8")

    # -- users: quotas, fair-share usage -------------------------------------------------------------
    def load_quotas(self) -> Quotas | None:
        """The configured quotas: --quotas FILE over --max-gpus-per-user / --max-jobs-per-user.

        Raises:
            GpuplanError: the quota file is unreadable or wrong (the message says where).
        """
        c = self.config
        if c.quotas_file:
            from gpuplan.agent.quotafile import load_quotas

            return load_quotas(Path(c.quotas_file), c.max_gpus_per_user, c.max_jobs_per_user)
        if c.max_gpus_per_user is None and c.max_jobs_per_user is None:
            return None
        return Quotas(c.max_gpus_per_user, c.max_jobs_per_user)

    def reload_quotas(self) -> Quotas | None:
        """Read the quotas again (SIGHUP, `gpuplan agent reload`); a bad file keeps the old ones.

        Raises:
            GpuplanError: the quota file is unreadable or wrong (nothing changed).
        """
        quotas = self.load_quotas()
        self.engine.set_quotas(quotas)
        log.info("quotas reloaded: %s", quotas)
        return quotas

    def _restore_usage(self) -> None:
        """Fairshare: the users' decayed usage of ended runs, as saved before a restart."""
        raw = self.store.get_meta(_USAGE_KEY)
        if raw is None or not self.engine.policy.usage_ranked:
            return
        try:
            saved = json.loads(raw)
            self.engine.restore_usage(
                {str(u): float(v) for u, v in saved["usage"].items()}, float(saved["t_s"])
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("fair-share usage in the store is unreadable (%s): starting from none", e)

    def save_usage(self, now: float) -> None:
        """Fairshare: keep the users' usage of ended runs in the store (it survives restarts)."""
        if self.engine.policy.usage_ranked and self.engine.usage_changed:
            usage = self.engine.charged_usage(now)
            self.store.set_meta(_USAGE_KEY, json.dumps({"t_s": now, "usage": usage}))

    # -- start-up ----------------------------------------------------------------------------------
    def recover(self) -> None:
        """Re-adopt running jobs whose processes live, close those that ended while the agent was down,
        requeue those it marked running but never launched, queue the waiting ones."""
        now = self.clock()
        live = self._live_jobs()
        for row in self.store.jobs(["running", "suspended"]):
            pids = live.get((row.id, row.attempt))
            if pids:
                self._adopt(row, pids)
            elif row.state == "suspended":
                run = _Run(row.id, row.attempt, row.pid, row.pgid, row.gpu_list, row.start_s or now,
                           row.time_limit_s, run_before_s=row.run_s, suspended=True)  # fmt: skip
                run.exit_code = launcher.read_status_file(self.paths.job_dir(row.id))
                self.runs[row.id] = run
                self._finalize(run, now, vanished=True)
            elif row.pid is None:
                self.store.update_job(row.id, state="queued", start_s=None, gpu_ids="", reason="")
                log.info("job %d was never launched; queued again", row.id)
            else:
                code = launcher.read_status_file(self.paths.job_dir(row.id))
                run = _Run(
                    row.id, row.attempt, row.pid, row.pgid, row.gpu_list, row.start_s or now, row.time_limit_s
                )
                run.exit_code = code
                run.seg_start_s, run.run_before_s = row.seg_start_s or run.start_s, row.run_s
                self.runs[row.id] = run
                self.engine.seed_running(row.id, self.core_job(row), row.gpu_list, run.start_s)
                end = launcher.ended_s(self.paths.job_dir(row.id))
                self._finalize(
                    run, now if end is None else max(run.seg_start_s, min(now, end)), vanished=True
                )
        for row in self.store.jobs(
            ["preempted", "requeued"]
        ):  # died between an attempt's end and its requeue
            self._append_history(row.id)
            self.requeue_job(row, row.mem_gb, f"{row.state}; requeued", now)
        for row in self.store.jobs(["queued", "held"]):
            self.priority[row.id] = row.priority
            if row.plan_rank is not None:
                self.rank[row.id] = row.plan_rank
            if row.state == "queued" and self.deps_ok(row) is True:
                self.queue_job(row, now)
        self._write_pending_history()

    def queue_job(self, row: JobRow, now: float) -> None:
        """The one way a job (re)enters the Scheduler's queue (submit, release, a dependency met, a plan's
        rank, a requeue, a preemption, recovery): from its store row, which owns it, with the GPU-service
        it attained, its preemptions and the instant it started waiting; a suspended job waits on its
        own GPUs again."""
        job, since = self.core_job(row), row.stopped_at_s or row.submit_s
        if row.state == "suspended":
            self.engine.submit_suspended(row.id, job, row.gpu_list, since)
        else:
            self.engine.submit(row.id, job, now=since)
        self.engine.restore_progress(
            row.id, row.service_gpu_s, row.run_since_promotion_s, row.preemptions, now
        )

    def _adopt(self, row: JobRow, pids: set[int]) -> None:
        pgid = row.pgid
        if pgid is None:
            with contextlib.suppress(OSError):
                pgid = os.getpgid(min(pids))
        run = _Run(
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
        self.runs[row.id] = run
        self.store.update_job(row.id, pid=run.pid, pgid=pgid)
        job = self.core_job(row)
        log.info("re-adopted %s job %d (pgid %s) on GPUs %s", row.state, row.id, pgid, row.gpu_ids)
        run.suspended = row.state == "suspended"
        if run.stop_state and (run.suspended or run.stop_state == "preempt"):
            return  # already out of the Scheduler, dying: its GPUs wait for its processes (_blocked)
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

    # -- helpers -----------------------------------------------------------------------------------
    def _live_jobs(self) -> dict[tuple[int, int], set[int]]:
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

    def core_job(self, row: JobRow) -> Job:
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

    def predict_s(self, job: Job) -> Job:
        if not self.predictors:
            return job
        from gpuplan.predict import apply_model

        for model in self.predictors:
            (job,) = apply_model([job], model)
        return job

    # -- the loop's round --------------------------------------------------------------------------
    def step(self, now: float | None = None) -> None:
        """One round: reap, watch, enforce limits, sample, release dependencies, schedule."""
        now = self.clock() if now is None else now
        self._reap()
        self._watch(now)
        self._timers(now)
        if now >= self._next_sample_s:
            self._sample(now)
            self._next_sample_s = now + self.config.sample_interval_s
        if now >= self._next_prune_s:
            self._prune(now)
            self._next_prune_s = now + 3600.0
        if not self.stopping:
            self._release_dependents(now)
            self._carry_out_pending(now)
            self._schedule(now)
        self.save_usage(now)

    def _prune(self, now: float) -> None:
        """Retention: GPU samples older than --sample-retention; finished jobs (rows, samples, events,
        `jobs/ID/` with their logs) older than --retention."""
        self.store.prune(now - self.config.sample_retention_s)
        cutoff = now - self.config.retention_s
        for jid in self.store.prune_jobs(cutoff):
            shutil.rmtree(self.paths.job_dir(jid), ignore_errors=True)
        known = {r[0] for r in self.store.conn.execute("SELECT id FROM jobs").fetchall()}
        with os.scandir(self.paths.jobs_dir) as entries:  # directories whose job row is gone (an old store)
            for e in entries:
                if e.name.isdigit() and int(e.name) not in known and e.stat().st_mtime < cutoff:
                    shutil.rmtree(e.path, ignore_errors=True)

    def _reap(self) -> None:
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

    def _watch(self, now: float) -> None:
        """Close jobs whose processes are all gone; stop the remnants of a group whose leader exited.

        Cheap checks first: a leader that is this process's child and still running means the job
        runs; otherwise `killpg(pgid, 0)` failing means the whole group is gone. Only when a group
        still answers (leftovers, an adopted job, or zombies that a non-reaping init keeps) does one
        /proc pass (`live_jobs`, at most every 0.25 s) decide by the job markers.
        """
        gone: list[_Run] = []
        unsure: list[_Run] = []
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
            live = self._live_jobs()
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
            self._finalize(run, now)

    def _timers(self, now: float) -> None:
        for run in list(self.runs.values()):
            if run.kill_at_s is not None and now >= run.kill_at_s and run.pgid is not None:
                launcher.signal_group(run.pgid, signal.SIGKILL)
            elif (  # suspended time does not count against the limit (as in Slurm)
                run.time_limit_s is not None and not run.stop_state and run.pid is not None
                and run.run_time_s(now) >= run.time_limit_s
            ):  # fmt: skip
                self.stop_run(run, "timeout", now)

    def stop_run(self, run: _Run, why: str, now: float) -> None:
        """SIGTERM to the whole group now (then SIGCONT: a suspended group gets it too), SIGKILL after
        the grace period. A suspended job leaves the Scheduler at once; a job whose launch waits
        ends at once."""
        run.stop_state = why
        if run.pid is None:  # decided but never launched
            self._finalize(run, now, reason=f"{why} before it started")
            return
        if run.suspended and self.engine.is_waiting(run.jid):
            self.engine.withdraw(run.jid)  # its GPUs go to others once its processes are gone
        run.kill_at_s = now + self.config.grace_s
        self.store.update_job(run.jid, reason=f"stopping:{why}")
        if run.pgid is not None:
            launcher.signal_group(run.pgid, signal.SIGTERM)
            launcher.signal_group(run.pgid, signal.SIGCONT)

    def _schedule(self, now: float) -> None:
        decided = self.engine.decide(now)
        for p in decided.preempted:
            self._preempt(p.jid, p.action, now)
        for s in decided.started:
            run = self.runs.get(s.jid)
            if run is not None and run.suspended:
                self._resume(run, now)
            else:
                self._launch(s.jid, s.gpu_ids, now)
        if (
            decided.started
        ):  # a reading on the next round (right after the reply): even a short job gets a profile
            self._next_sample_s = now

    # -- preemption (docs/agent.md, "Preemption") -------------------------------------------------------
    def _preempt(self, jid: int, action: str, now: float) -> None:
        """Carry out the Scheduler's preemption: `suspend` SIGSTOPs the group in place (it keeps its GPU
        memory; the Scheduler still books it there); `checkpoint` and `requeue` stop it as a cancel
        does (SIGTERM, grace, SIGKILL) and queue it again once its processes are gone."""
        run = self.runs[jid]
        if run.stop_state:  # already on its way out (cancel, time limit, a re-adopted preemption)
            self.engine.withdraw(jid)  # its GPUs wait for its processes (_blocked)
            return
        slot = self.engine.sched.slot(jid)
        progress = {"service_gpu_s": slot.service_gpu_s, "run_since_promotion_s": slot.run_since_promotion_s,
                    "preemptions": slot.preemptions, "stopped_at_s": now, "run_s": run.run_time_s(now)}  # fmt: skip
        self.store.log_event(now, -1, f"preempt:{action}", jid, json.dumps({"gpus": list(run.gpus)}))
        if run.pid is None:  # decided earlier, its launch still waiting: nothing runs yet
            self.engine.withdraw(jid)
            self.runs.pop(jid)
            self.store.update_job(jid, state="queued", start_s=None, seg_start_s=None, gpu_ids="", **progress)
            row = self.store.job(jid)
            assert row is not None
            self.queue_job(row, now)
            return
        run.pending = False
        if action == "suspend":
            self.store.update_job(jid, state="suspended", seg_start_s=None, **progress)
            run.run_before_s, run.suspended = progress["run_s"], True
            if run.pgid is not None:
                launcher.signal_group(run.pgid, signal.SIGSTOP)
            log.info("job %d suspended in place on GPUs %s", jid, run.gpus)
            return
        self.engine.withdraw(jid)  # back in the queue once its processes are gone (_finalize)
        self.store.update_job(jid, **progress)
        run.run_before_s = progress["run_s"]
        self.stop_run(run, "preempt", now)
        log.info("job %d preempted (%s): stopping it", jid, action)

    def _blocked(self, jid: int, gpus: tuple[int, ...]) -> bool:
        """Whether a job that left the Scheduler (preempted by kill, or cancelled while suspended)
        still has processes on `gpus`: a start or resume there waits until they are gone."""
        return any(
            r.jid != jid and r.stop_state and r.pid is not None and not self.engine.is_running(r.jid)
            and not set(r.gpus).isdisjoint(gpus)
            for r in self.runs.values()
        )  # fmt: skip

    def _resume(self, run: _Run, now: float) -> None:
        """SIGCONT a suspended job (after its GPUs are free of a preempted job's processes)."""
        if self._blocked(run.jid, run.gpus):
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

    def _carry_out_pending(self, now: float) -> None:
        """Starts and resumes that waited for a preempted job's processes to leave their GPUs."""
        for run in [r for r in self.runs.values() if r.pending]:
            if self._blocked(run.jid, run.gpus):
                continue
            if run.suspended:
                self._resume(run, now)
            else:
                run.pending = False
                self._spawn(run, now)

    def _launch(self, jid: int, gpus: tuple[int, ...], now: float) -> None:
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
        run = _Run(jid, row.attempt, None, None, gpus, now, row.time_limit_s, seg_start_s=now)
        self.runs[jid] = run
        if self._blocked(jid, gpus):
            run.pending = True
            return
        self._spawn(run, now)

    def _spawn(self, run: _Run, now: float) -> None:
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
            self._finalize(run, now, reason=f"failed to start: {e}")
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

    def _finalize(self, run: _Run, now: float, vanished: bool = False, reason: str = "") -> None:
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
        self._append_history(run.jid)
        if state == "failed" and oom:
            self._maybe_requeue_oom(row, run)
        elif run.stop_state == "requeue":  # the GPU-time of its last run segment counts as attained
            seg_s = 0.0 if run.suspended or run.pid is None else max(now - run.seg_start_s, 0.0)
            attained = {"service_gpu_s": row.service_gpu_s + row.gpus * seg_s,
                        "run_since_promotion_s": row.run_since_promotion_s + seg_s}  # fmt: skip
            self.store.update_job(row.id, **attained)
            requeued = self.store.job(row.id)
            assert requeued is not None
            self.requeue_job(requeued, row.mem_gb, "requeued by request", now)
        elif run.stop_state == "preempt":
            self.requeue_job(row, row.mem_gb, f"preempted ({row.preempt}); requeued", now)
        else:
            self.store.forget_env(run.jid)  # the job ended for good: its environment goes

    def _maybe_requeue_oom(self, row: JobRow, run: _Run) -> None:
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
        self.requeue_job(
            row, new_mem, f"CUDA out of memory at {seen:g} GB; requeued with {new_mem} GB", self.clock()
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

    def _release_dependents(self, now: float) -> None:
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

    # -- history (agent/history.py) ----------------------------------------------------------------
    def _append_history(self, jid: int) -> None:
        append_history(self.store, self.paths.history, jid)

    def _write_pending_history(self) -> None:
        """Finished attempts whose history line a crash may have skipped (the meta key says which)."""
        for row in self.store.jobs(list(FINAL_STATES)):
            self._append_history(row.id)

    # -- sampling ----------------------------------------------------------------------------------
    def _sample(self, now: float) -> None:
        try:
            snap = self.backend.snapshot()
        except Exception as e:  # a monitor never dies on one bad reading
            log.warning("GPU snapshot failed: %s", e)
            return
        by_pgid = {run.pgid: run for run in self.runs.values() if run.pgid is not None}
        job_rows = []
        external: list[ProcReading] = []
        foreign: dict[int, float] = {}
        for p in snap.procs:
            run = by_pgid.get(p.pgid) if p.pgid is not None else None
            if run is not None:
                job_rows.append((run.jid, run.attempt, p.gpu, p.pid, p.mem_gb, p.util_pct))
                if p.mem_gb is not None:
                    run.peak_gb[p.gpu] = max(run.peak_gb.get(p.gpu, 0.0), p.mem_gb)
                    if self.engine.preemptive and self.engine.is_running(run.jid):
                        self.engine.observe_mem(run.jid, run.peak_gb[p.gpu])
            elif p.pgid is not None:
                external.append(p)
                if p.mem_gb:
                    self._foreign_peak[p.pid] = max(self._foreign_peak.get(p.pid, 0.0), p.mem_gb)
                    foreign[p.gpu] = foreign.get(p.gpu, 0.0) + self._foreign_peak[p.pid]
        self.external = external
        live_pids = {p.pid for p in snap.procs}
        self._foreign_peak = {pid: v for pid, v in self._foreign_peak.items() if pid in live_pids}
        self._apply_gpu_health(snap, foreign)
        gpu_rows = [
            (g.index, g.name, g.util_pct, g.mem_used_gb, g.mem_total_gb, g.power_w, g.temp_c, g.lost)
            for g in snap.gpus
        ]
        self.store.add_samples(now, gpu_rows, job_rows)

    def _apply_gpu_health(self, snap: Snapshot, foreign: dict[int, float]) -> None:
        for g in snap.gpus:
            if g.lost and g.index not in self.engine.offline:
                log.warning("GPU %d is lost: out of service until it answers again", g.index)
            self.engine.set_offline(g.index, g.lost)
            self.engine.set_foreign(g.index, foreign.get(g.index, 0.0))

    @property
    def next_sample_s(self) -> float:
        return self._next_sample_s

    @property
    def next_wake_s(self) -> float:
        """The next instant the loop must run a round: a sample, or a preemptive policy's level change."""
        return min(self._next_sample_s, self.engine.next_event_s())

    def done_stopping(self) -> bool:
        return self.stopping and (not self.kill_jobs_on_stop or not self.runs)

    def close(self) -> None:
        self.store.close()
        self.backend.close()

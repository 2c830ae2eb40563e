"""The agent: one loop that serves the socket, launches what the Scheduler starts, watches the jobs,
samples the GPUs and records every job's profile (docs/agent.md).

`Agent.step(now)` does one round with an injected clock (tests drive it directly);
`gpuplan.agent.server` runs it on the wall clock, woken by requests, child exits and timers. The agent's own errors are logged and
never kill a job: jobs live in their own sessions and are re-adopted after a restart.

The Agent composes what it does, one module each: agent/queueing.py (a job into the Scheduler's
queue, from its store row), agent/attempts.py (launching, watching, stopping and closing attempts),
agent/preempting.py (carrying out a preemptive pass), agent/recovery.py (start-up after a stop or a
crash), agent/sampling.py (GPU readings), agent/outlook.py (the forecast `queue` and `show` answer
with); agent/requests.py answers the clients.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from gpuplan.agent.attempts import LIVENESS_S, Attempts, Run
from gpuplan.agent.config import AgentConfig, configured_policy
from gpuplan.agent.engine import AgentPolicy, Engine, node_spec
from gpuplan.agent.gpus import GpuBackend, ProcReading, open_backend
from gpuplan.agent.outlook import ForecastCache
from gpuplan.agent.paths import AgentPaths
from gpuplan.agent.preempting import Preemptions
from gpuplan.agent.queueing import JobQueue, core_job
from gpuplan.agent.recovery import Recovery
from gpuplan.agent.sampling import Sampler
from gpuplan.agent.store import JobRow, Store
from gpuplan.core.policies import Policy
from gpuplan.core.quotas import Quotas
from gpuplan.model import ClusterSpec, Job

__all__ = ["LIVENESS_S", "Agent", "AgentConfig"]

log = logging.getLogger("gpuplan.agent")

_USAGE_KEY = "fairshare_usage"  # store meta: {"t_s": when, "usage": {user: decayed GPU-s of ended runs}}


class Agent:
    """The agent's state and its round. Not thread-safe: one loop owns it."""

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
        self._store = Store(self.paths.db)
        self.backend = backend or open_backend(config.gpus, set_id=str(self.paths.home))
        self.devices = self.backend.devices()
        spec = node_spec(self.devices, config.sharing, config.max_jobs_per_gpu)
        self.priority: dict[int, int] = {}
        self.rank: dict[int, int] = {}
        self.engine = Engine(
            spec,
            AgentPolicy(policy or configured_policy(config), self.priority, self.rank),
            config.backfill,
            config.placer,
            self.load_quotas(),
        )
        self._write_node_toml(spec)
        self.queue = JobQueue(self._store, self.engine)
        self.attempts = Attempts(config, self.paths, self.store, self.engine, self.backend, self.queue, clock)
        self.runs: dict[int, Run] = self.attempts.runs  # the live attempts, by job id
        self.preemptions = Preemptions(self.store, self.engine, self.attempts, self.queue)
        self.sampler = Sampler(self.backend, self.store, self.engine, self.runs)
        self.stopping = False
        self.reload_requested = False  # SIGHUP: read the quota file again at the next round
        self.kill_jobs_on_stop = False
        self._next_sample_s = 0.0
        self._next_prune_s = 0.0
        self.predictors = list(config.predict)
        self.forecasts = ForecastCache()  # `queue` and `show` after no change reuse the last forecast
        self._restore_usage()
        self.recover()

    @property
    def store(self) -> Store:
        """The job store (agent/store.py), shared by every part of the agent."""
        return self._store

    @store.setter
    def store(self, store: Store) -> None:
        """A new connection to the store, for every part at once."""
        self._store = self.queue.store = self.attempts.store = store
        self.preemptions.store = self.sampler.store = store

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

    # -- jobs (agent/queueing.py, agent/attempts.py, agent/recovery.py) ---------------------------
    def recover(self) -> None:
        """Re-adopt running jobs whose processes live, close those that ended while the agent was down,
        requeue those it marked running but never launched, queue the waiting ones (agent/recovery.py)."""
        recovery = Recovery(self.paths, self.store, self.engine, self.attempts, self.queue, self.clock)
        recovery.recover(self.priority, self.rank)

    def queue_job(self, row: JobRow, now: float) -> None:
        """The one way a job (re)enters the Scheduler's queue (`JobQueue.queue_job`)."""
        self.queue.queue_job(row, now)

    def requeue_job(self, row: JobRow, mem_gb: float | None, reason: str, now: float) -> None:
        """The job waits again as attempt + 1, with the GPU-service it attained (preemptive policies)."""
        self.queue.requeue_job(row, mem_gb, reason, now)

    def deps_ok(self, row: JobRow) -> bool | str:
        """True when the job may queue, False while its dependency runs, a reason when it never will."""
        return self.queue.deps_ok(row)

    def core_job(self, row: JobRow) -> Job:
        """The store row as the Scheduler's Job (its id is the store id)."""
        return core_job(row)

    def estimate_s(self, name: str, command: str) -> float | None:
        """Median wall time of the last 20 completed runs with this name (else this command)."""
        return self.queue.estimate_s(name, command)

    def predict_s(self, job: Job) -> Job:
        if not self.predictors:
            return job
        from gpuplan.predict import apply_model

        for model in self.predictors:
            (job,) = apply_model([job], model)
        return job

    def stop_run(self, run: Run, why: str, now: float) -> None:
        """Stop an attempt (`Attempts.stop_run`: SIGTERM, grace, SIGKILL)."""
        self.attempts.stop_run(run, why, now)

    # -- the loop's round --------------------------------------------------------------------------
    def step(self, now: float | None = None) -> None:
        """One round: reap, watch, enforce limits, sample, release dependencies, schedule."""
        now = self.clock() if now is None else now
        self.attempts.reap()
        self.attempts.watch(now)
        self.attempts.timers(now)
        if now >= self._next_sample_s:
            self.sampler.sample(now)
            self._next_sample_s = now + self.config.sample_interval_s
        if now >= self._next_prune_s:
            self._prune(now)
            self._next_prune_s = now + 3600.0
        if not self.stopping:
            self.queue.release_dependents(now)
            self.preemptions.carry_out_pending(now)
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

    def _schedule(self, now: float) -> None:
        decided = self.engine.decide(now)
        for p in decided.preempted:
            self.preemptions.preempt(p.jid, p.action, now)
        for s in decided.started:
            run = self.runs.get(s.jid)
            if run is not None and run.suspended:
                self.preemptions.resume(run, now)
            else:
                self.attempts.launch(s.jid, s.gpu_ids, now)
        if (
            decided.started
        ):  # a reading on the next round (right after the reply): even a short job gets a profile
            self._next_sample_s = now

    @property
    def external(self) -> list[ProcReading]:
        """GPU processes the agent did not start, as last sampled."""
        return self.sampler.external

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

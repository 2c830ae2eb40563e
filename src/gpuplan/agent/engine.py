"""The agent's view of the core Scheduler: one node, live jobs, GPUs out of service, foreign memory.

The agent drives `gpuplan.core.scheduler.Scheduler` with the same policies, backfill modes and placers
as the simulator; only the clock differs (Unix time). This module adapts the agent's needs to the
Scheduler's public methods (docs/architecture.md, "The public core API"): `withdraw` a waiting job, `adopt` a running one
after a restart, `hold_external` for memory of processes the agent did not start, `set_offline` for a
lost GPU.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from gpuplan.agent.gpus import GpuDevice
from gpuplan.core.forecast import Deferred, Forecast, forecast
from gpuplan.core.policies import Policy, get_policy
from gpuplan.core.preemptive import LevelRule, PolicyLevels, PreemptivePolicy
from gpuplan.core.quotas import Quotas
from gpuplan.core.scheduler import Decisions, Scheduler
from gpuplan.core.view import JobSlot
from gpuplan.errors import JobNeverFitsError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec

__all__ = ["AgentPolicy", "Engine", "host_resources", "node_spec"]

_INF = math.inf


def host_resources(meminfo: str = "/proc/meminfo") -> tuple[float | None, float | None]:
    """This machine's CPU (milli-cores, from os.cpu_count) and memory (GiB, MemTotal of /proc/meminfo);
    None for what the OS does not tell."""
    cpus = os.cpu_count()
    mem_gb: float | None = None
    try:
        for line in Path(meminfo).read_text(encoding="ascii", errors="replace").splitlines():
            if line.startswith("MemTotal:"):
                mem_gb = int(line.split()[1]) / (1 << 20)  # kB
                break
    except (OSError, ValueError, IndexError):
        mem_gb = None
    return (cpus * 1000.0 if cpus else None), mem_gb


def node_spec(
    devices: list[GpuDevice],
    sharing: bool,
    max_jobs_per_gpu: int = 4,
    host: tuple[float | None, float | None] | None = None,
) -> ClusterSpec:
    """This node as a one-node ClusterSpec (mixed models plan with the smallest memory), with its CPU
    and host memory (`host`; default: `host_resources()`, from the OS): a job that declares
    cpu_milli or host_mem_gb starts only when they fit beside the running ones."""
    if not devices:
        raise JobNeverFitsError("the GPU backend lists no GPUs on this node")
    mem = min(d.mem_total_gb for d in devices)
    model = devices[0].name if len({d.name for d in devices}) == 1 else "mixed"
    cpu_milli, host_mem_gb = host_resources() if host is None else host
    node = NodeSpec("local", len(devices), GpuSpec(model, mem), cpu_milli, host_mem_gb)
    return ClusterSpec("local", (node,), sharing=sharing, max_jobs_per_gpu=max_jobs_per_gpu)


class AgentPolicy(Policy):
    """The chosen policy, after the user's `--priority` (higher first) and a plan's order (`apply`)."""

    def __init__(self, inner: Policy | str, priority: dict[int, int], rank: dict[int, int]) -> None:
        self.inner = get_policy(inner) if isinstance(inner, str) else inner
        self.name = self.inner.name
        self.description = self.inner.description
        self.needs_duration = self.inner.needs_duration
        self.preemptive = self.inner.preemptive
        self.endless_levels = getattr(self.inner, "endless_levels", False)  # las: the pass leases starts
        self.usage_ranked = self.inner.usage_ranked  # fairshare: users first, then priority and plan
        if self.usage_ranked:
            self.half_life_s = self.inner.half_life_s  # type: ignore[attr-defined]
        self._priority = priority
        self._rank = rank

    # A preemptive policy (las, tiresias, gittins) ranks by level first: priority and a plan's order
    # then order the jobs of one level.
    def level(self, slot: JobSlot, now: float) -> float:
        return float(self.inner.level(slot, now))  # type: ignore[attr-defined]

    def next_change_s(self, slot: JobSlot, now: float) -> float:
        return float(self.inner.next_change_s(slot, now))  # type: ignore[attr-defined]

    def observe(self, job: Job, service_gpu_s: float) -> bool:
        return bool(self.inner.observe(job, service_gpu_s))  # type: ignore[attr-defined]

    def level_rule(self) -> LevelRule:
        """The inner policy's (`PreemptivePolicy.level_rule`): `level` and `next_change_s` pass its on."""
        rule = getattr(self.inner, "level_rule", None)
        return PolicyLevels(self) if rule is None else rule()  # type: ignore[no-any-return]

    @property
    def observes(self) -> bool:
        """The inner policy's (`PreemptivePolicy.observes`): `observe` only passes the call on."""
        return bool(getattr(self.inner, "observes", True))

    @property
    def fallback_jobs(self) -> int:
        return self.inner.fallback_jobs if isinstance(self.inner, PreemptivePolicy) else 0

    def key(self, job: Job, seq: int, oracle: bool) -> tuple[float, ...]:
        rank = self._rank.get(seq)
        return (
            -self._priority.get(seq, 0),
            _INF if rank is None else rank,
            *self.inner.key(job, seq, oracle),
        )


class Engine:
    """The Scheduler plus the bookkeeping the live node needs. Job ids are the store's ids (> 0)."""

    def __init__(
        self, spec: ClusterSpec, policy: AgentPolicy, backfill: str, placer: str, quotas: Quotas | None = None
    ) -> None:
        self.spec = spec
        self.policy = policy
        self.sched = Scheduler(spec, policy, backfill, placer, quotas=quotas)
        self.usage_changed = False  # fairshare: a run ended or was preempted since the usage was saved
        self.offline: set[int] = set()
        self.foreign_gb: dict[int, float] = {}

    # -- jobs ------------------------------------------------------------------------------------
    def never_fits(self, gpus: int, mem_gb: float | None, user: str | None = None) -> str | None:
        """Why a job can never start on this node (or under `user`'s quota), or None when it can."""
        from gpuplan.core.booking import fits_empty_cluster

        quotas = self.sched.quotas
        most = None if quotas is None or user is None else quotas.limits(user).max_gpus
        if most is not None and gpus > most:
            return f"asks for {gpus} GPUs; {user}'s quota is {most} GPUs (ask for at most {most}, or have it raised)"
        if fits_empty_cluster(self.spec, self.sched.placer, gpus, mem_gb, False):
            return None
        cap = self.spec.nodes[0].gpu.mem_gb
        if gpus > self.spec.total_gpus:
            return f"asks for {gpus} GPUs; this node has {self.spec.total_gpus}"
        return f"asks for {mem_gb:g} GB per GPU; this node's GPUs have {cap:g} GB"

    def submit(self, jid: int, job: Job, now: float | None = None) -> None:
        """Queue a waiting job (the caller checked `never_fits`); `now`: when it (re)entered the queue."""
        self.sched.submit(jid, job, now=now)

    def submit_suspended(
        self, jid: int, job: Job, gpus: tuple[int, ...], now: float, book_mem_gb: float | None = None
    ) -> None:
        """A job found suspended in place on `gpus` after a restart: it waits there, holding its memory
        (`book_mem_gb` per GPU: its booking raised to its observed peak; default its declared memory)."""
        self.sched.submit_suspended(jid, job, gpus, now, book_mem_gb)

    def restore_progress(
        self, jid: int, service_gpu_s: float, run_since_promotion_s: float, preemptions: int, now: float
    ) -> None:
        """The GPU-service a re-seeded job attained before (preemptive policies rank by it)."""
        if service_gpu_s or run_since_promotion_s or preemptions:
            self.sched.restore_progress(jid, service_gpu_s, run_since_promotion_s, preemptions, now)

    def observe_mem(self, jid: int, mem_gb: float) -> None:
        """A running job's observed memory per GPU: a suspension keeps at least that much booked."""
        self.sched.observe_mem(jid, mem_gb)

    @property
    def preemptive(self) -> bool:
        return bool(self.policy.inner.preemptive)

    def next_event_s(self) -> float:
        """When a preemptive policy wants a pass although nothing arrived or ended (inf otherwise)."""
        return self.sched.next_event_s()

    def withdraw(self, jid: int) -> None:
        """Take a waiting job out of the queue (cancel, hold, a new plan rank)."""
        self.sched.withdraw(jid)

    def is_waiting(self, jid: int) -> bool:
        return jid in self.sched and not self.sched.slot(jid).is_running

    def is_running(self, jid: int) -> bool:
        return jid in self.sched and self.sched.slot(jid).is_running

    def seed_running(self, jid: int, job: Job, gpus: tuple[int, ...], start_s: float) -> None:
        """A job already running on `gpus` since `start_s` (re-adopted after a restart)."""
        self.sched.adopt(jid, job, gpus, start_s)

    def decide(self, now: float) -> Decisions:
        """One pass: jobs to preempt (carry those out first), then jobs to start or resume."""
        out = self.sched.decide(now)
        if out.preempted:
            self.usage_changed = True
        return out

    def finish(self, jid: int, now: float | None = None, completed: bool = True) -> None:
        """A running job ended at `now` (`completed`: a learning policy observes it; fairshare charges
        every run)."""
        self.sched.finish(jid, now, learn=completed)
        self.usage_changed = True

    # -- users: quotas and fair-share usage ----------------------------------------------------------
    def set_quotas(self, quotas: Quotas | None) -> None:
        """New per-user limits (a reload); running jobs keep running."""
        self.sched.set_quotas(quotas)

    def charged_usage(self, now: float) -> dict[str, float]:
        """Fairshare: each user's decayed GPU-seconds of ended runs at `now` (what the store keeps)."""
        self.usage_changed = False
        return self.sched.charged_usage(now)

    def restore_usage(self, usage_gpu_s: dict[str, float], at_s: float) -> None:
        """Fairshare: the users' usage saved at `at_s` by the agent before a restart."""
        self.sched.restore_usage(usage_gpu_s, at_s)

    def quota_reason(self, jid: int) -> str | None:
        """Why a waiting job waits on its user's quota (`Scheduler.quota_reason`), or None."""
        return self.sched.quota_reason(jid)

    @property
    def waiting(self) -> int:
        return self.sched.waiting_count

    def waiting_jids(self) -> list[int]:
        return list(self.sched.waiting_jids())

    # -- GPUs the agent cannot give out ------------------------------------------------------------
    def set_offline(self, gpu: int, offline: bool) -> None:
        """Take a GPU out of service (lost) or back; jobs already on it keep their booking."""
        if offline == (gpu in self.offline):
            return
        (self.offline.add if offline else self.offline.discard)(gpu)
        self.sched.set_offline(gpu, offline)

    def set_foreign(self, gpu: int, mem_gb: float) -> None:
        """Memory held on `gpu` by processes the agent did not start (0: none). Exclusive nodes then
        treat the GPU as taken; sharing nodes book that much memory."""
        mem_gb = min(mem_gb, self.spec.nodes[0].gpu.mem_gb)
        if mem_gb == self.foreign_gb.get(gpu, 0.0):
            return
        if mem_gb > 0:
            self.foreign_gb[gpu] = mem_gb
        else:
            self.foreign_gb.pop(gpu, None)
        self.sched.hold_external(gpu, mem_gb)

    # -- what happens next ------------------------------------------------------------------------
    def forecast(
        self,
        now: float,
        deferred: Iterable[Deferred] = (),
        held: Mapping[int, str] | None = None,
        progress_s: Mapping[int, float] | None = None,
    ) -> Forecast:
        """Every job's expected start, end and GPUs, and why it waits (core/forecast.py: the Scheduler's
        own passes run forward on a copy; the live queue is not touched)."""
        return forecast(self.sched, now, deferred=deferred, held=held, progress_s=progress_s)

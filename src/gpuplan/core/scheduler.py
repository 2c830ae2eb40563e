"""The scheduling core: a queue in policy order, the running jobs, a placer and a backfill mode.

The simulator, the local agent and the Slurm planner drive the same Scheduler and differ only in their
clock: they call `submit`, `withdraw`, `finish`, `adopt` and `schedule(now)` and start what `schedule`
returns. Everything they read goes through the `SchedulerView` surface (core/view.py).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from operator import itemgetter
from typing import Any, Final

from gpuplan.core import shapes
from gpuplan.core.backfill import Backfill, get_backfill
from gpuplan.core.booking import fits_empty_cluster, never_fits_message
from gpuplan.core.fairshare import FairQueue, UsageLedger
from gpuplan.core.placement import Placer, get_placer
from gpuplan.core.policies import Policy, get_policy
from gpuplan.core.preemption import (
    Decisions,
    Preempted,
    PreemptingScheduler,
    PreemptionCost,
    PreemptiveQueue,
)
from gpuplan.core.preemptive import LevelRule, PolicyLevels
from gpuplan.core.quotas import QuotaNeverFitsError, Quotas, QuotaUse
from gpuplan.core.shapes import ShapeIndex
from gpuplan.core.sortedseq import KeyedSeq, SortedSeq
from gpuplan.core.state import ClusterState, Need, need_of
from gpuplan.core.view import JobSlot, RunningObserver, SchedulerView, Started, WaitReason
from gpuplan.errors import JobNeverFitsError, ScheduleError
from gpuplan.model import ClusterSpec, Job

__all__ = ["Decisions", "Preempted", "Scheduler", "Started", "WaitRule"]

WaitRule = Callable[[SchedulerView, JobSlot, float], "WaitReason | None"]
"""An eligibility rule's say on a waiting job (a quota, a limit): why it may not start now, or None."""

_INF: Final = math.inf
# queue entries end with (jid, slot): C-level getters
_LAST: Final = itemgetter(-1)
_SECOND_LAST: Final = itemgetter(-2)


class Scheduler(PreemptingScheduler):
    """Decides which waiting jobs start now and on which GPUs.

    Jobs are known by an integer handle `jid` chosen by the caller (the simulator uses trace order).
    Durations come from `Job.planning_duration_s(oracle)`; a job without one plans as endless.
    The scheduler keeps one `JobSlot` per waiting or running job.
    """

    def __init__(
        self,
        spec: ClusterSpec,
        policy: Policy | str = "fifo",
        backfill: Backfill | str = "easy",
        placer: Placer | str = "first-fit",
        oracle: bool = False,
        quotas: Quotas | None = None,
    ) -> None:
        self.spec = spec
        self._identity = object()  # unique to this scheduler (a fork gets its own): `identity`
        self.policy = get_policy(policy) if isinstance(policy, str) else policy
        self.backfill = get_backfill(backfill) if isinstance(backfill, str) else backfill
        self._placer = get_placer(placer) if isinstance(placer, str) else placer
        self.oracle = oracle
        self._state = ClusterState(spec)
        self._empty = ClusterState(spec)
        self._fits_empty: dict[tuple[int, float | None, bool, Need | None], bool] = {}
        self._host = spec.has_host_resources  # some node limits CPU or host memory
        self._slots: dict[int, JobSlot] = {}
        self._ledger: UsageLedger | None = None
        # (policy key..., jid, slot); empty under a preemptive policy: its records rank the waiting jobs
        self._queue: SortedSeq[tuple[Any, ...]] | FairQueue = SortedSeq()
        if self.policy.usage_ranked:
            self._ledger = UsageLedger(self.policy.half_life_s)  # type: ignore[attr-defined]
            self._queue = FairQueue(self._ledger)
        self._quotas: Quotas | None = None
        self._use: QuotaUse | None = None  # each user's running jobs and GPUs, kept while quotas are set
        self._in_pass = False
        self._shapes: ShapeIndex | None = None  # built on first use by a backfill pass (waiting_shapes)
        self._running: KeyedSeq[JobSlot] = KeyedSeq()  # by (expected end, jid)
        self.preemption_cost = PreemptionCost()
        """What a preemption costs (the clock sets its own: the simulator's, the forecast's); the
        preemptive pass gives each started job the lease it implies (`PreemptionCost.lease_s`)."""
        self._pre = PreemptiveQueue(self, _levels(self.policy)) if self.policy.preemptive else None
        # whether `finish` tells the policy of a finished job (`PreemptivePolicy.observes`), read once:
        # a call into a policy (a Python class) is a generic call, and most learn nothing from it
        self._observes = self._pre is not None and bool(getattr(self.policy, "observes", True))
        self._version = 0  # bumped by every call that changes the queue, the running jobs or the cluster
        self.wait_rules: list[WaitRule] = []
        """Eligibility rules that explain a wait (core/forecast.py asks them first, in order)."""
        self._observers: list[RunningObserver] = []  # told of running-job and hold changes (observe)
        if quotas is not None:
            self.set_quotas(quotas)

    # -- the clock-independent API -------------------------------------------------------------
    def submit(
        self, jid: int, job: Job, book_mem_gb: float | None = None, now: float | None = None
    ) -> JobSlot:
        """Queue a job and return its record.

        `book_mem_gb` overrides the per-GPU memory to book (default: the job's estimate, or its true
        memory in oracle runs; `core.booking.booked_mem_gb` is the simulator's rule). `now`: the
        clock's time of the submit (default the job's submit_s; preemptive policies rank by it).

        Raises:
            JobNeverFitsError: no placement on the empty cluster hosts it (the message says why).
            ScheduleError: `jid` is already waiting or running.
        """
        mem = job.planning_mem_gb(self.oracle) if book_mem_gb is None else book_mem_gb
        need = (
            need_of(job, self._host, self.spec.sharing) if self._host or job.gpu_share is not None else None
        )
        shape = (job.gpus, mem, job.may_span_nodes, need)
        fits = self._fits_empty.get(shape)
        if fits is None:
            fits = self._fits_empty[shape] = fits_empty_cluster(
                self.spec, self._placer, job.gpus, mem, job.may_span_nodes, empty=self._empty, need=need
            )
        if not fits:
            raise JobNeverFitsError(never_fits_message(self.spec, job, mem, need))
        if self._quotas is not None:
            why = self._quotas.never_fits(job.user, job.gpus)
            if why is not None:
                raise QuotaNeverFitsError(f"job {job.id!r}: {why}")
        slot = self._new_slot(jid, job, mem)
        self._placer.learn(job)
        self._version += 1
        key = (*self.policy.key(job, jid, self.oracle), jid)
        slot.key = key
        if self._pre is not None:  # a preemptive policy's waiting jobs are its records' (`waiting`)
            slot.waiting_since_s = job.submit_s if now is None else now
            self._pre.submitted(slot, slot.waiting_since_s)
            return slot
        self._queue.add((*key, slot))
        if self._shapes is not None:
            self._shapes.add(slot)
        return slot

    def _new_slot(self, jid: int, job: Job, mem: float | None) -> JobSlot:
        if jid in self._slots:
            raise ScheduleError(f"job handle {jid} is already in use (job {self._slots[jid].job.id!r})")
        plan = job.planning_duration_s(self.oracle)
        slot = JobSlot(jid, job, job.gpus, mem, _INF if plan is None else max(plan, 0.0), job.may_span_nodes)
        if self._host or job.gpu_share is not None:
            slot.need = need_of(job, self._host, self.spec.sharing)
        self._slots[jid] = slot
        return slot

    def schedule(self, now: float) -> list[Started]:
        """Start every job the policy and the backfill mode allow now; returns the decisions.

        Raises:
            ScheduleError: the policy is preemptive (call `decide`: it may also suspend jobs).
        """
        if self._pre is not None:
            raise ScheduleError(f"policy {self.policy.name!r} preempts jobs: drive it with decide(now)")
        if self._ledger is not None and self._queue.rerank(now):  # type: ignore[union-attr]
            self._version += 1  # the users' order moved: a pass that stood may not stand
        if not self._queue or (not self._state.sharing and self._state.idle_total == 0):
            return []  # nothing can start on a full exclusive cluster, whatever the mode
        self._in_pass = self._quotas is not None
        try:
            started = self.backfill.select(self, now)
        finally:
            self._in_pass = False
        shapes = self._shapes
        for st in started:
            slot = self._slots[st.jid]
            self._queue.remove((*slot.key, slot))
            if shapes is not None:
                shapes.remove(st.jid)
        return started

    def decide(self, now: float) -> Decisions:
        """One pass: the jobs to suspend or requeue (carry those out first), then the jobs to start.

        Works for every policy; only preemptive ones (las, tiresias, gittins) ever preempt."""
        if self._pre is None:
            return Decisions([], self.schedule(now))
        return self._pre.decide(now)

    def settle_levels(self) -> None:
        """Make every running job's `JobSlot.level` current as of the last pass: a preemptive pass
        leaves a running job's level change for the first reader of running levels (most passes read
        none). Call it before reading running jobs' levels outside a pass."""
        if self._pre is not None:
            self._pre.catch_up()

    def next_event_s(self) -> float:
        """When a preemptive policy wants the next pass even if nothing arrives or ends (a level
        changes); `math.inf` for the others."""
        return _INF if self._pre is None else self._pre.next_change_s()

    def next_pass_s(self) -> float:
        """When a preemptive policy's pass may decide something even if nothing arrives or ends (what
        a clock waits for): `next_event_s`, or `math.inf` while no job waits (a level change then
        moves no decision; the next pass ranks the job at its own instant)."""
        return _INF if self._pre is None else self._pre.next_pass_s()

    def quiet_before_s(self) -> float:
        """An instant before which a pass, with nothing entering or ending first, decides nothing: a
        clock need not stop there for an end that no longer holds (`PreemptiveQueue.quiet_before_s`);
        -inf for a policy that does not preempt (its pass is asked at every stop)."""
        return -_INF if self._pre is None else self._pre.quiet_before_s()

    def preempt(self, jid: int, now: float, released: bool = False) -> Preempted:
        """Take a running job's GPUs (`Job.preempt_mode`): `suspend` keeps its memory on them (it resumes
        there), `checkpoint` and `requeue` free them. It waits again, keeping the GPU-service it
        attained. Returns what the clock must do (its `action` is the mode). `released`: the caller
        (the preemptive pass's eviction) has already released its GPUs in the cluster state, and held a
        suspended job's memory there.

        Raises:
            ScheduleError: the job is not running, or its mode is `never`.
        """
        slot = self._slots.get(jid)
        if slot is None or slot.start_s is None:
            raise ScheduleError(f"cannot preempt job handle {jid}: it is not running")
        # the preemptive queue reads a job's mode once (Job.preempt_mode is an interpreted property)
        mode = slot.job.preempt_mode if self._pre is None else self._pre.mode(slot)
        if mode == "never":
            raise ScheduleError(f"cannot preempt job {slot.job.id!r}: its preempt mode is 'never'")
        self._version += 1
        if self._pre is not None:
            self._pre.leave(slot)
        run_s = max(now - slot.start_s, 0.0)
        self._unbook_user(slot, now)
        slot.service_gpu_s += slot.gpus * run_s
        slot.run_since_promotion_s += run_s
        self._running.remove(slot.expected_end_s, jid)
        if not released:
            self._state.release(slot.alloc, slot.mem_gb, slot.need)
        for o in self._observers:
            o.job_stopped(slot)
        done = Preempted(jid, slot.alloc, mode)
        if mode == "suspend":
            if not released:
                self._state.hold_suspended(slot.alloc, slot.mem_gb)
            slot.suspended_on = slot.alloc
            self._holds_changed()
        slot.alloc, slot.start_s, slot.expected_end_s = (), None, _INF
        slot.waiting_since_s = now
        slot.preemptions += 1
        if self._pre is not None:
            self._pre.enter(slot, now)
        else:  # (only a preemptive pass preempts today; a caller may still preempt under any policy)
            self._queue.add((*slot.key, slot))
            if self._shapes is not None:
                self._shapes.add(slot)
        return done

    def submit_suspended(
        self, jid: int, job: Job, gpu_ids: tuple[int, ...], now: float, book_mem_gb: float | None = None
    ) -> JobSlot:
        """Seed a job that waits suspended in place on `gpu_ids` (a restarted agent found it stopped).

        Raises:
            JobNeverFitsError, ScheduleError: as `submit`.
        """
        slot = self.submit(jid, job, book_mem_gb, now=now)  # bumps the version
        self._state.hold_suspended(gpu_ids, slot.mem_gb)
        slot.suspended_on = tuple(gpu_ids)
        self._holds_changed()
        return slot

    def restore_progress(
        self, jid: int, service_gpu_s: float, run_since_promotion_s: float, preemptions: int, now: float
    ) -> None:
        """Give a re-seeded job the GPU-service it attained before (a restarted agent's store)."""
        slot = self._slots[jid]
        self._version += 1
        slot.service_gpu_s = service_gpu_s
        slot.run_since_promotion_s = run_since_promotion_s
        slot.preemptions = preemptions
        if self._pre is not None:
            self._pre.leave(slot)
            self._pre.enter(slot, now)

    def observe_mem(self, jid: int, mem_gb: float) -> None:
        """A running job was seen holding `mem_gb` per GPU: book at least that much when it is
        suspended in place (exclusive clusters only: there a running job's booking is its whole GPUs)."""
        slot = self._slots.get(jid)
        if slot is None or self._state.sharing or not slot.is_running:
            return
        if slot.mem_gb is not None and mem_gb > slot.mem_gb:
            slot.mem_gb = mem_gb
            self._version += 1

    def start_waiting(
        self, slot: JobSlot, gpu_ids: list[int] | tuple[int, ...], now: float, started: list[Started]
    ) -> None:
        """Start a waiting job on `gpu_ids` and take it out of the queue (the preemptive pass)."""
        if self._pre is None:
            self._queue.remove((*slot.key, slot))
            if self._shapes is not None:
                self._shapes.remove(slot.jid)
        self.start(slot, gpu_ids, now, started)

    def finish(self, jid: int, now: float | None = None, learn: bool = True) -> JobSlot:
        """A running job ended: free its GPUs; returns its record (with its start and GPUs).

        `now`: when it ended (a preemptive policy that learns from finished jobs, gittins, needs it;
        fairshare charges the run up to then). `learn=False`: it did not complete (cancelled, failed),
        so a learning policy does not observe it."""
        slot = self._slots[jid]
        if self._pre is not None:
            self._pre.leave(slot)
            self._pre.forget(jid)
            if learn and self._observes and now is not None and slot.start_s is not None:
                service = slot.service_gpu_s + slot.gpus * max(now - slot.start_s, 0.0)
                if self.policy.observe(slot.job, service):  # type: ignore[attr-defined]
                    self._pre.rerank_all(now)
        del self._slots[jid]  # (a del: dict.pop is a generic method call in the compiled core)
        self._version += 1
        self._running.remove(slot.expected_end_s, jid)
        self._state.release(slot.alloc, slot.mem_gb, slot.need)
        for o in self._observers:
            o.job_stopped(slot)
        self._unbook_user(slot, now)
        if self._pre is not None:
            self._pre.finished(slot, self._version)
        return slot

    def _unbook_user(self, slot: JobSlot, now: float | None) -> None:
        """A run ended or was preempted: its user's quota use drops, its GPU-time is charged."""
        if self._use is not None:
            self._use.remove(slot.job.user, slot.gpus)
        if self._ledger is not None:
            if now is None:  # the clock did not say: the plan's end, or nothing when unknown
                now = slot.expected_end_s if slot.expected_end_s < _INF else slot.start_s
            self._ledger.stop(slot.jid, now)  # type: ignore[arg-type]

    def withdraw(self, jid: int) -> JobSlot:
        """A waiting job leaves the queue (cancelled, or held); returns its record.

        Raises:
            ScheduleError: the job is running (use `finish` when it ends) or unknown.
        """
        slot = self._slots.get(jid)
        if slot is None or slot.is_running:
            what = "unknown" if slot is None else "running, not waiting"
            raise ScheduleError(f"cannot withdraw job handle {jid}: it is {what}")
        del self._slots[jid]
        self._version += 1
        if self._pre is None:
            self._queue.remove((*slot.key, slot))
            if self._shapes is not None:
                self._shapes.remove(jid)
        if slot.suspended_on:
            self._state.drop_suspended(slot.suspended_on, slot.mem_gb)
            slot.suspended_on = ()
            self._holds_changed()
        if self._pre is not None:
            self._pre.leave(slot)
            self._pre.forget(jid)
        return slot

    def adopt(
        self,
        jid: int,
        job: Job,
        gpu_ids: Iterable[int],
        start_s: float,
        expected_end_s: float | None = None,
        book_mem_gb: float | None = None,
    ) -> JobSlot:
        """Seed a job that is already running on `gpu_ids` since `start_s` (a restarted agent, a live queue).

        It is booked on its GPUs as they are, without a fit check: it runs there in reality.
        `expected_end_s` defaults to start + its planned duration (endless when it has none); when
        given, the job's planned duration becomes expected_end_s - start_s.

        Raises:
            ScheduleError: `jid` is already in use, or a GPU index is not on the cluster.
        """
        gpu_ids = tuple(gpu_ids)
        bad = [g for g in gpu_ids if not 0 <= g < self._state.total_gpus]
        if bad or not gpu_ids:
            raise ScheduleError(
                f"cannot adopt job {job.id!r} on GPUs {list(gpu_ids)}: cluster {self.spec.name!r} has GPUs "
                f"0..{self._state.total_gpus - 1}"
            )
        mem = job.planning_mem_gb(self.oracle) if book_mem_gb is None else book_mem_gb
        slot = self._new_slot(jid, job, mem)
        slot.key = (*self.policy.key(job, jid, self.oracle), jid)  # its rank should it be preempted
        if expected_end_s is None:
            expected_end_s = start_s + slot.plan_s
        elif expected_end_s < _INF:
            slot.plan_s = max(expected_end_s - start_s, 0.0)  # what the caller expects is the plan
        self._book(slot, gpu_ids, start_s, expected_end_s)
        if self._pre is not None:
            self._pre.enter(slot, start_s)
        return slot

    def set_expected_end(self, jid: int, end_s: float) -> None:
        """Move a running job's expected end (its rate changed, or a better estimate came)."""
        slot = self._slots[jid]
        old = slot.expected_end_s
        if old != end_s:
            self._version += 1
            self._running.remove(old, jid)
            self._running.add(end_s, jid, slot)
            slot.expected_end_s = end_s
            for o in self._observers:
                o.end_moved(slot)

    def set_offline(self, gpu: int, offline: bool = True) -> None:
        """Take a GPU out of service (or bring it back): see `ClusterState.set_offline`."""
        self._state.set_offline(gpu, offline)
        self._version += 1
        self._holds_changed()

    def set_quotas(self, quotas: Quotas | None) -> None:
        """Per-user limits from now on (None: none). Jobs already running keep running; a waiting job
        that can never start under the new limits waits with that reason (`quota_reason`).

        Raises:
            ScheduleError: the policy is preemptive (its pass does not apply quotas).
        """
        if quotas is not None and quotas.is_empty:
            quotas = None
        if quotas is not None and self._pre is not None:
            raise ScheduleError(
                f"policy {self.policy.name!r} preempts jobs: per-user quotas apply to the other policies"
            )
        self._quotas = quotas
        if quotas is None:
            self._use = None  # no quota to check: no use to keep (a start and an end cost nothing more)
        elif self._use is None:  # the running jobs' use as it stands, kept from now on
            self._use = QuotaUse()
            for slot in self._running.values():
                self._use.add(slot.job.user, slot.gpus)
        self._version += 1

    @property
    def quotas(self) -> Quotas | None:
        return self._quotas

    def quota_reason(self, jid: int) -> str | None:
        """Why a waiting job may not start now under its user's quota ("quota: alice uses 4 of 4
        GPUs"), or None (no quota holds it back; a running job: None). The forecast and the agent's
        queue call this one function."""
        slot = self._slots.get(jid)
        if self._quotas is None or slot is None or slot.is_running:
            return None
        assert self._use is not None  # kept while quotas are set
        return self._use.reason(self._quotas, slot.job.user, slot.gpus)

    def user_usage(self, now: float) -> dict[str, float]:
        """Decayed GPU-seconds per user at `now` under a fair-share policy (charged runs and running
        jobs up to now); empty for the other policies."""
        return {} if self._ledger is None else self._ledger.snapshot(now)

    def charged_usage(self, now: float) -> dict[str, float]:
        """The charged part of `user_usage` (ended runs only): what a clock persists, since the running
        jobs it re-adopts after a restart count again from their start."""
        return {} if self._ledger is None else self._ledger.charged_snapshot(now)

    def restore_usage(self, usage_gpu_s: dict[str, float], at_s: float) -> None:
        """Seed the users' charged usage (decayed GPU-seconds as of `at_s`), e.g. from a restarted
        agent's store; a no-op for policies that do not rank by usage."""
        if self._ledger is None:
            return
        for user, value in usage_gpu_s.items():
            self._ledger.charge(user, float(value), at_s)
        self._version += 1
        self._queue.rerank(at_s)  # type: ignore[union-attr]

    def hold_external(self, gpu: int, mem_gb: float) -> None:
        """Memory held on a GPU by processes the scheduler did not start: see `ClusterState.hold_external`."""
        self._state.hold_external(gpu, mem_gb)
        self._version += 1
        self._holds_changed()

    def _holds_changed(self) -> None:
        for o in self._observers:
            o.holds_changed()

    def note_change(self) -> None:
        """Bump `version`: the live state changed outside these methods (the preemptive pass re-ranked
        jobs, a suspended job's memory left its GPUs)."""
        self._version += 1
        self._holds_changed()  # an observer cannot tell what moved: it starts afresh

    def wait_reason(self, slot: JobSlot, now: float) -> WaitReason | None:
        """Why `slot` may not start now by an eligibility rule: its user's quota (`quota_reason`), then
        `wait_rules` in order; None when no rule holds it (it waits for resources or its turn)."""
        quota = self.quota_reason(slot.jid)
        if quota is not None:
            return WaitReason("QOSMaxJobsPerUserLimit" if " runs " in quota else "QOSMaxGRESPerUser", quota)
        for rule in self.wait_rules:
            why = rule(self, slot, now)
            if why is not None:
                return why
        return None

    def fork(self) -> Scheduler:
        """An independent copy of the live state, to run the same code forward (core/forecast.py).

        The cluster, every job record (reservation notes included), both queues and a preemptive
        queue are copied; a preemptive policy is deep-copied (gittins' learned distribution goes on
        learning in the copy only); static policies, placers and the empty-cluster caches are shared.
        Every other attribute is copied shallowly, so a field added later travels too.
        """
        self.settle_levels()  # the copied slots carry current levels
        new = Scheduler(self.spec, self.policy, self.backfill, self._placer, self.oracle)
        fields: dict[str, object] = self.__getstate__()  # type: ignore[assignment]  # every attribute
        for name, value in fields.items():  # (interpreted: the instance dict; compiled: its fields)
            setattr(new, name, value)
        new._identity = object()  # the copy is another view: no memo of this one applies to it
        new.policy = copy.deepcopy(self.policy) if self.policy.preemptive else self.policy
        new.backfill = copy.copy(self.backfill)  # its pass memo names this scheduler: never reused there
        new._state = self._state.copy()
        new.wait_rules = list(self.wait_rules)
        new._observers = []  # the copy's backfill mode builds its own profile of the copy
        slots = {jid: slot.copy() for jid, slot in self._slots.items()}
        new._slots = slots
        if self._ledger is not None:
            new._ledger = copy.deepcopy(self._ledger)
            new._queue = self._queue.copy_with(new._ledger, partial(_entry_on, slots))  # type: ignore[union-attr]
        else:
            new._queue = SortedSeq((*e[:-1], slots[e[-2]]) for e in self._queue)
        new._use = None if self._use is None else copy.deepcopy(self._use)
        new._shapes = None if self._shapes is None else self._shapes.copy(slots)
        new._running = self._running.copy_with(partial(_slot_of, slots))
        new._pre = None if self._pre is None else self._pre.fork(new, _levels(new.policy))
        return new

    # -- the read-only view (SchedulerView) ---------------------------------------------------------
    @property
    def state(self) -> ClusterState:
        """The live cluster (read it; change it only through the Scheduler's methods)."""
        return self._state

    @property
    def placer(self) -> Placer:
        return self._placer

    @property
    def identity(self) -> object:
        """Unique to this scheduler (a fork gets its own): what backfill memos keep (SchedulerView)."""
        return self._identity

    @property
    def waiting_count(self) -> int:
        return len(self._queue) if self._pre is None else len(self._pre.waiting)

    @property
    def version(self) -> int:
        """Changes so far: every call that changes the queue, the running jobs (an expected end
        included) or the cluster bumps it; a backfill mode may reuse a pass's outcome while it stands."""
        return self._version

    @property
    def running_count(self) -> int:
        return len(self._running)

    def waiting(self) -> Iterator[JobSlot]:
        """Waiting jobs in policy order (a preemptive policy's: level, then key, as of its last pass)."""
        if self._pre is not None:
            return map(self._slots.__getitem__, self._pre.waiting.jids())  # lazy (compiled too)
        if self._in_pass:  # during a pass, jobs over their user's quota are passed by
            return self._within_quota(map(_LAST, self._queue))
        return map(_LAST, self._queue)

    def _within_quota(self, slots: Iterator[JobSlot]) -> Iterator[JobSlot]:
        quotas, use = self._quotas, self._use
        assert quotas is not None and use is not None
        reason = use.reason
        for slot in slots:  # lazy: a job started earlier in this pass counts for the next ones
            if reason(quotas, slot.job.user, slot.gpus) is None:
                yield slot

    @property
    def plain_order(self) -> bool:
        """`waiting()` is the plain queue order (see SchedulerView)."""
        return self._pre is None and self._ledger is None and self._quotas is None

    def waiting_shapes(self) -> ShapeIndex | None:
        """The waiting jobs by fits-shape and planned duration (core/shapes.py), for a backfill pass
        that skips what cannot start; None where `waiting()` is not the plain queue order (preemptive
        and fair-share policies, quotas), there the pass visits every job; None too while
        `shapes.INDEX_WAITING` is off (the plain scan, which tests compare it with)."""
        if not self.plain_order:
            return None
        if not shapes.INDEX_WAITING:
            return None
        if self._shapes is None:
            self._shapes = ShapeIndex(map(_LAST, self._queue))
        return self._shapes

    def waiting_jids(self) -> Iterator[int]:
        """Handles of the waiting jobs in policy order."""
        if self._pre is not None:
            return self._pre.waiting.jids()
        return map(_SECOND_LAST, self._queue)

    def running(self) -> Iterator[JobSlot]:
        """Running jobs by expected end, then handle."""
        return self._running.values()

    def slot(self, jid: int) -> JobSlot:
        """The record of a waiting or running job (KeyError when the handle is unknown)."""
        return self._slots[jid]

    def __contains__(self, jid: object) -> bool:
        return jid in self._slots

    def projected_state(self, at_s: float) -> ClusterState:
        """A copy of the cluster as it will be at `at_s` if every running job ends at its expected end."""
        proj = self._state.copy()
        for end, _jid, slot in self._running.items():
            if end > at_s:
                break
            proj.release(slot.alloc, slot.mem_gb, slot.need)
        return proj

    def observe(self, observer: RunningObserver) -> None:
        """Tell `observer` of every start, end, preemption and moved expected end of a running job, and
        of every change to the cluster's holds, from now on (conservative's availability profile)."""
        if observer not in self._observers:
            self._observers.append(observer)

    def unobserve(self, observer: RunningObserver) -> None:
        """Stop telling `observer` (no error when it was not observing)."""
        if observer in self._observers:
            self._observers.remove(observer)

    def start(
        self, slot: JobSlot, gpu_ids: list[int] | tuple[int, ...], now: float, started: list[Started]
    ) -> None:
        """Book a waiting job on `gpu_ids` at `now` (called by backfill modes during `schedule`)."""
        gpu_ids = tuple(gpu_ids)
        self._book(slot, gpu_ids, now, now + slot.plan_s)
        started.append(Started(slot.jid, gpu_ids))

    def _book(self, slot: JobSlot, gpu_ids: tuple[int, ...], start_s: float, end_s: float) -> None:
        self._version += 1
        self._state.place(gpu_ids, slot.mem_gb, slot.need)
        slot.alloc = gpu_ids
        slot.start_s = start_s
        slot.expected_end_s = end_s
        self._running.add(end_s, slot.jid, slot)
        for o in self._observers:
            o.job_started(slot)
        if self._use is not None:
            self._use.add(slot.job.user, slot.gpus)
        if self._ledger is not None:
            self._ledger.start(slot.jid, slot.job.user, slot.gpus, start_s)


def _levels(policy: Policy) -> LevelRule:
    """What ranks a preemptive policy's jobs in its queue: its `level_rule()` (a compiled rule for the
    built-ins, `PreemptivePolicy.level_rule`), else one that asks the policy."""
    rule = getattr(policy, "level_rule", None)
    return PolicyLevels(policy) if rule is None else rule()  # type: ignore[arg-type]


def _entry_on(slots: dict[int, JobSlot], entry: tuple[Any, ...]) -> tuple[Any, ...]:
    """A queue entry `(*key, jid, slot)` on the copied slot of a forked scheduler."""
    return (*entry[:-1], slots[entry[-2]])


def _slot_of(slots: dict[int, JobSlot], slot: JobSlot) -> JobSlot:
    """The copied record of `slot` in a forked scheduler's `slots`."""
    return slots[slot.jid]

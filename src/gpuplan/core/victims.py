"""What the preemptive pass (core/preemption.py) knows of an eviction before it releases anyone: the GPUs
counted victims would free (`VictimTally`), the evictions that failed in the pass so far
(`FailedEvictions`), and whether the pass after one that preempted would decide nothing
(`follow_up_idle`); and the eviction's steps (`find_gpus`, `release_counted`, `any_idle`). Compiled
(native) classes: the pass asks them for every job it tries to place by preempting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, final

from gpuplan.core.placement import Placer
from gpuplan.core.ranks import Ranks
from gpuplan.core.rankseq import JobRank
from gpuplan.core.state import ClusterState, Need
from gpuplan.core.view import JobSlot, Preempted

__all__ = [
    "MAX_FOLLOW_UP",
    "FailedEvictions",
    "FitKey",
    "FitMemo",
    "VictimTally",
    "any_idle",
    "find_gpus",
    "fit_mem",
    "follow_up_idle",
    "left_idle",
    "overlaps",
    "release_counted",
]


def fit_mem(slot: JobSlot, min_cap_gb: float) -> float:
    """The memory in `slot`'s fit key: -1.0 for memory every GPU has (None in `_fit_key_of`)."""
    mem = slot.mem_gb
    return -1.0 if mem is None or mem <= min_cap_gb else mem


@final
class FitKey:
    """A job's fit key (`_fit_key_of`) as fields read as C fields: its GPUs, the memory
    the placer looks at (`fit_mem`), whether it may span nodes and its other needs. What the pass keeps of
    a job that failed (`FailedEvictions`, `FitMemo`)."""

    __slots__ = ("gpus", "mem", "need", "spans")

    def __init__(self, slot: JobSlot, min_cap_gb: float) -> None:
        self.gpus = slot.gpus
        self.mem = fit_mem(slot, min_cap_gb)
        self.spans = slot.may_span
        self.need: Need | None = slot.need

    def same(self, slot: JobSlot, mem: float) -> bool:
        """Whether `slot`, whose `fit_mem` is `mem`, has this key."""
        need = self.need
        return (
            self.gpus == slot.gpus
            and self.mem == mem
            and self.spans == slot.may_span
            and (need is slot.need or need == slot.need)
        )

    def no_harder(self, slot: JobSlot, mem: float) -> bool:
        """Whether a job of this key is at most as hard to place as `slot` (whose `fit_mem` is `mem`): no
        more GPUs, on one node only if `slot` must be too, no more memory, the same other needs."""
        need = self.need
        return (
            self.gpus <= slot.gpus
            and (self.spans or not slot.may_span)
            and self.mem <= mem
            and (need is slot.need or need == slot.need)
        )


def _fit_key_of(slot: JobSlot, min_cap_gb: float) -> tuple[object, ...]:
    """What decides whether a job that does not wait suspended finds GPUs on an exclusive cluster where
    no GPU holds a suspended job's memory: memory that every GPU has does not matter there."""
    mem = slot.mem_gb
    return (slot.gpus, None if mem is None or mem <= min_cap_gb else mem, slot.may_span, slot.need)


# a module attribute read at each call, also compiled, so a test can put the plain rule in its place
_fit_key: Callable[[JobSlot, float], object] = _fit_key_of
_FIT_KEY: Final[Callable[[JobSlot, float], object]] = _fit_key_of


class FitMemo:
    """The fit keys (`_fit_key_of`) of jobs that failed in a pass (`core.preemption.PreemptiveQueue`'s):
    kept as the key's fields and compared natively (a key tuple was built, boxed and hashed at every
    look-up); the keys of a rule a test put in `_fit_key`'s place go in a set. The rule is read when
    the memo is made or reset (once per pass)."""

    __slots__ = ("fits", "other", "rule")

    def __init__(self) -> None:
        self.fits: list[FitKey] = []
        self.other: set[object] = set()
        self.rule: Callable[[JobSlot, float], object] | None = None
        self.reset()

    def reset(self) -> FitMemo:
        """Empty, reading the rule again (a pass keeps one memo and resets it at its start)."""
        self.clear()
        rule = _fit_key
        self.rule = None if rule is _FIT_KEY else rule
        return self

    def __bool__(self) -> bool:
        return len(self.fits) > 0 or len(self.other) > 0

    def clear(self) -> None:
        self.fits.clear()
        self.other.clear()

    def add(self, slot: JobSlot, min_cap_gb: float) -> None:
        rule = self.rule
        if rule is not None:
            self.other.add(rule(slot, min_cap_gb))
        elif not self.has(slot, min_cap_gb):
            self.fits.append(FitKey(slot, min_cap_gb))

    def has(self, slot: JobSlot, min_cap_gb: float) -> bool:
        """Whether a job of `slot`'s fit key failed."""
        rule = self.rule
        if rule is not None:
            return rule(slot, min_cap_gb) in self.other
        mem = fit_mem(slot, min_cap_gb)
        return any(fit.same(slot, mem) for fit in self.fits)


class FailedEvictions:
    """Evictions that failed in a pass since it last freed anything, on an exclusive cluster where no GPU
    holds a suspended job's memory and no running job would keep it (the count of `_evict`, then the
    placer): a later job of the pass fails alike when it is at least as hard to place (as many GPUs or
    more, on one node if the failed one was, as much memory the placer looks at, the same other needs)
    and its victims are among the failed one's. They are: it ranks at the same level or higher, so the
    running jobs above it are among those above the failed one, and a lease that bound one for the
    failed job binds it for this one too (a lease binds a job of a level at or above the victim's start
    level), unless the failed job was one no lease binds (then any). A start that freed nothing only
    took idle GPUs from it; one that freed GPUs ends the memo. Such a job only notes the leases its
    count would have noted (`PreemptiveQueue._note_leases`). It relies on what every built-in placer
    does (core/placement.py, core/fgd.py): a job fails only where no node can host it, so a job that
    needs more fails where a smaller one failed."""

    __slots__ = ("failed", "lease_free")

    def __init__(self) -> None:
        self.failed: list[FitKey] = []
        self.lease_free: list[bool] = []  # whether no lease could bind the failed job

    def __bool__(self) -> bool:
        return len(self.failed) > 0

    def clear(self) -> None:
        self.failed.clear()
        self.lease_free.clear()

    def add(self, slot: JobSlot, min_cap_gb: float, lease_free: bool) -> None:
        if slot.gpus > 0:
            self.failed.append(FitKey(slot, min_cap_gb))
            self.lease_free.append(lease_free)

    def covers(self, slot: JobSlot, min_cap_gb: float, lease_free: bool) -> bool:
        """Whether `slot`'s eviction fails as one noted did (while no running job may keep its memory
        and no GPU holds a suspended job's: the caller's test)."""
        mem = fit_mem(slot, min_cap_gb)
        failed, free = self.failed, self.lease_free
        return any((free[k] or not lease_free) and failed[k].no_harder(slot, mem) for k in range(len(failed)))


class VictimTally:
    """GPUs that releasing counted victims would make idle on an exclusive cluster, without releasing
    them: `add` says whether the job could then be placed (a placer finds GPUs for a job of n GPUs only
    where n are idle: in all when it may span nodes, else on one node)."""

    __slots__ = ("dec", "gain", "need", "njobs", "node_idle", "node_of", "spans", "total", "touched")

    def __init__(self, state: ClusterState, slot: JobSlot) -> None:
        self.dec: dict[int, int] = {}  # GPU -> counted victims on it (a GPU with several holders)
        self.gain = [0] * len(state.node_idle)  # node -> GPUs the counted victims free there
        self.touched: list[int] = []  # the nodes whose gain is not 0
        self.restart(state, slot)

    def restart(self, state: ClusterState, slot: JobSlot) -> VictimTally:
        """Count again from nothing, for `slot` on `state` as it is now (a pass keeps one tally)."""
        self.njobs, self.node_of, self.node_idle = state.gpu_njobs, state.gpu_node, state.node_idle
        self.need = slot.gpus
        self.spans = slot.may_span
        self.total = state.idle_total  # idle GPUs once every counted victim is released
        if self.dec:
            self.dec.clear()
        gain = self.gain
        if len(gain) != len(state.node_idle):
            self.gain = [0] * len(state.node_idle)
        else:
            for n in self.touched:
                gain[n] = 0
        self.touched.clear()
        return self

    def add(self, alloc: tuple[int, ...]) -> bool:
        """Count one more victim; whether the job may fit once every counted victim is released."""
        njobs, gain, node_of = self.njobs, self.gain, self.node_of
        need, total = self.need, self.total
        fits = False
        at, k = -1, 0  # the node of the GPUs counted last, and its gain so far (a job's GPUs come by node)
        for g in alloc:
            held = njobs[g]
            if held == 1:
                d = 1  # its only occupant (no other victim can share it)
            else:
                dec = self.dec
                d = dec[g] = dec.get(g, 0) + 1
            if held == d:  # no other occupant: idle once released
                n = node_of[g]
                if n != at:
                    if at >= 0 and self._gained(at, k):
                        fits = True
                    at, k = n, gain[n]
                    if k == 0:
                        self.touched.append(n)
                k += 1
                total += 1
        if at >= 0 and self._gained(at, k):
            fits = True
        self.total = total
        if total < need:
            return False
        return fits or self.spans

    def _gained(self, n: int, k: int) -> bool:
        """Node `n` gains `k` GPUs in all: whether it could then host the job."""
        self.gain[n] = k
        return self.node_idle[n] + k >= self.need

    def hosts(self) -> list[int]:
        """The nodes where the job fits once every counted victim is released (for a job on one node;
        read before `restart`)."""
        node_idle, gain, need = self.node_idle, self.gain, self.need
        return [n for n in self.touched if node_idle[n] + gain[n] >= need]


MAX_FOLLOW_UP: Final = 64
"""More jobs ranked before the last start that freed GPUs than this: `follow_up_idle` does not try them
all (it answers False: the pass after runs, as it would have)."""


def follow_up_idle(
    r: Ranks,
    state: ClusterState,
    placer: Placer,
    victims: list[JobRank],
    level: float,
    order: int,
    tally: VictimTally | None = None,
) -> bool:
    """Whether a pass now, right after one that preempted (`victims`, now waiting) and whose last start
    that freed GPUs was of the job at (`level`, `order`), would decide nothing, on an exclusive cluster
    where no GPU holds a suspended job's memory and no running job would keep it (False otherwise, and
    whenever it cannot tell).

    That pass walks the queue again. A job the last one tried after that start saw the state as it is
    (later starts only took idle GPUs, and a job they put among its victims holds GPUs that were idle
    at its try): it fails alike, and so does every job the last pass did not reach because every job
    left failed alike or ranked at the highest running level. What may act is a job ranked before
    that start (it failed with fewer GPUs idle) or a victim (a pass never tries the jobs it preempted).
    Each fails when the placer finds no GPUs for it and, counting every running job above its level
    as released (a lease or not), no node could host it (`VictimTally`): a job that fails so fails
    whatever the leases, so the leases its try would note make no pass act either. `tally`: one to
    count with (the queue's), else a new one."""
    if state.sharing or state.suspended_n or r.suspend_running:
        return False
    if r.waiting.rank(level, order, False) > MAX_FOLLOW_UP:
        return False
    worst = r.worst()
    cursor = r.waiting.cursor()
    rec = cursor.next()
    while rec is not None and (rec.level < level or (rec.level == level and rec.order < order)):
        if not _fails_now(r, state, placer, rec, worst, tally):
            return False
        rec = cursor.next()
    return all(_fails_now(r, state, placer, rec, worst, tally) for rec in victims)


def _fails_now(
    r: Ranks, state: ClusterState, placer: Placer, rec: JobRank, worst: float, tally: VictimTally | None
) -> bool:
    slot = rec.slot
    if slot.suspended_on or slot.gpus <= 0:
        return False
    if placer.find(state, slot.gpus, slot.mem_gb, slot.may_span, slot.need) is not None:
        return False
    level = rec.level
    if level >= worst:
        return True  # nobody runs above it
    tally = VictimTally(state, slot) if tally is None else tally.restart(state, slot)
    for victim in r.running.above(level):
        if victim.mode != "never" and tally.add(victim.slot.alloc):
            return False
    return True


def overlaps(taken: tuple[int, ...], gpus: tuple[int, ...]) -> bool:
    """Whether any of `gpus` is in `taken` (compiled to two loops over a job's few GPUs: no set built)."""
    return any(_has(taken, g) for g in gpus)


def _has(gpus: tuple[int, ...], gpu: int) -> bool:
    """`gpu in gpus`, compared as C ints."""
    return any(g == gpu for g in gpus)


def left_idle(preempted: list[Preempted], since: int, gpus: list[int] | tuple[int, ...]) -> bool:
    """Whether a victim preempted since `preempted[since]` holds a GPU that the start on `gpus` does not
    take (it is idle now)."""
    taken = tuple(gpus)
    return any(not _has(taken, g) for k in range(since, len(preempted)) for g in preempted[k].gpu_ids)


def release_counted(
    state: ClusterState, counted: list[JobRank], freed: list[bool], hosts: list[int] | None
) -> int:
    """Release an eviction's counted victims not yet released (`freed`), in order: those with a GPU on
    a node of `hosts` when given, else every one (a victim of mode `suspend` keeps its memory there).
    Returns how many it released."""
    node_of = state.gpu_node
    n = 0
    for k in range(len(counted)):
        if freed[k]:
            continue
        v = counted[k].slot
        if hosts is not None and not any(node_of[g] in hosts for g in v.alloc):
            continue
        freed[k] = True
        n += 1
        state.release(v.alloc, v.mem_gb, v.need)
        if counted[k].mode == "suspend":
            state.hold_suspended(v.alloc, v.mem_gb)
    return n


def any_idle(state: ClusterState, gpus: list[int]) -> bool:
    """Whether one of `gpus` is idle (an exclusive cluster's)."""
    njobs = state.gpu_njobs
    return any(njobs[g] == 0 for g in gpus)


def find_gpus(state: ClusterState, placer: Placer, slot: JobSlot) -> list[int] | tuple[int, ...] | None:
    """GPUs for `slot` now: idle ones, else (a job that declares its memory) idle ones and GPUs where it
    fits beside suspended jobs' memory."""
    gpus = placer.find(state, slot.gpus, slot.mem_gb, slot.may_span, slot.need)
    if gpus is not None or slot.mem_gb is None or not state.suspended_n:
        return gpus
    beside = [g for g in state.suspended_n if state.fits_beside_suspended(g, slot.mem_gb)]
    if not beside:
        return None
    trial = state.copy()
    for g in beside:  # as if idle: the placer then ranks them with the idle GPUs
        trial.suspended_n.pop(g)
        trial.suspended_gb.pop(g)
        trial.vacate_all(g)
    return placer.find(trial, slot.gpus, slot.mem_gb, slot.may_span, slot.need)

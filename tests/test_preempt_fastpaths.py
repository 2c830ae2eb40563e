"""The preemptive pass's shortcuts give the schedules of the plain rules they skip work in.

- `PreemptiveQueue._evict_for` counts victims (`VictimTally`) instead of releasing each one and asking
  the placer again: checked by hand, and against the plain rule (release every victim in turn, ask the
  placer after each).
- `PreemptiveQueue.decide` does not walk a settled queue (the last pass decided nothing and only level
  changes no pass acts on came since): against walking every pass.
- A running job's level change waits for the first reader of running levels (`Ranks.catch_up`):
  against making every change at its pass.
- After a settled pass the clock waits for the first level change a pass may act on
  (`Ranks.next_loud_s`, las' `LevelRule.rise_s`), not for every change: against stopping at each.
- A pass that preempted is settled when a pass right after it would decide nothing
  (`core.victims.follow_up_idle`: the jobs ranked before its last start that freed GPUs and its victims
  fail, counting every running job above them as released): against a pass at every change ("settle").
- A pass passes by a job whose fit key (memory every GPU has left out) failed earlier in the pass:
  against trying every job of a new shape.
- Shapes leave out memory every GPU has (tiresias, gittins) until a job that keeps its memory (mode
  `suspend`) is known: against shapes that keep it.
Both on random traces under every preemptive policy, preempt modes mixed.
"""

from __future__ import annotations

import dataclasses
import pickle
import random

import pytest

from gpuplan.core import preemption, victims
from gpuplan.core.preemption import PreemptiveQueue, VictimTally
from gpuplan.core.state import ClusterState
from gpuplan.core.view import JobSlot
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.engine import simulate

A100 = GpuSpec("A100-80GB", 80.0)


def _cluster(nodes: int, per_node: int) -> ClusterSpec:
    return ClusterSpec(f"{nodes}x{per_node}", tuple(NodeSpec(f"n{i}", per_node, A100) for i in range(nodes)))


def _slot(gpus: int, may_span: bool = False) -> JobSlot:
    return JobSlot(0, Job("w", 0.0, gpus, may_span_nodes=may_span), gpus, None, 100.0, may_span)


def test_the_tally_says_fit_only_once_one_node_could_host_the_job() -> None:
    # 2 nodes x 4 GPUs; node 0: GPUs 0-1 idle, 2-3 busy; node 1 all busy (GPU 7 by two holders).
    state = ClusterState(_cluster(2, 4))
    for gpus in ((2,), (3,), (4, 5), (6,), (7,), (7,)):
        state.place(gpus, None)
    tally = VictimTally(state, _slot(4))
    assert not tally.add((4, 5))  # node 1 would have 2 idle, node 0 still 2: no node has 4
    assert not tally.add((2,))  # node 0: 3 idle
    assert tally.add((3,))  # node 0: 4 idle
    # node 1: GPU 7 has a second holder, so counting one of them frees nothing there
    tally = VictimTally(state, _slot(4))
    assert not tally.add((6,)) and not tally.add((7,))
    assert tally.total == 3  # the 2 idle on node 0 and GPU 6
    assert not tally.add((4, 5))  # node 1: 3 idle of 4
    assert tally.add((7,))  # the second holder of GPU 7: node 1 all idle


def test_a_spanning_job_fits_once_enough_gpus_are_idle_in_all() -> None:
    state = ClusterState(_cluster(2, 4))
    for gpus in ((0,), (1,), (4,), (5,), (6,), (7,)):
        state.place(gpus, None)
    tally = VictimTally(state, _slot(5, may_span=True))
    assert not tally.add((0,))  # 3 idle
    assert not tally.add((4,))  # 4 idle
    assert tally.add((6,))  # 5 idle over two nodes
    assert not VictimTally(state, _slot(5)).add((0,))


def _plain_evict_for(self, slot, now, out, preempted):  # type: ignore[no-untyped-def]
    """The rule before the tally: release every victim in turn, ask the placer after each."""
    sched, state = self.sched, self.sched.state
    released = []
    gpus = None
    for entry in reversed(list(self.running)):
        if entry.level <= slot.level:
            break
        victim = sched.slot(entry.jid)
        mode = victim.job.preempt_mode
        r = self.ranks
        if mode == "never" or r.leased(r.record(victim), r.record(slot), now, sched.preemption_cost):
            continue
        state.release(victim.alloc, victim.mem_gb, victim.need)
        if mode == "suspend":
            state.hold_suspended(victim.alloc, victim.mem_gb)
        released.append(victim)
        if state.sharing or state.idle_total >= slot.gpus or state.suspended_n:
            gpus = victims.find_gpus(state, sched.placer, slot)
            if gpus is not None:
                break
    taken = set(gpus or ())
    for victim in released:
        if victim.job.preempt_mode == "suspend":
            state.drop_suspended(victim.alloc, victim.mem_gb)
        state.place(victim.alloc, victim.mem_gb, victim.need)
    if gpus is None:
        return None
    for victim in released:
        if taken.intersection(victim.alloc):
            out.append(sched.preempt(victim.jid, now))
            preempted.add(victim.jid)
    return gpus


def _trace(rng: random.Random, n: int, suspend: bool) -> list[Job]:
    jobs, t = [], 0.0
    modes = ["checkpoint", "checkpoint", "requeue", "never", *(["suspend"] if suspend else [])]
    for i in range(n):
        t += rng.expovariate(1 / 40.0)
        duration_s = float(rng.choice([20, 60, 200, 900, 3000]))
        mode = rng.choice(modes)
        if mode == "requeue" and duration_s > 60:  # a long requeued job may never finish under las
            mode = "checkpoint"
        gpus = rng.choice([1, 1, 1, 2, 2, 3, 4, 4, 6, 8])
        jobs.append(
            Job(f"j{i}", round(t, 1), gpus, mem_gb=rng.choice([10.0, 30.0, 70.0]), duration_s=duration_s,
                may_span_nodes=gpus > 4 or (gpus > 1 and rng.random() < 0.3), meta={"preempt": mode})
        )  # fmt: skip
    return jobs


def _schedule(jobs: list[Job], policy: str, placer: str = "first-fit") -> tuple[object, ...]:
    r = simulate(jobs, _cluster(3, 4), policy, "none", placer)
    return tuple(sorted((x.job_id, x.start_s, x.end_s, x.gpus) for x in r.records)), r.metrics.preemptions


_REFRESH = PreemptiveQueue.refresh


def _never_quiet(self, now):  # type: ignore[no-untyped-def]
    _REFRESH(self, now)
    return False  # every pass walks the queue


def _eager_levels(self, now):  # type: ignore[no-untyped-def]
    quiet = _REFRESH(self, now)
    self.catch_up()  # every running job's change made at its pass, read or not
    return quiet


def _exact_shape(self, slot):  # type: ignore[no-untyped-def]
    return (slot.gpus, slot.mem_gb, slot.may_span, slot.need, bool(slot.suspended_on))


@pytest.mark.parametrize("policy", ["las:quantum=100", "tiresias:threshold=200", "gittins:first=50"])
@pytest.mark.parametrize("plain", ["evict", "settle", "eager", "stops", "fits", "shapes"])
def test_the_shortcuts_give_the_schedules_of_the_plain_rules(
    policy: str, plain: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(policy)
    traces = [_trace(rng, rng.randint(10, 40), suspend=k % 2 == 0) for k in range(12)]
    fast = [_schedule(jobs, policy) for jobs in traces]
    if plain == "evict":
        monkeypatch.setattr(preemption, "_evict_rule", _plain_evict_for)
    elif plain == "settle":  # a whole pass at every level change
        monkeypatch.setattr(preemption, "_refresh_rule", _never_quiet)
        monkeypatch.setattr(preemption, "_skip_quiet", False)
    elif plain == "stops":  # the clock stops at every level change while a job waits
        monkeypatch.setattr(preemption, "_skip_quiet", False)
    elif plain == "eager":  # running jobs' level changes made at every pass, not at the first read
        monkeypatch.setattr(preemption, "_refresh_rule", _eager_levels)
    elif plain == "fits":  # no two jobs share a fit key: each new shape is tried
        monkeypatch.setattr(victims, "_fit_key", lambda slot, cap: object())
    else:
        monkeypatch.setattr(preemption, "_shape_rule", _exact_shape)
    slow = [_schedule(jobs, policy) for jobs in traces]
    assert fast == slow
    assert sum(p for _, p in slow) > 30  # the traces do preempt


@pytest.mark.parametrize("placer", ["best-fit", "spread", "fgd"])
def test_releasing_only_the_victims_on_nodes_that_can_host_gives_the_plain_rules_schedules(
    placer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node-local placer (`Placer.node_local`) sees only the victims on nodes that can host the job
    released: the schedules of the plain rule (every victim released in turn), under each placer."""
    rng = random.Random(placer)
    traces = [_trace(rng, rng.randint(10, 40), suspend=k % 2 == 0) for k in range(12)]
    fast = [_schedule(jobs, "las:quantum=100", placer) for jobs in traces]
    monkeypatch.setattr(preemption, "_evict_rule", _plain_evict_for)
    slow = [_schedule(jobs, "las:quantum=100", placer) for jobs in traces]
    assert fast == slow
    assert sum(p for _, p in slow) > 30  # the traces do preempt


@pytest.mark.parametrize(
    "policy", ["las:quantum=300", "las:quantum=400", "tiresias:threshold=100", "gittins:first=50"]
)
def test_a_settled_pass_that_preempted_gives_the_schedules_of_a_pass_at_every_change(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More traces for what a settled pass lets the next ones skip (`follow_up_idle`, the jobs of levels
    no change crossed, quiet stops, stale ends), some crowded (arrivals every 12 to 20 s on average) so
    that big jobs at the head of the queue fail before a small one preempts: the schedules of a whole
    pass at every level change and every end (nothing settled, nothing skipped)."""
    rng = random.Random(f"many {policy}")
    traces = []
    for k in range(60):
        jobs = _trace(rng, rng.randint(15, 40), suspend=k % 5 == 0)
        scale = rng.choice([0.3, 0.5, 1.0])
        traces.append([dataclasses.replace(j, submit_s=round(j.submit_s * scale, 1)) for j in jobs])
    fast = [_schedule(jobs, policy) for jobs in traces]
    monkeypatch.setattr(preemption, "_refresh_rule", _never_quiet)
    monkeypatch.setattr(preemption, "_skip_quiet", False)
    slow = [_schedule(jobs, policy) for jobs in traces]
    assert fast == slow
    assert sum(p for _, p in slow) > 100


def test_a_quiet_change_within_the_lease_tolerance_of_a_lease_end_is_a_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A running job's quiet change 5e-13 s before a lease end (las:quantum=120): a pass there sees the
    lease as ended (`Ranks.lease_binds` takes an end within 1e-9 of now as past), so the clock stops
    there (`Ranks.next_loud_s`), as a pass at every change does; it stopped at the lease end, and the
    schedules parted. The 63rd of the random traces of the check above for that policy."""
    rng = random.Random("many las:quantum=120")
    for k in range(63):
        jobs = _trace(rng, rng.randint(15, 40), suspend=k % 5 == 0)
        scale = rng.choice([0.3, 0.5, 1.0])
    jobs = [dataclasses.replace(j, submit_s=round(j.submit_s * scale, 1)) for j in jobs]
    fast = _schedule(jobs, "las:quantum=120")
    monkeypatch.setattr(preemption, "_refresh_rule", _never_quiet)
    monkeypatch.setattr(preemption, "_skip_quiet", False)
    assert fast == _schedule(jobs, "las:quantum=120")


def test_the_settled_shortcuts_on_a_big_crowded_cluster_give_the_schedules_of_a_pass_at_every_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same check where the shortcuts' bounds apply: 96 GPUs with up to ~90 running jobs (more than
    `MAX_LOUD_SCAN`: the clock stops at each change, and a waiting level that comes or goes ends every
    kept bound) and queues of ~200 (more than `MAX_FOLLOW_UP` jobs before a freeing start: the pass
    after one that preempted runs)."""
    rng = random.Random(7)
    traces = []
    for _ in range(3):
        jobs, t = [], 0.0
        for i in range(400):
            t += rng.expovariate(1 / 4.0)
            jobs.append(Job(f"j{i}", round(t, 1), rng.choice([1, 1, 1, 2, 4]), mem_gb=30.0,
                            duration_s=float(rng.choice([100, 400, 1500, 5000])), meta={"preempt": "checkpoint"}))  # fmt: skip
        traces.append(jobs)

    def run() -> list[tuple[object, ...]]:
        out = []
        for jobs in traces:
            r = simulate(jobs, _cluster(12, 8), "las:quantum=300", "none")
            out.append(
                (
                    tuple(sorted((x.job_id, x.start_s, x.end_s, x.gpus) for x in r.records)),
                    r.metrics.preemptions,
                )
            )
        return out

    fast = run()
    monkeypatch.setattr(preemption, "_refresh_rule", _never_quiet)
    monkeypatch.setattr(preemption, "_skip_quiet", False)
    slow = run()
    assert fast == slow
    assert min(p for _, p in slow) > 1000  # type: ignore[operator]


def test_a_start_leaves_idle_the_victims_gpus_it_does_not_take() -> None:
    """`overlaps` and `left_idle` (what ends a pass's shortcut after a settled one) against sets."""
    from gpuplan.core.preemption import Preempted
    from gpuplan.core.victims import left_idle, overlaps

    assert overlaps((1, 2, 3), (3, 9)) and not overlaps((1, 2, 3), (4, 9)) and not overlaps((), (1,))
    victims = [Preempted(5, (0, 1), "checkpoint"), Preempted(6, (2, 3), "checkpoint")]
    assert not left_idle(victims, 0, [0, 1, 2, 3, 7])  # every victim GPU taken (and an idle one)
    assert left_idle(victims, 0, (0, 1, 2))  # GPU 3 left idle
    assert not left_idle(victims, 1, (2, 3))  # only the victims since index 1 count
    assert not left_idle(victims, 2, ())


def test_gittins_levels_follow_each_rebuilt_table() -> None:
    """Gittins keeps each GPU count's table until one is rebuilt: a level asked before any history is the
    LAS fallback (its grid point), the same level asked after the bucket's table is built is minus its
    index; a waiting job's next change is never (it attains nothing)."""
    from gpuplan.core.preemptive import Gittins

    g = Gittins(first_gpu_s=100.0, levels=4, min_samples=2)
    running = JobSlot(1, Job("r", 0.0, 1), 1, None, 100.0, False, alloc=(0,), start_s=0.0)
    waiting = JobSlot(2, Job("w", 0.0, 1), 1, None, 100.0, False)
    assert g.level(running, 50.0) == 0.0 and g.next_change_s(running, 50.0) == 100.0
    assert not g.observe(Job("a", 0.0, 1), 150.0)  # one sample: below min_samples, no table of its own
    assert g.level(running, 50.0) == 0.0
    assert g.observe(Job("b", 0.0, 1), 150.0)  # two: the table is built and ranks move
    assert g.level(running, 50.0) == pytest.approx(-2.0 / 300.0)
    assert g.next_change_s(waiting, 50.0) == float("inf")


def test_a_finished_job_is_observed_only_by_a_policy_that_observes(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Scheduler.finish` skips `observe` for a policy that keeps the base one (`observes` False): a
    subclass that overrides it is told of every completed job, a wrapper (the agent's) answers for its
    inner policy, and the skip gives the schedules of calling it at every end."""
    from gpuplan.agent.engine import AgentPolicy
    from gpuplan.core.preemptive import Gittins, Las, PreemptivePolicy, Tiresias

    assert not Las().observes and not Tiresias().observes and Gittins().observes
    assert not AgentPolicy("las", {}, {}).observes and AgentPolicy("gittins", {}, {}).observes
    seen: list[str] = []

    class Counting(Las):
        def observe(self, job: Job, service_gpu_s: float) -> bool:
            seen.append(job.id)
            return False

    assert Counting().observes
    jobs = _trace(random.Random(5), 40, suspend=False)
    r = simulate(jobs, _cluster(3, 4), Counting(), "none")
    assert sorted(seen) == sorted(x.job_id for x in r.records) and len(seen) == 40
    traces = [_trace(random.Random(seed), 50, suspend=seed % 2 == 0) for seed in range(4)]
    fast = [_schedule(jobs, policy) for jobs in traces for policy in ("las", "tiresias")]
    monkeypatch.setattr(PreemptivePolicy, "observes", property(lambda self: True))
    assert fast == [_schedule(jobs, policy) for jobs in traces for policy in ("las", "tiresias")]
    assert sum(p for _, p in fast) > 30  # the traces do preempt


def test_a_preemption_is_a_preempted_of_the_jobs_mode() -> None:
    """`Scheduler.preempt` reads a job's mode through its preemptive queue (once per job) and builds its
    `Preempted` without the NamedTuple's interpreted constructor: a real `Preempted`, by mode."""
    from gpuplan.core.preemption import Preempted
    from gpuplan.core.scheduler import Scheduler
    from gpuplan.errors import ScheduleError

    s = Scheduler(_cluster(1, 4), "las", "none")
    for jid, mode in enumerate(["checkpoint", "suspend", "requeue", "never"]):
        s.submit(jid, Job(f"j{jid}", 0.0, 1, mem_gb=10.0, duration_s=100.0, meta={"preempt": mode}), now=0.0)
    started = s.decide(0.0).started
    assert sorted(st.jid for st in started) == [0, 1, 2, 3]
    for jid, mode in enumerate(["checkpoint", "suspend", "requeue"]):
        p = s.preempt(jid, 5.0)
        assert type(p) is Preempted and p == Preempted(jid, s.slot(jid).suspended_on or p.gpu_ids, mode)
        assert (p.jid, p.action) == (jid, mode) and len(p.gpu_ids) == 1
    with pytest.raises(ScheduleError, match="never"):
        s.preempt(3, 5.0)


def test_the_built_in_level_rules_give_the_policies_own_levels(monkeypatch: pytest.MonkeyPatch) -> None:
    """`PreemptivePolicy.level_rule`: las and tiresias rank through a compiled `LevelRule` that gives, for
    any job and instant, the level and next change the policy's own methods give (tiresias' promotion
    resets the job alike); a subclass that overrides `level` is asked itself (`PolicyLevels`), and the
    rules give the schedules of asking the policies."""
    from gpuplan.core.preemptive import Gittins, Las, PolicyLevels, Tiresias

    rng = random.Random(11)
    promoted = 0
    for policy in (Las(), Las(quantum_gpu_s=300.0), Tiresias(), Tiresias((600, 3600.0), promote_knob=2)):
        rule = policy.level_rule()
        assert type(rule) is not PolicyLevels and rule.endless_levels == policy.endless_levels
        twin = pickle.loads(pickle.dumps(rule))  # (a forked scheduler's, a worker's)
        assert type(twin) is type(rule) and twin.args() == rule.args()
        for _ in range(300):
            running = rng.random() < 0.5
            slot = JobSlot(1, Job("j", 0.0, 2), rng.choice([1, 2, 4]), None, 100.0, False,
                           start_s=rng.uniform(0.0, 5000.0) if running else None)  # fmt: skip
            slot.service_gpu_s = rng.choice([0.0, rng.uniform(0.0, 9000.0)])
            slot.run_since_promotion_s = rng.choice([0.0, rng.uniform(0.0, 2000.0)])
            slot.waiting_since_s = rng.uniform(0.0, 5000.0)
            now = rng.uniform(5000.0, 12000.0)
            mine, theirs = slot.copy(), slot.copy()
            assert rule.level(mine, now) == policy.level(theirs, now)
            assert (mine.service_gpu_s, mine.run_since_promotion_s) == (
                theirs.service_gpu_s, theirs.run_since_promotion_s)  # fmt: skip
            assert rule.next_change_s(mine, now) == policy.next_change_s(theirs, now)
            promoted += mine.service_gpu_s == 0.0 < slot.service_gpu_s
    assert promoted > 20  # tiresias promoted waiting jobs: the reset is compared too
    asked: list[int] = []

    class Own(Las):
        def level(self, slot: JobSlot, now: float) -> float:
            asked.append(slot.jid)
            return super().level(slot, now)

    assert type(Own().level_rule()) is PolicyLevels
    assert type(Gittins().level_rule()) is not PolicyLevels  # (tests/test_preempt_gittins.py)
    simulate(_trace(random.Random(3), 20, suspend=False), _cluster(3, 4), Own(), "none")
    assert asked
    traces = [_trace(random.Random(seed), 50, suspend=seed % 2 == 0) for seed in range(4)]
    fast = [_schedule(jobs, policy) for jobs in traces for policy in ("las", "tiresias")]
    monkeypatch.setattr(Las, "level_rule", lambda self: PolicyLevels(self))
    monkeypatch.setattr(Tiresias, "level_rule", lambda self: PolicyLevels(self))
    assert fast == [_schedule(jobs, policy) for jobs in traces for policy in ("las", "tiresias")]


def test_a_job_without_meta_reads_the_default_preempt_terms() -> None:
    """`Job.preempt_mode` and `checkpointable` answer a job without meta at once: the defaults the full
    reading gives (a meta without the two keys takes the full reading)."""
    from gpuplan.model import PREEMPT_MODES, SharedMeta

    bare, other = Job("a", 0.0, 1), Job("b", 0.0, 1, meta={"queue": "q"})
    assert (bare.preempt_mode, bare.checkpointable) == (other.preempt_mode, other.checkpointable)
    assert (bare.preempt_mode, bare.checkpointable) == ("checkpoint", True)
    empty = Job("c", 0.0, 1, meta=SharedMeta({}))
    assert (empty.preempt_mode, empty.checkpointable) == ("checkpoint", True)
    for mode in PREEMPT_MODES:
        job = Job("d", 0.0, 1, meta={"preempt": mode})
        assert job.preempt_mode == mode and job.checkpointable == (mode != "requeue")
    assert Job("e", 0.0, 1, meta={"checkpointable": False}).preempt_mode == "requeue"


def test_a_restarted_tally_counts_as_a_new_one() -> None:
    """`VictimTally.restart` (the pass keeps one tally per queue) answers as a fresh tally does, on
    random placements and victims, spanning or not."""
    rng = random.Random(7)
    state = ClusterState(_cluster(4, 4))
    kept = VictimTally(state, _slot(1))
    for _ in range(200):
        state = ClusterState(_cluster(4, 4))
        for g in range(16):
            if rng.random() < 0.7:
                state.place((g,), None)
        slot = _slot(rng.choice([1, 2, 3, 4, 6]), may_span=rng.random() < 0.3)
        fresh = VictimTally(state, slot)
        kept.restart(state, slot)
        for _ in range(6):
            alloc = tuple(rng.sample(range(16), rng.choice([1, 2])))
            assert kept.add(alloc) == fresh.add(alloc)
            assert kept.total == fresh.total


def test_the_fit_memo_is_the_set_of_fit_keys() -> None:
    """`FitMemo` says a job's fit key failed exactly when a set of the keys as tuples holds it (GPUs,
    memory unless every GPU has it, spanning, other needs)."""
    from gpuplan.core.state import Need
    from gpuplan.core.victims import FitMemo

    def key(slot: JobSlot, cap: float) -> tuple[object, ...]:
        mem = slot.mem_gb
        return (slot.gpus, None if mem is None or mem <= cap else mem, slot.may_span, slot.need)

    rng = random.Random(3)
    memo, keys = FitMemo(), set()
    needs = [None, Need(cpu_milli=1000.0), Need(cpu_milli=1000.0), Need(host_mem_gb=8.0)]
    for _ in range(300):
        gpus = rng.choice([1, 2, 4])
        slot = JobSlot(0, Job("w", 0.0, gpus), gpus, rng.choice([None, 20.0, 79.0, 90.0]), 100.0,
                       rng.random() < 0.5, need=rng.choice(needs))  # fmt: skip
        assert memo.has(slot, 80.0) == (key(slot, 80.0) in keys)
        if rng.random() < 0.3:
            memo.add(slot, 80.0)
            keys.add(key(slot, 80.0))
    assert keys and bool(memo)
    memo.clear()
    assert not memo


def test_a_running_jobs_level_is_made_when_read() -> None:
    """A pass that reads no running level leaves a running job's due change for later: its level is
    the one of its last move until `Scheduler.settle_levels` (or a fork, or the next change asked)
    makes it, at that pass's instant."""
    from gpuplan.core.scheduler import Scheduler

    sched = Scheduler(_cluster(1, 4), "las:quantum=100", "none")
    sched.submit(0, Job("a", 0.0, 1, duration_s=1e6), None, now=0.0)
    assert [st.jid for st in sched.decide(0.0).started] == [0]
    a = sched.slot(0)
    assert a.level == 0.0
    sched.submit(1, Job("b", 250.0, 1, duration_s=1e6), None, now=250.0)
    assert [st.jid for st in sched.decide(250.0).started] == [1]  # on an idle GPU: no running level read
    assert a.level == 0.0  # its changes at 100 and 200 are not made yet
    fork = sched.fork()
    assert fork.slot(0).level == 2.0  # the fork reads current levels
    sched.settle_levels()
    assert a.level == 2.0  # at the pass's instant (250 GPU-s: 2 whole quanta), not a later one
    assert sched.next_event_s() == pytest.approx(300.0)


def test_a_failed_eviction_covers_only_jobs_at_least_as_hard_to_place() -> None:
    """`FailedEvictions.covers`: as many GPUs or more, on one node if the failed job was, as much memory
    the placer looks at, the same other needs; and a failed job a lease could bind covers only jobs a
    lease could bind (their victims are among its own)."""
    from gpuplan.core.state import Need
    from gpuplan.core.victims import FailedEvictions

    def slot(gpus: int, span: bool = False, mem: float | None = None, need: Need | None = None) -> JobSlot:
        return JobSlot(0, Job("w", 0.0, gpus), gpus, mem, 100.0, span, need=need)

    memo = FailedEvictions()
    memo.add(slot(4), 80.0, lease_free=False)
    assert memo.covers(slot(4), 80.0, False) and memo.covers(slot(8), 80.0, False)
    assert memo.covers(slot(4, mem=79.0), 80.0, False)  # memory every GPU has: not looked at
    assert not memo.covers(slot(2), 80.0, False)  # fewer GPUs may fit
    assert not memo.covers(slot(4, span=True), 80.0, False)  # may span nodes: may fit
    assert not memo.covers(slot(4), 80.0, True)  # no lease binds it: it may take what bound the other
    assert not memo.covers(slot(4, need=Need(cpu_milli=10.0)), 80.0, False)
    memo.add(slot(2, span=True, mem=90.0), 80.0, lease_free=True)
    assert memo.covers(slot(2, mem=95.0), 80.0, True) and memo.covers(
        slot(3, span=True, mem=90.0), 80.0, False
    )
    assert not memo.covers(slot(2, span=True, mem=85.0), 80.0, True)  # less memory than the failed one
    memo.clear()
    assert not memo and not memo.covers(slot(8), 80.0, False)

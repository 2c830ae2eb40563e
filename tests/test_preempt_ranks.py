"""The preemptive queue's records (core/ranks.py) against plain models of what they keep.

- A running job's level change moves its entry only when the order is next read (`Ranks.settle`,
  `worst`): after any mix of enters, moves, leaves and reads, `running` holds exactly the entries an
  eager move at each change leaves, in the same order.
- `next_open` with the answers it keeps (`heads`) gives what a search from each cursor gives.
- `waiting_in` says whether a waiting level is in [lo, hi), as a scan of the waiting levels does.
- Each job's order (`Ranks.order_of`) follows its static key, through jobs that go between any two
  (every job gets a new order when no int is left between two) and jobs that leave for good.
"""

from __future__ import annotations

import inspect
import itertools
import math
import random
from collections.abc import Iterable
from typing import cast

import pytest

from gpuplan.core.preemptive import PolicyLevels
from gpuplan.core.ranks import DueHeap, Entry, Ranks
from gpuplan.core.state import ClusterState
from gpuplan.core.view import JobSlot
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec

_SPEC = ClusterSpec("1x8", (NodeSpec("n0", 8, GpuSpec("A100-80GB", 80.0)),))


class _Levels:
    """A policy whose levels a test sets by hand (`at`), that never plans a change."""

    endless_levels = False

    def __init__(self) -> None:
        self.at: dict[int, float] = {}

    def level(self, slot: JobSlot, now: float) -> float:
        return self.at.get(slot.jid, 0.0)

    def next_change_s(self, slot: JobSlot, now: float) -> float:
        return float("inf")


class _Shapes:
    def shape(self, slot: JobSlot) -> tuple[object, ...]:
        return (slot.gpus,)


def _at(e: Entry) -> tuple[float, int]:
    return (e.level, e.order)


def _slot(jid: int, rng: random.Random, running: bool) -> JobSlot:
    gpus = rng.choice([1, 2, 4])
    slot = JobSlot(jid, Job(f"j{jid}", float(jid), gpus), gpus, None, 100.0, False)
    slot.key = (float(rng.randint(0, 20)), jid, jid)  # ties of the static key: the handle breaks them
    if running:
        slot.start_s, slot.alloc = 0.0, (0,)
    return slot


@pytest.mark.parametrize("seed", range(20))
def test_lazy_moves_leave_the_order_an_eager_move_leaves(seed: int) -> None:
    rng = random.Random(seed)
    policy, shapes = _Levels(), _Shapes()
    rule = PolicyLevels(policy)  # what a scheduler gives its queue for a policy of its own
    r = Ranks(ClusterState(_SPEC), endless=False)
    plain: dict[int, tuple[object, ...]] = {}  # jid -> the entry an eager move leaves
    slots: dict[int, JobSlot] = {}
    for step in range(300):
        op = rng.random()
        if op < 0.3 or not slots:
            jid = step
            slot = slots[jid] = _slot(jid, rng, running=True)
            policy.at[jid] = float(rng.randint(0, 5))
            r.enter(slot, 0.0, rule, shapes)
            plain[jid] = (policy.at[jid], *slot.key)
        elif op < 0.75:
            slot = slots[rng.choice(list(slots))]
            policy.at[slot.jid] = float(rng.randint(0, 5))
            r.move_running(r.rec[slot.jid], 1.0, rule, shapes)
            plain[slot.jid] = (policy.at[slot.jid], *slot.key)
        elif op < 0.9:
            slot = slots.pop(rng.choice(list(slots)))
            r.leave(slot)
            del plain[slot.jid]
        else:
            worst = max(
                (cast(float, e[0]) for e in plain.values()), default=-float("inf")
            )  # levels are floats
            assert r.worst() == worst
            assert _seen(r.running) == _by_key(plain)
            assert r.moved == [] and not any(rec.moved for rec in r.rec.values())
    r.settle()
    assert _seen(r.running) == _by_key(plain)
    assert {e.jid: (e.level, e.jid) for e in r.running} == {j: (p[0], p[-1]) for j, p in plain.items()}


def _seen(entries: Iterable[Entry]) -> list[tuple[float, int]]:
    return [(e.level, e.jid) for e in entries]


def _by_key(plain: dict[int, tuple[object, ...]]) -> list[tuple[float, int]]:
    """(level, handle) in the order of (level, *static key): what the entries' orders must follow."""
    return [(cast(float, p[0]), cast(int, p[-1])) for p in sorted(plain.values())]  # type: ignore[type-var]


@pytest.mark.parametrize("seed", range(20))
def test_next_open_with_kept_heads_is_a_search_from_each_cursor(seed: int) -> None:
    rng = random.Random(seed)
    policy, shapes = _Levels(), _Shapes()
    rule = PolicyLevels(policy)  # what a scheduler gives its queue for a policy of its own
    r = Ranks(ClusterState(_SPEC), endless=False)
    for jid in range(rng.randint(5, 200)):
        policy.at[jid] = float(rng.randint(0, 3))
        r.enter(_slot(jid, rng, running=False), 0.0, rule, shapes)
    entries = list(r.waiting)
    heads: dict[object, Entry | None] = {}
    failed: set[int] = set()  # shape ids
    cursor = entries[0]
    while True:
        if rng.random() < 0.3:
            failed.add(cursor.shape)
        got = r.next_open(cursor.level, cursor.order, failed, heads)
        want = next((e for e in entries if _at(e) > _at(cursor) and e.shape not in failed), None)
        assert got is want
        if got is None:
            break
        later = [e for e in entries if _at(e) >= _at(got)]
        cursor = rng.choice(later[:3])  # a jump lands on it; the walk may go on a little further


@pytest.mark.parametrize("seed", range(10))
def test_waiting_in_is_a_scan_of_the_waiting_levels(seed: int) -> None:
    rng = random.Random(seed)
    policy, shapes = _Levels(), _Shapes()
    rule = PolicyLevels(policy)  # what a scheduler gives its queue for a policy of its own
    r = Ranks(ClusterState(_SPEC), endless=False)
    for jid in range(rng.randint(0, 30)):
        policy.at[jid] = float(rng.choice([0, 1, 1, 3, 7]))
        r.enter(_slot(jid, rng, running=False), 0.0, rule, shapes)
    levels = [e.level for e in r.waiting]
    for lo in range(-1, 9):
        for hi in range(-1, 9):
            assert r.waiting_in(float(lo), float(hi)) == any(lo <= v < hi for v in levels)


@pytest.mark.parametrize("policy", ["las", "tiresias", "gittins"])
def test_a_preemptive_schedulers_waiting_count_is_its_records_waiting_jobs(policy: str) -> None:
    """Under a preemptive policy the Scheduler keeps no queue of its own: its count of waiting jobs,
    `waiting()` and `waiting_jids()` all read the records, through submits, passes (starts and
    preemptions), withdrawals and ends."""
    from gpuplan.core.scheduler import Scheduler

    rng = random.Random(7)
    s = Scheduler(_SPEC, policy, "easy", "first-fit")
    waiting: set[int] = set()
    running: set[int] = set()
    now = 0.0
    for jid in range(300):
        now += rng.uniform(0.0, 50.0)
        job = Job(f"j{jid}", now, rng.choice([1, 2, 4]), requested_s=float(rng.randint(10, 400)))
        s.submit(jid, job, now=now)
        waiting.add(jid)
        if rng.random() < 0.1:
            gone = rng.choice(sorted(waiting))
            s.withdraw(gone)
            waiting.discard(gone)
        if rng.random() < 0.2 and running:
            done = rng.choice(sorted(running))
            s.finish(done, now)
            running.discard(done)
        d = s.decide(now)
        for p in d.preempted:
            running.discard(p.jid)
            waiting.add(p.jid)
        for st in d.started:
            waiting.discard(st.jid)
            running.add(st.jid)
        assert s.waiting_count == len(waiting)
        assert set(s.waiting_jids()) == waiting
        assert [slot.jid for slot in s.waiting()] == list(s.waiting_jids())


def test_shape_ids_name_equal_shapes_alike_and_distinct_shapes_apart() -> None:
    r = Ranks(ClusterState(_SPEC), endless=False)
    shapes = [(g, m, span) for g in (1, 2, 4) for m in (None, 40.0, 80.0) for span in (False, True)]
    ids = [r.shape_id(s) for s in shapes]
    assert len(set(ids)) == len(shapes)
    assert [r.shape_id(tuple(list(s))) for s in shapes] == ids  # equal tuples, not the same objects
    assert [r.copy(ClusterState(_SPEC), {}).shape_id(s) for s in shapes] == ids


@pytest.mark.parametrize("seed", range(10))
def test_orders_follow_the_static_keys_through_inserts_between_and_forgets(seed: int) -> None:
    """Keys that go, again and again, between the last one and the same upper neighbour use up the
    ints between their orders (a midpoint halves the gap each time): the records then give every job a
    new order. At every step the waiting entries of one level come in static key order."""
    rng = random.Random(seed)
    policy, shapes = _Levels(), _Shapes()
    rule = PolicyLevels(policy)  # what a scheduler gives its queue for a policy of its own
    r = Ranks(ClusterState(_SPEC), endless=False)
    keys: dict[int, tuple[object, ...]] = {}
    lo, hi = 0.0, 1.0
    gaps: list[int] = []
    for jid in range(150):
        slot = JobSlot(jid, Job(f"j{jid}", 0.0, 1), 1, None, 100.0, False)
        if jid < 2:
            slot.key = (float(jid), jid)  # the two bounds
        elif rng.random() < 0.8:  # between the last squeezed key and the upper bound
            lo = (lo + hi) / 2
            slot.key = (lo, jid)
        else:
            slot.key = (rng.choice([-1.0, 2.0, rng.random()]), jid)
        keys[jid] = slot.key
        policy.at[jid] = float(rng.randint(0, 1))
        r.enter(slot, 0.0, rule, shapes)
        if jid > 2 and rng.random() < 0.1:  # one leaves for good
            gone = rng.choice(sorted(keys))
            r.leave(r.rec[gone].slot)
            r.forget(gone)
            del keys[gone]
        want = sorted((policy.at[j], k, j) for j, k in keys.items())
        assert [(e.level, e.jid) for e in r.waiting] == [(w[0], w[2]) for w in want]
        assert len(r.waiting) == len(keys) == len(r.rec)
        orders = sorted(rec.order for rec in r.rec.values())
        if len(orders) > 1:
            gaps.append(min(b - a for a, b in itertools.pairwise(orders)))
    assert min(gaps) == 1 and max(gaps[-10:]) > 1  # the ints ran out, and the new orders have room again


def test_a_record_copy_for_a_forked_slot_carries_every_field() -> None:
    """`JobRank.copy_for` (a forked scheduler's records): every field but the slot (and `moved`: a
    fork settles first, so no copied record waits for `settle`); a field added later and not copied
    fails here."""
    from gpuplan.core.rankseq import JobRank

    slot = JobSlot(7, Job("j7", 0.0, 1), 1, None, 100.0, False)
    rec = JobRank(slot, 123, "suspend")
    values: dict[str, object] = {
        "level": 2.5, "due": 99.0, "shape": 3, "overhead": 1.5, "overhead_cost": "cost",
        "start_level": 1.0, "waits": True, "hpos": 5, "rise_of": 4.0, "rise_s": 77.0, "rise_epoch": 3,
        "lease_end_s": 40.0, "lease_start_s": 30.0, "lease_resumed": True,
    }  # fmt: skip
    for name, value in values.items():
        setattr(rec, name, value)
    rec.moved = True
    twin = JobSlot(7, Job("j7", 0.0, 1), 1, None, 100.0, False)
    new = rec.copy_for(twin)
    assert new.slot is twin and new.jid == 7 and not new.moved
    fields = {n for n, v in vars(JobRank).items() if inspect.isdatadescriptor(v) and not n.startswith("__")}
    assert {"slot", "jid", "moved", *values, "order", "mode"} == fields  # compiled or source
    assert {name: getattr(new, name) for name in values} == values
    assert (new.order, new.mode) == (123, "suspend")


@pytest.mark.parametrize("seed", range(10))
def test_cursors_and_above_walk_the_sequence_as_a_sorted_list(seed: int) -> None:
    """`RankedSeq.cursor`, `cursor_after` (with `peek`) and `above` against a sorted list of the same
    records, on sequences long enough to have several chunks."""
    from gpuplan.core.rankseq import JobRank, RankedSeq

    rng = random.Random(seed)
    seq, plain = RankedSeq(), []
    for jid in range(rng.randint(0, 1200)):
        slot = _slot(jid, rng, running=False)
        rec = JobRank(slot, rng.randint(0, 10**6) * 4096 + jid, "checkpoint")
        rec.level = float(rng.randint(0, 30))
        seq.add(rec)
        plain.append(rec)
    plain.sort(key=lambda x: (x.level, x.order))

    def walk(cursor):  # type: ignore[no-untyped-def]
        out = []
        while True:
            ahead = cursor.peek()
            got = cursor.next()
            assert got is ahead
            if got is None:
                return out
            out.append(got)

    assert walk(seq.cursor()) == plain
    for _ in range(20):
        level, order = float(rng.randint(-1, 31)), rng.randint(0, 10**6) * 4096
        if plain and rng.random() < 0.5:
            pick = rng.choice(plain)
            level, order = pick.level, pick.order
        after = [x for x in plain if (x.level, x.order) > (level, order)]
        assert walk(seq.cursor_after(level, order)) == after
        assert seq.above(level) == [x for x in reversed(plain) if x.level > level]


@pytest.mark.parametrize("seed", range(10))
def test_a_refiled_record_takes_the_place_its_new_level_gives(seed: int) -> None:
    """`RankedSeq.refile` (in place when the record keeps its place between its neighbours, else out and
    back in) leaves the records in (level, order) order, over several chunks."""
    from gpuplan.core.rankseq import JobRank, RankedSeq

    rng = random.Random(seed)
    seq, recs = RankedSeq(), []
    for jid in range(rng.randint(1, 1500)):
        rec = JobRank(_slot(jid, rng, running=True), jid * 8 + rng.randint(0, 3), "checkpoint")
        rec.level = float(rng.randint(0, 40))
        seq.add(rec)
        recs.append(rec)
    for _ in range(500):
        rec = rng.choice(recs)
        level = rec.level + rng.choice([0.5, 1.0, 1.0, 2.0, -1.0, 25.0])
        seq.refile(rec, level)
        assert rec.level == level
    assert list(seq) == sorted(recs, key=lambda x: (x.level, x.order)) and len(seq) == len(recs)
    assert seq.last() is max(recs, key=lambda x: (x.level, x.order))


@pytest.mark.parametrize("seed", range(10))
def test_a_flat_sequence_sorts_again_after_levels_change_in_place(seed: int) -> None:
    """`RankedSeq.resort` (what `Ranks.settle` does with many moved running jobs in one chunk): after
    some levels change in place, up or down, by a little or past every other, the records are back
    in (level, order) order and the last is the highest."""
    from gpuplan.core.rankseq import JobRank, RankedSeq

    rng = random.Random(seed)
    seq, recs = RankedSeq(), []
    for jid in range(rng.randint(1, 200)):
        rec = JobRank(_slot(jid, rng, running=True), jid * 8 + rng.randint(0, 3), "checkpoint")
        rec.level = float(rng.randint(0, 20))
        seq.add(rec)
        recs.append(rec)
    assert seq.flat()
    for _ in range(20):
        for rec in rng.sample(recs, rng.randint(0, len(recs))):
            rec.level += rng.choice([1.0, 1.0, 2.0, -1.0, 30.0, -30.0])
        seq.resort()
        assert list(seq) == sorted(recs, key=lambda x: (x.level, x.order))
        assert seq.last() is max(recs, key=lambda x: (x.level, x.order))
        plain = sorted(recs, key=lambda x: (x.level, x.order))
        at = float(rng.randint(-30, 50))  # the searches read the chunk's last record too
        assert seq.first_at_level(at) is next((x for x in plain if x.level >= at), None)
        assert seq.first_after(at, 0) is next((x for x in plain if (x.level, x.order) > (at, 0)), None)


@pytest.mark.parametrize("seed", range(10))
def test_the_due_heap_keeps_the_earliest_change_first_through_moves_and_removals(seed: int) -> None:
    """`DueHeap` (running jobs by their next change, each record once, moved in place) against a dict
    of due times: after any mix of puts, moves to an earlier or later time and removals, its first is
    the least (due, jid), the records due by an instant are those of the dict, every record knows its
    place, and a copy for other records keeps theirs. The count grows past the bag's bound and falls
    back under it (a bag of at most 64 records, a heap past it), more than once."""
    from gpuplan.core.rankseq import JobRank

    rng = random.Random(seed)
    heap, model = DueHeap(), dict[int, float]()
    recs = [JobRank(_slot(jid, rng, running=True), jid, "checkpoint") for jid in range(160)]
    kinds = set()
    for step in range(6000):
        grow = (step // 1000) % 2 == 0  # phases: mostly puts, then mostly removals
        rec = rng.choice(recs)
        roll = rng.random()
        if roll < 0.1 and model:  # a catch-up: every record due by an instant moves later
            at = float(rng.randint(0, 50))
            due = heap.due_by(at)
            for moved in due:
                if rng.random() < 0.1:
                    heap.remove(moved)
                    del model[moved.jid]
                else:
                    heap.place(moved, at + rng.randint(1, 20))
                    model[moved.jid] = moved.due
            heap.moved(due)
        elif roll < (0.85 if grow else 0.2):
            heap.place(rec, float(rng.randint(0, 50)))  # ties: the handle breaks them
            model[rec.jid] = rec.due
        else:
            heap.remove(rec)
            model.pop(rec.jid, None)
            assert rec.hpos == -1
        kinds.add((heap.ordered, len(heap) > 64))
        assert len(heap) == len(model)
        if model:
            want = min(model, key=lambda j: (model[j], j))
            assert heap.top().jid == want and heap.first_s() == model[want]
            at = float(rng.randint(0, 50))
            assert sorted(r.jid for r in heap.due_by(at)) == sorted(j for j, d in model.items() if d <= at)
        else:
            assert heap.first_s() == math.inf and heap.due_by(50.0) == []
        assert all(heap.items[i].hpos == i for i in range(len(heap)))
    assert {(False, False), (True, True), (True, False)} <= kinds  # a bag, a heap, and a heap falling back
    fresh = {rec.jid: rec.copy_for(rec.slot) for rec in recs}
    twin = heap.mapped(fresh)
    assert [r.jid for r in twin.items] == [r.jid for r in heap.items]
    assert all(
        twin.items[i].hpos == i and twin.items[i] is fresh[twin.items[i].jid] for i in range(len(twin))
    )

"""core/shapes.py's ShapeIndex against a plain model under random adds, removals and re-adds of the
same handle (a preempted job waits again): `after` must list exactly the waiting jobs it is asked
for, in queue order, whichever way it merges its shapes' runs."""

from __future__ import annotations

import random

import pytest

from gpuplan.core.shapes import ShapeIndex
from gpuplan.core.state import ClusterState
from gpuplan.core.view import JobSlot, fits_key
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec

_SPEC = ClusterSpec("2x8", tuple(NodeSpec(f"n{i}", 8, GpuSpec("A100-80GB", 80.0)) for i in range(2)))


def _slot(rng: random.Random, jid: int) -> JobSlot:
    gpus = rng.choice([1, 2, 4, 8])
    slot = JobSlot(jid, Job(str(jid), 0.0, gpus), gpus, None, float(rng.randint(1, 50)), False)
    slot.key = (float(rng.randint(0, 400)), jid)
    return slot


def _expected(waiting: dict[int, JobSlot], state: ClusterState, every: set, short: set, now: float,
              shadow: float, cursor: tuple) -> list[int]:  # fmt: skip
    out = []
    for slot in sorted(waiting.values(), key=lambda s: s.key):
        fk = fits_key(slot.gpus, slot.mem_gb, slot.may_span, slot.need, state)
        if slot.key > cursor and (fk in every or (fk in short and now + slot.plan_s <= shadow)):
            out.append(slot.jid)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_after_lists_the_waiting_jobs_it_is_asked_for_through_removals_and_re_adds(seed: int) -> None:
    rng = random.Random(seed)
    state = ClusterState(_SPEC)
    waiting = {j: _slot(rng, j) for j in range(300)}
    index = ShapeIndex(sorted(waiting.values(), key=lambda s: s.key))
    gone: dict[int, JobSlot] = {}
    keys = sorted({fits_key(g, None, False, None, state) for g in (1, 2, 4, 8)})
    for step in range(1500):
        r = rng.random() * (0.6 if 300 <= step < 700 else 1.0)  # a phase that drains the queue
        if r < 0.45 and waiting:
            jid = rng.choice(list(waiting))
            index.remove(jid)
            gone[jid] = waiting.pop(jid)
        elif r < 0.75 and gone:  # the same handle waits again, keeping its key (a preemption)
            jid = rng.choice(list(gone))
            waiting[jid] = gone.pop(jid)
            index.add(waiting[jid])
        elif r < 0.9:  # a new job, or a handle reused with another shape and key
            jid = rng.choice(list(gone)) if gone and rng.random() < 0.5 else 1000 + step
            gone.pop(jid, None)
            waiting[jid] = _slot(rng, jid)
            index.add(waiting[jid])
        every = set(rng.sample(keys, rng.randint(0, len(keys))))
        short = set(keys) - every if rng.random() < 0.5 else set()
        now, shadow = float(rng.randint(0, 10)), float(rng.randint(10, 60))
        cursor = (float(rng.randint(-1, 400)), rng.randint(0, 2000))
        got = [s.jid for s in index.after(state, every, short, now, shadow, cursor)] if waiting else []
        assert got == _expected(waiting, state, every, short, now, shadow, cursor)
        assert len(index) == len(waiting)
        present = index.fits_keys(state)
        want = {fits_key(s.gpus, None, False, None, state) for s in waiting.values()}
        assert present == want
    copied = index.copy({j: s.copy() for j, s in waiting.items()})
    assert len(copied) == len(waiting)


def test_a_shape_whose_jobs_all_left_leaves_the_index_and_comes_back_with_a_re_added_job() -> None:
    state = ClusterState(_SPEC)
    slots = [
        JobSlot(j, Job(str(j), 0.0, 1 if j < 5 else 2), 1 if j < 5 else 2, None, 5.0, False) for j in range(7)
    ]
    for s in slots:
        s.key = (float(s.jid), s.jid)
    index = ShapeIndex(slots)
    one, two = (fits_key(g, None, False, None, state) for g in (1, 2))
    for j in range(5):
        index.remove(j)
    assert index.fits_keys(state) == {two} and len(index) == 2
    assert [s.jid for s in index.after(state, {one, two}, set(), 0.0, 1.0, (-1.0, -1))] == [5, 6]
    index.add(slots[2])
    assert index.fits_keys(state) == {one, two}
    assert [s.jid for s in index.after(state, {one, two}, set(), 0.0, 1.0, (-1.0, -1))] == [2, 5, 6]
    assert [s.jid for s in index.after(state, {one}, set(), 0.0, 1.0, (-1.0, -1))] == [2]


@pytest.mark.parametrize("seed", range(4))
def test_jobs_added_and_removed_between_reads_leave_the_index_as_if_never_added(seed: int) -> None:
    """An add enters the sequences only when the index is next read (most jobs start in the pass they
    arrive in): runs of adds and removals between reads, re-adds of a pending handle included, must
    read back as the plain model."""
    rng = random.Random(100 + seed)
    state = ClusterState(_SPEC)
    waiting = {j: _slot(rng, j) for j in range(40)}
    index = ShapeIndex(sorted(waiting.values(), key=lambda s: s.key))
    keys = sorted({fits_key(g, None, False, None, state) for g in (1, 2, 4, 8)})
    for step in range(3000):
        r = rng.random()
        if r < 0.4 and waiting:
            jid = rng.choice(list(waiting))
            index.remove(jid)
            del waiting[jid]
        elif r < 0.85:
            jid = rng.choice(list(waiting)) if waiting and rng.random() < 0.1 else 1000 + step
            if jid in waiting:  # a pending or indexed handle leaves and comes back with another shape
                index.remove(jid)
            waiting[jid] = _slot(rng, jid)
            index.add(waiting[jid])
        assert len(index) == len(waiting)
        if rng.random() < 0.15:  # a read: the pending adds enter the sequences
            every = set(rng.sample(keys, rng.randint(1, len(keys))))
            got = [s.jid for s in index.after(state, every, set(), 0.0, 1.0, (-1.0, -1))] if waiting else []
            assert got == _expected(waiting, state, every, set(), 0.0, 1.0, (-1.0, -1))
            want = {fits_key(s.gpus, None, False, None, state) for s in waiting.values()}
            assert index.fits_keys(state) == want

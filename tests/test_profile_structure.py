"""The availability profiles conservative backfill keeps across passes, on their own: free GPUs per
node on exclusive clusters (core/profile.py) and booked intervals per GPU with memory on sharing
clusters (core/gpu_profile.py).

Hand-computed cases on two nodes: the step function of each node, a reservation inserted and removed,
earliest fits with and without reservations, a job that ends early, a job past its estimate, a moved
end, a held GPU. Then a random walk of operations (starts, ends early and late, moved ends,
reservations made and dropped, time moving on) after each of which the incremental profile must equal
a profile rebuilt from scratch and a brute-force reading of the definition (free GPUs at every
breakpoint of the whole cluster, every earliest fit by trying every breakpoint). The sharing profile:
bookings per GPU in planned-end order with their memory, the cluster with every booking placed (its
free memory to the last bit), candidate times, a job past its end, a moved end, a job started during a
pass, and the same random walk against a rebuild.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.core.gpu_profile import GpuProfile
from gpuplan.core.profile import CountProfile
from gpuplan.core.state import ClusterState
from gpuplan.core.view import JobSlot
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec

_INF = math.inf
_A100 = GpuSpec("A100-80GB", 80.0)


def _cluster(*gpus: int) -> ClusterState:
    return ClusterState(ClusterSpec("c", tuple(NodeSpec(f"n{i}", g, _A100) for i, g in enumerate(gpus))))


def _two_nodes() -> tuple[ClusterState, CountProfile]:
    """Node 0: A on GPUs 0-1 until 100, B on GPU 2 until 50, GPU 3 idle; node 1: C on all 4 until 200."""
    state = _cluster(4, 4)
    running = [(1, 100.0, (0, 1)), (2, 50.0, (2,)), (3, 200.0, (4, 5, 6, 7))]
    for _, _, gpus in running:
        state.place(gpus, None)
    return state, CountProfile.build(state, running)


def test_the_step_function_of_each_node() -> None:
    _, p = _two_nodes()
    assert p.steps(0, 0.0) == ([0.0, 50.0, 100.0], [1, 2, 4])
    assert p.steps(1, 0.0) == ([0.0, 200.0], [0, 4])
    assert [p.free_at(0, t, 0.0) for t in (0.0, 49.0, 50.0, 99.0, 100.0, 1e9)] == [1, 1, 2, 2, 4, 4]


def test_earliest_fit_without_reservations() -> None:
    _, p = _two_nodes()
    assert p.earliest_on(0, 1, 10.0, 0.0) == 0.0
    assert p.earliest_on(0, 2, 10.0, 0.0) == 50.0
    assert p.earliest_on(0, 4, 10.0, 0.0) == 100.0
    assert p.earliest_on(1, 1, 10.0, 0.0) == 200.0
    assert p.earliest_on(1, 1, 10.0, 0.0, bound=150.0) == _INF  # later than the bound
    assert p.fits_now(1) == [0]
    assert p.fits_now(2) == []
    # the earliest later fit over both nodes: node 0 at 100 for 3 GPUs, and both at 200 for 4 ...
    assert p.first_fit_later(3, 0.0, set(), None) == (100.0, [0])
    assert p.first_fit_later(4, 0.0, {0}, None) == (200.0, [1])
    assert p.first_fit_later(5, 0.0, set(), None) == (_INF, [])  # no node has 5 GPUs


def test_a_reservation_inserted_then_removed() -> None:
    _, p = _two_nodes()
    p.reserve(50.0, 120.0, {0: 2})
    assert p.steps(0, 0.0) == ([0.0, 50.0, 100.0, 120.0], [1, 0, 2, 4])
    assert p.reserved_nodes == {0} and p.first_start_s == 50.0
    # 1 GPU for 60 s: free now, but the run from 0 covers [50, 100) where none is: from 100
    assert p.earliest_on(0, 1, 60.0, 0.0) == 100.0
    assert p.earliest_on(0, 1, 50.0, 0.0) == 0.0  # ends as the reservation begins
    assert p.earliest_on(0, 2, 30.0, 0.0) == 100.0
    assert p.earliest_on(0, 3, 10.0, 0.0) == 120.0
    assert p.window_min(0, 0.0, 60.0, 0.0) == 0
    assert p.window_min(0, 100.0, 10.0, 0.0) == 2
    assert p.window_min(0, 100.0, 0.0, 0.0) == 2  # a run of no time: the value at its start
    p.unreserve(50.0, 120.0, {0: 2})
    assert p.steps(0, 0.0) == ([0.0, 50.0, 100.0], [1, 2, 4])
    assert p.reserved_nodes == set() and p.first_start_s == _INF


def test_reservations_on_several_nodes_are_dropped_together() -> None:
    _, p = _two_nodes()
    p.reserve(200.0, _INF, {0: 1, 1: 3})  # a spanning job, endless
    p.reserve(100.0, 150.0, {0: 3})
    assert p.steps(0, 0.0) == ([0.0, 50.0, 100.0, 150.0, 200.0], [1, 2, 1, 4, 3])
    assert p.steps(1, 0.0) == ([0.0, 200.0], [0, 1])
    assert p.first_start_s == 100.0
    p.drop_reservations()
    assert p.steps(0, 0.0) == ([0.0, 50.0, 100.0], [1, 2, 4])
    assert p.steps(1, 0.0) == ([0.0, 200.0], [0, 4])


def test_a_job_that_ends_early_or_late_and_a_moved_end() -> None:
    state, p = _two_nodes()
    state.release((0, 1), None)  # A ends at 20 instead of 100
    p.stop(1)
    assert p.steps(0, 20.0) == ([20.0, 50.0], [3, 4])
    # at 60, B (planned to end at 50) still runs: it is planned to end at the next instant
    soon = math.nextafter(60.0, _INF)
    assert p.steps(0, 60.0) == ([60.0, soon], [3, 4])
    assert p.earliest_on(0, 4, 10.0, 60.0) == soon
    p.move(3, 150.0)  # C's expected end moved
    assert p.steps(1, 60.0) == ([60.0, 150.0], [0, 4])
    assert p.first_fit_later(4, 60.0, set(), None) == (soon, [0])


def test_an_endless_job_and_a_held_gpu_free_nothing() -> None:
    state = _cluster(2, 2)
    state.set_offline(3)  # node 1's second GPU is out of service while D runs on it
    for gpus in ((0,), (2, 3)):
        state.place(gpus, None)
    p = CountProfile.build(state, [(1, _INF, (0,)), (2, 40.0, (2, 3))])
    assert p.steps(0, 0.0) == ([0.0], [1])
    assert p.steps(1, 0.0) == ([0.0, 40.0], [0, 1])
    assert p.earliest_on(0, 2, 1.0, 0.0) == _INF
    assert p.earliest_on(1, 2, 1.0, 0.0) == _INF
    assert p.first_fit_later(1, 0.0, {0}, None) == (40.0, [1])


def test_the_nodes_whose_gpus_hold_a_memory() -> None:
    l40s = GpuSpec("L40S-48GB", 48.0)
    spec = ClusterSpec("h", (NodeSpec("a", 2, _A100), NodeSpec("b", 2, l40s), NodeSpec("c", 2, _A100)))
    p = CountProfile(ClusterState(spec))
    assert p.nodes_holding(None) == ([0, 1, 2], None)
    assert p.nodes_holding(48.0) == ([0, 1, 2], None)
    assert p.nodes_holding(60.0) == ([0, 2], {0, 2})
    assert p.nodes_holding(81.0) == ([], set())


# -- the random walk -----------------------------------------------------------------------------
_OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["start", "start", "stop", "move", "reserve", "reserve", "unreserve", "drop", "wait"]
        ),
        st.integers(0, 50),
        st.sampled_from([0.0, 5.0, 10.0, 30.0, 100.0, _INF, -5.0]),
        st.integers(1, 4),
    ),
    min_size=1,
    max_size=60,
)


class _Model:
    """The plain record of what the profile must hold: running jobs and reservations as lists."""

    def __init__(self, gpus: list[int]) -> None:
        self.state = _cluster(*gpus)
        self.profile = CountProfile(self.state)
        self.running: dict[int, tuple[float, tuple[int, ...]]] = {}
        self.reservations: list[tuple[float, float, dict[int, int]]] = []
        self.now = 0.0
        self.next_jid = 0

    def apply(self, kind: str, pick: int, dt: float, k: int) -> None:
        st_, p = self.state, self.profile
        nodes = len(st_.node_gpus)
        if kind == "start":
            n = pick % nodes
            free = [g for g in st_.node_gpus[n] if st_.gpu_njobs[g] == 0][:k]
            if free:
                end = self.now + dt  # dt < 0: a job already past its estimate
                st_.place(free, None)
                p.start(self.next_jid, end, free)
                self.running[self.next_jid] = (end, tuple(free))
                self.next_jid += 1
        elif kind == "stop" and self.running:
            jid = sorted(self.running)[pick % len(self.running)]
            st_.release(self.running.pop(jid)[1], None)
            p.stop(jid)
        elif kind == "move" and self.running:
            jid = sorted(self.running)[pick % len(self.running)]
            self.running[jid] = (self.now + dt, self.running[jid][1])
            p.move(jid, self.now + dt)
        elif kind == "reserve" and dt > 0:
            t0 = self.now + dt
            t1 = t0 + [1.0, 20.0, 50.0, _INF][pick % 4]
            per_node = {pick % nodes: k} if pick % 3 else {n: 1 for n in range(nodes)}
            p.reserve(t0, t1, per_node)
            self.reservations.append((t0, t1, per_node))
        elif kind == "unreserve" and self.reservations:
            p.unreserve(*self.reservations.pop(pick % len(self.reservations)))
        elif kind == "drop":
            p.drop_reservations()
            self.reservations.clear()
        elif kind == "wait" and dt < _INF:
            self.now += abs(dt) / 2
            p.drop_reservations()  # reservations lie after now: a new pass books its own
            self.reservations.clear()

    # -- brute force, from the definition -------------------------------------------------------
    def times(self) -> list[float]:
        soon = math.nextafter(self.now, _INF)
        ends = {max(e, soon) for e, _ in self.running.values() if e < _INF}
        books = {t for t0, t1, _ in self.reservations for t in (t0, t1) if t < _INF}
        return sorted({self.now} | ends | books)

    def free(self, n: int, t: float) -> int:
        st_, soon = self.state, math.nextafter(self.now, _INF)
        value = st_.node_idle[n]
        for e, gpus in self.running.values():
            if max(e, soon) <= t:
                value += sum(1 for g in gpus if st_.gpu_node[g] == n)
        for t0, t1, per_node in self.reservations:
            if t0 <= t < t1:
                value -= per_node.get(n, 0)
        return value

    def earliest(self, n: int, g: int, d: float) -> float:
        times = self.times()
        for t in times:
            if all(self.free(n, x) >= g for x in [t, *(x for x in times if t < x < t + d)]):
                return t
        return _INF


@settings(max_examples=150, deadline=None)
@given(gpus=st.lists(st.integers(1, 4), min_size=1, max_size=3), ops=_OPS)
def test_the_incremental_profile_equals_a_rebuild_after_every_operation(gpus: list[int], ops: list) -> None:  # type: ignore[type-arg]
    m = _Model(gpus)
    for op in ops:
        m.apply(*op)
        p, now = m.profile, m.now
        rebuilt = CountProfile.build(m.state, ((j, e, a) for j, (e, a) in m.running.items()), m.reservations)
        times = m.times()
        for n in range(len(gpus)):
            assert p.steps(n, now) == rebuilt.steps(n, now)
            assert [p.free_at(n, t, now) for t in times] == [m.free(n, t) for t in times]
            for g in range(1, gpus[n] + 1):
                for d in (0.0, 10.0, 40.0, _INF):
                    assert p.earliest_on(n, g, d, now) == m.earliest(n, g, d), (n, g, d)
        assert p.first_start_s == min((r[0] for r in m.reservations), default=_INF)
        for g in range(1, max(gpus) + 1):
            assert p.fits_now(g) == [n for n in range(len(gpus)) if m.state.node_idle[n] >= g]
            skip = set(p.reserved_nodes) | set(p.fits_now(g))
            clean = [(m.earliest(n, g, 0.0), n) for n in range(len(gpus)) if n not in skip]
            best = min((t for t, _ in clean), default=_INF)
            want = (best, [n for t, n in clean if t == best] if best < _INF else [])
            assert p.first_fit_later(g, now, skip, None) == want, g


# -- the sharing profile (core/gpu_profile.py): bookings per GPU with memory ----------------------
def _shared(*gpus: int) -> ClusterState:
    nodes = tuple(NodeSpec(f"n{i}", g, _A100) for i, g in enumerate(gpus))
    return ClusterState(ClusterSpec("s", nodes, sharing=True, max_jobs_per_gpu=4))


def _gpu_view(p: GpuProfile) -> tuple[object, ...]:
    """Everything a pass reads of the profile, for comparisons."""
    full = p.full
    books = {g: p.bookings(g) for g in sorted(p.booked_gpus())}
    ends = {t: sorted(p.ends_at(t)) for t in p.candidates()[1:]}
    return (books, list(full.gpu_njobs), list(full.gpu_free_gb), list(full.node_idle), full.idle_total,
            p.candidates(), ends, p.booked_count(), list(p.starts))  # fmt: skip


def _sharing_case() -> GpuProfile:
    """One node of two 80 GB GPUs shared by up to 4 jobs: A (30 GB) on GPU 0 until 100, B (20 GB) on
    GPU 0 until 50, C (whole GPU: memory unknown) on GPU 1 until 200."""
    p = GpuProfile.build(_shared(2), [(1, 100.0, (0,), 30.0), (2, 50.0, (0,), 20.0), (3, 200.0, (1,), None)])
    p.begin_pass(0.0)
    return p


def test_sharing_bookings_per_gpu_in_planned_end_order() -> None:
    p = _sharing_case()
    assert p.bookings(0) == [(0.0, 50.0, 20.0), (0.0, 100.0, 30.0)]  # B before A: it ends first
    assert p.bookings(1) == [(0.0, 200.0, None)]
    assert p.full.gpu_njobs == [2, 1] and p.full.gpu_free_gb == [30.0, 0.0]
    assert p.full.node_idle == [0] and p.full.idle_total == 0
    assert p.candidates() == [0.0, 50.0, 100.0, 200.0]
    assert list(p.ends_at(50.0)) == [0] and list(p.ends_at(200.0)) == [1]


def test_sharing_a_reservation_inserted_then_dropped_and_a_job_removed() -> None:
    p = _sharing_case()
    assert p.book(50.0, 120.0, [0], 40.0)  # 120 is a new candidate time
    assert p.bookings(0)[-1] == (50.0, 120.0, 40.0) and p.starts == [(50.0, 0)]
    assert p.full.gpu_njobs[0] == 3 and p.full.gpu_free_gb[0] == 80.0 - 20.0 - 30.0 - 40.0
    assert not p.book(60.0, 100.0, [1], 10.0)  # 100 is A's end already
    assert sorted(p.ends_at(100.0)) == [0, 1]
    p.stop(2)  # B ended early
    assert p.bookings(0) == [(0.0, 100.0, 30.0), (50.0, 120.0, 40.0)]
    assert p.full.gpu_free_gb[0] == 80.0 - 30.0 - 40.0
    p.begin_pass(10.0)  # the next pass: its own bookings only
    assert p.bookings(0) == [(10.0, 100.0, 30.0)] and p.starts == []
    assert p.full.gpu_njobs == [1, 1] and p.full.gpu_free_gb == [50.0, 0.0]
    assert p.candidates() == [10.0, 100.0, 200.0]


def test_sharing_a_job_past_its_end_a_moved_end_and_a_job_started_in_a_pass() -> None:
    p = _sharing_case()
    p.begin_pass(60.0)  # B, planned to end at 50, still runs: it ends at the next instant
    soon = math.nextafter(60.0, _INF)
    assert p.candidates() == [60.0, soon, 100.0, 200.0]
    assert p.bookings(0) == [(60.0, soon, 20.0), (60.0, 100.0, 30.0)]
    assert list(p.ends_at(soon)) == [0]
    p.move(1, 40.0)  # A's expected end moved before B's: A is booked first now
    p.begin_pass(60.0)
    assert p.bookings(0) == [(60.0, soon, 30.0), (60.0, soon, 20.0)]
    # a job started during a pass is booked after the pass's earlier bookings, and joins the running
    # layer (in planned-end order) when the next pass begins
    p.book(100.0, 150.0, [1], 5.0)
    slot = JobSlot(9, Job("D", 60.0, 1), 1, 10.0, 30.0, False, alloc=(1,), start_s=60.0, expected_end_s=90.0)
    p.job_started(slot)
    p.book(60.0, 90.0, [1], 10.0)  # what the pass books for its start
    assert p.bookings(1) == [(60.0, 200.0, None), (100.0, 150.0, 5.0), (60.0, 90.0, 10.0)]
    p.begin_pass(61.0)
    assert p.bookings(1) == [(61.0, 90.0, 10.0), (61.0, 200.0, None)]


_GPU_OPS = st.lists(
    st.tuples(
        st.sampled_from(["start", "start", "stop", "move", "book", "book", "pass", "started"]),
        st.integers(0, 50),
        st.sampled_from([0.0, 5.0, 10.0, 30.0, 100.0, _INF, -5.0]),
        st.sampled_from([None, 10.0, 25.0, 40.0]),
    ),
    min_size=1,
    max_size=50,
)


@settings(max_examples=150, deadline=None)
@given(gpus=st.lists(st.integers(1, 3), min_size=1, max_size=3), ops=_GPU_OPS)
def test_the_incremental_sharing_profile_equals_a_rebuild_after_every_operation(
    gpus: list[int],
    ops: list,  # type: ignore[type-arg]
) -> None:
    state = _shared(*gpus)
    p = GpuProfile(state)
    p.begin_pass(0.0)
    now, next_jid = 0.0, 0
    running: dict[int, tuple[float, tuple[int, ...], float | None]] = {}  # in the running layer
    started: dict[int, JobSlot] = {}  # started during the current pass
    extra: list[tuple[float, float, tuple[int, ...], float | None]] = []
    total = state.total_gpus
    for kind, pick, dt, mem in ops:
        g = (pick % total,)
        if kind == "start":
            running[next_jid] = (now + dt, g, mem)
            p.start(next_jid, now + dt, g, mem)
            next_jid += 1
        elif kind == "started" and dt > 0:  # a start during the pass, as the scheduler reports it
            slot = JobSlot(
                next_jid, Job("x", now, 1), 1, mem, dt, False, alloc=g, start_s=now, expected_end_s=now + dt
            )
            started[next_jid] = slot
            p.job_started(slot)
            p.book(now, now + dt, g, mem)
            extra.append((now, now + dt, g, mem))
            next_jid += 1
        elif kind == "stop" and running:
            jid = sorted(running)[pick % len(running)]
            del running[jid]
            p.stop(jid)
        elif kind == "move" and running:
            jid = sorted(running)[pick % len(running)]
            running[jid] = (now + dt, *running[jid][1:])
            p.move(jid, now + dt)
        elif kind == "book" and dt > 0:
            t0 = now + dt
            t1 = t0 + [1.0, 20.0, _INF][pick % 3]
            p.book(t0, t1, g, mem)
            extra.append((t0, t1, g, mem))
        elif kind == "pass" and dt < _INF:
            now += abs(dt) / 2
            for jid, slot in started.items():
                running[jid] = (slot.expected_end_s, slot.alloc, slot.mem_gb)
            started.clear()
            extra.clear()
            p.begin_pass(now)
        rebuilt = GpuProfile.build(state, [(j, e, a, m) for j, (e, a, m) in running.items()])
        rebuilt.begin_pass(now)
        for t0, t1, gs, m in extra:
            rebuilt.book(t0, t1, gs, m)
        assert _gpu_view(p) == _gpu_view(rebuilt)

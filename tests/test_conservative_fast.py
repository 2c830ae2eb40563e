"""The fast conservative planner decides exactly as the plain one (hypothesis, deterministic).

`Conservative` (core/backfill.py with core/count_plan.py and core/gpu_plan.py) plans on availability
profiles kept across passes and told of every start, end and moved end by the scheduler
(core/profile.py, core/gpu_profile.py), scans per-node step functions, answers jobs beyond the depth with a start-now check, moves sharing windows from candidate to
candidate instead of rebuilding them, runs the placer only where it can find GPUs, and skips a pass
when nothing changed since one that started nothing. tests/legacy_conservative.py is the planner as it
was before (rebuilt from scratch, plainly, on every pass). Both drive their own Scheduler through the
same random sequence of live events (submits, passes at the same or a later instant, ends before, at
and after the expected end, withdrawals, expected ends moved, GPUs taken offline and back, foreign
memory, adopted jobs) on exclusive and sharing clusters, with depths small enough that jobs fall beyond
them; after every pass the starts, the reservations and every waiting job's reservation note must be
identical. A second property feeds one node long queues of few shapes, where the start-now memo and
the dominance bound do their work; two hand-made cases show each on its own. Each shortcut was checked
by planting a bug in it (the memo's direction, the skip's horizon made inclusive, a window shift that
forgets entering bookings, pruning that drops ties, a dominance that ignores durations, a first window
that keeps bookings ending at its start): one of the properties here fails on each.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from gpuplan.core.backfill import Conservative
from gpuplan.core.scheduler import Scheduler, Started
from gpuplan.errors import JobNeverFitsError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.engine import simulate
from invariant_cases import INVARIANTS, Case, any_clusters, booked_mem_gb, cases
from legacy_conservative import LegacyConservative

_OPS = st.one_of(
    st.tuples(st.just("submit")),
    st.tuples(st.just("submit")),
    st.tuples(st.just("schedule")),
    st.tuples(st.just("tick"), st.booleans()),  # to the next expected end, maybe end it there, a pass
    st.tuples(st.just("advance"), st.sampled_from([0.0, -1.0, 1.0, 5.0, 10.0, 50.0])),  # -1: next instant
    st.tuples(st.just("to_next_end")),
    st.tuples(st.just("finish"), st.integers(0, 7)),
    st.tuples(st.just("withdraw"), st.integers(0, 7)),
    st.tuples(st.just("expect"), st.integers(0, 7), st.sampled_from([-5.0, 0.0, 10.0, 100.0, math.inf])),
    st.tuples(st.just("offline"), st.integers(0, 11), st.booleans()),
    st.tuples(st.just("hold"), st.integers(0, 11), st.sampled_from([0.0, 5.0, 20.0, 45.0])),
    st.tuples(st.just("adopt"), st.integers(0, 11), st.sampled_from([10.0, 100.0, math.inf])),
)


def _few_shapes(jobs: list[Job]) -> list[Job]:
    """The jobs cut down to four shapes (1 or 2 GPUs, 20 GB or unknown memory): equal shapes meet in
    the queue, where a pass reuses what it learnt about one shape for the next."""
    return [
        dataclasses.replace(j, gpus=1 + i % 2, mem_gb=(None, 20.0)[i // 2 % 2], est_mem_gb=None)
        for i, j in enumerate(jobs)
    ]


class _Pair:
    """Two schedulers, the fast and the plain planner, fed the same calls."""

    def __init__(self, case: Case, depth: int) -> None:
        args = (case.cluster, case.policy)
        self.fast = Scheduler(*args, Conservative(depth), case.placer, oracle=case.oracle)
        self.plain = Scheduler(*args, LegacyConservative(depth), case.placer, oracle=case.oracle)
        self.case = case
        self.now = 0.0
        self.next_job = 0
        self.passes = 0

    def both(self, method: str, *args: Any) -> None:
        outcomes = []
        for sched in (self.fast, self.plain):
            try:
                getattr(sched, method)(*args)
                outcomes.append(None)
            except JobNeverFitsError as e:
                outcomes.append(str(e))
        assert outcomes[0] == outcomes[1], (method, args, outcomes)

    def schedule(self) -> None:
        fast, plain = self.fast.schedule(self.now), self.plain.schedule(self.now)
        assert fast == plain, (self.now, fast, plain)
        assert self.fast.backfill.reserved == self.plain.backfill.reserved, self.now
        notes = [(j, self.fast.slot(j).reservation) for j in self.fast.waiting_jids()]
        assert notes == [(j, self.plain.slot(j).reservation) for j in self.plain.waiting_jids()], self.now
        self.passes += 1

    def apply(self, op: tuple[Any, ...]) -> None:
        kind, s = op[0], self.fast
        running = [r.jid for r in s.running()]
        waiting = list(s.waiting_jids())
        gpus = s.state.total_gpus
        if kind == "submit" and self.next_job < len(self.case.jobs):
            job = dataclasses.replace(self.case.jobs[self.next_job], submit_s=self.now)
            self.both("submit", self.next_job, job, booked_mem_gb(job, self.case.oracle))
            self.next_job += 1
        elif kind == "schedule":
            self.schedule()
        elif kind == "advance":
            self.now = math.nextafter(self.now, math.inf) if op[1] < 0 else self.now + op[1]
        elif kind == "to_next_end" and running:
            end = min(s.slot(j).expected_end_s for j in running)
            self.now = max(self.now, end) if end < math.inf else self.now
        elif kind == "tick":
            self.apply(("to_next_end",))
            if op[1] and running:
                self.both("finish", running[0], self.now)  # the first to end, at its expected end
            self.schedule()
        elif kind == "finish" and running:
            self.both("finish", running[op[1] % len(running)], self.now)
        elif kind == "withdraw" and waiting:
            self.both("withdraw", waiting[op[1] % len(waiting)])
        elif kind == "expect" and running:
            self.both("set_expected_end", running[op[1] % len(running)], self.now + op[2])
        elif kind == "offline":
            self.both("set_offline", op[1] % gpus, op[2])
        elif kind == "hold":
            self.both("hold_external", op[1] % gpus, op[2])
        elif kind == "adopt" and s.state.gpu_njobs[op[1] % gpus] == 0:
            job = dataclasses.replace(self.case.jobs[0], gpus=1, mem_gb=10.0, est_mem_gb=10.0)
            jid = 1000 + self.passes * 20 + op[1]
            if jid not in s:
                self.both("adopt", jid, job, (op[1] % gpus,), self.now, self.now + op[2], 10.0)


@INVARIANTS(400)
@given(
    case=cases(clusters=any_clusters(), backfills=("conservative",), max_jobs=20),
    depth=st.sampled_from([1, 2, 3, 6, 500]),
    ops=st.lists(_OPS, min_size=5, max_size=80),
    few_shapes=st.booleans(),
)
def test_the_fast_planner_decides_as_the_plain_one_under_live_events(
    case: Case, depth: int, ops: list[tuple[Any, ...]], few_shapes: bool
) -> None:
    if few_shapes:
        case = dataclasses.replace(case, jobs=_few_shapes(case.jobs))
    pair = _Pair(case, depth)
    for op in ops:
        pair.apply(op)
    while pair.next_job < len(case.jobs):  # every job in, then passes until the queue settles
        pair.apply(("submit",))
    for k in range(6):
        pair.apply(("tick", k % 2 == 1))
    backfill = pair.fast.backfill
    assert isinstance(backfill, Conservative)
    event(f"sharing={case.cluster.sharing}, depth={'small' if depth < 500 else 500}")
    event("a pass was skipped" if backfill.skipped else "no pass skipped")
    event("a pass kept the last one's reservations" if backfill.kept_passes else "no pass kept reservations")


@INVARIANTS(300)
@given(case=cases(clusters=any_clusters(), backfills=("conservative",)), depth=st.sampled_from([1, 2, 500]))
def test_the_fast_planner_simulates_as_the_plain_one(case: Case, depth: int) -> None:
    # whole runs: exclusive and sharing clusters, estimates exact, wrong or missing, interference moving
    # the expected ends of sharing jobs as neighbours come and go
    fast = simulate(
        case.jobs, case.cluster, case.policy, Conservative(depth), case.placer, oracle=case.oracle
    )
    plain = simulate(
        case.jobs, case.cluster, case.policy, LegacyConservative(depth), case.placer, oracle=case.oracle
    )
    assert fast.records == plain.records
    event(f"sharing={case.cluster.sharing}")


@INVARIANTS(300)
@given(
    gpus=st.integers(2, 4),
    sharing=st.booleans(),
    policy=st.sampled_from(["fifo", "sjf"]),
    depth=st.sampled_from([1, 2, 500]),
    running=st.lists(st.tuples(st.integers(0, 3), st.sampled_from([20.0, 60.0, 150.0])), max_size=3),
    queue=st.lists(
        st.tuples(st.sampled_from([1, 2]), st.sampled_from([10.0, 50.0, 100.0, 200.0, 400.0])),
        min_size=3,
        max_size=14,
    ),
)
def test_long_queues_of_few_shapes_beyond_a_small_depth(
    gpus: int,
    sharing: bool,
    policy: str,
    depth: int,
    running: list[tuple[int, float]],
    queue: list[tuple[int, float]],
) -> None:
    # one node, a few running jobs, a queue of few shapes, mostly beyond a small depth (the fast planner
    # answers "does it start now?" from what it learnt of earlier jobs of the same shape) or all within
    # it (with sharing, a job's search starts where an earlier job it dominates found its window)
    cluster = ClusterSpec(
        "c", (NodeSpec("n", gpus, GpuSpec("A100-80GB", 80.0)),), sharing=sharing, max_jobs_per_gpu=1
    )
    jobs = [Job(f"q{i}", 0.0, g, duration_s=d, est_duration_s=d) for i, (g, d) in enumerate(queue)]
    pair = _Pair(Case(jobs, cluster, policy, "conservative", "first-fit", False), depth)
    for k, (gpu, end) in enumerate(running):
        if pair.fast.state.gpu_njobs[gpu % gpus] == 0:
            pair.both("adopt", 1000 + k, jobs[0], (gpu % gpus,), 0.0, end, None)
    for _ in jobs:
        pair.apply(("submit",))
    for _ in range(2 * len(jobs) + 4):
        pair.apply(("tick", True))
    assert not pair.fast.waiting_count, "every job started"
    backfill = pair.fast.backfill
    assert isinstance(backfill, Conservative)
    event("a pass kept the last one's reservations" if backfill.kept_passes else "no pass kept reservations")


def test_a_job_beyond_the_depth_starts_now_though_a_longer_one_of_its_shape_could_not() -> None:
    # One node of 4 GPUs; A runs on 2 until 100; depth 1: only R (4 GPUs) gets a reservation, at 100.
    # X and Y (2 GPUs each, same memory) are beyond the depth: X (200 s) would run into R's
    # reservation, Y (50 s) ends before it and starts now on the 2 idle GPUs. The fast planner
    # remembers that X's shape did not start and skips longer jobs of that shape only.
    cluster = ClusterSpec("c", (NodeSpec("n", 4, GpuSpec("A100-80GB", 80.0)),))
    got = []
    for backfill in (Conservative(1), LegacyConservative(1)):
        s = Scheduler(cluster, "fifo", backfill)
        s.adopt(0, Job("A", 0.0, 2, duration_s=100.0, est_duration_s=100.0), (0, 1), 0.0)
        for jid, (name, gpus, est) in enumerate(
            [("R", 4, 50.0), ("X", 2, 200.0), ("Y", 2, 50.0), ("Z", 2, 300.0)], 1
        ):
            s.submit(jid, Job(name, 0.0, gpus, duration_s=est, est_duration_s=est))
        got.append((s.schedule(0.0), dict(backfill.reserved)))
    assert got[0] == got[1] == ([Started(3, (2, 3))], {1: 100.0})


def test_on_a_sharing_cluster_a_short_job_fills_the_gap_a_longer_one_of_its_shape_could_not() -> None:
    # One node of 2 GPUs shared by at most one job each; A runs on GPU 0 until 100; R (2 GPUs) is
    # reserved from 100 to 150. X (1 GPU, 200 s) finds no window before 150; Y (1 GPU, 50 s), next in
    # the queue, ends before R's reservation and starts now on GPU 1. The fast planner starts a job's
    # search where an earlier job it dominates found its first window, and only for jobs as long or
    # longer.
    cluster = ClusterSpec(
        "c", (NodeSpec("n", 2, GpuSpec("A100-80GB", 80.0)),), sharing=True, max_jobs_per_gpu=1
    )
    got = []
    for backfill in (Conservative(), LegacyConservative()):
        s = Scheduler(cluster, "fifo", backfill)
        s.adopt(0, Job("A", 0.0, 1, duration_s=100.0, est_duration_s=100.0), (0,), 0.0)
        for jid, (name, gpus, est) in enumerate([("R", 2, 50.0), ("X", 1, 200.0), ("Y", 1, 50.0)], 1):
            s.submit(jid, Job(name, 0.0, gpus, duration_s=est, est_duration_s=est))
        got.append((s.schedule(0.0), dict(backfill.reserved)))
    assert got[0] == got[1] == ([Started(3, (1,))], {1: 100.0, 2: 150.0})

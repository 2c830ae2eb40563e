"""Backfill keeps its word (hypothesis over random exclusive clusters, exact estimates).

With every planned duration equal to the truth, and no job ranked before it arriving in the meantime:
- EASY never starts the head job after its shadow time (the earliest time it fits if running jobs end
  at their expected ends, computed here from per-node free-GPU counts);
- conservative never starts a job after the first reservation it got;
- neither leaves a job waiting that fits now and would delay no reservation: under EASY, one that ends
  by the shadow or, on some placement, leaves the head placeable at the shadow; under conservative, one
  that ends before every reservation of the jobs ranked before it begins.

The runs are driven here through the Scheduler's public calls (submit, schedule, finish) exactly as the
simulator drives them (the test checks the starts agree with `simulate`), so each pass can be inspected.
Reservation times come from `Backfill.reserved`.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
from dataclasses import dataclass, field

from hypothesis import event, example, given

from gpuplan.core.policies import get_policy
from gpuplan.core.scheduler import Scheduler
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.engine import simulate
from invariant_cases import INVARIANTS, Case, booked_mem_gb, cases, exclusive_clusters, sharing_clusters


@dataclass
class _Pass:
    now: float
    waiting: list[int]  # in policy order
    idle: list[int]  # free GPUs per node after the pass
    running: dict[int, tuple[float, list[int]]]  # jid -> (expected end, GPUs per node)
    reserved: dict[int, float]
    ran: bool  # the backfill mode ran (an exclusive cluster with no free GPU skips the pass)


@dataclass
class _Drive:
    starts: dict[int, float] = field(default_factory=dict)
    passes: list[_Pass] = field(default_factory=list)


def _drive(case: Case) -> _Drive:
    """Run the case with the simulator's event order (finishes, arrivals, one pass), recording each pass."""
    jobs, cluster = case.jobs, case.cluster
    node_of = [k for k, n in enumerate(cluster.nodes) for _ in range(n.gpus)]
    sched = Scheduler(cluster, case.policy, case.backfill, case.placer, oracle=case.oracle)
    t0 = min(j.submit_s for j in jobs)
    arrivals = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
    heap: list[tuple[float, int, int]] = []
    seq = itertools.count()
    idle = [n.gpus for n in cluster.nodes]
    running: dict[int, tuple[float, list[int]]] = {}
    waiting: list[int] = []
    rank = {i: (*sched.policy.key(j, i, case.oracle), i) for i, j in enumerate(jobs)}
    out = _Drive()
    ai, now = 0, 0.0
    while ai < len(jobs) or heap:
        now = min(
            jobs[arrivals[ai]].submit_s - t0 if ai < len(jobs) else math.inf, heap[0][0] if heap else math.inf
        )
        while heap and heap[0][0] <= now:
            _, _, jid = heapq.heappop(heap)
            sched.finish(jid)
            for n, k in enumerate(running.pop(jid)[1]):
                idle[n] += k
        while ai < len(jobs) and jobs[arrivals[ai]].submit_s - t0 <= now:
            i = arrivals[ai]
            sched.submit(i, jobs[i], book_mem_gb=booked_mem_gb(jobs[i], case.oracle))
            waiting.append(i)
            ai += 1
        ran = bool(waiting) and (cluster.sharing or sum(idle) > 0)  # a full exclusive cluster skips the pass
        for st in sched.schedule(now):
            per_node = [0] * len(idle)
            for g in st.gpu_ids:
                per_node[node_of[g]] += 1
            for n, k in enumerate(per_node):
                idle[n] -= k
            plan = jobs[st.jid].planning_duration_s(case.oracle)
            assert plan == jobs[st.jid].duration_s  # exact estimates
            running[st.jid] = (now + float(plan or 0.0), per_node)
            out.starts[st.jid] = now
            waiting.remove(st.jid)
            heapq.heappush(heap, (now + float(jobs[st.jid].duration_s or 0.0), next(seq), st.jid))
        waiting.sort(key=lambda i: rank[i])
        out.passes.append(
            _Pass(now, list(waiting), list(idle), dict(running), dict(sched.backfill.reserved), ran)
        )
    return out


def _placements(idle: list[int], usable: list[bool], g: int, span: bool) -> list[list[int]]:
    """Every per-node GPU count a job of g GPUs could get now: one node, or (spanning, when no node
    can host it) any split over the nodes."""
    nodes = len(idle)
    single = [[g if m == n else 0 for m in range(nodes)] for n in range(nodes) if usable[n] and idle[n] >= g]
    if single or not span:
        return single
    ranges = [range(idle[n] + 1) if usable[n] else range(1) for n in range(nodes)]
    return [list(c) for c in itertools.product(*ranges) if sum(c) == g]


def _usable(job: Job, cluster: ClusterSpec, oracle: bool) -> list[bool]:
    mem = booked_mem_gb(job, oracle)
    return [mem is None or mem <= n.gpu.mem_gb for n in cluster.nodes]


def _fits(free: list[int], usable: list[bool], g: int, span: bool) -> bool:
    ok = [k for k, u in zip(free, usable) if u]
    return max(ok, default=0) >= g or (span and sum(ok) >= g)


def _free_at(p: _Pass, t: float) -> list[int]:
    """Free GPUs per node at t if every running job ends at its expected end."""
    free = list(p.idle)
    for end, per_node in p.running.values():
        if end <= t:
            free = [a + b for a, b in zip(free, per_node)]
    return free


def _shadow(p: _Pass, head: Job, usable: list[bool]) -> float:
    ends = sorted({max(end, p.now) for end, _ in p.running.values()})
    return min(t for t in ends if _fits(_free_at(p, t), usable, head.gpus, head.may_span_nodes))


def _instant_jobs_ended(case: Case, drive: _Drive, after: float, until: float) -> bool:
    """Whether a job of zero duration started in [after, until): the plan books it for an instant
    (`booked_end`: the next float after its start), so it ends that instant earlier than booked, an
    early end; a job ranked before j may then take what j had reserved (reservations are planned
    again in rank order each pass, as Slurm does), which the claim below excludes."""
    return any(
        float(case.jobs[i].duration_s or 0.0) == 0.0 and after <= t < until for i, t in drive.starts.items()
    )


def _assert_first_reservations_kept(case: Case, drive: _Drive, first: dict[int, tuple[float, float]]) -> None:
    """Each job started no later than its first reservation (`first`: job -> (reservation, when made)),
    unless a job ranked before it arrived meanwhile or a zero-length job ended early."""
    for j, (t, when) in first.items():
        if _ranked_arrivals(case, drive, j, when, drive.starts[j]):
            event("a job ranked before arrived: no claim")
            continue
        if drive.starts[j] > t and _instant_jobs_ended(case, drive, when, drive.starts[j]):
            event("a zero-length job ended an instant before its booking: no claim")
            continue
        assert drive.starts[j] <= t, (case.jobs[j].id, drive.starts[j], "first reserved", t, "at", when)
        event(
            "started before its first reservation"
            if drive.starts[j] < t
            else "started at its first reservation"
        )


def _ranked_arrivals(case: Case, drive: _Drive, j: int, after: float, until: float) -> bool:
    """Whether a job ranked before j arrived in (after, until]."""
    pol, t0 = get_policy(case.policy), min(x.submit_s for x in case.jobs)
    mine = (*pol.key(case.jobs[j], j, case.oracle), j)
    return any(
        after < job.submit_s - t0 <= until and (*pol.key(job, i, case.oracle), i) < mine
        for i, job in enumerate(case.jobs)
    )


_EXACT_EXCLUSIVE = cases(estimates="exact", clusters=exclusive_clusters(), backfills=("easy",))


@INVARIANTS(400)
@given(case=_EXACT_EXCLUSIVE)
def test_easy_keeps_the_heads_shadow_and_misses_no_backfill(case: Case) -> None:
    jobs, drive = case.jobs, _drive(case)
    assert drive.starts == {i: r.start_s for i, r in _by_index(case).items()}
    claims: dict[int, tuple[float, float]] = {}  # head -> (first shadow, when)
    for p in drive.passes:
        if not p.waiting:
            continue
        head = p.waiting[0]
        usable = _usable(jobs[head], case.cluster, case.oracle)
        shadow = _shadow(p, jobs[head], usable)
        if head in p.reserved:
            assert p.reserved[head] == shadow, (p.now, head)
        claims.setdefault(head, (shadow, p.now))
        for j in p.waiting[1:]:
            job = jobs[j]
            fits_now = _placements(
                p.idle, _usable(job, case.cluster, case.oracle), job.gpus, job.may_span_nodes
            )
            if not fits_now:
                continue
            assert p.now + float(job.duration_s or 0.0) > shadow, (
                f"job {job.id} ends by the shadow, waits at {p.now}"
            )
            at_shadow = _free_at(p, shadow)
            for place in fits_now:
                left = [a - b for a, b in zip(at_shadow, place)]
                ok = _fits(left, usable, jobs[head].gpus, jobs[head].may_span_nodes)
                assert not ok, (
                    f"job {job.id} on {place} leaves head {jobs[head].id} placeable, waits at {p.now}"
                )
            event("a waiting job fitted but would have delayed the head")
    for head, (shadow, when) in claims.items():
        if _ranked_arrivals(case, drive, head, when, drive.starts[head]):
            event("a job ranked before the head arrived: no claim")
            continue
        assert drive.starts[head] <= shadow, (jobs[head].id, drive.starts[head], shadow)
        event(
            "head started before its shadow" if drive.starts[head] < shadow else "head started at its shadow"
        )


def _by_index(case: Case) -> dict[int, object]:
    res = simulate(case.jobs, case.cluster, case.policy, case.backfill, case.placer, oracle=case.oracle)
    index = {j.id: i for i, j in enumerate(case.jobs)}
    return {index[r.job_id]: r for r in res.records}


_CONSERVATIVE = cases(estimates="exact", clusters=exclusive_clusters(), backfills=("conservative",))

# Found by hypothesis: j3 takes 0 s, so it ends an instant before its booking; j11, ranked before j4,
# then takes the GPU j4 had reserved an instant after 100 s, and j4 starts at 110 s.
_INSTANT_JOB = Case(
    [Job("j0", 0.0, 7, duration_s=100.0, may_span_nodes=True)]
    + [Job(f"j{i}", 10.0 if i == 4 else 0.0, g, duration_s=d) for i, g, d in
       [(1, 1, 10.0), (2, 1, 20.0), (3, 1, 0.0), (4, 1, 10.0), (5, 1, 10.0), (6, 1, 10.0), (7, 1, 10.0),
        (8, 1, 10.0), (9, 3, 10.0), (10, 3, 10.0), (11, 1, 20.0)]],
    ClusterSpec("drawn", (NodeSpec("n0", 3, GpuSpec("L40S-48GB", 48.0)), NodeSpec("n1", 4, GpuSpec("L40S-48GB", 48.0)))),
    "fifo", "conservative", "first-fit", True,
)  # fmt: skip


@INVARIANTS(400)
@given(case=_CONSERVATIVE)
@example(case=_INSTANT_JOB)
def test_conservative_keeps_first_reservations_and_misses_no_start(case: Case) -> None:
    jobs, drive = case.jobs, _drive(case)
    assert drive.starts == {i: r.start_s for i, r in _by_index(case).items()}
    first: dict[int, tuple[float, float]] = {}
    for p in drive.passes:
        if not p.ran:
            continue
        for j, t in p.reserved.items():
            first.setdefault(j, (t, p.now))
        for pos, j in enumerate(p.waiting):
            job = jobs[j]
            assert j in p.reserved, f"waiting job {job.id} has no reservation at {p.now}"
            earlier = [p.reserved[k] for k in p.waiting[:pos]]
            ends = p.now + float(job.duration_s or 0.0)
            if any(t < ends or (t == p.now) for t in earlier):
                continue
            fits_now = _placements(
                p.idle, _usable(job, case.cluster, case.oracle), job.gpus, job.may_span_nodes
            )
            assert not fits_now, (
                f"job {job.id} fits now on {fits_now[0]} and ends by every earlier reservation, waits at {p.now}"
            )
    _assert_first_reservations_kept(case, drive, first)


def _as_recorded(case: Case) -> Case:
    """Every job's duration recorded while sharing (as Alibaba's pods): no neighbour slows it, so with
    exact estimates a running job ends exactly at its expected end on a sharing cluster too. (No
    start-up or init phases: the simulator runs a job whose start-up + init exceed its duration for
    their sum, longer than its duration.)"""
    jobs = [
        dataclasses.replace(j, duration_includes_sharing=True, startup_s=None, init_s=None) for j in case.jobs
    ]
    return dataclasses.replace(case, jobs=jobs)


_CONSERVATIVE_SHARING = cases(estimates="exact", clusters=sharing_clusters(), backfills=("conservative",))


@INVARIANTS(300)
@given(case=_CONSERVATIVE_SHARING.map(_as_recorded))
def test_conservative_keeps_first_reservations_on_sharing_clusters(case: Case) -> None:
    # per GPU with memory (core/gpu_plan.py): a reservation keeps its GPUs from pass to pass, so with
    # exact estimates a job starts no later than the first reservation it got
    drive = _drive(case)
    assert drive.starts == {i: r.start_s for i, r in _by_index(case).items()}
    first: dict[int, tuple[float, float]] = {}
    for p in drive.passes:
        for j, t in p.reserved.items():
            first.setdefault(j, (t, p.now))
    _assert_first_reservations_kept(case, drive, first)

"""The forecast against the Slurm planner's clock: from generated live Slurm states (sinfo nodes, squeue
running jobs with elapsed time and limits, pending jobs with priorities, multi-node jobs, held and
dependent jobs the planner leaves alone), the scheduler `gpuplan slurm plan` seeds (`live_scheduler`)
is driven event by event, every running job ending at its expected end (its limit) and nothing new
arriving: every pending job starts exactly when and where the forecast (`simulate_queue`'s) said,
under Slurm's own order and every static policy, with each backfill mode and placer."""

from __future__ import annotations

import heapq
import math

from hypothesis import given
from hypothesis import strategies as st

from gpuplan.core.forecast import forecast
from gpuplan.core.scheduler import Scheduler
from gpuplan.optimize.order import FixedOrder
from gpuplan.slurm.parse import NodeInfo, QueueJob
from gpuplan.slurm.planner import LiveState, live_scheduler, plan_inputs, simulate_queue, slurm_order
from invariant_cases import BACKFILLS, INVARIANTS, PLACERS, POLICIES

NOW = 1_800_000_000.0
_LIMITS = st.sampled_from([60.0, 300.0, 600.0, 1800.0, 3600.0])


def _queue_job(jid: int, state: str, gpus: int, limit: float | None, **kw: object) -> QueueJob:
    base = dict(name=f"j{jid}", user="u", partition="gpu", time_limit_s=limit, elapsed_s=0.0, num_nodes=1,
                gpus=gpus, priority=100, nice=0, reason="None", submit_s=NOW - 600, start_s=None, node_list="")  # fmt: skip
    base.update(kw)
    return QueueJob(str(jid), state=state, **base)  # type: ignore[arg-type]


@st.composite
def slurm_states(draw: st.DrawFn) -> LiveState:
    sizes = [draw(st.sampled_from([2, 4, 8])) for _ in range(draw(st.integers(1, 3)))]
    used = [0] * len(sizes)
    jobs: list[QueueJob] = []
    jid = 100
    for _ in range(draw(st.integers(0, 5))):
        n = draw(st.integers(0, len(sizes) - 1))
        g = draw(st.integers(1, sizes[n]))
        if used[n] + g > sizes[n]:
            continue
        used[n] += g
        limit = draw(_LIMITS)
        elapsed = draw(st.sampled_from([0.0, 30.0, 50.0, 59.0]))
        jobs.append(_queue_job(jid, "RUNNING", g, limit, elapsed_s=elapsed, start_s=NOW - elapsed,
                               node_list=f"n{n}", reason="None"))  # fmt: skip
        jid += 1
    for _ in range(draw(st.integers(0, 10))):
        g = draw(st.integers(1, max(sizes)))
        nodes = 2 if len(sizes) > 1 and draw(st.integers(0, 4)) == 0 else 1
        kind = draw(st.integers(0, 9))
        extra: dict[str, object] = {}
        if kind == 0:
            extra["reason"] = "JobHeldUser"
        elif kind == 1:
            extra.update(reason="Dependency", dependency="afterok:100")
        jobs.append(_queue_job(jid, "PENDING", g * nodes if nodes > 1 else g, draw(_LIMITS), num_nodes=nodes,
                               priority=draw(st.sampled_from([10, 100, 1000])),
                               submit_s=NOW - draw(st.sampled_from([0.0, 60.0, 600.0])), **extra))  # fmt: skip
        jid += 1
    nodes = [
        NodeInfo(f"n{k}", "mixed" if used[k] else "idle", g, used[k], ("gpu",)) for k, g in enumerate(sizes)
    ]
    return LiveState(nodes, jobs, NOW, {"SchedulerType": "sched/backfill"})


def _drive(sched: Scheduler) -> dict[int, tuple[float, tuple[int, ...]]]:
    """What happens on the clock: each running job ends at its expected end; a pass at every end."""
    ends = [(max(s.expected_end_s, 0.0), s.jid) for s in sched.running() if s.expected_end_s < math.inf]
    heapq.heapify(ends)
    out, t = {}, 0.0
    while True:
        while ends and ends[0][0] <= t:
            sched.finish(heapq.heappop(ends)[1], t)
        for st_ in sched.decide(t).started:
            out[st_.jid] = (t, st_.gpu_ids)
            end = sched.slot(st_.jid).expected_end_s
            if end < math.inf:
                heapq.heappush(ends, (end, st_.jid))
        if not ends or not sched.waiting_count:
            return out
        t = ends[0][0]


@INVARIANTS(230)
@given(slurm_states(), st.sampled_from(("slurm-order", *POLICIES)))
def test_slurm_clock_starts_every_pending_job_as_forecast(state: LiveState, policy: str) -> None:
    inp = plan_inputs(state, None)
    ids = {j.id for j in inp.pending}
    order = slurm_order([q for q in state.jobs if q.job_id in ids])
    for backfill in BACKFILLS:
        for placer in PLACERS:
            pol = FixedOrder(order, "slurm-order") if policy == "slurm-order" else policy
            args = (inp.cluster, inp.seeds, inp.pending, pol, backfill, placer)
            fc = forecast(live_scheduler(*args), 0.0)
            real = _drive(live_scheduler(*args))
            base = len(inp.seeds)
            for i in range(len(inp.pending)):
                got = fc[base + i]
                want = real.get(base + i, (None, ()))
                assert (got.start_s, got.gpu_ids) == want, (i, got, want, backfill, placer)
                assert got.end_s is None or got.start_s is None or got.end_s >= got.start_s
            out = simulate_queue(*args)  # what `gpuplan slurm plan` reports is that forecast
            assert out.starts == {j.id: fc[base + i].start_s for i, j in enumerate(inp.pending)}
            assert set(out.reasons()) == ids

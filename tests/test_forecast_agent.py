"""The forecast against the agent's clock: the agent's Engine (agent/engine.py: AgentPolicy with
priorities and plan ranks, held jobs kept out, dependents queued when their job ends, preemptive
policies suspending in place) is driven in-process with a fake clock, each round as `Agent.step` does
it (ends, then released dependents, then one `decide`), with every running job ending at its expected
end and nothing new arriving. Every job starts exactly when and where `agent.outlook`'s forecast
(`Engine.forecast`) said, and ends when it said; held jobs and jobs behind them never start."""

from __future__ import annotations

import heapq
import math
from dataclasses import replace

from hypothesis import given

from forecast_cases import NOW_S, PREEMPTIVE, LiveCase, live_cases
from gpuplan.agent.engine import AgentPolicy, Engine
from gpuplan.core.forecast import Deferred, Forecast
from gpuplan.model import Job
from invariant_cases import BACKFILLS, INVARIANTS, PLACERS, POLICIES

_RUN = 1000  # running job k is handle _RUN + k; waiting job i is i + 1 (store ids are > 0)


def _jobs(case: LiveCase) -> list[Job]:
    if case.policy not in PREEMPTIVE:
        return case.waiting
    # the agent keeps a job preempted by suspend in its Scheduler (SIGSTOP); kill modes leave it for
    # the grace period, which no forecast knows
    return [replace(j, meta={**j.meta, "preempt": "suspend"}) for j in case.waiting]


def _dep(case: LiveCase, i: int) -> int | None:
    a = case.after.get(i)
    if a is None:
        return None
    return _RUN + (-1 - a) if a < 0 else a + 1


def _engine(case: LiveCase, backfill: str) -> tuple[Engine, dict[int, Job], dict[int, int]]:
    priority = {i + 1: p for i, p in case.priority.items()}
    rank = {i + 1: r for i, r in case.rank.items()}
    eng = Engine(case.cluster, AgentPolicy(case.policy, priority, rank), backfill, case.placer)
    for k, (job, gpus, start, _end) in enumerate(case.running):
        eng.seed_running(_RUN + k, job, gpus, start)
    later, deps = {}, {}
    for i, job in enumerate(_jobs(case)):
        if i in case.held:
            continue
        dep = _dep(case, i)
        if dep is None:
            eng.submit(i + 1, job, now=job.submit_s)
        else:
            later[i + 1], deps[i + 1] = job, dep
    return eng, later, deps


def _forecast(case: LiveCase, eng: Engine, later: dict[int, Job], deps: dict[int, int]) -> Forecast:
    deferred = [Deferred(jid, job, after=(deps[jid],)) for jid, job in later.items()]
    return eng.forecast(NOW_S, deferred, {i + 1: "JobHeldUser" for i in case.held})


def _run(eng: Engine, later: dict[int, Job], deps: dict[int, int]) -> dict[int, tuple[float, float, tuple]]:  # type: ignore[type-arg]
    """The agent's rounds on a fake clock: what really happens (job -> first start, end, GPUs)."""
    s = eng.sched
    ends: list[tuple[float, int]] = []
    left = {sl.jid: sl.plan_s for sl in s.waiting()}
    seg: dict[int, float] = {}
    gen: dict[int, float] = {}  # each running job's current end (a preempted job's old one no longer holds)
    for sl in s.running():
        end = max(sl.expected_end_s, NOW_S)
        heapq.heappush(ends, (end, sl.jid))
        left[sl.jid], seg[sl.jid], gen[sl.jid] = end - NOW_S, NOW_S, end
    done: set[int] = set()
    out: dict[int, list] = {}  # type: ignore[type-arg]
    t = NOW_S
    for _ in range(10_000):
        while ends and ends[0][0] <= t:
            end, jid = heapq.heappop(ends)
            if gen.get(jid, end) != end:
                continue
            eng.finish(jid, t)
            done.add(jid)
            if jid in out:
                out[jid][1] = t
        for jid in [j for j in later if deps[j] in done]:  # JobQueue.release_dependents
            eng.submit(jid, later.pop(jid))
            left[jid] = s.slot(jid).plan_s
        decided = eng.decide(t)
        for p in decided.preempted:  # suspended in place: its work so far is kept
            left[p.jid] -= t - seg[p.jid]
            gen[p.jid] = -1.0
        for st in decided.started:
            out.setdefault(st.jid, [t, None, st.gpu_ids])
            seg[st.jid] = t
            end = t + left.setdefault(st.jid, s.slot(st.jid).plan_s)
            if end < math.inf:
                gen[st.jid] = end
                heapq.heappush(ends, (end, st.jid))
        nxt = min(ends[0][0] if ends else math.inf, eng.next_event_s())
        if nxt == math.inf or (not s.waiting_count and not later and not eng.preemptive):
            break
        t = nxt
    return {j: (a, b, g) for j, (a, b, g) in out.items()}


def _check(case: LiveCase, backfill: str) -> None:
    eng, later, deps = _engine(case, backfill)
    version = eng.sched.version
    fc = _forecast(case, eng, later, deps)
    assert eng.sched.version == version, "the forecast changed the live scheduler"
    real = _run(eng, dict(later), deps)
    for i in range(len(case.waiting)):
        got = fc[i + 1]
        if i + 1 not in real:
            assert got.start_s is None, (i, got)
            continue
        start, end, gpus = real[i + 1]
        assert (got.start_s, got.gpu_ids) == (start, gpus), (i, got, real[i + 1])
        if end is not None:
            assert got.end_s == end >= got.start_s, (i, got, real[i + 1])


# each drawn state under every backfill mode x placer (250 x 9 cases), preemptive ones under every
# placer (120 x 3; they ignore backfill)
@INVARIANTS(250)
@given(live_cases(policies=(*POLICIES, "fairshare"), ranks=True))
def test_agent_clock_starts_every_job_as_forecast(case: LiveCase) -> None:
    for backfill in BACKFILLS:
        for placer in PLACERS:
            _check(replace(case, placer=placer), backfill)


@INVARIANTS(120)
@given(live_cases(policies=PREEMPTIVE, ranks=True))
def test_agent_clock_under_a_preemptive_policy_starts_every_job_as_forecast(case: LiveCase) -> None:
    for placer in PLACERS:
        _check(replace(case, placer=placer), "none")

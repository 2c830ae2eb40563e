"""Random live states for the forecast's property tests (tests/test_forecast*.py).

A live state: a drawn cluster (exclusive or sharing), the running jobs on GPUs a placer chose, each with
an expected end at or after now, and waiting jobs of mixed sizes, memory and ranks (priorities, plan
ranks, holds and dependencies where the clock has them). Estimates are exact (est = duration), so a
running job that ends at its expected end is the truth the forecast assumes. Few distinct values, so
ends, shadows and level changes coincide (ties are where two clocks would differ).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from hypothesis import strategies as st

from gpuplan.core.placement import get_placer
from gpuplan.core.state import ClusterState
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from invariant_cases import BACKFILLS, PLACERS, POLICIES, booked_mem_gb, fits_empty

__all__ = ["NOW_S", "PREEMPTIVE", "LiveCase", "live_cases"]

NOW_S = 1000.0
PREEMPTIVE = ("las", "tiresias", "gittins")
_GPUS = (GpuSpec("L40S-48GB", 48.0), GpuSpec("A100-80GB", 80.0))
_DURATIONS = st.sampled_from([5.0, 10.0, 20.0, 30.0, 60.0, 100.0])
_LEFT = st.sampled_from([0.0, 5.0, 10.0, 20.0, 30.0, 45.0])
_MEMS = st.sampled_from([None, 10.0, 30.0, 45.0, 70.0])


@dataclass
class LiveCase:
    """One live state. `running`: (job, gpus, start_s, expected_end_s); `waiting`: jobs (submit_s
    <= now); `priority`, `rank`, `held`, `after`: by waiting index (the agent's ranks, holds and
    dependencies; a dependency names another waiting index or a running job as -1 - its index)."""

    cluster: ClusterSpec
    policy: str
    backfill: str
    placer: str
    running: list[tuple[Job, tuple[int, ...], float, float]]
    waiting: list[Job]
    priority: dict[int, int] = field(default_factory=dict)
    rank: dict[int, int] = field(default_factory=dict)
    held: set[int] = field(default_factory=set)
    after: dict[int, int] = field(default_factory=dict)

    def __repr__(self) -> str:
        nodes = [(n.gpus, n.gpu.mem_gb) for n in self.cluster.nodes]
        run = "\n".join(f"  run {g} {s}->{e} {j!r}" for j, g, s, e in self.running)
        wait = "\n".join(f"  wait {j!r}" for j in self.waiting)
        return (
            f"LiveCase(nodes={nodes}, sharing={self.cluster.sharing}/{self.cluster.max_jobs_per_gpu}, "
            f"{self.policy}+{self.backfill}+{self.placer}, priority={self.priority}, rank={self.rank}, "
            f"held={self.held}, after={self.after}\n{run}\n{wait})"
        )


@st.composite
def _cluster(draw: st.DrawFn, sharing: bool) -> ClusterSpec:
    nodes = tuple(
        NodeSpec(f"n{k}", draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from(_GPUS)))
        for k in range(draw(st.integers(1, 3)))
    )
    return ClusterSpec("drawn", nodes, sharing=sharing, max_jobs_per_gpu=draw(st.integers(2, 3)))


@functools.cache
def _job(i: int, max_gpus: int, preemptive: bool) -> st.SearchStrategy[Job]:
    @st.composite
    def job(draw: st.DrawFn) -> Job:
        duration = draw(_DURATIONS)
        mem = draw(_MEMS)
        meta = {}
        if preemptive:
            meta["preempt"] = draw(st.sampled_from(["checkpoint", "requeue", "suspend", "never"]))
            if draw(st.booleans()):
                meta["checkpointable"] = False
        return Job(
            id=f"j{i}",
            submit_s=NOW_S - draw(st.sampled_from([0.0, 10.0, 50.0, 100.0])),
            user=draw(st.sampled_from(["", "alice", "bob"])),
            gpus=draw(st.integers(1, max_gpus)),
            mem_gb=mem,
            duration_s=duration,
            est_duration_s=duration,
            est_mem_gb=mem,
            may_span_nodes=draw(st.booleans()),
            duration_includes_sharing=True,  # its duration is the truth even beside others
            meta=meta,
        )

    return job()


@st.composite
def live_cases(
    draw: st.DrawFn,
    policies: tuple[str, ...] = POLICIES,
    max_waiting: int = 10,
    sharing: bool | None = None,
    ranks: bool = False,
) -> LiveCase:
    """A live state; `ranks`: draw priorities, plan ranks, holds and dependencies (the agent's)."""
    policy = draw(st.sampled_from(policies))
    preemptive = policy in PREEMPTIVE
    share = False if preemptive else (draw(st.booleans()) if sharing is None else sharing)
    cluster = draw(_cluster(share))
    placer = draw(st.sampled_from(PLACERS))
    max_gpus = min(cluster.total_gpus, 4)
    state, find = ClusterState(cluster), get_placer(placer).find
    running = []
    for i in range(draw(st.integers(0, 5))):
        job = draw(_job(100 + i, max_gpus, preemptive))
        mem = booked_mem_gb(job, False)
        gpus = find(state, job.gpus, mem, job.may_span_nodes) if fits_empty(job, cluster, False) else None
        if gpus is None:
            continue
        state.place(gpus, mem)
        left = draw(_LEFT)
        start = NOW_S - draw(st.sampled_from([0.0, 5.0, 40.0]))
        end = NOW_S + left
        ran = max(end - start, 0.0)
        running.append((Job(f"r{i}", start - 1.0, job.gpus, job.mem_gb, ran, ran, job.est_mem_gb, user=job.user,
                            may_span_nodes=job.may_span_nodes, duration_includes_sharing=True,
                            meta=job.meta), tuple(gpus), start, end))  # fmt: skip
    n = draw(st.integers(0, max_waiting))
    waiting = [draw(_job(i, max_gpus, preemptive)) for i in range(n)]
    waiting = [j for j in waiting if fits_empty(j, cluster, False)]
    case = LiveCase(cluster, policy, draw(st.sampled_from(BACKFILLS)), placer, running, waiting)
    if ranks:
        for i in range(len(waiting)):
            if draw(st.integers(0, 3)) == 0:
                case.priority[i] = draw(st.sampled_from([-1, 1, 5]))
            if draw(st.integers(0, 3)) == 0:
                case.rank[i] = draw(st.integers(0, 5))
            if draw(st.integers(0, 7)) == 0:
                case.held.add(i)
            elif draw(st.integers(0, 4)) == 0:
                case.after[i] = draw(st.integers(-len(running), len(waiting) - 1)) if running or i else 0
                if case.after[i] >= 0 and case.after[i] >= i:  # only earlier jobs: no cycle
                    del case.after[i]
    return case

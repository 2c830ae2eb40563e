"""Hypothesis strategies for the invariant tests: small random clusters and traces.

Every Job field is sometimes missing and sometimes present; estimates are exact, wrong or missing;
clusters are exclusive or sharing, with one to three nodes of different GPU memory; jobs may span nodes.
Jobs that could never start on the drawn cluster are dropped (the simulator refuses them at submit).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec

__all__ = [
    "BACKFILLS",
    "INVARIANTS",
    "PLACERS",
    "POLICIES",
    "Case",
    "any_clusters",
    "booked_mem_gb",
    "cases",
    "exclusive_clusters",
    "fits_empty",
    "sharing_clusters",
    "single_node_exact_cases",
]

POLICIES = ("fifo", "sjf", "ljf", "small-gpus-first", "large-gpus-first", "mem-desc", "gpu-time", "article")
BACKFILLS = ("none", "easy", "conservative")
PLACERS = ("first-fit", "best-fit", "spread")
GPU_MODELS = (GpuSpec("L40S-48GB", 48.0), GpuSpec("A100-80GB", 80.0), GpuSpec("H200-141GB", 141.0))


def INVARIANTS(examples: int) -> settings:
    """Deterministic settings (no database, derandomized): CI runs the same cases every time."""
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


@dataclass(frozen=True)
class Case:
    """One drawn run: jobs, cluster and the scheduler's settings."""

    jobs: list[Job]
    cluster: ClusterSpec
    policy: str
    backfill: str
    placer: str
    oracle: bool

    def __repr__(self) -> str:  # what hypothesis prints for a failing case: enough to rebuild it
        nodes = [(n.gpus, n.gpu.mem_gb) for n in self.cluster.nodes]
        return (
            f"Case(nodes={nodes}, sharing={self.cluster.sharing}, max_share={self.cluster.max_jobs_per_gpu}, "
            f"policy={self.policy!r}, backfill={self.backfill!r}, placer={self.placer!r}, oracle={self.oracle},\n"
            + "\n".join(f"  {j!r}" for j in self.jobs)
            + ")"
        )


def booked_mem_gb(job: Job, oracle: bool) -> float | None:
    """The memory the simulator books per GPU (docs: its estimate, or its true use when larger)."""
    est = job.planning_mem_gb(oracle)
    if est is None or job.mem_gb is None:
        return est
    return max(est, job.mem_gb)


def fits_empty(job: Job, cluster: ClusterSpec, oracle: bool) -> bool:
    """Whether the job can start on the empty cluster (one node, or several when it may span)."""
    mem = booked_mem_gb(job, oracle)
    usable = [n.gpus for n in cluster.nodes if mem is None or mem <= n.gpu.mem_gb]
    return max(usable, default=0) >= job.gpus or (job.may_span_nodes and sum(usable) >= job.gpus)


# few distinct values, so that ends, shadows and arrivals coincide (ties are where rules differ)
_DURATIONS = st.one_of(
    st.sampled_from([10.0, 20.0, 50.0, 100.0]),
    st.sampled_from([0.0, 100.0]),
    st.integers(0, 400).map(float),
)
_SUBMITS = st.one_of(st.just(0.0), st.sampled_from([0.0, 10.0, 50.0, 100.0]), st.integers(0, 300).map(float))
_MEMS = st.one_of(st.none(), st.sampled_from([1.0, 10.0, 20.0, 30.0, 40.0, 45.0, 60.0, 75.0, 100.0]))


_REQUESTED = st.one_of(st.none(), _DURATIONS)
_UTILS = st.one_of(st.none(), st.sampled_from([5.0, 30.0, 60.0, 100.0]))
_PHASES = st.one_of(st.none(), st.sampled_from([0.0, 5.0, 30.0]))
_USERS = st.sampled_from(["", "alice"])
_NAMES = st.sampled_from(["", "train"])
_METAS = st.sampled_from([{}, {"queue": "q1"}]).map(dict)  # a fresh dict per job (meta may be written)


@functools.cache
def _gpus(max_gpus: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(1, max_gpus), st.sampled_from(sorted({1, max(max_gpus // 2, 1), max_gpus})))


@functools.cache
def _wrong_estimate(duration: float) -> st.SearchStrategy[float | None]:
    return st.one_of(st.none(), st.just(duration), _DURATIONS)


# The strategies are built once (module constants, cached per argument), not per draw: building and
# validating them on every job was most of the invariant tests' time; the drawn cases are the same.
@functools.cache
def _job(i: int, max_gpus: int, estimates: str, spanning: bool) -> st.SearchStrategy[Job]:
    return _job_strategy(i, max_gpus, estimates, spanning)


@st.composite
def _job_strategy(draw: st.DrawFn, i: int, max_gpus: int, estimates: str, spanning: bool) -> Job:
    duration = draw(_DURATIONS)
    est: float | None
    requested: float | None = draw(_REQUESTED)
    if estimates == "exact":
        est = duration if requested is None or draw(st.booleans()) else None
        requested = duration if est is None else requested
    else:  # wrong or missing
        est = draw(_wrong_estimate(duration))
    return Job(
        id=f"j{i}",
        submit_s=draw(_SUBMITS),
        gpus=draw(_gpus(max_gpus)),
        mem_gb=draw(_MEMS),
        duration_s=duration,
        est_duration_s=est,
        est_mem_gb=draw(_MEMS),
        requested_s=requested,
        gpu_util_pct=draw(_UTILS),
        may_span_nodes=spanning and draw(st.booleans()),
        duration_includes_sharing=draw(st.booleans()),
        startup_s=draw(_PHASES),
        init_s=draw(_PHASES),
        user=draw(_USERS),
        name=draw(_NAMES),
        meta=draw(_METAS),
    )


@st.composite
def _cluster(draw: st.DrawFn, sharing: bool | None = None, nodes: int | None = None) -> ClusterSpec:
    n = nodes if nodes is not None else draw(st.integers(1, 3))
    node_specs = tuple(
        NodeSpec(f"n{k}", draw(st.integers(1, 4)), draw(st.sampled_from(GPU_MODELS))) for k in range(n)
    )
    share = draw(st.booleans()) if sharing is None else sharing
    return ClusterSpec("drawn", node_specs, sharing=share, max_jobs_per_gpu=draw(st.integers(1, 4)))


@st.composite
def cases(
    draw: st.DrawFn,
    estimates: str | None = None,
    clusters: st.SearchStrategy[ClusterSpec] | None = None,
    backfills: tuple[str, ...] = BACKFILLS,
    placers: tuple[str, ...] = PLACERS,
    max_jobs: int = 12,
    spanning: bool = True,
) -> Case:
    """A run on a drawn cluster. `estimates`: "exact" (every planned duration is the truth: exact
    estimates, the time limit, or an oracle run), "any" (exact, wrong or missing), None: either."""
    cluster = draw(clusters if clusters is not None else _cluster())
    kind = estimates or draw(st.sampled_from(["exact", "any"]))
    oracle = draw(st.booleans())
    max_gpus = min(cluster.total_gpus, 8)
    n = draw(st.one_of(st.integers(1, max_jobs), st.integers(max_jobs // 2, max_jobs)))
    jobs = [draw(_job(i, max_gpus, "any" if oracle else kind, spanning)) for i in range(n)]
    jobs = [j for j in jobs if fits_empty(j, cluster, oracle)]
    if not jobs:
        jobs = [Job("j0", 0.0, 1, duration_s=10.0, est_duration_s=10.0)]
    return Case(
        jobs,
        cluster,
        draw(st.sampled_from(POLICIES)),
        draw(st.sampled_from(backfills)),
        draw(st.sampled_from(placers)),
        oracle,
    )


def _one_node() -> st.SearchStrategy[ClusterSpec]:
    return st.builds(
        lambda g, gpu: ClusterSpec("one-node", (NodeSpec("n0", g, gpu),), sharing=False),
        st.integers(1, 8),
        st.sampled_from(GPU_MODELS),
    )


def single_node_exact_cases(max_jobs: int = 12) -> st.SearchStrategy[Case]:
    """One exclusive node; every planned duration is the truth (the reference scheduler's scope)."""
    return cases(estimates="exact", clusters=_one_node(), max_jobs=max_jobs)


def exclusive_clusters(nodes: int | None = None) -> st.SearchStrategy[ClusterSpec]:
    return _cluster(sharing=False, nodes=nodes)


def sharing_clusters() -> st.SearchStrategy[ClusterSpec]:
    return _cluster(sharing=True)


def any_clusters() -> st.SearchStrategy[ClusterSpec]:
    return _cluster()

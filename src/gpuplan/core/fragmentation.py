"""GPU fragmentation as FGD defines it (Weng et al., "Beware of Fragmentation", USENIX ATC '23).

For one pod (job) type, a node's fragmentation is the free GPU capacity there that a job of that
type could not use: all of it when the job does not fit the node at all (its CPU, host memory or
GPUs are short there), otherwise the free capacity of the GPUs whose free share is below the job's
per-GPU need. A node's fragmentation is the expectation over the workload's job types, weighted by
how often each occurs; the cluster's is the sum over nodes. Capacities are in GPUs (a free share of
0.3 of one GPU counts 0.3). docs/fragmentation.md has the hand-computed example the tests check.

One deliberate reading: a type of 0 GPUs that fits the node (its CPU and memory fit) leaves no
fragment (no GPU falls below its need of 0); FGD's simulator counts every free GPU as a fragment
for such a type, a constant that changes no placement decision.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuplan.core.state import ClusterState, Need
from gpuplan.model import Job

if TYPE_CHECKING:
    import numpy as np
else:  # numpy on first use: `gpuplan --help` and `gpuplan policies` never need it
    from gpuplan.lazy import lazy_module

    np = lazy_module("numpy")

__all__ = [
    "NodeKey",
    "Workload",
    "cluster_fragmentation",
    "node_key",
    "per_gpu_need",
]

_EPS = 1e-9

NodeKey = tuple[float, float, tuple[float, ...]]
"""What a node's fragmentation depends on: (free CPU, free host memory, its GPUs' free shares sorted)."""


def per_gpu_need(gpus: int, share: float | None) -> float:
    """The share of each of its GPUs a job takes: its GPU share (one GPU), else whole GPUs (0 GPUs: 0)."""
    if gpus == 0:
        return 0.0
    return share if share is not None and gpus == 1 else 1.0


@dataclass(frozen=True, slots=True)
class Workload:
    """Job types and how often each occurs (weights sum to 1).

    Attributes:
        gpus, need, cpu_milli, host_mem_gb, weight: one entry per type (numpy arrays): whole GPUs, the
            per-GPU need (`per_gpu_need`), CPU and host memory (0 when not constrained), its share.
    """

    gpus: np.ndarray
    need: np.ndarray
    cpu_milli: np.ndarray
    host_mem_gb: np.ndarray
    weight: np.ndarray
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    """Figures computed under this workload (the fgd placers' node fragmentation and moves)."""

    @classmethod
    def from_counts(cls, counts: Counter[tuple[int, float, float, float]]) -> Workload:
        """From counts of (gpus, per-GPU need, cpu_milli, host_mem_gb)."""
        if not counts:
            raise ValueError("a workload needs at least one job type")
        keys = sorted(counts)
        total = sum(counts.values())
        cols = list(zip(*keys, strict=True))
        return cls(
            np.array(cols[0], dtype=np.int64),
            np.array(cols[1], dtype=float),
            np.array(cols[2], dtype=float),
            np.array(cols[3], dtype=float),
            np.array([counts[k] / total for k in keys], dtype=float),
        )

    @classmethod
    def from_jobs(cls, jobs: Iterable[Job], host: bool = True) -> Workload:
        """The types of `jobs` (CPU and host memory count only when `host`)."""
        counts: Counter[tuple[int, float, float, float]] = Counter()
        for j in jobs:
            counts[
                type_of(j.gpus, j.gpu_share, j.cpu_milli if host else None, j.host_mem_gb if host else None)
            ] += 1
        return cls.from_counts(counts)

    @property
    def types(self) -> int:
        return len(self.weight)

    def node_fragmentation(self, key: NodeKey) -> float:
        """The expected fragmentation of a node in state `key` (GPUs)."""
        return float(self.fragmentation_batch([key])[0])

    def fragmentation_batch(self, keys: list[NodeKey]) -> np.ndarray:
        """`node_fragmentation` of several node states with the same number of GPUs, vectorized."""
        free = np.sort(np.array([k[2] for k in keys], dtype=float), axis=1)  # (S, G)
        s, g = free.shape
        cum = np.zeros((s, g + 1))
        np.cumsum(free, axis=1, out=cum[:, 1:])
        total = cum[:, -1]
        # below[i, t]: GPUs of state i whose free share is under type t's need
        below = (free[:, :, None] < (self.need - _EPS)[None, None, :]).sum(axis=1)  # (S, T)
        frag_fit = np.take_along_axis(cum, below, axis=1)
        cpu = np.array([k[0] for k in keys], dtype=float)[:, None]
        mem = np.array([k[1] for k in keys], dtype=float)[:, None]
        fits = (self.cpu_milli <= cpu + _EPS) & (self.host_mem_gb <= mem + _EPS) & (g - below >= self.gpus)
        frag = np.where(fits, frag_fit, total[:, None])
        return frag @ self.weight


def type_of(
    gpus: int, share: float | None, cpu_milli: float | None, host_mem_gb: float | None
) -> tuple[int, float, float, float]:
    """The workload type key of a job."""
    return (gpus, per_gpu_need(gpus, share), float(cpu_milli or 0.0), float(host_mem_gb or 0.0))


def type_of_need(gpus: int, need: Need | None) -> tuple[int, float, float, float]:
    """The workload type key of a placement request (by GPUs, per-GPU need and CPU)."""
    if need is None:
        return (gpus, per_gpu_need(gpus, None), 0.0, 0.0)
    return (gpus, per_gpu_need(gpus, need.gpu_share), need.cpu_milli, 0.0)


def free_shares(state: ClusterState, node: int) -> tuple[float, ...]:
    """Free share of each GPU of `node` (exclusive clusters: 1 idle, 0 busy), sorted."""
    fs = state.gpu_free_share
    gpus = state.node_gpus[node]
    if fs is None:
        njobs = state.gpu_njobs
        return tuple(sorted(1.0 if njobs[g] == 0 else 0.0 for g in gpus))
    return tuple(
        sorted(max(0.0, round(fs[g], 9)) if state.gpu_njobs[g] < state.max_share else 0.0 for g in gpus)
    )


def node_key(state: ClusterState, node: int) -> NodeKey:
    """The state of `node` that its fragmentation depends on."""
    cpu = state.node_cpu_free[node] if state.node_cpu_free is not None else float("inf")
    mem = state.node_mem_free[node] if state.node_mem_free is not None else float("inf")
    return (round(cpu, 6), round(mem, 6), free_shares(state, node))


def cluster_fragmentation(state: ClusterState, workload: Workload) -> float:
    """The cluster's fragmentation: the sum over nodes of their expected fragmentation (GPUs)."""
    by_size: dict[int, list[NodeKey]] = {}
    for n in range(len(state.node_gpus)):
        key = node_key(state, n)
        by_size.setdefault(len(key[2]), []).append(key)
    return float(sum(workload.fragmentation_batch(keys).sum() for keys in by_size.values()))

"""What the live dashboard reads: per-GPU and per-process readings and the queue, behind one seam.

`LiveSource` is the seam: the agent's store is one implementation, a fake node (a fake device set
running demo jobs, for when no agent runs) another. The dashboard, `/metrics` and the SSE stream
only call `snapshot()` and `queue()`, so they cannot tell a real node from a fake one except by
`is_fake`, which every page shows.
"""

from __future__ import annotations

import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gpuplan.model import ClusterSpec

__all__ = [
    "Clock",
    "FakeJob",
    "FakeNode",
    "GpuReading",
    "LiveSource",
    "ProcessReading",
    "QueueRow",
    "Snapshot",
    "demo_jobs",
]

Clock = Callable[[], float]
"""Seconds since the epoch; tests inject their own."""


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU at one instant. A field the device does not report is None ("not available")."""

    index: int
    uuid: str
    model: str
    node: str
    mem_total_gb: float
    util_pct: float | None = None
    mem_used_gb: float | None = None
    power_w: float | None = None
    temp_c: float | None = None


@dataclass(frozen=True, slots=True)
class ProcessReading:
    """One process on one GPU, attributed to the job that started it ("" when none did)."""

    gpu: int
    pid: int
    job_id: str = ""
    user: str = ""
    name: str = ""
    mem_gb: float | None = None
    util_pct: float | None = None


@dataclass(frozen=True, slots=True)
class QueueRow:
    """A job of the live queue. Times are seconds since the epoch; None when not known (yet)."""

    job_id: str
    state: str  # "running" or "waiting"
    gpus: int
    submit_s: float
    name: str = ""
    user: str = ""
    mem_gb: float | None = None
    est_duration_s: float | None = None
    start_s: float | None = None
    gpu_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every GPU and process of the node at `time_s` (seconds since the epoch)."""

    time_s: float
    gpus: tuple[GpuReading, ...]
    processes: tuple[ProcessReading, ...]


class LiveSource(ABC):
    """Where the dashboard's live numbers come from."""

    is_fake: bool = False
    label: str = ""
    """One line the pages show, e.g. which store or which fake device set."""

    cluster: ClusterSpec
    policy: str = "fifo"
    backfill: str = "easy"

    @abstractmethod
    def snapshot(self) -> Snapshot:
        """All GPU and process readings now; never raises for one bad reading."""

    @abstractmethod
    def queue(self) -> list[QueueRow]:
        """Running and waiting jobs, in submit order."""


# --------------------------------------------------------------------------- the fake node

_IDLE_W = {"A100": 50.0, "H100": 70.0, "H200": 70.0}
_TDP_W = {"A100": 400.0, "H100": 700.0, "H200": 700.0}


def _family(model: str) -> str:
    return model.split("-")[0].upper()


@dataclass(slots=True)
class FakeJob:
    """A job running on the fake node: one process per GPU whose readings wobble with time."""

    job_id: str
    gpu_ids: tuple[int, ...]
    mem_gb: float
    util_pct: float
    user: str = "demo"
    name: str = ""
    start_s: float = 0.0
    submit_s: float = 0.0
    est_duration_s: float | None = None
    pid: int = 0


@dataclass(slots=True)
class _FakeGpu:
    lost: bool = False  # a named failure scenario: the GPU stops answering
    util_override: float | None = None


class FakeNode(LiveSource):
    """A fake device set with jobs on it, for the dashboard when no agent runs, and for tests.

    Readings are a pure function of the clock: a job's utilization and memory move around its
    declared values along a slow sine, so live charts and per-process metrics change over time
    without any randomness. Tests change the node (`run`, `finish`, `set_util`, `lose_gpu`,
    `enqueue`) and see the change in the next snapshot.
    """

    is_fake = True

    def __init__(self, cluster: ClusterSpec, clock: Clock = time.time, label: str = "") -> None:
        self.cluster = cluster
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[str, FakeJob] = {}
        self._waiting: list[QueueRow] = []
        self._gpus = [_FakeGpu() for _ in range(cluster.total_gpus)]
        self._node_of = [n for n in cluster.nodes for _ in range(n.gpus)]
        self._next_pid = 4242
        self.label = label or f"FAKE device set fake:{cluster.name}: no agent is running; numbers are made up"

    # -- changing the node

    def run(self, job: FakeJob) -> FakeJob:
        """Start `job` on its GPUs now (its start time and pid are filled in)."""
        with self._lock:
            for g in job.gpu_ids:
                if not 0 <= g < len(self._gpus):
                    raise ValueError(f"fake GPU {g} does not exist (0..{len(self._gpus) - 1})")
            self._next_pid += 1
            started = replace(job, start_s=job.start_s or self._clock(), pid=job.pid or self._next_pid)
            self._jobs[job.job_id] = started
            self._waiting = [w for w in self._waiting if w.job_id != job.job_id]
            return started

    def finish(self, job_id: str) -> None:
        """The job ends; its processes disappear."""
        with self._lock:
            self._jobs.pop(job_id, None)

    def enqueue(self, rows: Sequence[QueueRow]) -> None:
        """Add waiting jobs to the queue (they never start by themselves)."""
        with self._lock:
            self._waiting.extend(rows)

    def cancel(self, job_id: str) -> bool:
        """Remove a waiting or running job; False when there is no such job."""
        with self._lock:
            before = len(self._waiting) + len(self._jobs)
            self._waiting = [w for w in self._waiting if w.job_id != job_id]
            self._jobs.pop(job_id, None)
            return len(self._waiting) + len(self._jobs) < before

    def set_util(self, gpu: int, util_pct: float | None) -> None:
        """Pin a GPU's utilization reading (None: back to what its jobs do)."""
        with self._lock:
            self._gpus[gpu].util_override = util_pct

    def lose_gpu(self, gpu: int, lost: bool = True) -> None:
        """A GPU stops answering: every field but its identity reads "not available"."""
        with self._lock:
            self._gpus[gpu].lost = lost

    # -- reading it

    def snapshot(self) -> Snapshot:
        now = self._clock()
        with self._lock:
            jobs = list(self._jobs.values())
            gpus = [(_FakeGpu(g.lost, g.util_override)) for g in self._gpus]
        procs = [p for job in jobs for p in self._processes(job, now)]
        readings = tuple(self._gpu(i, gpus[i], [p for p in procs if p.gpu == i]) for i in range(len(gpus)))
        live = tuple(p for p in procs if not gpus[p.gpu].lost)
        return Snapshot(now, readings, live)

    def queue(self) -> list[QueueRow]:
        with self._lock:
            running = [
                QueueRow(
                    j.job_id,
                    "running",
                    len(j.gpu_ids),
                    j.submit_s or j.start_s,
                    j.name,
                    j.user,
                    j.mem_gb,
                    j.est_duration_s,
                    j.start_s,
                    j.gpu_ids,
                )
                for j in self._jobs.values()
            ]
            return sorted(running, key=lambda r: r.submit_s) + list(self._waiting)

    def _processes(self, job: FakeJob, now: float) -> list[ProcessReading]:
        out = []
        for k, g in enumerate(job.gpu_ids):
            phase = (job.pid + 7 * k) % 13
            wave = math.sin((now - job.start_s) / 5.0 + phase)
            util = min(100.0, max(0.0, job.util_pct + 8.0 * wave))
            mem = job.mem_gb * (0.92 + 0.06 * (1 + wave) / 2)
            out.append(
                ProcessReading(g, job.pid, job.job_id, job.user, job.name, round(mem, 3), round(util, 1))
            )
        return out

    def _gpu(self, index: int, state: _FakeGpu, procs: list[ProcessReading]) -> GpuReading:
        node = self._node_of[index]
        base = GpuReading(
            index=index,
            uuid=f"GPU-fake0000-0000-0000-0000-{index:012d}",
            model=node.gpu.model,
            node=node.name,
            mem_total_gb=node.gpu.mem_gb,
        )
        if state.lost:
            return base
        util = sum(p.util_pct or 0.0 for p in procs)
        util = min(100.0, util) if state.util_override is None else state.util_override
        family = _family(node.gpu.model)
        idle, tdp = _IDLE_W.get(family, 50.0), _TDP_W.get(family, 300.0)
        return replace(
            base,
            util_pct=round(util, 1),
            mem_used_gb=round(min(node.gpu.mem_gb, sum(p.mem_gb or 0.0 for p in procs) + 0.5), 3),
            power_w=round(idle + (tdp - idle) * util / 100.0, 1),
            temp_c=round(32.0 + 0.4 * util, 1),
        )


def demo_jobs(cluster: ClusterSpec) -> list[FakeJob]:
    """A few jobs filling about half the cluster, so an idle fake node still shows something move."""
    jobs, gpu = [], 0
    shapes = [(2, 0.7, 85.0, "finetune"), (1, 0.3, 40.0, "infer"), (1, 0.5, 65.0, "eval")]
    k = 0
    while gpu < max(1, cluster.total_gpus // 2):
        n, mem_share, util, name = shapes[k % len(shapes)]
        n = min(n, cluster.total_gpus - gpu)
        mem = cluster.nodes[0].gpu.mem_gb * mem_share
        jobs.append(FakeJob(f"demo-{k + 1}", tuple(range(gpu, gpu + n)), mem, util, "demo", name))
        gpu += n
        k += 1
    return jobs

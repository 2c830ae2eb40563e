"""What the live dashboard reads: per-GPU and per-process readings and the queue, behind one seam.

`LiveSource` is the seam; `NodeSource` reads this node: GPUs from the agent's GPU backend (NVML or
the fake device set, `gpuplan.agent.gpus`), jobs from the agent's store (`gpuplan.agent.store`).
The dashboard, `/metrics` and the SSE stream only call `snapshot()` and `queue()`; whether the
readings are fake is `is_fake`, which every page shows.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from gpuplan.errors import GpuplanError
from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec

if TYPE_CHECKING:
    from gpuplan.agent.gpus import GpuBackend
    from gpuplan.agent.paths import AgentPaths
    from gpuplan.agent.store import JobRow

__all__ = [
    "AgentUnavailable",
    "BadJobIdError",
    "GpuStatus",
    "JobNotFoundError",
    "LiveSource",
    "NodeSource",
    "NodeStatus",
    "ProcStatus",
    "QueueRow",
    "cluster_of",
]


class AgentUnavailable(GpuplanError):
    """No agent answers for this node (none running, or its client is not installed)."""


class JobNotFoundError(GpuplanError):
    """No job of that id (HTTP 404)."""


class BadJobIdError(GpuplanError):
    """Not a job id of this source at all (HTTP 400)."""


@dataclass(frozen=True, slots=True)
class GpuStatus:
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
    lost: bool = False


@dataclass(frozen=True, slots=True)
class ProcStatus:
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
    state: str  # "running", "suspended" (stopped by a preemptive policy, GPUs held), "held" or "waiting"
    gpus: int
    submit_s: float
    name: str = ""
    user: str = ""
    mem_gb: float | None = None
    est_duration_s: float | None = None  # an estimate (a prediction); the user's limit is time_limit_s
    start_s: float | None = None
    gpu_ids: tuple[int, ...] = ()
    expected_start_s: float | None = None
    planned: bool = False  # the row comes in the order of the agent's own plan, with its expected start
    expected_end_s: float | None = None  # the agent's forecast (planned rows)
    reason: str = ""  # why it waits, in Slurm's word (planned rows)
    time_limit_s: float | None = None  # the job's --time (Slurm's TimeLimit)


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """Every GPU and process of the node at `time_s` (seconds since the epoch).

    `origin` is "store" when read from the samples the agent recorded, "backend" when read from
    the GPUs directly (no agent sampling).
    """

    time_s: float
    gpus: tuple[GpuStatus, ...]
    processes: tuple[ProcStatus, ...]
    origin: str = "backend"


class LiveSource(ABC):
    """Where the dashboard's live numbers come from."""

    is_fake: bool = False
    cluster: ClusterSpec
    policy: str = "fifo"
    backfill: str = "easy"

    @property
    @abstractmethod
    def label(self) -> str:
        """One line every page shows: which store, which (fake) GPUs, whether an agent runs."""

    @abstractmethod
    def snapshot(self) -> NodeStatus:
        """All GPU and process readings now; never raises for one bad reading."""

    @abstractmethod
    def queue(self) -> list[QueueRow]:
        """Running and waiting jobs, in submit order."""

    def history(self, since_s: float) -> list[NodeStatus]:
        """GPU readings recorded since `since_s` (seconds since the epoch), oldest first; none kept here."""
        return []

    def health(self) -> dict[str, Any]:
        """What /healthz says besides the label: `ok` (the source can be read) and its GPUs."""
        return {"ok": True, "gpus": self.cluster.total_gpus}

    def extra_metrics(self) -> Iterator[Any]:
        """Prometheus metric families this source adds to /metrics (none here)."""
        return iter(())

    def job(self, job_id: str) -> dict[str, Any]:
        """One job as the job-detail page shows it (web/jobdetail.py `job_detail`); none here.

        Raises:
            JobNotFoundError: no such job.
        """
        raise JobNotFoundError(f"{self.label}: no job {job_id[:40]!r}")

    def ask_agent(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one request to the agent that runs the queue (cancel, ...) and return its reply.

        Raises:
            AgentUnavailable: no agent runs (or this source has none).
            GpuplanError: the agent refused the request; the message is the agent's.
        """
        raise AgentUnavailable(f"{self.label}: no agent to ask")


# --------------------------------------------------------------------------- the node

STORE_FRESH_S = 5.0
"""A sample the agent recorded less than this long ago is read instead of the GPUs."""
_T = TypeVar("_T")


def _agent_pid(paths: AgentPaths) -> int | None:
    """The running agent's pid, None when its pidfile is absent or names no live process."""
    try:
        pid = int(paths.pidfile.read_text(encoding="ascii").strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def cluster_of(backend: GpuBackend, host: str) -> ClusterSpec:
    """This node as a one-node cluster (one NodeSpec per GPU model), for planning its queue."""
    groups: dict[tuple[str, float], int] = {}
    for dev in backend.devices():
        key = (dev.name, dev.mem_total_gb)
        groups[key] = groups.get(key, 0) + 1
    nodes = tuple(
        NodeSpec(host if len(groups) == 1 else f"{host}-{model}", n, GpuSpec(model, mem))
        for (model, mem), n in groups.items()
    )
    return ClusterSpec(host, nodes)


class NodeSource(LiveSource):
    """This node, read from the agent's store (read-only) and its GPU backend.

    While an agent samples the node (its latest sample is under STORE_FRESH_S old), GPU and
    per-process readings are the agent's samples, jobs the store's. With no agent sampling, GPUs are
    read from the backend (the fake device set's processes included), processes matched to the
    store's running jobs by process group, and the label says no agent runs.
    """

    def __init__(
        self,
        backend: GpuBackend,
        paths: AgentPaths,
        spec: str,
        policy: str = "fifo",
        backfill: str = "easy",
        host: str = "",
    ) -> None:
        self.backend = backend
        self.paths = paths
        self.spec = spec
        self.host = host or socket.gethostname()
        self.cluster = cluster_of(backend, self.host)
        self.is_fake = backend.name == "fake"
        self.policy, self.backfill = policy, backfill
        self.uid = os.getuid()  # whom the agent answers (SO_PEERCRED); the store's rows are read as it
        self._devices = {d.index: d for d in backend.devices()}

    @property
    def label(self) -> str:
        pid = _agent_pid(self.paths)
        what = f"FAKE device set {self.spec}" if self.is_fake else f"GPUs via {self.spec}"
        if pid is None:
            return f"{what}; no agent running at {self.paths.home}"
        return f"{what}; agent pid {pid} at {self.paths.home}"

    def _read(self, read: Callable[[sqlite3.Connection], _T]) -> _T | None:
        """`read` on a read-only connection to the store; None when the agent never ran here."""
        from gpuplan.agent.store import connect

        if not self.paths.db.exists():
            return None
        try:
            conn = connect(self.paths.db, readonly=True)
            try:
                return read(conn)
            finally:
                conn.close()
        except sqlite3.Error as e:
            raise GpuplanError(
                f"{self.paths.db}: cannot read the agent's store ({e}); it should be the SQLite file "
                "`gpuplan agent start` writes (docs/agent.md)"
            ) from e

    def read_store(self, read: Callable[[sqlite3.Connection], _T]) -> _T | None:
        """`read` on a read-only connection to the agent's store; None when the agent never ran here.

        Raises:
            GpuplanError: the store cannot be read.
        """
        return self._read(read)

    def _jobs(self, states: tuple[str, ...]) -> list[JobRow]:
        from gpuplan.agent.store import jobs_by_state

        return self._read(lambda conn: jobs_by_state(conn, states)) or []

    def history(self, since_s: float) -> list[NodeStatus]:
        from gpuplan.agent.store import samples_since

        samples = self._read(lambda conn: samples_since(conn, since_s)) or []
        by_time: dict[float, list[GpuStatus]] = {}
        for g in samples:
            by_time.setdefault(g.t_s, []).append(self._stored_gpu(g))
        return [NodeStatus(t, tuple(gpus), (), "store") for t, gpus in sorted(by_time.items())]

    def _from_store(self, now: float) -> NodeStatus | None:
        """The latest sample the agent recorded, if it is fresh: an agent is sampling this node."""
        from gpuplan.agent.store import job_samples_since, jobs_by_state, samples_since

        def read(conn: sqlite3.Connection) -> tuple[list[Any], list[Any], list[JobRow]]:
            since = now - STORE_FRESH_S
            return (
                samples_since(conn, since),
                job_samples_since(conn, since),
                jobs_by_state(conn, ("running",)),
            )

        got = self._read(read)
        if got is None or not got[0]:
            return None
        gpus, procs, running = got
        t = gpus[-1].t_s
        jobs = {j.id: j for j in running}
        statuses = []
        for p in procs:
            if p.t_s != t:
                continue
            job = jobs.get(p.job_id)
            user, name = (job.user, job.name) if job is not None else ("", "")
            statuses.append(ProcStatus(p.gpu, p.pid, str(p.job_id), user, name, p.mem_gb, p.util_pct))
        latest = tuple(self._stored_gpu(g) for g in gpus if g.t_s == t)
        return NodeStatus(t, latest, tuple(statuses), "store")

    def _stored_gpu(self, g: Any) -> GpuStatus:
        dev = self._devices.get(g.gpu)
        total = g.mem_total_gb if g.mem_total_gb is not None else (dev.mem_total_gb if dev else 0.0)
        return GpuStatus(
            index=g.gpu, uuid=(dev.uuid if dev else "") or f"GPU-{g.gpu}", model=g.name, node=self.host,
            mem_total_gb=total, util_pct=g.util_pct, mem_used_gb=g.mem_used_gb, power_w=g.power_w,
            temp_c=g.temp_c, lost=g.lost,
        )  # fmt: skip

    def snapshot(self) -> NodeStatus:
        try:
            stored = self._from_store(time.time())
            running = self._jobs(("running",))
        except GpuplanError:  # an unreadable store: the GPUs still report, unattributed
            stored, running = None, []
        if stored is not None:
            return stored
        snap = self.backend.snapshot()
        by_group = {j.pgid: j for j in running if j.pgid is not None}
        gpus = tuple(self._gpu(g) for g in snap.gpus)
        procs = []
        for p in snap.procs:
            job = by_group.get(p.pgid) if p.pgid is not None else None
            procs.append(
                ProcStatus(
                    p.gpu, p.pid, "" if job is None else str(job.id), "" if job is None else job.user,
                    "" if job is None else job.name, p.mem_gb, p.util_pct,
                )
            )  # fmt: skip
        return NodeStatus(snap.t_s, gpus, tuple(procs))

    def _gpu(self, g: Any) -> GpuStatus:
        dev = self._devices.get(g.index)
        total = g.mem_total_gb if g.mem_total_gb is not None else (dev.mem_total_gb if dev else 0.0)
        return GpuStatus(
            index=g.index,
            uuid=(dev.uuid if dev else "") or f"GPU-{g.index}",
            model=g.name or (dev.name if dev else ""),
            node=self.host,
            mem_total_gb=total,
            util_pct=g.util_pct,
            mem_used_gb=g.mem_used_gb,
            power_w=g.power_w,
            temp_c=g.temp_c,
            lost=g.lost,
        )

    def ask_agent(self, request: dict[str, Any]) -> dict[str, Any]:
        if not self.paths.socket.exists():
            raise AgentUnavailable(
                f"no agent running at {self.paths.home} (no socket {self.paths.socket}); "
                "start one with `gpuplan agent start`"
            )
        try:
            from gpuplan.agent.protocol import AgentNotRunningError, call
        except ImportError as e:  # the agent's client is not part of this install
            raise AgentUnavailable(f"cannot talk to the agent: {e}") from e
        try:
            return call(self.paths.socket, request)
        except AgentNotRunningError as e:
            raise AgentUnavailable(str(e)) from e

    def queue(self) -> list[QueueRow]:
        """The agent's queue in its planned order when it answers, else the store's jobs by submit."""
        from gpuplan.agent.store import ACTIVE_STATES

        if self.paths.socket.exists():
            try:
                reply = self.ask_agent({"op": "queue"})
                return [_agent_row(j) for j in reply.get("jobs", [])]
            except GpuplanError:
                pass  # not answering (stopping, restarting): the store still knows the jobs
        return [_queue_row(j) for j in sorted(self._jobs(ACTIVE_STATES), key=lambda j: (j.submit_s, j.id))]


def _row_state(agent_state: str) -> str:
    """The view's state of an agent job state: running, suspended and held as they are, else waiting."""
    return agent_state if agent_state in ("running", "suspended", "held") else "waiting"


def _agent_row(j: dict[str, Any]) -> QueueRow:
    """A job of the agent's `queue` reply (JobRow.to_json() plus its forecast: agent/outlook.py)."""
    return QueueRow(
        job_id=str(j["id"]),
        state=_row_state(str(j.get("state", ""))),
        gpus=int(j.get("gpus", 1)),
        submit_s=float(j.get("submit_s", 0.0)),
        name=str(j.get("name", "")),
        user=str(j.get("user", "")),
        mem_gb=j.get("mem_gb"),
        est_duration_s=j.get("est_duration_s"),
        time_limit_s=j.get("time_limit_s"),
        start_s=j.get("start_s"),
        gpu_ids=tuple(int(g) for g in j.get("gpu_ids", [])),
        expected_start_s=j.get("expected_start_s"),
        planned=True,
        expected_end_s=j.get("expected_end_s"),
        reason=str(j.get("reason") or "") if j.get("state") != "running" else "",
    )


def _queue_row(j: JobRow) -> QueueRow:
    return QueueRow(
        job_id=str(j.id),
        state=_row_state(j.state),
        gpus=j.gpus,
        submit_s=j.submit_s,
        name=j.name,
        user=j.user,
        mem_gb=j.mem_gb,
        est_duration_s=j.est_duration_s,
        time_limit_s=j.time_limit_s,
        start_s=j.start_s,
        gpu_ids=j.gpu_list,
    )

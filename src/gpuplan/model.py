"""Plain records shared by every part of gpuplan. Units: seconds (`_s`), GiB (`_gb`), percent (`_pct`),
thousandths of a CPU core (`_milli`), a fraction of one GPU (`_share`, 0-1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuplan.preempt_modes import PREEMPT_MODES, checkpointable_of, preempt_mode_of

__all__ = ["PREEMPT_MODES", "ClusterSpec", "GpuSpec", "Job", "NodeSpec", "SharedMeta"]
# PREEMPT_MODES: how a preemptive policy may take a running job's GPUs (`Job.preempt_mode`;
# docs/preemption.md), defined with the rule that reads them (gpuplan/preempt_modes.py)


class SharedMeta(dict[str, Any]):
    """A `Job.meta` that several jobs share, read-only: the columnar readers give every row with the
    same flat meta text one such dict (a million rows of a few kinds take a few dicts, not a million;
    184 bytes a job). It reads, compares, copies and serializes as the dict it is; changing it in place
    raises TypeError: give the job its own first, `job.meta = dict(job.meta)`."""

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError(
            "this Job.meta is shared by every job read with the same meta text: give the job its own "
            "before changing it (job.meta = dict(job.meta))"
        )

    __setitem__ = __delitem__ = __ior__ = _refuse  # type: ignore[assignment]
    update = setdefault = pop = popitem = clear = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[type[SharedMeta], tuple[dict[str, Any]]]:
        return (SharedMeta, (dict(self),))

    def copy(self) -> dict[str, Any]:
        """A plain (writable) dict with the same items."""
        return dict(self)


@dataclass(slots=True)
class Job:
    """One job of a trace or a queue.

    Attributes:
        id: unique id within its trace.
        submit_s: submit time in seconds (any origin; the simulator measures from the first submit).
        gpus: number of GPUs the job needs.
        mem_gb: GPU memory the job uses on each of its GPUs (None when unknown).
        duration_s: true run time when run alone (None when unknown, e.g. a job still queued).
        est_duration_s: an estimate of duration_s (a prediction); what policies use.
        est_mem_gb: an estimate of mem_gb.
        requested_s: the user's time limit (None when unlimited or unknown).
        user, name: who and what, as the source trace says.
        gpu_util_pct: mean GPU busy percent when run alone, over its whole duration (None when unknown).
        command: shell command, for the local agent.
        may_span_nodes: the job may take GPUs from several nodes (an MPI/NCCL multi-node job).
        duration_includes_sharing: duration_s was measured while the job shared its GPUs (as the
            Alibaba trace records it): the simulator replays it as is and never slows it again.
        startup_s: seconds at the start of duration_s before the job's own setup (process start,
            imports): CPU work, never slowed by GPU sharing (None: unknown, counted as 0).
        init_s: seconds after startup_s before the job's GPU work (model build, data loading): never
            contends for GPU compute, but takes longer while the job shares its GPU (the sharing model's
            init_stretch; docs/interference.md). None: unknown, counted as 0. The rest of duration_s
            is the GPU phase, where sharing jobs slow each other down.
        meta: anything else a reader keeps (state, queue, class label ...). `meta["checkpointable"]`
            false marks a job that cannot checkpoint: preempted, it restarts from scratch.
            `meta["preempt"]` (one of PREEMPT_MODES) says how it may be preempted (`preempt_mode`).
        cpu_milli: CPU the job needs, in thousandths of a core (4 cores = 4000), on its node in all
            (a job spanning nodes takes it in proportion to its GPUs on each); None: not constrained.
        host_mem_gb: host memory (RAM) the job needs in GiB, counted as cpu_milli; None: not constrained.
        gpu_share: the share of ONE GPU's compute a single-GPU job asks for (0 < share <= 1; Alibaba's
            gpu_milli / 1000), a resource of its own beside GPU memory: on a sharing cluster the shares
            on one GPU never add up to more than 1. None: whole GPUs (or memory alone decides).
    """

    id: str
    submit_s: float
    gpus: int
    mem_gb: float | None = None
    duration_s: float | None = None
    est_duration_s: float | None = None
    est_mem_gb: float | None = None
    requested_s: float | None = None
    user: str = ""
    name: str = ""
    gpu_util_pct: float | None = None
    command: str = ""
    may_span_nodes: bool = False
    duration_includes_sharing: bool = False
    startup_s: float | None = None
    init_s: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    cpu_milli: float | None = None
    host_mem_gb: float | None = None
    gpu_share: float | None = None

    @property
    def checkpointable(self) -> bool:
        """Whether a preempted run resumes from a checkpoint (default) or restarts from scratch."""
        return checkpointable_of(self.meta)

    @property
    def preempt_mode(self) -> str:
        """How a preemptive policy may take its GPUs: `suspend` (stopped in place: it keeps its GPU
        memory and resumes on the same GPUs, nothing lost), `checkpoint` (stopped after a checkpoint,
        its GPUs freed; it resumes anywhere after a restart overhead), `requeue` (killed, restarts from
        scratch) or `never`. Default: `meta["preempt"]`, else checkpoint (requeue when
        `meta["checkpointable"]` is false)."""
        return preempt_mode_of(self.meta)

    def planning_duration_s(self, oracle: bool = False) -> float | None:
        """The duration a policy may use: the truth for oracle runs, else the estimate or the limit."""
        if oracle:
            return self.duration_s
        if self.est_duration_s is not None:
            return self.est_duration_s
        return self.requested_s

    def gpu_phase_s(self) -> float | None:
        """Seconds of the GPU phase: duration_s less startup_s and init_s (unknown = 0), at least 0."""
        if self.duration_s is None:
            return None
        return max(0.0, self.duration_s - (self.startup_s or 0.0) - (self.init_s or 0.0))

    def planning_mem_gb(self, oracle: bool = False) -> float | None:
        """The per-GPU memory a policy may use: the truth for oracle runs, else the estimate."""
        if oracle:
            return self.mem_gb
        return self.est_mem_gb if self.est_mem_gb is not None else self.mem_gb


@dataclass(slots=True, frozen=True)
class GpuSpec:
    """A GPU model: its name and memory; or one MIG slice of a GPU (docs/formats.md, "MIG").

    Attributes:
        model: the GPU model ("A100-80GB"); for a MIG slice, the model and the profile ("A100-80GB MIG 3g.40gb").
        mem_gb: its memory.
        compute_fraction: its share of a whole GPU's compute (1 for a whole GPU, 3/7 for a 3g slice).
        mig_profile: the MIG profile of a slice ("3g.40gb"); empty for a whole GPU. A slice hosts only
            single-GPU jobs: no job spans slices.
    """

    model: str
    mem_gb: float
    compute_fraction: float = 1.0
    mig_profile: str = ""


@dataclass(slots=True, frozen=True)
class NodeSpec:
    """One node: a name, how many GPUs of one model it has, and optionally its CPU and host memory.

    Attributes:
        cpu_milli: its CPU in thousandths of a core (None: not constrained, every job's CPU fits).
        host_mem_gb: its host memory in GiB (None: not constrained).
    """

    name: str
    gpus: int
    gpu: GpuSpec
    cpu_milli: float | None = None
    host_mem_gb: float | None = None


@dataclass(slots=True, frozen=True)
class ClusterSpec:
    """A cluster: its nodes and whether several jobs may share one GPU while their memory fits.

    Attributes:
        name: preset name or file name.
        nodes: the nodes, in placement order.
        sharing: allow several jobs on one GPU while their memory fits (slowed by interference).
        max_jobs_per_gpu: upper bound on jobs sharing one GPU when sharing is on.
        origin: where a command took it from: "option" (--cluster), "trace" (the trace describes it)
            or "default" (neither); "" outside the CLI. Not part of equality.
    """

    name: str
    nodes: tuple[NodeSpec, ...]
    sharing: bool = False
    max_jobs_per_gpu: int = 4
    origin: str = field(default="", compare=False)

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def max_node_gpus(self) -> int:
        return max(n.gpus for n in self.nodes)

    @property
    def has_host_resources(self) -> bool:
        """Whether some node limits CPU or host memory (jobs' cpu_milli / host_mem_gb then count)."""
        return any(n.cpu_milli is not None or n.host_mem_gb is not None for n in self.nodes)

    @property
    def total_mem_gb(self) -> float:
        return sum(n.gpus * n.gpu.mem_gb for n in self.nodes)

    def as_dict(self) -> dict[str, Any]:
        """What `--json` says of the cluster a run used."""
        return {
            "name": self.name,
            "describe": self.describe(),
            "gpus": self.total_gpus,
            "nodes": len(self.nodes),
            "sharing": self.sharing,
            "max_jobs_per_gpu": self.max_jobs_per_gpu,
            "origin": self.origin,
        }

    def describe(self) -> str:
        """One line such as '8 GPUs on 1 node (8x A100-80GB), exclusive'; with MIG slices (nodes named
        NODE/gpuI:PROFILE@START) the slices are counted per profile and their node once."""
        groups: dict[tuple[int, str], int] = {}
        slices: dict[str, int] = {}
        for n in self.nodes:
            if n.gpu.mig_profile:
                slices[n.gpu.model] = slices.get(n.gpu.model, 0) + 1
                continue
            key = (n.gpus, n.gpu.model)
            groups[key] = groups.get(key, 0) + 1
        parts = [f"{cnt}x{g}x {model}" if cnt > 1 else f"{g}x {model}" for (g, model), cnt in groups.items()]
        mode = f"sharing (up to {self.max_jobs_per_gpu} jobs/GPU)" if self.sharing else "exclusive"
        if not slices:
            gpus = f"{self.total_gpus} GPU" + ("s" if self.total_gpus != 1 else "")
            return f"{gpus} on {len(self.nodes)} node(s) ({', '.join(parts)}), {mode}"
        parts += [f"{cnt}x {model}" for model, cnt in slices.items()]
        cut = {
            n.name.split("/")[0] + "/" + n.name.split("/")[1].split(":")[0]
            for n in self.nodes
            if n.gpu.mig_profile
        }
        whole = sum(n.gpus for n in self.nodes if not n.gpu.mig_profile)
        hosts = {n.name.split("/")[0] for n in self.nodes}
        return (
            f"{whole + len(cut)} GPUs ({len(cut)} cut into {sum(slices.values())} MIG slices) on "
            f"{len(hosts)} node(s) ({', '.join(parts)}), {mode}"
        )

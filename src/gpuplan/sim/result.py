"""What one simulated run produces: per-job records, a utilization timeline and the metrics."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from gpuplan.model import ClusterSpec

__all__ = ["JobRecord", "Metrics", "SimResult"]


@dataclass(slots=True)
class JobRecord:
    """Where and when one job ran. Times in seconds from the first submit of the trace."""

    job_id: str
    submit_s: float
    start_s: float
    end_s: float
    gpus: tuple[int, ...]  # global GPU indices, see SimResult.gpu_labels
    mem_gb: float | None = None
    name: str = ""


@dataclass(slots=True)
class Metrics:
    """Figures of one run. Times in seconds from the first submit."""

    jobs: int
    makespan_s: float
    utilization: float  # occupied GPU-seconds / (GPUs x makespan_s); a GPU counts once while held
    mean_jct_s: float
    p50_jct_s: float
    p95_jct_s: float
    mean_wait_s: float
    p50_wait_s: float
    p95_wait_s: float
    mean_bounded_slowdown: float  # bound 10 s
    idle_gpu_hours_while_waiting: float
    lower_bound_s: float
    bound_ratio: float  # makespan_s / lower_bound_s
    gpu_hours: float  # occupied GPU-hours

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass(slots=True)
class SimResult:
    """One simulated run of one policy + backfill + placer on one cluster."""

    policy: str
    backfill: str
    placer: str
    oracle: bool
    cluster: ClusterSpec
    metrics: Metrics
    records: list[JobRecord]  # in start order
    util_timeline: list[tuple[float, int]]  # (time_s, occupied GPUs) from that time on
    gpu_labels: list[str]  # label of each global GPU index, e.g. "node1/gpu3"
    warnings: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        suffix = " (oracle)" if self.oracle else ""
        return f"{self.policy}+{self.backfill}{suffix}"

    def summary(self) -> dict[str, object]:
        """The flat object `--json` prints for one run."""
        m = self.metrics
        return {
            "policy": self.policy,
            "backfill": self.backfill,
            "placer": self.placer,
            "oracle": self.oracle,
            "jobs": m.jobs,
            "makespan_s": m.makespan_s,
            "utilization": m.utilization,
            "mean_jct_s": m.mean_jct_s,
            "p50_jct_s": m.p50_jct_s,
            "p95_jct_s": m.p95_jct_s,
            "mean_wait_s": m.mean_wait_s,
            "p95_wait_s": m.p95_wait_s,
            "mean_bounded_slowdown": m.mean_bounded_slowdown,
            "idle_gpu_hours_while_waiting": m.idle_gpu_hours_while_waiting,
            "gpu_hours": m.gpu_hours,
            "lower_bound_s": m.lower_bound_s,
            "bound_ratio": m.bound_ratio,
            "cluster": self.cluster.as_dict(),
        }

"""How an agent runs: `AgentConfig`, the `gpuplan agent start` options (agent/daemon.py runs them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan.core.policies import Policy

__all__ = ["AgentConfig", "configured_policy"]


@dataclass(slots=True)
class AgentConfig:
    """How an agent runs (the `gpuplan agent start` options)."""

    home: Path
    gpus: str = "nvml"
    policy: str = "fifo"
    backfill: str = "easy"
    placer: str = "first-fit"
    sharing: bool = False
    max_jobs_per_gpu: int = 4
    sample_interval_s: float = 1.0
    retention_s: float = 30 * 86400.0  # finished jobs: rows, logs, jobs/ID/ (`--retention`)
    sample_retention_s: float = 7 * 86400.0  # GPU and job samples (`--sample-retention`)
    grace_s: float = 10.0
    oom_retries: int = 1
    oom_factor: float = 1.25
    predict: list[str] = field(default_factory=list)
    quantum_gpu_s: float | None = None  # preemptive policies: first level boundary (None: the policy's own)
    max_gpus_per_user: int | None = None
    max_jobs_per_user: int | None = None
    quotas_file: str | None = (
        None  # per-user quotas (agent/quotafile.py), reloaded on SIGHUP / `agent reload`
    )
    multi_user: bool = False  # root agent: every local user submits; each job runs as its submitter
    admin_group: str | None = None  # multi-user: members may steer every user's job (as root)
    run_dir: str | None = None  # where the socket lives when not in the home (/run/gpuplan)

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__slots__}
        out["home"] = str(self.home)
        return out


def configured_policy(config: AgentConfig) -> Policy | str:
    """The configured policy: by name, or a preemptive one with its own first level boundary."""
    if config.quantum_gpu_s is None:
        return config.policy
    from gpuplan.core.policies import preemptive_policy

    return preemptive_policy(config.policy, config.quantum_gpu_s)

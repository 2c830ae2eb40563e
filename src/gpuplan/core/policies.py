"""The built-in ordering policies and the lookups of the policy registry (core/policy.py).

`get_policy(spec)` builds a policy from its name and parameters (`las:quantum=60`, core/params.py);
importing this module registers every built-in policy: the preemptive ones of core/preemptive.py and
fairshare (core/fairshare.py) too.
"""

from __future__ import annotations

import math
from typing import cast

from gpuplan.core import fairshare, preemptive
from gpuplan.core.params import build, spec_class
from gpuplan.core.policy import (
    Policy,
    policy_classes,
    policy_names,
    preemptive_policy_names,
    register_policy,
    usage_policy_names,
)
from gpuplan.errors import GpuplanError
from gpuplan.model import Job

__all__ = [
    "ARTICLE_CLASSES",
    "Policy",
    "article_class",
    "get_policy",
    "is_preemptive",
    "policy_class",
    "policy_names",
    "preemptive_policy",
    "preemptive_policy_names",
    "register_policy",
    "usage_policy_names",
]

_INF = math.inf


def _dur(job: Job, oracle: bool) -> float:
    d = job.planning_duration_s(oracle)
    return _INF if d is None else d


def _mem(job: Job, oracle: bool) -> float:
    m = job.planning_mem_gb(oracle)
    return _INF if m is None else m


class Fifo(Policy):
    name = "fifo"
    description = "first come, first served (submit time, then trace order)"

    def key(self, job: Job, seq: int, oracle: bool) -> tuple[float, ...]:
        return (job.submit_s, seq)


class ShortestFirst(Policy):
    name = "sjf"
    description = "shortest estimated duration first"
    needs_duration = True

    def key(self, job: Job, seq: int, oracle: bool) -> tuple[float, ...]:
        return (_dur(job, oracle), job.submit_s, seq)


class LongestFirst(Policy):
    name = "ljf"
    description = "longest estimated duration first (LPT: long jobs early, short ones fill the tail)"
    needs_duration = True

    def key(self, job: Job, seq: int, oracle: bool) -> tuple[float, ...]:
        return (-_dur(job, oracle), -job.gpus, job.submit_s, seq)


class SmallGpusFirst(Policy):
    name = "small-gpus-first"
    description = "fewest GPUs first"

    def key(self, job: Job, seq: int, oracle: bool) -> tuple[float, ...]:
        return (job.gpus, job.submit_s, seq)


class LargeGpusFirst(Policy):
    name = "large-gpus-first"
    description = "most GPUs first (big jobs before they get starved)"

    def key(self, job: Job, seq: int, oracle: bool) -> tuple[float, ...]:
        return (-job.gpus, job.submit_s, seq)


class MemDesc(Policy):
    name = "mem-desc"
    description = "most GPU memory per GPU first (unknown memory counts as the most)"

    def key(self, job: Job, seq: int, oracle: bool) -> tuple[float, ...]:
        return (-_mem(job, oracle), job.submit_s, seq)


class GpuTime(Policy):
    name = "gpu-time"
    description = "smallest estimated GPU-time (duration x GPUs) first, as Helios' QSSF"
    needs_duration = True

    def key(self, job: Job, seq: int, oracle: bool) -> tuple[float, ...]:
        return (_dur(job, oracle) * job.gpus, job.submit_s, seq)


# The article's three profile classes, in the order it runs them.
ARTICLE_CLASSES = ("very-long-low-mem", "long-moderate-mem", "short-high-mem")
_SHORT_S = 30 * 60.0
_VERY_LONG_S = 90 * 60.0
_LOW_MEM_GB = 20.0


def article_class(job: Job, oracle: bool = False) -> str:
    """The article's profile class of a job from its estimated duration and memory.

    very long (>= 90 min), or not short (>= 30 min) with low memory (<= 20 GB/GPU): very-long-low-mem;
    short (< 30 min): short-high-mem; the rest (and unknown durations): long-moderate-mem.
    """
    d = job.planning_duration_s(oracle)
    m = job.planning_mem_gb(oracle)
    if d is None:
        return ARTICLE_CLASSES[1]
    if d >= _VERY_LONG_S or (d >= _SHORT_S and m is not None and m <= _LOW_MEM_GB):
        return ARTICLE_CLASSES[0]
    if d < _SHORT_S:
        return ARTICLE_CLASSES[2]
    return ARTICLE_CLASSES[1]


class Article(Policy):
    name = "article"
    description = "the article's profile order: very-long/low-mem, then long/moderate, then short/high-mem"
    needs_duration = True

    def key(self, job: Job, seq: int, oracle: bool) -> tuple[float, ...]:
        rank = ARTICLE_CLASSES.index(article_class(job, oracle))
        return (rank, -job.gpus, -_dur(job, oracle), job.submit_s, seq)


for _cls in (Fifo, ShortestFirst, LongestFirst, SmallGpusFirst, LargeGpusFirst, MemDesc, GpuTime, Article):
    register_policy(_cls)
BUILTIN_MODULES = (preemptive, fairshare)  # their policies register themselves when imported (above)


def policy_class(spec: str) -> type[Policy]:
    """The class a policy spec names. Raises UnknownNameError listing the valid names."""
    return spec_class("policy", policy_classes(), spec)


def is_preemptive(spec: str) -> bool:
    """Whether the policy a spec names preempts (its class says so: `Policy.preemptive`)."""
    return policy_class(spec).preemptive


def get_policy(spec: str, **overrides: object) -> Policy:
    """A new policy from its spec: a name, then its parameters (`las:quantum=60`, `gpuplan policies`
    lists them); `overrides` set parameters by key (typed values, e.g. from a CLI option).

    Raises:
        UnknownNameError: an unknown name (the message lists the valid ones).
        SpecError: an unknown parameter or a bad value (the message lists the valid ones).
    """
    pol: Policy = build("policy", policy_classes(), spec, **overrides)
    return pol


def preemptive_policy(spec: str, quantum_gpu_s: float | None = None) -> preemptive.PreemptivePolicy:
    """The preemptive policy of a spec, its first level boundary (`quantum_param`: las's quantum,
    tiresias's threshold, gittins's first grid point) at `quantum_gpu_s` GPU-seconds when given (the
    `--quantum-gpu-s` option of the agent and `gpuplan slurm`).

    Raises:
        GpuplanError: the policy does not preempt, the quantum is <= 0, or it has no first level
            boundary; UnknownNameError, SpecError: as `get_policy`.
    """
    cls = policy_class(spec)
    if not (cls.preemptive and issubclass(cls, preemptive.PreemptivePolicy)):
        raise GpuplanError(
            f"policy {cls.name!r} does not preempt; preemptive ones: {', '.join(preemptive_policy_names())}"
        )
    overrides: dict[str, object] = {}
    if quantum_gpu_s is not None:
        if not quantum_gpu_s > 0:
            raise GpuplanError(f"--quantum-gpu-s {quantum_gpu_s:g}: must be > 0 GPU-seconds")
        if not cls.quantum_param:
            raise GpuplanError(
                f"policy {cls.name!r} has no first level boundary: --quantum-gpu-s does not apply"
            )
        overrides[cls.quantum_param] = quantum_gpu_s
    return cast(preemptive.PreemptivePolicy, get_policy(spec, **overrides))

"""Ordering policies: each ranks the waiting jobs; one registry by name.

A policy that needs a duration uses the job's estimate (`est_duration_s`, else the user's limit
`requested_s`), never the true duration unless the run is an oracle run. A job with neither ranks as
if it were endless.
"""

from __future__ import annotations

import importlib
import math
from abc import ABC, abstractmethod

from gpuplan.errors import UnknownNameError
from gpuplan.model import Job

__all__ = [
    "ARTICLE_CLASSES",
    "Policy",
    "article_class",
    "get_policy",
    "policy_names",
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


class Policy(ABC):
    """Ranks waiting jobs: the scheduler considers them by ascending `key`.

    Keys are static (computed once when a job arrives); `seq` is the job's position in the trace, the
    last tie-break, so equal keys keep file order on every run.
    """

    name: str = ""
    description: str = ""
    needs_duration: bool = False
    preemptive: bool = False  # ranks change over time and running jobs may be preempted (core/preemptive.py)
    usage_ranked: bool = False  # users ranked by their decayed GPU-time first (core/fairshare.py)

    @abstractmethod
    def key(self, job: Job, seq: int, oracle: bool) -> tuple[float, ...]:
        """Sort key of one job."""


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


_POLICIES: dict[str, type[Policy]] = {}
# Policies in their own core modules, which import this one: loaded on the first look at the registry
# (by name, so this module imports none of them and no import cycle forms).
_BUILTIN_MODULES = ["gpuplan.core.fairshare"]


def _load_builtins() -> None:
    while _BUILTIN_MODULES:
        importlib.import_module(_BUILTIN_MODULES.pop())


def register_policy(cls: type[Policy]) -> type[Policy]:
    """Add a policy class to the registry under its `name` (usable as a decorator)."""
    _POLICIES[cls.name] = cls
    return cls


for _cls in (Fifo, ShortestFirst, LongestFirst, SmallGpusFirst, LargeGpusFirst, MemDesc, GpuTime, Article):
    register_policy(_cls)


def policy_names() -> list[str]:
    """The ordering policies (static keys): what `--policy all` runs and `gpuplan plan` searches from."""
    _load_builtins()
    return [n for n, cls in _POLICIES.items() if not cls.preemptive and not cls.usage_ranked]


def usage_policy_names() -> list[str]:
    """The policies that rank users by their usage (fairshare): keys change as jobs run; named explicitly."""
    _load_builtins()
    return [n for n, cls in _POLICIES.items() if cls.usage_ranked]


def preemptive_policy_names() -> list[str]:
    """The preemptive policies (las, tiresias, gittins): ranks change as jobs run; named explicitly."""
    _load_builtins()
    return [n for n, cls in _POLICIES.items() if cls.preemptive]


def get_policy(name: str) -> Policy:
    """A policy by name. Raises UnknownNameError listing the valid names."""
    _load_builtins()
    try:
        return _POLICIES[name]()
    except KeyError:
        raise UnknownNameError("policy", name, list(_POLICIES)) from None


# The preemptive policies register themselves (their module needs Policy and register_policy above).
# isort: split
from gpuplan.core import preemptive as _preemptive  # noqa: E402,F401

"""The ordering-policy seam: `Policy` and the registry by name (the built-in policies register in
core/policies.py, the static ones, core/preemptive.py, those that preempt, and core/fairshare.py).

A policy that needs a duration uses the job's estimate (`est_duration_s`, else the user's limit
`requested_s`), never the true duration unless the run is an oracle run. A job with neither ranks as
if it were endless.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from gpuplan.core.params import Configurable, register_in
from gpuplan.model import Job

__all__ = [
    "Policy",
    "policy_classes",
    "policy_names",
    "preemptive_policy_names",
    "register_policy",
    "usage_policy_names",
]


class Policy(Configurable, ABC):
    """Ranks waiting jobs: the scheduler considers them by ascending `key`.

    Keys are static (computed once when a job arrives); `seq` is the job's position in the trace, the
    last tie-break, so equal keys keep file order on every run. A class takes parameters by declaring
    `params` (core/params.py: `get_policy("las:quantum=60")`).

    Attributes:
        preemptive: ranks change over time and running jobs may be preempted (the seam of
            core/preemptive.py; a Scheduler drives such a policy with `decide`). A class attribute:
            a class declares it (a wrapper such as the agent's may copy its inner policy's).
        usage_ranked: users are ranked by their decayed GPU-time first (core/fairshare.py: the
            Scheduler keeps its queue per user).
        needs_duration: it ranks by estimated durations.
    """

    description: str = ""
    needs_duration: bool = False
    preemptive: bool = False
    usage_ranked: bool = False

    @abstractmethod
    def key(self, job: Job, seq: int, oracle: bool) -> tuple[float, ...]:
        """Sort key of one job."""


_POLICIES: dict[str, type[Policy]] = {}


def register_policy(cls: type[Policy]) -> type[Policy]:
    """Add a policy class to the registry under its `name` (usable as a decorator)."""
    return register_in(_POLICIES, cls)


def policy_classes() -> dict[str, type[Policy]]:
    """The registered policy classes by name, the static ones first (a copy: register with
    `register_policy`)."""
    return {n: _POLICIES[n] for n in [*policy_names(), *preemptive_policy_names(), *usage_policy_names()]}


def policy_names() -> list[str]:
    """The ordering policies (static keys): what `--policy all` runs and `gpuplan plan` searches from."""
    return [n for n, cls in _POLICIES.items() if not cls.preemptive and not cls.usage_ranked]


def usage_policy_names() -> list[str]:
    """The policies that rank users by their usage (fairshare): keys change as jobs run; named explicitly."""
    return [n for n, cls in _POLICIES.items() if cls.usage_ranked]


def preemptive_policy_names() -> list[str]:
    """The preemptive policies (las, tiresias, gittins): ranks change as jobs run; named explicitly."""
    return [n for n, cls in _POLICIES.items() if cls.preemptive]

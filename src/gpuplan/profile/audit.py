"""The whole audit of a job history in one record: `audit_jobs(jobs, cluster)`; `Audit.as_dict()`
is the JSON that `gpuplan audit --json` prints (keys in docs/audit.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuplan.model import ClusterSpec, Job
from gpuplan.profile.achieved import Achieved, achieved
from gpuplan.profile.classes import (
    ClassShare,
    ProfileMatrix,
    Ranking,
    article_shares,
    profile_matrix,
    top_queues,
    top_users,
)
from gpuplan.profile.stats import (
    Distribution,
    Histogram,
    distribution,
    gpu_hours,
    histogram,
    meta_seconds,
    state_counts,
)
from gpuplan.profile.whatif import POLICY_ORDER, ProgressFn, WhatIf, what_if

__all__ = ["Audit", "audit_jobs", "censored_jobs"]

_TRUE = {"true", "1", "yes", "y", "t"}


@dataclass(slots=True)
class Audit:
    """Everything the audit computes; each part is documented where it is computed."""

    jobs: int
    censored_jobs: int
    states: dict[str, int]
    distributions: dict[str, Distribution]
    histograms: dict[str, Histogram]
    matrix: ProfileMatrix
    article_classes: list[ClassShare]
    top_users: Ranking
    top_queues: Ranking
    achieved: Achieved | None
    what_if: WhatIf | None
    cluster: ClusterSpec | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        c = self.cluster
        return {
            "jobs": self.jobs,
            "censored_jobs": self.censored_jobs,
            "cluster": None if c is None else c.as_dict(),
            "states": dict(self.states),
            "distributions": {k: d.as_dict() for k, d in self.distributions.items()},
            "histograms": {k: h.as_dict() for k, h in self.histograms.items()},
            "matrix": self.matrix.as_dict(),
            "article_classes": [s.as_dict() for s in self.article_classes],
            "top_users": self.top_users.as_dict(),
            "top_queues": self.top_queues.as_dict(),
            "achieved": None if self.achieved is None else self.achieved.as_dict(),
            "what_if": None if self.what_if is None else self.what_if.as_dict(),
            "notes": list(self.notes),
        }


def censored_jobs(jobs: Sequence[Job]) -> int:
    """Jobs the trace marks as censored (meta 'censored' true): their duration is a lower bound."""
    return sum(1 for j in jobs if str(j.meta.get("censored", "")).strip().lower() in _TRUE)


def audit_jobs(
    jobs: Sequence[Job],
    cluster: ClusterSpec | None = None,
    *,
    top: int = 10,
    bins: int = 200,
    simulate: bool = True,
    policies: Sequence[str] = POLICY_ORDER,
    oracle: bool = False,
    budget_s: float | None = None,
    progress: ProgressFn | None = None,
    clock: Callable[[], float] | None = None,
) -> Audit:
    """Profile `jobs` and, with a cluster and `simulate`, replay them (see `what_if`).

    Args:
        jobs: the history, in any order.
        cluster: the cluster it ran on; without one there is no utilization, idle split or what-if,
            and memory classes use absolute bounds.
        top: how many users and queues to list.
        bins: bins of the utilization timeline.
        simulate: run the what-if.
        policies, oracle, budget_s, progress, clock: passed to `what_if`.
    """
    durations = [j.duration_s for j in jobs if j.duration_s is not None]
    mems = [j.mem_gb for j in jobs if j.mem_gb is not None]
    hours = [h for j in jobs if (h := gpu_hours(j)) is not None]
    gpus = [float(j.gpus) for j in jobs]
    history = achieved(jobs, cluster, bins)
    replay = None
    if cluster is not None and simulate:
        extra: dict[str, Any] = {} if clock is None else {"clock": clock}
        replay = what_if(
            jobs, cluster, policies=policies, oracle=oracle, budget_s=budget_s, progress=progress, **extra
        )
    return Audit(
        jobs=len(jobs),
        censored_jobs=censored_jobs(jobs),
        states=state_counts(jobs),
        distributions={
            "duration_s": distribution(durations),
            "gpus": distribution(gpus),
            "mem_gb": distribution(mems),
            "gpu_hours": distribution(hours),
        },
        histograms={
            "duration_s": histogram(durations, log=True),
            "gpus": _gpu_histogram(jobs),
            "mem_gb": histogram(mems),
            "queue_delay_s": _delay_histogram(jobs, history),
        },
        matrix=profile_matrix(jobs, cluster),
        article_classes=article_shares(jobs),
        top_users=top_users(jobs, top),
        top_queues=top_queues(jobs, top),
        achieved=history,
        what_if=replay,
        cluster=cluster,
        notes=_notes(jobs, cluster, history),
    )


def _gpu_histogram(jobs: Sequence[Job]) -> Histogram:
    """One bin per GPU count that occurs: edges are value - 0.5 ... so each bar sits on its count."""
    counts: dict[int, int] = {}
    for j in jobs:
        counts[j.gpus] = counts.get(j.gpus, 0) + 1
    if not counts:
        return Histogram((), ())
    values = range(min(counts), max(counts) + 1)
    if len(values) > 64:  # a few wide jobs on a huge range: equal bins instead
        return histogram([float(j.gpus) for j in jobs], bins=32)
    return Histogram(
        tuple(v - 0.5 for v in [*values, values[-1] + 1]), tuple(counts.get(v, 0) for v in values)
    )


def _delay_histogram(jobs: Sequence[Job], history: Achieved | None) -> Histogram:
    if history is None:
        return Histogram((), ())
    delays = [max(s - j.submit_s, 0.0) for j in jobs if (s := meta_seconds(j, "start_s")) is not None]
    return histogram(delays, log=True)


def _notes(jobs: Sequence[Job], cluster: ClusterSpec | None, history: Achieved | None) -> list[str]:
    notes = []
    missing_dur = sum(1 for j in jobs if j.duration_s is None)
    if missing_dur:
        notes.append(
            f"{missing_dur} of {len(jobs)} job(s) have no duration: not in duration figures or GPU-hours"
        )
    if not any(j.mem_gb is not None for j in jobs):
        notes.append("no job gives mem_gb: every memory class is 'unknown'")
    if history is None:
        notes.append("the trace has no start times (meta start_s): no achieved utilization or queueing delay")
    if cluster is None:
        notes.append(
            "no cluster: no utilization, idle split or what-if; memory classes use absolute GB bounds"
        )
    return notes

"""Schedule with predictions: the same policies simulated with the true durations (oracle), with
predicted durations, and with the users' time limits, against plain FIFO.

FIFO without backfill needs no estimate, so it is the common baseline. For each policy the oracle's
gain is baseline mean JCT − the policy's mean JCT with true durations; predictions recover the share
(baseline − policy with predictions) / (oracle gain).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuplan.model import ClusterSpec, Job

__all__ = ["DEFAULT_POLICIES", "ScheduleReport", "ScheduleRun", "compare_schedules", "scaled_arrivals"]

DEFAULT_POLICIES: tuple[str, ...] = ("fifo", "sjf", "gpu-time", "article")
ESTIMATES: tuple[str, ...] = ("oracle", "predicted", "limit")


@dataclass(slots=True)
class ScheduleRun:
    """One simulated run: policy + backfill, and where its duration estimates came from."""

    policy: str
    backfill: str
    estimates: str  # "oracle", "predicted", "limit" or "none" (the baseline)
    mean_jct_s: float
    makespan_s: float
    mean_wait_s: float
    utilization: float

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(slots=True)
class ScheduleReport:
    """Runs side by side, and the share of the oracle's mean-JCT gain over FIFO each estimate recovers.

    `recovered[policy][estimates]` is None where the oracle gains nothing (no queueing to improve).
    """

    cluster: str
    jobs: int
    backfill: str
    predictor: str
    load_factor: float
    baseline: ScheduleRun
    runs: list[ScheduleRun]
    recovered: dict[str, dict[str, float | None]]
    best: dict[str, float | None]
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "jobs": self.jobs,
            "backfill": self.backfill,
            "predictor": self.predictor,
            "load_factor": self.load_factor,
            "baseline": self.baseline.as_dict(),
            "runs": [r.as_dict() for r in self.runs],
            "recovered": self.recovered,
            "best_recovered": self.best,
            "notes": self.notes,
        }


def scaled_arrivals(jobs: Sequence[Job], load_factor: float) -> list[Job]:
    """Copies of `jobs` whose gaps between submits are divided by `load_factor` (2: twice the load)."""
    if load_factor == 1.0 or not jobs:
        return list(jobs)
    t0 = min(j.submit_s for j in jobs)
    return [dataclasses.replace(j, submit_s=t0 + (j.submit_s - t0) / load_factor) for j in jobs]


def _with_estimates(jobs: Sequence[Job], estimates: str, pred: np.ndarray) -> list[Job]:
    if estimates == "predicted":
        return [
            dataclasses.replace(j, est_duration_s=float(p) if np.isfinite(p) else None)
            for j, p in zip(jobs, pred.tolist())
        ]
    return [dataclasses.replace(j, est_duration_s=None) for j in jobs]  # limit: requested_s


def compare_schedules(
    jobs: Sequence[Job],
    predictions: np.ndarray,
    cluster: ClusterSpec,
    *,
    policies: Sequence[str] = DEFAULT_POLICIES,
    backfill: str = "easy",
    predictor: str = "gbm",
    load_factor: float = 1.0,
    progress: Callable[[int, str], None] | None = None,
) -> ScheduleReport:
    """Simulate `policies` with oracle, predicted and limit durations, and FIFO without backfill.

    Args:
        jobs: jobs with true durations (the ones to simulate).
        predictions: predicted duration per job (NaN: no prediction, the job plans with its limit).
        cluster: where they run.
        policies, backfill: what to compare.
        predictor: the name the predictions came from (for the report).
        load_factor: divide the gaps between submits by this (more contention) before simulating.
        progress: called with (1, what) after each simulation.

    Raises:
        ScheduleError: a job without duration, or one that never fits the cluster.
    """
    from gpuplan.sim.engine import simulate

    sim_jobs = scaled_arrivals(jobs, load_factor)
    has_limits = any(j.requested_s is not None for j in jobs)
    variants = [e for e in ESTIMATES if e != "limit" or has_limits]

    def run(policy: str, bf: str, estimates: str) -> ScheduleRun:
        oracle = estimates == "oracle"
        js = sim_jobs if oracle else _with_estimates(sim_jobs, estimates, predictions)
        m = simulate(js, cluster, policy, bf, oracle=oracle).metrics
        if progress is not None:
            progress(1, f"simulating {policy}+{bf} ({estimates})")
        return ScheduleRun(policy, bf, estimates, m.mean_jct_s, m.makespan_s, m.mean_wait_s, m.utilization)

    baseline = run("fifo", "none", "oracle")
    baseline.estimates = "none"
    runs = [run(p, backfill, e) for p in policies for e in variants]
    recovered, best = _recovered(baseline, runs, policies, variants)
    report = ScheduleReport(
        cluster.describe(), len(jobs), backfill, predictor, load_factor, baseline, runs, recovered, best
    )
    report.notes = _notes(jobs, predictions, has_limits, best)
    return report


def _recovered(
    baseline: ScheduleRun, runs: list[ScheduleRun], policies: Sequence[str], variants: list[str]
) -> tuple[dict[str, dict[str, float | None]], dict[str, float | None]]:
    jct = {(r.policy, r.estimates): r.mean_jct_s for r in runs}
    base = baseline.mean_jct_s

    def share(gain: float, oracle_gain: float) -> float | None:
        return gain / oracle_gain if oracle_gain > 1e-9 * max(base, 1.0) else None

    recovered = {
        p: {e: share(base - jct[p, e], base - jct[p, "oracle"]) for e in variants if e != "oracle"}
        for p in policies
    }
    best_oracle = base - min(jct[p, "oracle"] for p in policies)
    best = {e: share(base - min(jct[p, e] for p in policies), best_oracle) for e in variants if e != "oracle"}
    return recovered, best


def _notes(
    jobs: Sequence[Job], pred: np.ndarray, has_limits: bool, best: dict[str, float | None]
) -> list[str]:
    notes = []
    missing = int(np.isnan(pred).sum())
    if missing:
        notes.append(
            f"{missing} of {len(jobs)} jobs have no prediction: they plan with their time limit, if any"
        )
    if not has_limits:
        notes.append("no job has a time limit (requested_s): the `limit` runs are left out")
    if best.get("predicted") is None:
        notes.append(
            "the oracle gains nothing over FIFO here (the cluster hardly queues): try a smaller --cluster "
            "or a --load-factor above 1"
        )
    return notes

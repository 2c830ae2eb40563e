"""Who gains and who loses before an order is applied: per user and per account, the number of
planned jobs and their mean expected wait under Slurm's own order and under the plan.

Built only on what the planner returns per job (`expected_starts`: the expected start of each
pending job under each order, seconds from the plan's `now_s`), so it follows the planner whatever
its internals. A job's expected wait = its expected start + the time it has already waited. A group
with a job that never starts under an order (a job without a time limit ahead of it) has no mean for
that order ("never").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuplan.slurm.parse import QueueJob
from gpuplan.slurm.planner import QueuePlan

__all__ = ["FairnessRow", "expected_starts", "fairness_lines", "fairness_table"]


def expected_starts(plan: QueuePlan) -> tuple[Mapping[str, float | None], Mapping[str, float | None]]:
    """(Slurm's order, the plan): each planned job's expected start, seconds from `plan.now_s`."""
    return plan.slurm.starts, plan.planned.starts


@dataclass(frozen=True, slots=True)
class FairnessRow:
    """One user's (or account's) planned jobs and their mean expected wait under each order."""

    name: str
    jobs: int
    slurm_mean_wait_s: float | None
    plan_mean_wait_s: float | None

    @property
    def change_s(self) -> float | None:
        """Plan minus Slurm's: negative = these jobs wait less under the plan."""
        if self.slurm_mean_wait_s is None or self.plan_mean_wait_s is None:
            return None
        return self.plan_mean_wait_s - self.slurm_mean_wait_s

    def as_dict(self) -> dict[str, Any]:
        change = self.change_s
        pct = None if change is None or not self.slurm_mean_wait_s else change / self.slurm_mean_wait_s
        return {"name": self.name, "jobs": self.jobs, "slurm_mean_wait_s": self.slurm_mean_wait_s,
                "plan_mean_wait_s": self.plan_mean_wait_s, "change_s": change, "change": pct}  # fmt: skip


def fairness_table(plan: QueuePlan, jobs: Sequence[QueueJob]) -> dict[str, list[dict[str, Any]]]:
    """`{"by_user": [...], "by_account": [...]}`, each group's row as `FairnessRow.as_dict`, the group
    whose jobs lose most under the plan first (groups without a change last)."""
    slurm, planned = expected_starts(plan)
    info = {q.job_id: q for q in jobs}
    waited = {j: max(plan.now_s - s, 0.0) if (q := info.get(j)) and (s := q.submit_s) is not None else 0.0
              for j in plan.order}  # fmt: skip
    out: dict[str, list[dict[str, Any]]] = {}
    for key, attr in (("by_user", "user"), ("by_account", "account")):
        groups: dict[str, list[str]] = {}
        for j in plan.order:
            q = info.get(j)
            groups.setdefault((getattr(q, attr, "") if q else "") or "(none)", []).append(j)
        rows = [FairnessRow(name, len(ids), _mean(ids, slurm, waited), _mean(ids, planned, waited))
                for name, ids in groups.items()]  # fmt: skip
        rows.sort(key=lambda r: (r.change_s is None, -(r.change_s or 0.0), r.name))
        out[key] = [r.as_dict() for r in rows]
    return out


def _mean(
    ids: Sequence[str], starts: Mapping[str, float | None], waited: Mapping[str, float]
) -> float | None:
    total = 0.0
    for j in ids:
        s = starts.get(j)
        if s is None:
            return None
        total += s + waited[j]
    return total / len(ids) if ids else None


def fairness_lines(table: Mapping[str, Sequence[Mapping[str, Any]]], limit: int = 10) -> list[str]:
    """The table for people: one block per grouping, the biggest losers first."""
    out: list[str] = []
    for key, title in (("by_user", "user"), ("by_account", "account")):
        rows = table.get(key, [])
        if not rows:
            continue
        out.append(f"  who gains, who loses (by {title}; mean expected wait, Slurm's order -> plan):")
        width = max(len(title), *(len(str(r["name"])) for r in rows[:limit]))
        out.append(f"    {title:<{width}}  jobs  {'Slurm':>9}  {'plan':>9}  change")
        for r in rows[:limit]:
            ch = r["change_s"]
            pct = "" if r["change"] is None else f" ({100 * r['change']:+.0f} %)"
            change = "n/a" if ch is None else f"{ch:+.0f} s{pct}"
            out.append(f"    {r['name']:<{width}}  {r['jobs']:>4}  {_s(r['slurm_mean_wait_s']):>9}  "
                       f"{_s(r['plan_mean_wait_s']):>9}  {change}")  # fmt: skip
        if len(rows) > limit:
            out.append(f"    ... {len(rows) - limit} more (--json has them all)")
    return out


def _s(v: float | None) -> str:
    return "never" if v is None else f"{v:.0f} s"

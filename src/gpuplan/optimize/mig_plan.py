"""`gpuplan mig plan`: which MIG layout per GPU a job mix needs, against whole GPUs and memory sharing.

Every candidate is simulated with the same policy and backfill mode on the same jobs (docs/mig.md):

1. **exclusive**: the cluster as whole GPUs, one job per GPU;
2. **sharing**: whole GPUs, several jobs per GPU while memory fits, slowed by the interference model;
3. **MIG, uniform**: the first k MIG-capable GPUs of the cluster (node by node, in file order) cut with
   layout L (every k from 1 to their number, every full layout L of `valid_layouts(model, full_only=True)`),
   the other GPUs whole;
4. **MIG, refined**: from the best uniform candidate, one pass over the GPUs, trying for each every full
   layout and "whole", keeping a change when it improves the objective.

5. **MIG after one reconfiguration** (`reconfigure=True`): the jobs that need whole GPUs (several GPUs, or
   more memory than a 4g slice) run first on whole GPUs, as the exclusive run schedules them, up to the
   moment the last of them starts; then the node drains (nothing new starts until every running job has
   ended), pays `drain_cost_s` to re-cut its GPUs, and the remaining jobs run on the best static layout
   found for them (steps 3-4 on those jobs).

A job runs on a slice at the speed `slice_slowdown` gives from its busy %; multi-GPU jobs never use
slices. A candidate where some job can never fit is skipped (counted).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuplan.core.mig import MigLayoutError, mig_gpu, mig_node_specs, valid_layouts
from gpuplan.errors import GpuplanError, ScheduleError
from gpuplan.model import ClusterSpec, Job, NodeSpec

__all__ = ["OBJECTIVES", "MigCandidate", "MigPlan", "format_mig_plan", "plan_mig"]

OBJECTIVES = ("makespan", "mean-jct")
Layouts = dict[str, list[tuple[str, ...]]]  # node name -> one layout per GPU (() = whole GPU)
ProgressFn = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class MigCandidate:
    """One simulated configuration: its mode, per-node layouts, and the schedule's figures."""

    mode: str  # "exclusive", "sharing", "mig" or "mig-reconfigured"
    layouts: Layouts
    makespan_s: float
    mean_jct_s: float
    utilization: float | None  # None for the reconfigured plan (two runs stitched together)
    switch_s: float | None = None  # reconfigured plan: when the re-cut layout starts (after the drain)

    def score(self, objective: str) -> tuple[float, float]:
        main = self.makespan_s if objective == "makespan" else self.mean_jct_s
        other = self.mean_jct_s if objective == "makespan" else self.makespan_s
        return (main, other)

    def describe(self) -> str:
        """The layout in words, e.g. '4 whole + 4 x [3g.40gb, 4g.40gb] per node'."""
        if not self.mode.startswith("mig"):
            return "whole GPUs" if self.mode == "exclusive" else "whole GPUs, memory sharing"
        if self.switch_s is not None:
            return f"whole GPUs, then from {self.switch_s / 3600:.2f} h: " + self._parts()
        return self._parts()

    def _parts(self) -> str:
        parts: dict[str, int] = {}
        for per_gpu in self.layouts.values():
            for layout in per_gpu:
                key = "whole" if not layout else "[" + ", ".join(layout) + "]"
                parts[key] = parts.get(key, 0) + 1
        return " + ".join(f"{n} x {k}" for k, n in sorted(parts.items(), key=lambda kv: kv[0] != "whole"))

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "layout": self.describe(),
            "layouts": {node: [list(lay) for lay in per] for node, per in self.layouts.items()},
            "makespan_s": self.makespan_s,
            "mean_jct_s": self.mean_jct_s,
            "utilization": self.utilization,
            "switch_s": self.switch_s,
        }


@dataclass(slots=True)
class MigPlan:
    """The best candidate of each mode, the winner, and how many candidates were tried."""

    objective: str
    policy: str
    backfill: str
    cluster: str
    exclusive: MigCandidate
    sharing: MigCandidate | None
    mig: MigCandidate | None
    reconfigured: MigCandidate | None
    evaluated: int
    infeasible: int
    notes: list[str] = field(default_factory=list)

    @property
    def winner(self) -> MigCandidate:
        modes = [c for c in (self.exclusive, self.sharing, self.mig, self.reconfigured) if c is not None]
        return min(modes, key=lambda c: c.score(self.objective))

    def gain_vs(self, other: MigCandidate | None) -> float | None:
        """1 − winner / other on the objective (0.08: the winner is 8 % shorter); None without `other`."""
        if other is None:
            return None
        return 1.0 - self.winner.score(self.objective)[0] / other.score(self.objective)[0]

    def as_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective,
            "policy": self.policy,
            "backfill": self.backfill,
            "cluster": self.cluster,
            "modes": {
                "exclusive": self.exclusive.as_dict(),
                "sharing": None if self.sharing is None else self.sharing.as_dict(),
                "mig": None if self.mig is None else self.mig.as_dict(),
                "mig_reconfigured": None if self.reconfigured is None else self.reconfigured.as_dict(),
            },
            "winner": self.winner.mode,
            "gain_vs_exclusive": self.gain_vs(self.exclusive),
            "gain_vs_sharing": self.gain_vs(self.sharing),
            "gain_vs_mig": self.gain_vs(self.mig),
            "gain_vs_mig_reconfigured": self.gain_vs(self.reconfigured),
            "candidates_evaluated": self.evaluated,
            "candidates_infeasible": self.infeasible,
            "notes": self.notes,
        }


def plan_mig(
    jobs: Sequence[Job],
    cluster: ClusterSpec,
    *,
    objective: str = "makespan",
    policy: str = "fifo",
    backfill: str = "easy",
    refine: bool = True,
    reconfigure: bool = False,
    drain_cost_s: float = 300.0,
    progress: ProgressFn | None = None,
) -> MigPlan:
    """Compare exclusive, sharing and the best MIG layouts found for `jobs` on `cluster`.

    Raises:
        GpuplanError: an unknown objective, or no node of the cluster has a GPU model with MIG tables.
        ScheduleError: the jobs do not even run on whole GPUs (no duration, or a job never fits).
    """
    if objective not in OBJECTIVES:
        raise GpuplanError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    run = _Runner(jobs, cluster, policy, backfill, progress)
    exclusive = run.whole(sharing=False)
    if exclusive is None:
        raise ScheduleError("the jobs cannot run on the cluster's whole GPUs (a job never fits)")
    sharing = run.whole(sharing=True)
    mig_nodes = [n for n in cluster.nodes if _mig_model(n) is not None]
    if not mig_nodes:
        models = sorted({n.gpu.model for n in cluster.nodes})
        raise GpuplanError(
            f"no GPU of the cluster has MIG tables (models: {', '.join(models)}); MIG GPUs: A100-40GB, "
            "A100-80GB, H100-80GB, H200-141GB (set gpu_model in the cluster file)"
        )
    best = _best_static(run, mig_nodes, objective, refine)
    again = (
        _reconfigured(jobs, cluster, run, mig_nodes, objective, refine, drain_cost_s) if reconfigure else None
    )
    notes = [
        "'MIG' layouts are static for the whole run; MIG slices host single-GPU jobs only",
        "a job's speed on a slice: max(1, busy % / slice compute share) (docs/mig.md)",
    ]
    if reconfigure:
        notes.append(
            f"'MIG, re-cut': whole GPUs until the last job that needs one starts, then a full drain and "
            f"{drain_cost_s:g} s to re-cut"
        )
    if cluster.sharing:
        notes.append("the cluster file turns sharing on: the 'exclusive' row turns it off for comparison")
    return MigPlan(
        objective,
        policy,
        backfill,
        cluster.describe(),
        exclusive,
        sharing,
        best,
        again,
        run.evaluated,
        run.infeasible,
        notes,
    )


def _best_static(
    run: _Runner, mig_nodes: list[NodeSpec], objective: str, refine: bool
) -> MigCandidate | None:
    best = _best_uniform(run, mig_nodes, objective)
    if best is not None and refine:
        best = _refine(run, mig_nodes, best, objective)
    return best


def _needs_whole_gpu(job: Job, mig_nodes: list[NodeSpec]) -> bool:
    """Several GPUs, or more memory than any slice short of the whole-GPU 7g profile offers."""
    biggest = min(
        max(p.mem_gb for p in mig_gpu(n.gpu.model).profiles.values() if p.compute_slices < 7)
        for n in mig_nodes
    )
    return job.gpus > 1 or (job.mem_gb or 0.0) > biggest


def _reconfigured(
    jobs: Sequence[Job],
    cluster: ClusterSpec,
    run: _Runner,
    mig_nodes: list[NodeSpec],
    objective: str,
    refine: bool,
    drain_cost_s: float,
) -> MigCandidate | None:
    """Whole GPUs until the last whole-GPU job starts, a full drain plus `drain_cost_s`, then MIG."""
    from gpuplan.sim.engine import simulate

    t0 = min(j.submit_s for j in jobs)
    whole = ClusterSpec(cluster.name, cluster.nodes, False, cluster.max_jobs_per_gpu)
    first = simulate(jobs, whole, run.policy, run.backfill)
    by_id = {j.id: j for j in jobs}
    big = [r for r in first.records if _needs_whole_gpu(by_id[r.job_id], mig_nodes)]
    if not big:
        return None  # nothing needs a whole GPU: the static layouts already cover this
    switch = max(r.start_s for r in big)
    before = [r for r in first.records if r.start_s <= switch]
    started = {r.job_id for r in before}
    after_jobs = [j for j in jobs if j.id not in started]
    if not after_jobs:
        return None
    recut_s = max(r.end_s for r in before) + drain_cost_s  # relative to t0
    later = [replace(j, submit_s=max(j.submit_s, t0 + recut_s)) for j in after_jobs]
    second = _Runner(later, cluster, run.policy, run.backfill, run.progress)
    best = _best_static(second, mig_nodes, objective, refine)
    run.evaluated += second.evaluated
    run.infeasible += second.infeasible
    if best is None:
        return None
    ends = {r.job_id: r.end_s for r in before}
    offset = min(j.submit_s for j in later) - t0
    ends.update(
        {
            r.job_id: r.end_s + offset
            for r in simulate(later, second.spec_for(best.layouts), run.policy, run.backfill).records
        }
    )
    jct = [ends[j.id] - (j.submit_s - t0) for j in jobs]
    return MigCandidate(
        "mig-reconfigured", best.layouts, max(ends.values()), sum(jct) / len(jct), None, switch_s=recut_s
    )


class _Runner:
    """Simulates candidates; remembers how many it ran and how many could not run."""

    def __init__(
        self,
        jobs: Sequence[Job],
        cluster: ClusterSpec,
        policy: str,
        backfill: str,
        progress: ProgressFn | None,
    ) -> None:
        self.jobs, self.cluster, self.policy, self.backfill = jobs, cluster, policy, backfill
        self.progress = progress
        self.evaluated = 0
        self.infeasible = 0

    def whole(self, sharing: bool) -> MigCandidate | None:
        spec = ClusterSpec(self.cluster.name, self.cluster.nodes, sharing, self.cluster.max_jobs_per_gpu)
        return self._run(spec, "sharing" if sharing else "exclusive", {})

    def spec_for(self, layouts: Layouts) -> ClusterSpec:
        nodes: list[NodeSpec] = []
        for node in self.cluster.nodes:
            per_gpu = layouts.get(node.name)
            if per_gpu is None or not any(per_gpu):
                nodes.append(node)
            else:
                nodes.extend(mig_node_specs(node.name, node.gpu, per_gpu))
        return ClusterSpec(self.cluster.name, tuple(nodes), False, self.cluster.max_jobs_per_gpu)

    def cut(self, layouts: Layouts) -> MigCandidate | None:
        return self._run(self.spec_for(layouts), "mig", layouts)

    def _run(self, spec: ClusterSpec, mode: str, layouts: Layouts) -> MigCandidate | None:
        from gpuplan.sim.engine import simulate

        self.evaluated += 1
        if self.progress is not None:
            self.progress(self.evaluated)
        try:
            result = simulate(self.jobs, spec, self.policy, self.backfill)
        except ScheduleError:
            self.infeasible += 1
            return None
        m = result.metrics
        return MigCandidate(mode, layouts, m.makespan_s, m.mean_jct_s, m.utilization)


def _mig_model(node: NodeSpec) -> str | None:
    try:
        return mig_gpu(node.gpu.model).model
    except MigLayoutError:
        return None


def _best_uniform(run: _Runner, mig_nodes: list[NodeSpec], objective: str) -> MigCandidate | None:
    """Layout L on the first k MIG-capable GPUs of the cluster (node by node, in file order), the rest whole."""
    best: MigCandidate | None = None
    total = sum(n.gpus for n in mig_nodes)
    for layout in _layouts_of(mig_nodes):
        for k in range(1, total + 1):
            layouts: Layouts = {}
            left = k
            for n in mig_nodes:
                cut = min(left, n.gpus) if _fits(n, layout) else 0
                layouts[n.name] = [layout] * cut + [()] * (n.gpus - cut)
                left -= min(left, n.gpus)
            cand = run.cut(layouts)
            if cand is not None and (best is None or cand.score(objective) < best.score(objective)):
                best = cand
    return best


def _refine(run: _Runner, mig_nodes: list[NodeSpec], best: MigCandidate, objective: str) -> MigCandidate:
    for node in mig_nodes:
        options: list[tuple[str, ...]] = [(), *valid_layouts(node.gpu.model, full_only=True)]
        for i in range(node.gpus):
            for layout in options:
                current = best.layouts[node.name]
                if current[i] == layout:
                    continue
                trial = {k: list(v) for k, v in best.layouts.items()}
                trial[node.name][i] = layout
                cand = run.cut(trial)
                if cand is not None and cand.score(objective) < best.score(objective):
                    best = cand
    return best


def _layouts_of(mig_nodes: list[NodeSpec]) -> list[tuple[str, ...]]:
    """Full layouts of every MIG model in the cluster, in a stable order (each model's own names)."""
    out: list[tuple[str, ...]] = []
    for model in dict.fromkeys(mig_gpu(n.gpu.model).model for n in mig_nodes):
        out.extend(valid_layouts(model, full_only=True))
    return out


def _fits(node: NodeSpec, layout: tuple[str, ...]) -> bool:
    profiles = mig_gpu(node.gpu.model).profiles
    return all(name in profiles for name in layout)


def format_mig_plan(plan: MigPlan) -> str:
    """The plan as a plain-text table: one row per mode, the winner and its gains."""
    label = "makespan" if plan.objective == "makespan" else "mean JCT"
    rows = [("exclusive", plan.exclusive), ("sharing", plan.sharing), ("MIG", plan.mig)]
    if plan.reconfigured is not None or any("re-cut" in n for n in plan.notes):
        rows.append(("MIG, re-cut", plan.reconfigured))
    width = max([20] + [len(c.describe()) for _, c in rows if c is not None])
    lines = [
        f"MIG plan for {plan.cluster}; {plan.policy} + {plan.backfill}, objective {label}",
        "",
        f"{'mode':<11} {'layout':<{width}} {'makespan h':>10} {'mean JCT h':>10} {'util':>6}",
    ]
    for name, cand in rows:
        if cand is None:
            lines.append(f"{name:<11} {'(no feasible layout)':<{width}} {'-':>10} {'-':>10} {'-':>6}")
            continue
        util = "-" if cand.utilization is None else f"{100 * cand.utilization:.1f}%"
        lines.append(
            f"{name:<11} {cand.describe():<{width}} {cand.makespan_s / 3600:>10.2f} {cand.mean_jct_s / 3600:>10.2f} "
            f"{util:>6}"
        )
    win = plan.winner
    others = [(name, c) for name, c in rows if c is not None and c is not win]
    gains = ", ".join(
        f"{100 * (1 - win.score(plan.objective)[0] / c.score(plan.objective)[0]):+.1f} % vs {n}"
        for n, c in others
    )
    second = ", ".join(
        f"{100 * (1 - win.score(plan.objective)[1] / c.score(plan.objective)[1]):+.1f} % vs {n}"
        for n, c in others
    )
    other_label = "mean JCT" if plan.objective == "makespan" else "makespan"
    lines += [
        "",
        f"winner: {win.mode} ({win.describe()})",
        f"  {label} shorter by {gains}",
        f"  {other_label} shorter by {second} (ties on {label} are broken by {other_label})",
        f"{plan.evaluated} candidates simulated ({plan.infeasible} could not run every job)",
    ]
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines) + "\n"

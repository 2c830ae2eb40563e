"""Benchmark of `gpuplan plan`: plan quality (ratio to the proven lower bound) against the time budget.

Cases (each solved from scratch at every budget, seed 0):
  article: `synth_article(0)`, 80 jobs at t=0 on one node of 8 A100-80GB.
  t0-500: `synth_poisson(500, seed=1, load=1.2, total_gpus=64)` with every job submitted at t=0, on
    8 nodes x 8 A100-80GB (64 GPUs): a long queue where packing matters.
  poisson-500: the same jobs with their Poisson arrivals (offered load 1.2).

`bench_plan()` returns one dict per (case, backfill, budget); `python bench/bench_plan.py` prints them as
JSON. Issue #4's target: the article within 1.02x the best lower bound (or proven optimal) in 30 s.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

BUDGETS_S = (1.0, 5.0, 10.0, 30.0)
BACKFILLS = ("easy", "none")


def _cases() -> dict[str, tuple[list[Any], Any]]:
    from gpuplan.cluster import load_cluster
    from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec
    from gpuplan.synth import synth_article, synth_poisson

    gpu = GpuSpec("A100-80GB", 80.0)
    c64 = ClusterSpec("8x8xA100-80GB", tuple(NodeSpec(f"node{i + 1}", 8, gpu) for i in range(8)))
    poisson = synth_poisson(500, seed=1, load=1.2, total_gpus=64)
    return {
        "article": (synth_article(0), load_cluster("8xA100-80GB")),
        "t0-500": ([dataclasses.replace(j, submit_s=0.0) for j in poisson], c64),
        "poisson-500": (poisson, c64),
    }


def _evals_per_s(jobs: list[Any], cluster: Any, backfill: str) -> dict[str, float]:
    """Simulations per second of one order: the search's evaluator and `simulate`."""
    from gpuplan.optimize import Evaluator, FixedOrder
    from gpuplan.sim.engine import simulate

    ev = Evaluator(jobs, cluster, backfill)
    order = list(range(len(jobs)))
    rates = {}
    for name, fn in (
        ("evaluator", lambda: ev.ends(order)),
        ("simulate", lambda: simulate(jobs, cluster, FixedOrder([j.id for j in jobs]), backfill)),
    ):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 1.0:
            fn()
            n += 1
        rates[f"{name}_per_s"] = round(n / (time.perf_counter() - t0), 1)
    return {**rates, "evaluator_path": ev.path}  # type: ignore[dict-item]


def bench_plan(
    budgets_s: Sequence[float] = BUDGETS_S,
    backfills: Sequence[str] = BACKFILLS,
    cases: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Plan quality vs time: one row per case, backfill mode and time budget."""
    from gpuplan.optimize import plan_order

    rows = []
    for name, (jobs, cluster) in _cases().items():
        if cases is not None and name not in cases:
            continue
        for backfill in backfills:
            speed = _evals_per_s(jobs, cluster, backfill)
            for budget in budgets_s:
                p = plan_order(jobs, cluster, "makespan", backfill, budget, seed=0, max_evals=None)
                lb = p.bound.value_s
                rows.append(
                    {
                        "case": name, "jobs": len(jobs), "gpus": cluster.total_gpus, "backfill": backfill,
                        "budget_s": budget, "seconds": round(p.seconds, 2), "evaluations": p.evaluations,
                        "makespan_h": round(p.value_s / 3600, 4), "bound_h": round(lb / 3600, 4),
                        "bound_name": p.bound.name, "ratio": round(p.bound_ratio, 4),
                        "start_policy": p.start_policy, "start_ratio": round(p.start_value_s / lb, 4),
                        "fifo_ratio": round(p.fifo_value_s / lb, 4), "stop_reason": p.stop_reason,
                        "cpsat_status": None if p.exact is None else p.exact.status,
                        "cpsat_model": None if p.exact is None else p.exact.model,
                        "cpsat_ratio": None if p.exact is None or p.exact.value_s is None
                        else round(p.exact.value_s / lb, 4),
                        **speed,
                    }
                )  # fmt: skip
    return rows


def main() -> int:
    cases = sys.argv[1:] or None
    print(json.dumps(bench_plan(cases=cases), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

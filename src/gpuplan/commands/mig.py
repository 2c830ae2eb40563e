"""`gpuplan mig plan TRACE`: the MIG layout per GPU a trace needs, against whole GPUs and memory sharing.

Registered by cli.py as `app.add_typer(mig_app, name="mig")`. docs/mig.md explains the search and the
speed of a job on a slice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["mig_app"]

mig_app = typer.Typer(help="MIG (Multi-Instance GPU) partition planning.", no_args_is_help=True)


@mig_app.command("plan")
def plan(
    trace: Annotated[Path, typer.Argument(help="Job trace with true durations (any format gpuplan reads).")],
    cluster: Annotated[str | None, typer.Option("--cluster", "-c", help="Preset name or cluster .toml (GPU models with MIG tables: A100-40GB, A100-80GB, H100-80GB, H200-141GB); default: the trace's own, else 8xA100-80GB.")] = None,
    objective: Annotated[str, typer.Option("--objective", help="makespan or mean-jct.")] = "makespan",
    policy: Annotated[str, typer.Option("--policy", "-p", help="Queue policy every candidate runs with.")] = "fifo",
    backfill: Annotated[str, typer.Option("--backfill", "-b", help="none, easy or conservative[:depth=N].")] = "easy",
    refine: Annotated[bool, typer.Option("--refine/--no-refine", help="After the best uniform layout, try each GPU's layout in turn.")] = True,
    reconfigure: Annotated[bool, typer.Option("--reconfigure", help="Also try one re-cut: whole GPUs until the last job that needs one starts, a full drain, then MIG.")] = False,
    drain_cost: Annotated[float, typer.Option("--drain-cost", min=0.0, help="Seconds a re-cut costs after the drain (with --reconfigure).")] = 300.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")] = False,
) -> None:  # fmt: skip
    """Pick per-GPU MIG layouts for a trace (static for the run, or after one re-cut) and compare them with
    exclusive whole GPUs and memory sharing, under the same policy."""
    from gpuplan.commands.common import cli_errors as _errors
    from gpuplan.commands.common import cluster_for as _cluster_for
    from gpuplan.commands.common import fitting_jobs
    from gpuplan.commands.common import load_trace as _load_trace
    from gpuplan.commands.common import parse_names as _names

    with _errors():
        from gpuplan.core.backfill import get_backfill
        from gpuplan.core.policies import policy_names
        from gpuplan.optimize.mig_plan import format_mig_plan, plan_mig

        _names(policy, policy_names(), "policy")
        backfill = get_backfill(backfill).spec
        result = _load_trace(trace, None, None, False)
        spec = _cluster_for(cluster, result, None)
        found = plan_mig(
            fitting_jobs(result.jobs, spec),
            spec,
            objective=objective,
            policy=policy,
            backfill=backfill,
            refine=refine,
            reconfigure=reconfigure,
            drain_cost_s=drain_cost,
        )
        if as_json:
            typer.echo(json.dumps(found.as_dict(), indent=1))
        else:
            typer.echo(format_mig_plan(found), nl=False)

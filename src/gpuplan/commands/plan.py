"""`gpuplan plan TRACE`: search for the best order of a trace, with exact optima and proven bounds.

Registered by cli.py as `app.command(name="plan")(plan)`. Heavy imports (ortools, plotly) happen inside
the command. docs/plan.md explains the method, plan.json and what the numbers mean.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from gpuplan.model import ClusterSpec, Job
    from gpuplan.optimize.search import PlanResult
    from gpuplan.sim.result import SimResult

__all__ = ["plan", "plan_demo_results"]

_OUTCOME_NOTE = (
    "The plan was found by simulating this trace with its true durations: a what-if on history (an oracle "
    "of the outcome), not an order a scheduler could have known in advance."
)
_FORECAST_NOTE = "FORECAST: durations were replaced by their estimates; the plan is as good as the estimates."


def plan(
    trace: Annotated[Path, typer.Argument(help="Job trace with true durations (any format gpuplan reads).")],
    cluster: Annotated[str | None, typer.Option("--cluster", "-c", help="Preset name or cluster .toml file; default: the trace's own cluster (SWF, Alibaba), else 8xA100-80GB.")] = None,
    objective: Annotated[str, typer.Option("--objective", help="makespan, mean-jct or weighted (GPU-weighted mean JCT).")] = "makespan",
    time_limit: Annotated[float | None, typer.Option("--time-limit", min=0.0, help="Wall-clock cap in seconds for the whole search (default 300); reported when it cuts the search (the plan then depends on the machine).")] = None,
    backfill: Annotated[str, typer.Option("--backfill", "-b", help="Backfill mode the plan is applied with: none (strict order), easy, conservative.")] = "easy",
    placer: Annotated[str, typer.Option("--placer", help="GPU placer every simulation uses, recorded in the plan: first-fit, best-fit (pack), spread, fgd or fgd-pack, with parameters if any (fgd:step=0.1; docs/fragmentation.md).")] = "first-fit",
    seed: Annotated[int, typer.Option(help="Random seed of the search.")] = 0,
    max_evals: Annotated[int | None, typer.Option("--max-evals", min=1, help="Simulations the search runs (default 5000): the same trace, options and seed give the same plan on any machine.")] = None,
    oracle: Annotated[bool, typer.Option("--oracle", help="The scheduler's decisions (backfill) see true durations.")] = False,
    forecast: Annotated[bool, typer.Option("--forecast", help="Plan on the estimates (est_duration_s, else the time limit) instead of true durations.")] = False,
    fmt: Annotated[str | None, typer.Option("--format", help="Trace format; detected when omitted.")] = None,
    column_map: Annotated[str | None, typer.Option("--map", help="Column map for foreign CSVs: submit=COL,duration=COL,gpus=COL,...")] = None,
    time_unit: Annotated[str, typer.Option("--time-unit", help="Unit of a foreign CSV's times: s, ms, min, h, or per field.")] = "s",
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Skip invalid rows and report how many, instead of stopping.")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Write the plan as JSON: a .json file, or DIR/plan.json.")] = None,
    report: Annotated[Path | None, typer.Option("--report", help="Write an HTML report: a .html file, or DIR/report.html.")] = None,
    predict: Annotated[list[Path] | None, typer.Option("--predict", help="A model from `gpuplan predict fit` (repeatable): estimates come from it.")] = None,
    schedule_out: Annotated[Path | None, typer.Option("--schedule-out", help="Write the plan's per-job start, end and GPUs as JSONL; --json then leaves them out.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")] = False,
) -> None:  # fmt: skip
    """Search for the best order of a trace: start from the best built-in policy, improve it by simulation
    (and CP-SAT on small traces), and compare it with FIFO, the article's order and a proven lower bound."""
    from gpuplan.commands.common import apply_predictions, fitting_jobs, runnable_jobs, schedule_json
    from gpuplan.commands.common import cli_errors as _errors
    from gpuplan.commands.common import cluster_for as _cluster_for
    from gpuplan.commands.common import load_trace as _load_trace

    with _errors():
        from gpuplan.cluster import load_cluster
        from gpuplan.core.backfill import get_backfill
        from gpuplan.core.placement import get_placer
        from gpuplan.errors import GpuplanError
        from gpuplan.optimize.evaluate import check_objective
        from gpuplan.optimize.search import DEFAULT_MAX_EVALS, DEFAULT_TIME_LIMIT_S, plan_order
        from gpuplan.progress import LazyProgress

        if cluster is not None:
            load_cluster(cluster)  # a bad --cluster fails before a long read
        check_objective(objective)
        get_backfill(backfill)
        placer = get_placer(placer).spec  # an unknown name: one line with the valid ones, before the read
        read = _load_trace(trace, fmt, column_map, skip_bad, time_unit)
        # a job that never ran has nothing to plan on, unless the plan is on estimates (a pending queue)
        if not forecast and all(j.duration_s is None for j in read.jobs):
            raise GpuplanError(
                f"{trace}: no job has a true duration (duration_s), so there is no outcome to plan on; "
                "plan on the estimates with --forecast (est_duration_s, else the time limit)"
            )
        jobs = read.jobs if forecast else runnable_jobs(read.jobs, "plan")
        jobs = apply_predictions(jobs, predict)
        spec = _cluster_for(cluster, read)
        jobs = fitting_jobs(jobs, spec, oracle)
        with LazyProgress(100, "planning", enabled=not as_json) as bar:

            def tick(share: float, what: str) -> None:
                bar.advance(max(int(100 * share) - bar.done, 0), what)

            result = plan_order(
                jobs, spec, objective, backfill, DEFAULT_TIME_LIMIT_S if time_limit is None else time_limit,
                seed, tick, oracle=oracle, forecast=forecast,
                max_evals=DEFAULT_MAX_EVALS if max_evals is None else max_evals, placer=placer,
            )  # fmt: skip
        shown = _compared(result)
        notes = _notes(result)
        for w in sorted({w for r in shown for w in r.warnings}):
            typer.echo(f"gpuplan: warning: {w}", err=True)
        schedule = schedule_json([result.result], schedule_out)[0] if as_json or schedule_out else {}
        if as_json:
            typer.echo(json.dumps({**_json(result, shown), **schedule}, indent=2, allow_nan=False))
        else:
            _print_table(result, shown, f"{trace.name} on {spec.describe()}")
            for n in notes:
                typer.echo(n)
        _write_outputs(result, shown, notes, trace, spec, out, report, quiet=as_json)


def plan_demo_results(
    jobs: Sequence[Job], cluster: ClusterSpec, time_limit_s: float = 300.0
) -> list[SimResult]:
    """The planned order's run (policy "plan", EASY backfill) for the demo's report: the default budget
    of simulations, `time_limit_s` only a cap (a warning on stderr when it cuts the search)."""
    from gpuplan.optimize.search import plan_order

    found = plan_order(jobs, cluster, "makespan", "easy", time_limit_s)
    if found.time_cut:
        typer.echo(
            f"gpuplan: warning: --plan-seconds {time_limit_s:g} cut the search after {found.evaluations} "
            "simulations: plan+easy depends on this machine's speed; raise --plan-seconds",
            err=True,
        )
    return [found.result]


def _compared(result: PlanResult) -> list[SimResult]:
    """The plan, the best built-in run, the article's order (same backfill when run) and strict FIFO."""
    base = result.baselines
    best = next(r for r in base if r.label == result.start_policy)
    article = sorted((r for r in base if r.policy == "article"), key=lambda r: (r.backfill != result.backfill, r.metrics.makespan_s))  # fmt: skip
    fifo = next(r for r in base if r.policy == "fifo" and r.backfill == "none")
    out: list[SimResult] = []
    for r in (result.result, best, *article[:1], fifo):
        if all(r is not o for o in out):
            out.append(r)
    return out


def _value(result: PlanResult, r: SimResult) -> float:
    """A run's value of the plan's objective (records' times are already from the first submit)."""
    from gpuplan.optimize.evaluate import objective_value

    recs = r.records
    return objective_value(
        result.objective, [x.end_s for x in recs], [x.submit_s for x in recs], [len(x.gpus) for x in recs]
    )


def _role(result: PlanResult, r: SimResult) -> str:
    if r is result.result:
        return "plan"
    if r.label == result.start_policy:
        return "start (no best)" if _no_winner(result) else "best policy"
    return "FIFO" if r.policy == "fifo" else "article order"


_COLUMNS = ("makespan h", "util %", "mean JCT h", "p95 JCT h", "mean wait h")
_OBJECTIVE_COLUMN = {"makespan": "makespan h", "mean-jct": "mean JCT h", "weighted": "GPU-weighted JCT h"}


def _print_table(result: PlanResult, shown: Sequence[SimResult], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    obj_col = _OBJECTIVE_COLUMN[result.objective]
    cols = [*_COLUMNS, *([obj_col] if obj_col not in _COLUMNS else [])]
    table = Table(title=title, title_justify="left")
    for col in ("run", "policy+backfill", *cols, "vs bound"):
        table.add_column(col, justify="left" if col in ("run", "policy+backfill") else "right")
    lb = result.bound.value_s
    for r in shown:
        m, v = r.metrics, _value(result, r)
        cells = {
            "makespan h": f"{m.makespan_s / 3600:.3f}", "util %": f"{100 * m.utilization:.1f}",
            "mean JCT h": f"{m.mean_jct_s / 3600:.3f}", "p95 JCT h": f"{m.p95_jct_s / 3600:.2f}",
            "mean wait h": f"{m.mean_wait_s / 3600:.2f}", obj_col: f"{v / 3600:.3f}",
        }  # fmt: skip
        style = "bold green" if r is result.result else ("yellow" if r.policy == "fifo" else None)
        ratio = f"{v / lb:.3f}×" if lb > 0 else ""
        table.add_row(_role(result, r), r.label, *(cells[c] for c in cols), ratio, style=style)
    bound_cells = [f"{lb / 3600:.3f}" if c == obj_col else "" for c in cols]
    table.add_row("lower bound", f"proven ({result.bound.name})", *bound_cells, "1.000×", style="cyan")
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(table)


def _no_winner(result: PlanResult) -> str | None:
    """Why no built-in policy may be called best (nobody waited, or all runs equal), else None."""
    from gpuplan.sim.compare import no_winner_reason

    return no_winner_reason(result.baselines)


def _notes(result: PlanResult) -> list[str]:
    notes = [_OUTCOME_NOTE if result.uses_true_outcome else _FORECAST_NOTE]
    why = _no_winner(result)
    if why is not None:
        notes.append(
            f"no best policy among the built-in runs: {why}; the search started from {result.start_policy}."
        )
    if result.oracle:
        notes.append("ORACLE run: the scheduler's backfill decisions saw the true durations.")
    ex = result.exact
    cp = "" if ex is None else f"; CP-SAT ({ex.model} model) {ex.status}"
    if ex is not None and ex.value_s is not None:
        cp += f", its best {ex.value_s / 3600:.3f} h"
    if result.time_cut:
        notes.append(
            f"the time limit cut the search after {result.evaluations} simulations: this plan depends on "
            "the machine's speed; raise --time-limit (or lower --max-evals) for a reproducible one."
        )
    verdict = "proven optimal" if result.is_proven_optimal else f"{result.bound_ratio:.3f}× the lower bound"
    notes.append(
        f"plan: {result.objective} {result.value_s / 3600:.3f} h, {verdict} ({result.bound.name} "
        f"{result.bound.value_s / 3600:.3f} h); {result.gain_s / 3600:+.3f} h vs {result.start_policy}, "
        f"{result.gain_vs_fifo_s / 3600:+.3f} h vs fifo+none; placer {result.placer}; {result.evaluations} simulations in "
        f"{result.seconds:.1f} s, stopped: {result.stop_reason}{cp}."
    )
    return notes


def _json(result: PlanResult, shown: Sequence[SimResult]) -> dict[str, Any]:
    from gpuplan.optimize.planfile import json_safe

    runs = [{"role": _role(result, r), "objective_s": _value(result, r), **r.summary()} for r in shown]
    cluster = result.result.cluster.as_dict()
    return json_safe({"plan": result.summary(), "cluster": cluster, "runs": runs, "order": result.order})  # type: ignore[no-any-return]


def _write_outputs(result, shown, notes, trace, spec, out, report, quiet) -> None:  # type: ignore[no-untyped-def]
    from gpuplan.optimize.planfile import write_plan

    if out is not None:
        path = write_plan(result, out if out.suffix == ".json" else out / "plan.json", trace=str(trace))
        if not quiet:
            typer.echo(f"plan: {path}")
    if report is not None:
        from gpuplan.report.html import write_report

        html = report if report.suffix == ".html" else report / "report.html"
        subtitle = f"{trace.name} on {spec.describe()}"
        path = write_report(
            shown, html, title="gpuplan plan: the best order found", subtitle=subtitle, notes=notes
        )
        if not quiet:
            typer.echo(f"report: {path}")

"""The `gpuplan` command. Every command that reports has `--json`; errors are one line on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuplan.commands.common import (
    ClusterOpt,
    DaskOpt,
    JsonOpt,
    PredictOpt,
    ScheduleOutOpt,
    TraceClusterOpt,
    WorkersOpt,
    apply_predictions,
    batch_gc,
    fitting_jobs,
    parse_specs,
    runnable_jobs,
    schedule_json,
)
from gpuplan.commands.common import cli_errors as _errors
from gpuplan.commands.common import cluster_for as _cluster_for
from gpuplan.commands.common import load_trace as _load_trace
from gpuplan.commands.common import parse_names as _names
from gpuplan.errors import GpuplanError
from gpuplan.sim.matrix import rank_key, run_matrix

if TYPE_CHECKING:
    from gpuplan.core.preemption import PreemptionCost
    from gpuplan.sim.result import SimResult

__all__ = ["app", "main", "run_matrix"]

app = typer.Typer(
    name="gpuplan",
    help="Order and place GPU jobs: simulate traces under many policies and compare them to a lower bound.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
synth_app = typer.Typer(help="Generate synthetic workloads.", no_args_is_help=True)
app.add_typer(synth_app, name="synth")


_TABLE_CAPTION = (
    "span = makespan; JCT = mean job completion time (p95 = its 95th percentile); wait = mean wait; "
    "bsld = mean bounded slowdown (10 s); idle GPU-h = idle GPU-hours while jobs waited; "
    "×bound = makespan / proven lower bound"
)


def _print_table(results: Sequence[SimResult], title: str) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=150)
    wide = console.width >= 110  # on a narrow terminal keep the columns that decide
    cols = ["policy+backfill", "span h", "util%", "JCT h", "p95 h", "wait h", "bsld", "idle GPU-h", "×bound"]
    keep = [c for c in cols if wide or c not in ("p95 h", "bsld", "idle GPU-h")]
    table = Table(title=title, title_justify="left", caption=_TABLE_CAPTION, caption_justify="left",
                  box=box.SIMPLE_HEAD if not wide else box.HEAVY_HEAD)  # fmt: skip
    for col in keep:
        first = col == "policy+backfill"
        table.add_column(col, justify="left" if first else "right", no_wrap=True)
    from gpuplan.sim.compare import best_run, contenders, fifo_baseline, same_runs

    best = best_run(results, ranked=True)
    baseline = fifo_baseline(results)
    same = same_runs(results)
    for i, r in enumerate(results):
        m = r.metrics
        mark = " ← best" if r is best else (" ← FIFO" if r is baseline else "")
        if i in same:
            mark = f" = {same[i]}"
        style = "bold green" if r is best else ("yellow" if r is baseline else None)
        cells = dict(zip(cols, [
            r.label + mark, f"{m.makespan_s / 3600:.2f}", f"{100 * m.utilization:.1f}",
            f"{m.mean_jct_s / 3600:.2f}", f"{m.p95_jct_s / 3600:.2f}", f"{m.mean_wait_s / 3600:.2f}",
            f"{m.mean_bounded_slowdown:.1f}", f"{m.idle_gpu_hours_while_waiting:.1f}", f"{m.bound_ratio:.3f}×",
        ]))  # fmt: skip
        table.add_row(*(cells[c] for c in keep), style=style)
    lb = contenders(results)[0].metrics.lower_bound_s
    bound_cells = {
        "policy+backfill": "lower bound (proven)",
        "span h": f"{lb / 3600:.2f}",
        "×bound": "1.000×",
    }
    table.add_row(*(bound_cells.get(c, "") for c in keep), style="cyan")
    console.print(table)


def _report(results: Sequence[SimResult], out: Path, title: str, subtitle: str, notes: list[str]) -> Path:
    from gpuplan.report.html import write_report

    out.mkdir(parents=True, exist_ok=True)
    return write_report(results, out / "report.html", title=title, subtitle=subtitle, notes=notes)


@app.command()
def simulate(
    trace: Annotated[Path, typer.Argument(help="Job trace in any format of docs/formats.md.")],
    cluster: TraceClusterOpt = None,
    policy: Annotated[str, typer.Option("--policy", "-p", help="Policy name(s) with parameters if any (las:quantum=60; `gpuplan policies`), comma-separated, or 'all'.")] = "fifo",
    backfill: Annotated[str, typer.Option("--backfill", "-b", help="none, easy, conservative[:depth=N] (comma list) or 'all'.")] = "easy",
    placer: Annotated[str, typer.Option(help="first-fit, best-fit (pack), spread, fgd or fgd-pack (docs/fragmentation.md).")] = "first-fit",
    sharing: Annotated[bool | None, typer.Option("--sharing/--exclusive", help="Override the cluster's GPU sharing switch.")] = None,
    oracle: Annotated[bool, typer.Option("--oracle", help="Policies see the true durations (an oracle run; every output says so).")] = False,
    fmt: Annotated[str | None, typer.Option("--format", help="Trace format; detected when omitted.")] = None,
    column_map: Annotated[str | None, typer.Option("--map", help="Column map for foreign CSVs: submit=COL,duration=COL,gpus=COL,...")] = None,
    time_unit: Annotated[str, typer.Option("--time-unit", help="Unit of a foreign CSV's times: s, ms, min, h, or per field: submit=s,duration=min.")] = "s",
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Skip invalid rows and report how many, instead of stopping.")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Write DIR/report.html with Gantt and utilization plots.")] = None,
    predict: PredictOpt = None,
    estimates: Annotated[str, typer.Option("--estimates", help="trace: the trace's estimates (or --predict); history: learned online from the jobs finished so far in each run.")] = "trace",
    restart_overhead: Annotated[float | None, typer.Option("--restart-overhead", help="Seconds a preempted job needs to resume (default: its startup_s + init_s, else 10).")] = None,
    checkpoint_every: Annotated[float, typer.Option("--checkpoint-every", help="Seconds of work between checkpoints; 0: checkpoint when preempted (nothing lost).")] = 0.0,
    span: Annotated[bool, typer.Option("--span/--no-span", help="Let jobs wider than the largest node span nodes (default); --no-span leaves them out.")] = True,
    schedule_out: ScheduleOutOpt = None,
    workers: WorkersOpt = 1,
    dask: DaskOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Simulate a trace under one or more policies and backfill modes (las, tiresias, gittins preempt)."""
    with _errors(), batch_gc():
        from gpuplan.cluster import load_cluster
        from gpuplan.core.backfill import backfill_names, get_backfill
        from gpuplan.core.placement import get_placer
        from gpuplan.core.policies import get_policy, policy_names

        policies = parse_specs(policy, get_policy, "policy", policy_names())
        backfills = parse_specs(backfill, get_backfill, "backfill mode", backfill_names())
        source = _names(estimates, list(ESTIMATE_SOURCES), "estimate source")[0]
        cost = _preemption_cost(restart_overhead, checkpoint_every)
        placer = get_placer(placer).spec
        if cluster is not None:
            load_cluster(cluster)  # a bad --cluster fails before a long read
        result = _load_trace(trace, fmt, column_map, skip_bad, time_unit)
        jobs = apply_predictions(runnable_jobs(result.jobs, "simulation"), predict)
        spec = _cluster_for(cluster, result, sharing)
        jobs = fitting_jobs(jobs, spec, oracle, span=span)
        results = run_matrix(
            jobs,
            spec,
            policies,
            backfills,
            placer,
            oracle,
            show_progress=not as_json,
            estimates=source,
            preemption=cost,
            workers=workers,
            dask=dask,
        )
        from gpuplan.sim.fragseries import attach_fragmentation

        attach_fragmentation(results, jobs)
        _emit(
            results,
            as_json,
            f"{trace.name} on {spec.describe()}",
            out,
            schedules=True,
            schedule_out=schedule_out,
        )
        if dask is None:  # (a Dask client may still be closing)
            from gpuplan.quickexit import hand_over

            hand_over(result, jobs, results)  # freed by the process's end, not one by one


ESTIMATE_SOURCES = ("trace", "history")


def _preemption_cost(restart_overhead_s: float | None, checkpoint_every_s: float) -> PreemptionCost:
    from gpuplan.core.preemption import PreemptionCost

    for name, v in (("--restart-overhead", restart_overhead_s), ("--checkpoint-every", checkpoint_every_s)):
        if v is not None and not 0.0 <= v < float("inf"):
            raise GpuplanError(f"{name} {v}: give seconds >= 0")
    return PreemptionCost(restart_overhead_s, checkpoint_every_s)


def _emit(
    results: Sequence[SimResult],
    as_json: bool,
    subtitle: str,
    out: Path | None,
    schedules: bool = False,
    schedule_out: Path | None = None,
) -> None:
    """Print the runs (table or JSON), write the report; `schedules`: per-job schedules in the JSON."""
    notes = _notes(results)
    for w in sorted({w for r in results for w in r.warnings}):
        typer.echo(f"gpuplan: warning: {w}", err=True)
    rows = schedule_json(results, schedule_out) if schedules and (as_json or schedule_out) else None
    if as_json:
        runs = _summaries(results)
        if rows is not None:
            runs = [{**run, **rows[i]} for i, run in enumerate(runs)]
        typer.echo(json.dumps(runs, indent=2))
    else:
        _print_table(results, subtitle)
        for n in notes:
            typer.echo(n)
        for line in _user_lines(results):
            typer.echo(line)
    if out is not None:
        path = _report(results, out, "gpuplan: policies compared", subtitle, notes)
        if not as_json:
            typer.echo(f"report: {path}")


PLAN_POLICY = "plan"  # the order `gpuplan plan` searched for (see commands/plan.py)


def _user_lines(results: Sequence[SimResult], most: int = 8, detailed_runs: int = 3) -> list[str]:
    """Jain's index over users per run; with at most `detailed_runs` runs, also the figures of the
    users with the most GPU-hours (with more runs one line of indexes: the rest is in --json and the
    report, so that comparing every policy does not print a screen per run)."""
    from gpuplan.sim.fairness import jain_index

    per_run = [(r, users) for r in results if (users := r.user_figures())]
    if not per_run:
        return []
    if len(per_run) > detailed_runs:
        n = max(len(users) for _, users in per_run)
        cells = ", ".join(
            f"{r.label} {jain_index([u['mean_bounded_slowdown'] for u in users]):.3f}" for r, users in per_run
        )
        return [
            f"Jain's index over {n} users (mean bounded slowdowns; 1 = all alike): {cells}; per user: --json or the report"
        ]
    lines = []
    for r, users in per_run:
        jain = jain_index([u["mean_bounded_slowdown"] for u in users])
        top = sorted(users, key=lambda u: -u["gpu_hours"])[:most]
        cells = "; ".join(
            f"{u['user']} {u['jobs']} jobs, {u['gpu_hours']:.1f} GPU-h, wait {u['mean_wait_s'] / 3600:.2f} h, "
            f"bsld {u['mean_bounded_slowdown']:.1f}"
            for u in top
        )
        more = f"; {len(users) - most} more users (--json)" if len(users) > most else ""
        lines.append(
            f"{r.label}: Jain's index {jain:.3f} over {len(users)} users (mean bounded slowdowns): {cells}{more}"
        )
    return lines


def _summaries(results: Sequence[SimResult]) -> list[dict[str, Any]]:
    """What --json prints per run: its summary (with its cluster), whether it is the best, and, when
    no run may be called best, why (`no_winner`, the same text on every run)."""
    from gpuplan.sim.compare import best_run, no_winner_reason, same_runs

    best, why, same = best_run(results), no_winner_reason(results), same_runs(results)
    return [
        {**r.summary(), "best": r is best, "no_winner": why, "same_run_as": same.get(i)}
        for i, r in enumerate(results)
    ]


def _estimate_notes(results: Sequence[SimResult]) -> list[str]:
    """What the runs did for jobs without an estimate, one line per distinct clause: the runs it holds
    for are named once ("every run", "sjf, ljf (every backfill mode)"), not one line per run."""
    clauses: dict[str, list[SimResult]] = {}
    for r in results:
        line = r.estimates.describe()
        if not line or not r.estimates.without:
            continue
        for clause in line.split("; "):
            generic = clause.replace(f"policy {r.policy} ", "the policy ").replace(
                f"{r.backfill} backfill ", "the backfill mode "
            )
            clauses.setdefault(generic, []).append(r)
    return [f"{_runs_text(runs, results)}: {clause}." for clause, runs in clauses.items()]


def _runs_text(runs: Sequence[SimResult], results: Sequence[SimResult]) -> str:
    """The runs named as briefly as they are exactly: 'every run', 'every run with easy or conservative
    backfill', 'sjf, ljf (every backfill mode)', else their labels."""
    chosen = {id(r) for r in runs}

    def exactly(keep: Callable[[SimResult], bool]) -> bool:
        return all((id(r) in chosen) == keep(r) for r in results)

    if len(results) > 1 and exactly(lambda r: True):
        return "every run"
    if len(results) > 1 and exactly(lambda r: r.estimates.needed):
        return "every run that uses estimates"
    modes = sorted({r.backfill for r in runs})
    if len({r.policy for r in runs}) > 1 and exactly(lambda r: r.backfill in modes):
        return f"every run with {' or '.join(modes)} backfill"
    policies = list(dict.fromkeys(r.policy for r in runs))
    if len({r.backfill for r in results}) > 1 and exactly(lambda r: r.policy in policies):
        return f"{', '.join(policies)} (every backfill mode)"
    return ", ".join(r.label for r in runs)


def _honesty_notes(results: Sequence[SimResult]) -> list[str]:
    """What each run went on: estimates missing and what it fell back to, runs that are the same run
    under another name, preemptions and their waste, jobs that ran across nodes."""
    from gpuplan.sim.compare import same_runs

    notes = _estimate_notes(results)
    same = same_runs(results)
    groups: dict[str, list[str]] = {}
    for i, first in same.items():
        groups.setdefault(first, []).append(results[i].label)
    for first, others in groups.items():
        notes.append(f"same run: {', '.join(others)} = {first} (identical schedules; not separate results).")
    for r in results:
        if r.metrics.preemptions:
            notes.append(
                f"{r.label}: {r.metrics.preemptions} preemptions, {r.metrics.wasted_gpu_hours:.1f} GPU-h "
                "wasted (lost work and restart overhead)."
            )
    spanned = max((r.spanned_jobs for r in results), default=0)
    if spanned:
        notes.append(
            f"{spanned} job(s) ran across several nodes (jobs wider than a node span by default; --no-span)."
        )
    return notes


def _notes(results: Sequence[SimResult]) -> list[str]:
    from gpuplan.sim.compare import best_run, fifo_baseline, no_winner_reason

    notes = []
    if any(r.oracle for r in results):
        notes.append("ORACLE run: policies saw the true durations, which no real scheduler knows.")
    notes.extend(_honesty_notes(results))
    why = no_winner_reason(results)
    if why is not None:
        notes.append(f"no best run: {why}.")
    f = fifo_baseline(results)
    best = best_run(results, ranked=True)
    if f is not None and best is not None and best.policy != "fifo":
        gain = f.metrics.makespan_s - best.metrics.makespan_s
        if round(gain, 6) == 0:  # the same makespan: the best won on mean JCT (the ranking's tie-break)
            notes.append(
                f"best policy {best.label}: the same makespan as {f.label} ({f.metrics.makespan_s / 3600:.2f} h), "
                f"mean JCT {best.metrics.mean_jct_s:,.0f} s vs {f.metrics.mean_jct_s:,.0f} s; "
                f"{best.metrics.bound_ratio:.3f}× the lower bound."
            )
        else:
            notes.append(
                f"best policy {best.label}: {best.metrics.makespan_s / 3600:.2f} h at "
                f"{100 * best.metrics.utilization:.1f} % vs {f.label}: {f.metrics.makespan_s / 3600:.2f} h at "
                f"{100 * f.metrics.utilization:.1f} % ({gain / 3600:.2f} h sooner, "
                f"{100 * gain / f.metrics.makespan_s:.0f} % shorter); {best.metrics.bound_ratio:.3f}× the lower bound."
            )
    for p in (r for r in results if r.policy == PLAN_POLICY):
        notes.append(
            f"{p.label}: the order `gpuplan plan` found by searching with the simulator on these jobs' true "
            f"durations (a what-if on known jobs, not a policy a live queue can run): "
            f"{p.metrics.makespan_s / 3600:.2f} h, {p.metrics.bound_ratio:.3f}× the lower bound."
        )
    return notes


@app.command()
def demo(
    out: Annotated[Path, typer.Option("--out", help="Directory for report.html.")] = Path("out/demo"),
    seed: Annotated[int, typer.Option(help="Seed of the article scenario.")] = 0,
    oracle: Annotated[bool, typer.Option("--oracle", help="Let policies see true durations.")] = False,
    plan_s: Annotated[
        float,
        typer.Option(
            "--plan-seconds",
            help="Also search for the best order (gpuplan plan's budget of simulations: the same on every machine) and show it as 'plan+easy'; this caps its seconds, 0 skips.",
        ),
    ] = 60.0,
    as_json: JsonOpt = False,
) -> None:
    """The article's scenario (8xA100-80GB, 50 fine-tunes + 30 batch inference) under every policy x backfill."""
    with _errors():
        from gpuplan.cluster import load_cluster
        from gpuplan.core.backfill import backfill_names
        from gpuplan.core.policies import policy_names
        from gpuplan.synth import synth_article

        spec = load_cluster("8xA100-80GB")
        jobs = synth_article(seed)
        results = run_matrix(
            jobs, spec, policy_names(), backfill_names(), oracle=oracle, show_progress=not as_json
        )
        if plan_s > 0:
            from gpuplan.commands.plan import plan_demo_results

            results = sorted([*results, *plan_demo_results(jobs, spec, plan_s)], key=rank_key)
        subtitle = f"article scenario (seed {seed}, {len(jobs)} jobs at t=0) on {spec.describe()}"
        if not as_json:
            typer.echo("The article: FIFO 55 % utilization / 12 h; profile order 88 % / 8.5 h (8xA100).")
        _emit(results, as_json, subtitle, out)


@app.command()
def convert(
    trace: Annotated[Path, typer.Argument(help="Any readable trace (see docs/formats.md).")],
    out: Annotated[Path, typer.Argument(help="Output in gpuplan's own format: .jsonl, .csv or .parquet.")],
    fmt: Annotated[str | None, typer.Option("--format", help="Input format; detected when omitted.")] = None,
    column_map: Annotated[str | None, typer.Option("--map", help="Column map for foreign CSVs.")] = None,
    time_unit: Annotated[str, typer.Option("--time-unit", help="Unit of a foreign CSV's times.")] = "s",
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", help="Skip invalid rows and report how many.")
    ] = False,
) -> None:
    """Convert a trace to gpuplan's own format (JSONL, CSV or Parquet, by OUT's extension)."""
    with _errors():
        from gpuplan.traces import write_trace

        result = _load_trace(trace, fmt, column_map, skip_bad, time_unit)
        beside = write_trace(result.jobs, out, result.cluster)
        kept = ""
        if result.cluster is not None:
            kept = f" (its cluster in {beside})" if beside else " (its cluster in the Parquet metadata)"
        typer.echo(f"wrote {len(result.jobs)} jobs to {out}{kept}")


@app.command()
def policies(as_json: JsonOpt = False) -> None:
    """List ordering policies, backfill modes and placers, one line each, with their parameters
    (give them as NAME:KEY=VALUE,KEY=VALUE, e.g. --policy las:quantum=60)."""
    from gpuplan.core.backfill import backfill_classes
    from gpuplan.core.params import params_help
    from gpuplan.core.placement import placer_classes
    from gpuplan.core.policies import policy_classes

    rows: dict[str, list[dict[str, Any]]] = {
        "policies": [
            {
                "name": n,
                "needs_duration": c.needs_duration,
                "preemptive": c.preemptive,
                "description": c.description,
                "params": params_help(c),
            }
            for n, c in policy_classes().items()
        ],
        "backfill": [
            {"name": n, "description": c.description, "params": params_help(c)}
            for n, c in backfill_classes().items()
        ],
        "placers": [
            {"name": n, "description": c.description, "params": params_help(c)}
            for n, c in placer_classes().items()
        ],
    }
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for section, items in rows.items():
        typer.echo(f"{section}:")
        for it in items:
            typer.echo(f"  {it['name']:<18} {it['description']}")
            for p in it["params"]:
                typer.echo(f"  {'':<18}   {p['key']}={p['default']}: {p['description']} ({p['expected']})")


@app.command()
def clusters(as_json: JsonOpt = False) -> None:
    """List the cluster presets (use a .toml file for your own: docs/formats.md)."""
    from gpuplan.cluster import load_cluster, preset_names

    specs = {n: load_cluster(n) for n in preset_names()}
    if as_json:
        typer.echo(json.dumps({n: {"gpus": s.total_gpus, "nodes": len(s.nodes), "sharing": s.sharing,
                                   "describe": s.describe()} for n, s in specs.items()}, indent=2))  # fmt: skip
        return
    for n, s in specs.items():
        typer.echo(f"  {n:<16} {s.describe()}")


@synth_app.command("article")
def synth_article_cmd(
    out: Annotated[Path, typer.Option("--out", help="Output trace (.jsonl or .csv).")],
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    small_inference: Annotated[int, typer.Option("--small-inference", min=0, help="Add N small 1-GPU inference jobs arriving over the first 8 h (docs/mig.md).")] = 0,
) -> None:  # fmt: skip
    """The article's scenario: 50 fine-tunes + 30 batch-inference jobs at t=0 (docs/scenario.md)."""
    with _errors():
        from gpuplan.synth import synth_article, synth_small_inference
        from gpuplan.traces import write_trace

        jobs = synth_article(seed) + synth_small_inference(small_inference, seed=seed)
        write_trace(jobs, out)
        typer.echo(f"wrote {len(jobs)} jobs to {out}")


@synth_app.command("poisson")
def synth_poisson_cmd(
    out: Annotated[Path, typer.Option("--out", help="Output trace (.jsonl or .csv).")],
    jobs: Annotated[int, typer.Option("--jobs", "-n", help="Number of jobs.")] = 1000,
    rate: Annotated[float | None, typer.Option("--rate", help="Arrivals per hour.")] = None,
    load: Annotated[float | None, typer.Option("--load", help="Offered load vs the cluster (e.g. 0.9).")] = None,
    cluster: ClusterOpt = "4x8xA100-80GB",
    gpu_mix: Annotated[str | None, typer.Option("--gpu-mix", help="GPU-count mix, e.g. 1=0.6,2=0.2,8=0.2.")] = None,
    class_mix: Annotated[str | None, typer.Option("--class-mix", help="Weights of short,long,short-infer,long-infer, e.g. 26,24,24,6.")] = None,
    tail: Annotated[float | None, typer.Option("--tail", help="Heavy-tailed durations: Pareto shape (e.g. 1.5) times each class's median.")] = None,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
) -> None:  # fmt: skip
    """A general workload: Poisson arrivals with a class mix and a GPU-count mix."""
    with _errors():
        from gpuplan.cluster import load_cluster
        from gpuplan.synth import synth_poisson
        from gpuplan.traces import write_trace

        spec = load_cluster(cluster)
        made = synth_poisson(
            jobs, seed=seed, rate_per_h=rate, load=load if load is not None or rate is not None else 0.9,
            total_gpus=spec.total_gpus, mix=_class_mix(class_mix), gpu_mix=_gpu_mix(gpu_mix), tail_alpha=tail,
        )  # fmt: skip
        beside = write_trace(made, out, spec)  # the load is relative to this cluster: keep it with the jobs
        where = f" and its cluster ({spec.describe()}) to {beside}" if beside is not None else ""
        typer.echo(f"wrote {len(made)} jobs to {out}{where}")


def _gpu_mix(text: str | None) -> dict[int, float] | None:
    if text is None:
        return None
    mix: dict[int, float] = {}
    for part in text.split(","):
        k, _, v = part.partition("=")
        try:
            g, w = int(k), float(v)
        except ValueError:
            raise GpuplanError(f"--gpu-mix: {part!r} is not GPUS=WEIGHT (e.g. 1=0.6,8=0.4)") from None
        if g < 1 or w < 0:
            raise GpuplanError(f"--gpu-mix: {part!r} needs GPUS >= 1 and WEIGHT >= 0")
        mix[g] = w
    if sum(mix.values()) <= 0:
        raise GpuplanError("--gpu-mix: the weights sum to 0")
    return mix


def _class_mix(text: str | None):  # type: ignore[no-untyped-def]
    if text is None:
        return None
    from gpuplan.synth import ARTICLE_MIX

    parts = text.split(",")
    try:
        weights = [float(p) for p in parts]
    except ValueError:
        raise GpuplanError(
            f"--class-mix: {text!r} must be {len(ARTICLE_MIX)} numbers, e.g. 26,24,24,6"
        ) from None
    if len(weights) != len(ARTICLE_MIX) or min(weights) < 0 or sum(weights) <= 0:
        raise GpuplanError(f"--class-mix: {text!r} must be {len(ARTICLE_MIX)} weights >= 0, not all 0")
    return [(cls, w) for (cls, _), w in zip(ARTICLE_MIX, weights)]


def _register_commands() -> None:
    """Commands that live in their own modules (their heavy imports stay inside the command)."""
    from gpuplan.commands.audit import audit
    from gpuplan.commands.frag import frag
    from gpuplan.commands.mig import mig_app
    from gpuplan.commands.plan import plan
    from gpuplan.commands.predict import predict_app
    from gpuplan.commands.serve import serve
    from gpuplan.commands.slurm import slurm_app
    from gpuplan.commands.sweep import sweep

    app.command(name="audit")(audit)
    app.command(name="frag")(frag)
    app.command(name="sweep")(sweep)
    app.command(name="plan")(plan)
    app.add_typer(mig_app, name="mig")
    app.add_typer(predict_app, name="predict")
    app.command(name="serve")(serve)
    app.add_typer(slurm_app, name="slurm")
    _register_agent_commands()


def _register_agent_commands() -> None:
    """The local agent (`gpuplan agent ...`) and its job commands (commands/agent.py)."""
    from gpuplan.commands import agent as ag

    app.add_typer(ag.agent_app, name="agent")
    for name, fn in (("submit", ag.submit_cmd), ("queue", ag.queue_cmd), ("show", ag.show_cmd),
                     ("cancel", ag.cancel_cmd), ("logs", ag.logs_cmd), ("hold", ag.hold_cmd),
                     ("release", ag.release_cmd), ("requeue", ag.requeue_cmd), ("apply", ag.apply_cmd)):  # fmt: skip
        app.command(name=name)(fn)


_register_commands()


def main() -> int:
    """Console entry point: runs the app and returns its exit status (0 ok, 2 bad input)."""
    try:
        app()
    except SystemExit as e:
        if e.code is None:
            return 0
        return e.code if isinstance(e.code, int) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`gpuplan predict fit|eval|apply|show`: predict durations and GPU memory from history (docs/predict.md).

cli.py mounts `predict_app` with `app.add_typer(predict_app, name="predict")`. Heavy imports (numpy,
scikit-learn, the simulator) happen inside the commands, so `gpuplan --help` stays instant.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from gpuplan.model import Job
    from gpuplan.predict import EvalReport, ScheduleReport
    from gpuplan.traces import TraceResult

__all__ = ["predict_app"]

DEFAULT_SCHEDULE_JOBS = 4000
"""--schedule simulates this many jobs by default: a queue that grows without bound (a dense --load-factor)
makes each run slower with every waiting job, and a window of 4,000 keeps a run to seconds."""

predict_app = typer.Typer(
    help="Predict job durations and GPU memory from history, and schedule with the predictions.",
    no_args_is_help=True,
)

TraceArg = Annotated[
    Path, typer.Argument(help="Job history: any trace format gpuplan reads (docs/formats.md).")
]
FmtOpt = Annotated[str | None, typer.Option("--format", help="Trace format; detected when omitted.")]
MapOpt = Annotated[
    str | None,
    typer.Option("--map", help="Column map for foreign CSVs: submit=COL,duration=COL,gpus=COL,..."),
]
UnitOpt = Annotated[
    str, typer.Option("--time-unit", help="Unit of a foreign CSV's times: s, ms, min, h, or per field.")
]
SkipOpt = Annotated[
    bool, typer.Option("--skip-bad", help="Skip invalid rows and report how many, instead of stopping.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
ParamOpt = Annotated[str | None, typer.Option("--param", help="Predictor parameters KEY=VALUE,... (e.g. quantile=0.9,k=10).")]  # fmt: skip


def _read(
    trace: Path, fmt: str | None, column_map: str | None, time_unit: str, skip_bad: bool
) -> TraceResult:
    from gpuplan.commands.common import load_trace

    return load_trace(trace, fmt, column_map, skip_bad, time_unit)


def _params(text: str | None) -> dict[str, Any]:
    """KEY=VALUE pairs; numbers become numbers, `none` becomes None."""
    from gpuplan.traces.base import split_pairs

    out: dict[str, Any] = {}
    for key, value in split_pairs(text, "--param", "quantile=0.9,k=10") if text else []:
        out[key] = None if value.lower() == "none" else _number(value)
    return out


def _number(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


@predict_app.command("fit")
def fit(
    history: TraceArg,
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the model file.")],
    target: Annotated[str, typer.Option("--target", "-t", help="duration or memory.")] = "duration",
    model: Annotated[str, typer.Option("--model", "-m", help="Predictor: limit, global-median, rolling-median, gbm.")] = "gbm",
    param: ParamOpt = None,
    fmt: FmtOpt = None, column_map: MapOpt = None, time_unit: UnitOpt = "s", skip_bad: SkipOpt = False,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Fit a predictor on a whole job history and save it (use it with `--predict MODEL` or `predict apply`)."""
    from gpuplan.commands.common import cli_errors as _errors

    with _errors():
        from gpuplan.predict import get_predictor, save_model
        from gpuplan.progress import LazyProgress

        predictor = get_predictor(model, target, **_params(param))  # bad names fail before the read
        result = _read(history, fmt, column_map, time_unit, skip_bad)
        t0 = time.perf_counter()
        with LazyProgress(1, f"fitting {model} ({target}) on {len(result.jobs)} jobs", enabled=not as_json):
            predictor.fit(result.jobs)
        header = save_model(predictor, out, history=str(history))
        fit_s = time.perf_counter() - t0
        if as_json:
            typer.echo(json.dumps({**header.as_dict(), "path": str(out), "fit_s": round(fit_s, 3)}, indent=2))
            return
        typer.echo(
            f"{out}: {model} {target} model, trained on {header.training_size} of {len(result.jobs)} jobs, "
            f"{len(header.features)} feature(s), in {fit_s:.1f} s"
        )


@predict_app.command("show")
def show(model: Annotated[Path, typer.Argument(help="A model file from `gpuplan predict fit`.")], as_json: JsonOpt = False) -> None:  # fmt: skip
    """Print a model file's header (nothing in it is run)."""
    from gpuplan.commands.common import cli_errors as _errors

    with _errors():
        from gpuplan.predict import read_header

        header = read_header(model)
        if as_json:
            typer.echo(json.dumps(header.as_dict(), indent=2))
            return
        for key, value in header.as_dict().items():
            typer.echo(f"{key}: {', '.join(value) if isinstance(value, list) else value}")


@predict_app.command("apply")
def apply(
    trace: TraceArg,
    model: Annotated[Path, typer.Option("--model", "-m", help="A model file from `gpuplan predict fit`.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output trace: .jsonl, .csv or .parquet.")],
    fmt: FmtOpt = None, column_map: MapOpt = None, time_unit: UnitOpt = "s", skip_bad: SkipOpt = False,
) -> None:  # fmt: skip
    """Write TRACE again with est_duration_s or est_mem_gb (the model's target) set to the predictions."""
    from gpuplan.commands.common import cli_errors as _errors

    with _errors():
        from gpuplan.predict import apply_model, read_header
        from gpuplan.traces import write_trace

        header = read_header(model)  # a bad model file fails before the read
        jobs = apply_model(_read(trace, fmt, column_map, time_unit, skip_bad).jobs, model)
        write_trace(jobs, out)
        typer.echo(f"{out}: {len(jobs)} jobs with {header.model} {header.target} predictions")


@predict_app.command("eval")
def eval_(
    history: TraceArg,
    target: Annotated[str, typer.Option("--target", "-t", help="duration, memory or all.")] = "duration",
    predictors: Annotated[str, typer.Option("--predictors", "-p", help="Predictor names, comma-separated, or 'all'.")] = "all",
    chunks: Annotated[int, typer.Option("--chunks", min=2, help="Refit before each of these parts of the trace (the first is warm-up).")] = 10,
    param: ParamOpt = None,
    schedule: Annotated[bool, typer.Option("--schedule", help="Also simulate policies with oracle, predicted and limit durations.")] = False,
    cluster: Annotated[str | None, typer.Option("--cluster", "-c", help="For --schedule: preset or .toml; default: the trace's own cluster, else 8xA100-80GB.")] = None,
    sharing: Annotated[bool | None, typer.Option("--sharing/--exclusive", help="For --schedule: override the cluster's GPU sharing.")] = None,
    policy: Annotated[str, typer.Option("--policy", help="For --schedule: policies, comma-separated.")] = "fifo,sjf,gpu-time,article",
    backfill: Annotated[str, typer.Option("--backfill", "-b", help="For --schedule: none, easy or conservative[:depth=N].")] = "easy",
    schedule_with: Annotated[str | None, typer.Option("--schedule-with", help="For --schedule: whose predictions to plan with (default gbm, else the last predictor).")] = None,
    load_factor: Annotated[float, typer.Option("--load-factor", min=0.01, help="For --schedule: divide the gaps between submits by this (2: twice the load).")] = 1.0,
    schedule_jobs: Annotated[int, typer.Option("--schedule-jobs", min=0, help="For --schedule: simulate the first N jobs after the warm-up; 0: all.")] = DEFAULT_SCHEDULE_JOBS,
    fmt: FmtOpt = None, column_map: MapOpt = None, time_unit: UnitOpt = "s", skip_bad: SkipOpt = False,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Compare predictors on a history without leakage; with --schedule, what the predictions are worth."""
    from gpuplan.commands.common import cli_errors as _errors

    with _errors():
        from gpuplan.predict import TARGETS, predictor_names

        targets = _choose(target, list(TARGETS), "prediction target")
        names = _choose(predictors, predictor_names(), "predictor")
        if schedule_with is None:
            schedule_with = "gbm" if "gbm" in names else names[-1]
        if schedule:
            _check_schedule_options(targets, names, schedule_with, policy, backfill, cluster)
        result = _read(history, fmt, column_map, time_unit, skip_bad)
        reports = _evaluate(result.jobs, targets, names, chunks, _params(param), quiet=as_json)
        sched = None
        if schedule:
            duration = next(r for r in reports if r.target == "duration")
            sched = _schedule(result, duration, cluster, sharing, policy, backfill, schedule_with,
                              load_factor, schedule_jobs, quiet=as_json)  # fmt: skip
        if as_json:
            data = {"trace": str(history), "format": result.format, "jobs": len(result.jobs),
                    "evaluations": [r.as_dict() for r in reports], "schedule": sched.as_dict() if sched else None}  # fmt: skip
            typer.echo(json.dumps(data, indent=2, allow_nan=False))
            return
        for r in reports:
            _print_scores(history.name, r)
        if sched is not None:
            _print_schedule(history.name, sched)


def _choose(text: str, valid: list[str], kind: str) -> list[str]:
    from gpuplan.commands.common import parse_names as _names

    return _names(text, valid, kind)


def _check_schedule_options(
    targets: list[str], names: list[str], schedule_with: str, policy: str, backfill: str, cluster: str | None
) -> None:
    from gpuplan.cluster import load_cluster
    from gpuplan.commands.common import parse_names as _names
    from gpuplan.core.backfill import get_backfill
    from gpuplan.core.policies import policy_names
    from gpuplan.predict import PredictError

    if "duration" not in targets:
        raise PredictError("--schedule plans with predicted durations: use --target duration or all")
    if schedule_with not in names:
        raise PredictError(
            f"--schedule-with {schedule_with}: not among the evaluated predictors ({', '.join(names)})"
        )
    _names(policy, policy_names(), "policy")
    get_backfill(backfill)
    if cluster is not None:
        load_cluster(cluster)  # a bad --cluster fails before a long evaluation


def _evaluate(
    jobs: list[Job], targets: list[str], names: list[str], chunks: int, params: dict[str, Any], quiet: bool
) -> list[EvalReport]:
    from gpuplan.predict import evaluate, get_predictor
    from gpuplan.progress import LazyProgress

    per_predictor = _split_params(names, params)
    for name in names:
        get_predictor(name, targets[0], **per_predictor[name])  # a bad --param value fails now
    reports = []
    steps = len(targets) * len(names) * (chunks - 1)
    with LazyProgress(steps, "evaluating", enabled=not quiet) as bar:
        for target in targets:
            if target == "memory" and len(targets) > 1 and all(j.mem_gb is None for j in jobs):
                typer.echo("gpuplan: no job has mem_gb: memory is not evaluated", err=True)
                bar.advance(len(names) * (chunks - 1))
                continue

            def tick(n: int, what: str, target: str = target) -> None:
                bar.advance(n, f"evaluating {target}: {what}")

            reports.append(evaluate(jobs, target, names, chunks=chunks, params=per_predictor, progress=tick))
    return reports


def _split_params(names: list[str], params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """--param KEY=VALUE goes to every evaluated predictor that has KEY; a KEY none has is an error."""
    from gpuplan.predict import PredictError, get_predictor

    known = {n: get_predictor(n).param_names for n in names}
    unused = sorted(k for k in params if not any(k in ks for ks in known.values()))
    if unused:
        valid = sorted({k for ks in known.values() for k in ks})
        raise PredictError(
            f"--param: no evaluated predictor has {', '.join(unused)}; valid: {', '.join(valid) or 'none'}"
        )
    return {n: {k: v for k, v in params.items() if k in known[n]} for n in names}


def _schedule(
    result: TraceResult, report: EvalReport, cluster: str | None, sharing: bool | None, policy: str,
    backfill: str, schedule_with: str, load_factor: float, max_jobs: int, quiet: bool,
) -> ScheduleReport:  # fmt: skip
    from gpuplan.commands.common import cluster_for
    from gpuplan.commands.common import parse_names as _names
    from gpuplan.core.policies import policy_names
    from gpuplan.predict import compare_schedules
    from gpuplan.progress import LazyProgress

    jobs = result.jobs
    after_warmup = _after_warmup(jobs, report.warmup_jobs)
    keep = [i for i in after_warmup if jobs[i].duration_s is not None]
    if max_jobs and len(keep) > max_jobs:
        typer.echo(f"gpuplan: simulating the first {max_jobs} of {len(keep)} jobs after the warm-up "
                   "(--schedule-jobs 0: all)", err=True)  # fmt: skip
        keep = sorted(keep, key=lambda i: (jobs[i].submit_s, i))[:max_jobs]
    spec = cluster_for(cluster, result, sharing)
    policies = _names(policy, policy_names(), "policy")
    pred = report.predictions[schedule_with][keep]
    has_limits = any(jobs[i].requested_s is not None for i in keep)
    runs = 1 + len(policies) * (3 if has_limits else 2)
    with LazyProgress(runs, "simulating", enabled=not quiet) as bar:
        return compare_schedules(
            [jobs[i] for i in keep], pred, spec, policies=policies, backfill=backfill,
            predictor=schedule_with, load_factor=load_factor,
            progress=lambda n, what: bar.advance(n, what),
        )  # fmt: skip


def _after_warmup(jobs: list[Job], warmup: int) -> list[int]:
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
    return order[warmup:]


def _fmt(value: float | None, spec: str, scale: float = 1.0, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value * scale:{spec}}{suffix}"


def _print_scores(trace: str, r: EvalReport) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console() if Console().is_terminal else Console(width=130)
    scored = int(r.scored.sum())
    table = Table(
        title=f"{trace}: {r.target} predictions, {scored} jobs scored after {r.warmup_jobs} warm-up "
        f"(refit before each of {r.chunks - 1} parts)",
        title_justify="left",
        caption="MAE = mean absolute error; MdAPE = median absolute % error; within 2× = truth/2 ≤ prediction ≤ 2×truth; "
        "under = predicted below the truth",
        caption_justify="left",
    )
    for col in ("predictor", "coverage", f"MAE {r.unit}", "MdAPE", "within 2×", "under", "fit s"):
        table.add_column(col, justify="left" if col == "predictor" else "right", no_wrap=True)
    maes = [s.mae for s in r.scores if s.mae is not None]
    for s in r.scores:
        best = s.mae is not None and s.mae == min(maes)
        mae = _fmt(s.mae, ",.0f" if r.unit == "s" else ".2f")
        table.add_row(
            s.predictor + (" ← best MAE" if best else ""), _fmt(s.coverage, ".0f", 100, " %"), mae,
            _fmt(s.mdape_pct, ".0f", 1, " %"), _fmt(s.within_2x, ".0f", 100, " %"),
            _fmt(s.under, ".1f", 100, " %"), f"{s.fit_s:.1f}", style="bold green" if best else None,
        )  # fmt: skip
    console.print(table)
    for n in r.notes:
        typer.echo(f"note: {n}")


def _print_schedule(trace: str, s: ScheduleReport) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console() if Console().is_terminal else Console(width=150)
    variants = [e for e in ("oracle", "predicted", "limit") if any(r.estimates == e for r in s.runs)]
    load = f", arrivals ×{s.load_factor:g} denser" if s.load_factor != 1.0 else ""
    table = Table(
        title=f"{trace}: {s.jobs} jobs on {s.cluster}{load}; predictions from {s.predictor}",
        title_justify="left",
        caption="JCT = mean job completion time; recovered = share of the oracle's mean-JCT gain over "
        "fifo+none that the same policy gets with these estimates",
        caption_justify="left",
    )
    table.add_column("policy", no_wrap=True)
    for e in variants:
        table.add_column(f"JCT h {e}", justify="right")
    for e in variants:
        table.add_column(f"span h {e}", justify="right")
    for e in variants[1:]:
        table.add_column(f"recovered {e}", justify="right")
    runs = {(r.policy, r.estimates): r for r in s.runs}
    for p in dict.fromkeys(r.policy for r in s.runs):
        cells = [f"{p}+{s.backfill}"]
        cells += [f"{runs[p, e].mean_jct_s / 3600:.3f}" for e in variants]
        cells += [f"{runs[p, e].makespan_s / 3600:.2f}" for e in variants]
        cells += [_fmt(s.recovered[p].get(e), ".0f", 100, " %") for e in variants[1:]]
        table.add_row(*cells)
    b = s.baseline
    table.add_row("fifo+none (baseline)", *[f"{b.mean_jct_s / 3600:.3f}"] * len(variants),
                  *[f"{b.makespan_s / 3600:.2f}"] * len(variants), *[""] * (len(variants) - 1), style="yellow")  # fmt: skip
    console.print(table)
    for e, share in s.best.items():
        typer.echo(
            f"best policy with {e} durations: {_fmt(share, '.0f', 100, ' %')} of the oracle's mean-JCT gain over FIFO"
        )
    for n in s.notes:
        typer.echo(f"note: {n}")

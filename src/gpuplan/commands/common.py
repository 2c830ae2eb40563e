"""CLI helpers shared by cli.py and the command modules in commands/ (which import this, never cli.py).

Options every command spells the same way, reading a trace with its warnings on stderr, the one rule
for the cluster and for jobs that never fit, `--predict` models, per-job schedules in `--json`, and
gpuplan's errors as one line on stderr.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuplan.cluster import DEFAULT_CLUSTER  # re-exported: the rule of cluster_for below
from gpuplan.errors import GpuplanError

if TYPE_CHECKING:
    from gpuplan.model import ClusterSpec, Job
    from gpuplan.sim.result import SimResult
    from gpuplan.traces import TraceResult

__all__ = [
    "DEFAULT_CLUSTER",
    "ClusterOpt",
    "DaskOpt",
    "JsonOpt",
    "PredictOpt",
    "ScheduleOutOpt",
    "TraceClusterOpt",
    "WorkersOpt",
    "apply_predictions",
    "batch_gc",
    "cli_errors",
    "cluster_for",
    "fitting_jobs",
    "load_jobs",
    "load_trace",
    "parse_names",
    "parse_partitions",
    "parse_specs",
    "runnable_jobs",
    "schedule_json",
]

ClusterOpt = Annotated[
    str, typer.Option("--cluster", "-c", help="Preset name (see `gpuplan clusters`) or a cluster .toml file.")
]
TraceClusterOpt = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        "-c",
        help="Preset name or cluster .toml file; default: the trace's own cluster (SWF, Alibaba), else 8xA100-80GB.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
ScheduleOutOpt = Annotated[
    Path | None,
    typer.Option(
        "--schedule-out",
        help="Write every job's start, end and GPUs as JSONL (one row per job per run); --json then leaves them out.",
    ),
]
WorkersOpt = Annotated[
    int,
    typer.Option(
        "--workers", help="Run the simulations on N local processes at once (1: one after the other, here)."
    ),
]
DaskOpt = Annotated[
    str | None,
    typer.Option(
        "--dask",
        help="Run the simulations on the Dask scheduler at ADDRESS (tcp://host:8786); each trace goes once to each worker.",
    ),
]
PredictOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--predict",
        help="A model from `gpuplan predict fit` (repeat for duration and memory): policies use its predictions.",
    ),
]


def apply_predictions(jobs: list[Job], models: Sequence[Path] | None) -> list[Job]:
    """Jobs whose est_duration_s / est_mem_gb come from the given model files (in order)."""
    if not models:
        return jobs
    from gpuplan.predict import apply_model

    for model in models:
        jobs = apply_model(jobs, model)
    return jobs


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn gpuplan's own errors into one line on stderr and exit status 2."""
    try:
        yield
    except GpuplanError as e:
        typer.echo(f"gpuplan: error: {e}", err=True)
        raise typer.Exit(2) from None


@contextmanager
def batch_gc() -> Iterator[None]:
    """The cyclic garbage collector off for one batch command (`simulate`), on again after it.

    Such a command builds millions of objects that live until it ends (jobs, records) and no
    reference cycles worth collecting, so every collection is a scan of the whole heap that frees
    nothing: with the collector on, the first collections after a read or a pass alone scan millions of
    objects. One policy for the whole command, instead of each phase turning the collector off for
    itself; long-running commands (agent, serve) keep it on.

    On the way out the objects made meanwhile are frozen (`gc.freeze`: never scanned again; freed by
    their reference counts as ever) before the collector is on again: else the first collection
    after it, and the one at exit, would scan them all (about a second after a million-job pass)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was:
            gc.enable()


def parse_names(text: str, valid: list[str], kind: str, all_names: list[str] | None = None) -> list[str]:
    """Comma-separated names, each one of `valid`; "all" means `all_names` (default: every valid name)."""
    from gpuplan.errors import UnknownNameError

    if text.strip() == "all":
        return list(valid if all_names is None else all_names)
    names = [t.strip() for t in text.split(",") if t.strip()]
    for n in names:
        if n not in valid:
            raise UnknownNameError(kind, n, [*valid, "all"])
    if not names:
        raise UnknownNameError(kind, text, [*valid, "all"])
    return names


def parse_partitions(partition: list[str] | None) -> tuple[str, ...]:
    """Slurm partitions from repeated and comma-separated `--partition` options (none: every one)."""
    return tuple(p.strip() for item in partition or [] for p in item.split(",") if p.strip())


def parse_specs(text: str, make: Callable[[str], Any], kind: str, all_names: list[str]) -> list[str]:
    """Comma-separated seam specs (`las:quantum=60,sjf`; core/params.py `split_specs`), each built once
    by `make` (`get_policy`, `get_backfill`) to check it, returned canonical; "all" means `all_names`.

    Raises:
        UnknownNameError, SpecError: an unknown name, parameter or a bad value (the message lists the
            valid ones).
    """
    from gpuplan.core.params import split_specs
    from gpuplan.errors import UnknownNameError

    if text.strip() == "all":
        return list(all_names)
    specs = [make(s).spec for s in split_specs(text)]
    if not specs:
        raise UnknownNameError(kind, text, [*all_names, "all"])
    return list(dict.fromkeys(specs))


def load_jobs(
    trace: Path, fmt: str | None, column_map: str | None, skip_bad: bool, time_unit: str = "s"
) -> list[Job]:
    return load_trace(trace, fmt, column_map, skip_bad, time_unit).jobs


def load_trace(
    trace: Path, fmt: str | None, column_map: str | None, skip_bad: bool, time_unit: str = "s"
) -> TraceResult:
    """Read a trace; its warnings, skipped rows and censoring notes go to stderr."""
    from gpuplan.traces import ReadOptions, parse_column_map, parse_time_unit, read_trace

    opts = ReadOptions(
        column_map=parse_column_map(column_map) if column_map else {},
        time_unit=parse_time_unit(time_unit),
        skip_bad=skip_bad,
    )
    result = read_trace(trace, fmt, opts)
    for w in result.warnings:
        typer.echo(f"gpuplan: warning: {w}", err=True)
    for c in result.censored:
        typer.echo(f"gpuplan: censored: {c}", err=True)
    if result.skipped:
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(result.skipped.items()))
        typer.echo(f"gpuplan: skipped {sum(result.skipped.values())} bad row(s): {reasons}", err=True)
    return result


def cluster_for(cluster: str | None, result: TraceResult, sharing: bool | None = None) -> ClusterSpec:
    """The one rule of every command: --cluster when given, else the cluster the trace describes (SWF
    header, Alibaba node list, a cluster file beside a converted trace), else DEFAULT_CLUSTER with a
    warning on stderr. The spec's `origin` says which ("option", "trace", "default")."""
    from dataclasses import replace

    from gpuplan.cluster import load_cluster

    if cluster is not None:
        return replace(load_cluster(cluster, sharing=sharing), origin="option")
    if result.cluster is None:
        spec = replace(load_cluster(DEFAULT_CLUSTER, sharing=sharing), origin="default")
        typer.echo(
            f"gpuplan: warning: {result.source or 'the trace'} does not describe its cluster: using the "
            f"default {DEFAULT_CLUSTER} ({spec.describe()}); pass --cluster PRESET or a .toml file",
            err=True,
        )
        return spec
    spec = replace(result.cluster, origin="trace")
    if sharing is not None and sharing != spec.sharing:
        spec = replace(spec, sharing=sharing)
    typer.echo(f"gpuplan: using the trace's own cluster: {spec.describe()}", err=True)
    return spec


def fitting_jobs(jobs: list[Job], spec: ClusterSpec, oracle: bool = False, span: bool = True) -> list[Job]:
    """The jobs that can ever start on `spec`; the others are left out with one warning on stderr
    (the same rule in every command). With `span` (default), a job wider than the largest node may
    span nodes (it ran that way where it came from); a note on stderr says how many."""
    from gpuplan.sim.fits import allow_spanning, never_fit_warning, split_never_fitting

    if span:
        jobs, n = allow_spanning(jobs, spec)
        if n:
            typer.echo(
                f"gpuplan: {n} job(s) ask for more GPUs than the largest node has ({spec.max_node_gpus}): "
                "they may span nodes (--no-span leaves them out)",
                err=True,
            )
    ok, never = split_never_fitting(jobs, spec, oracle)
    if never and not ok:
        from gpuplan.errors import JobNeverFitsError

        raise JobNeverFitsError(f"no job can ever start: {never_fit_warning(never, len(jobs), spec)}")
    if never:
        typer.echo(f"gpuplan: warning: {never_fit_warning(never, len(jobs), spec)}", err=True)
    return ok


def schedule_json(results: Sequence[SimResult], schedule_out: Path | None) -> list[dict[str, Any]]:
    """Per run, what `--json` says of its per-job schedule: the rows inline, or where they went.

    With `schedule_out` every run's rows go to that JSONL file; without it they go inline unless there
    are more than INLINE_MAX_ROWS in all (then a note on stderr names --schedule-out)."""
    from gpuplan.sim.schedule_io import INLINE_MAX_ROWS, inline_schedules, schedule_rows, write_schedule_jsonl

    if schedule_out is not None:
        n = write_schedule_jsonl(results, schedule_out)
        typer.echo(f"gpuplan: schedule: {n} job rows written to {schedule_out}", err=True)
        return [{"schedule": None, "schedule_file": str(schedule_out)} for _ in results]
    if inline_schedules(results):
        return [{"schedule": schedule_rows(r)} for r in results]
    total = sum(len(r.records) for r in results)
    typer.echo(
        f"gpuplan: per-job schedules left out of --json ({total} job rows > {INLINE_MAX_ROWS}): "
        "write them with --schedule-out FILE",
        err=True,
    )
    return [{"schedule": None} for _ in results]


def runnable_jobs(jobs: list[Job], what: str) -> list[Job]:
    """Jobs with a known duration; the others (pending, never started) are left out of the `what`
    with one line on stderr (the same rule in simulate and plan)."""
    runnable = [j for j in jobs if j.duration_s is not None]
    if len(runnable) < len(jobs):
        typer.echo(
            f"gpuplan: {len(jobs) - len(runnable)} of {len(jobs)} jobs have no duration (never ran): "
            f"left out of the {what}",
            err=True,
        )
    return runnable

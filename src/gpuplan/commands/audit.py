"""`gpuplan audit TRACE`: the audit of a job history (docs/audit.md).

Registered by cli.py as `app.command(name="audit")(audit)`. Heavy imports happen inside the command.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from gpuplan.model import ClusterSpec, Job
    from gpuplan.traces import TraceResult

__all__ = ["DEFAULT_SIM_BUDGET_S", "audit"]

DEFAULT_SIM_BUDGET_S = 5.0
"""Seconds the what-if may spend simulating by default, so an audit of 10^4 jobs stays within ~10 s."""


def audit(
    trace: Annotated[Path, typer.Argument(help="Job history: any trace format gpuplan reads (see docs/formats.md).")],
    cluster: Annotated[str | None, typer.Option("--cluster", "-c", help="Preset name or cluster .toml; default: the cluster the trace describes.")] = None,
    fmt: Annotated[str | None, typer.Option("--format", help="Trace format; detected when omitted.")] = None,
    column_map: Annotated[str | None, typer.Option("--map", help="Column map for foreign CSVs: submit=COL,duration=COL,gpus=COL,...")] = None,
    time_unit: Annotated[str, typer.Option("--time-unit", help="Unit of a foreign CSV's times: s, ms, min, h, or per field.")] = "s",
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Skip invalid rows and report how many, instead of stopping.")] = False,
    top: Annotated[int, typer.Option("--top", min=1, help="How many users and queues to list.")] = 10,
    oracle: Annotated[bool, typer.Option("--oracle", help="What-if policies see the true durations (optimistic; every output says so).")] = False,
    sim_budget: Annotated[float, typer.Option("--sim-budget", min=0.0, help="Seconds the what-if may spend simulating; 0: no limit.")] = DEFAULT_SIM_BUDGET_S,
    out: Annotated[Path | None, typer.Option("--out", help="Write DIR/audit.html and DIR/audit.json.")] = None,
    predict: Annotated[list[Path] | None, typer.Option("--predict", help="A model from `gpuplan predict fit` (repeatable): the what-if's policies use its predictions.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the audit as one JSON object on stdout.")] = False,
) -> None:  # fmt: skip
    """Audit a job history: counts, distributions, the profile matrix, the article's classes, top users
    and queues, what the cluster achieved, and the GPU-hours the best policy would have freed."""
    from gpuplan.commands.common import apply_predictions
    from gpuplan.commands.common import cli_errors as _errors
    from gpuplan.commands.common import cluster_for as _cluster_for

    with _errors():
        from gpuplan.cluster import load_cluster
        from gpuplan.profile import audit_jobs
        from gpuplan.progress import LazyProgress

        if cluster is not None:
            load_cluster(cluster)  # a bad --cluster fails before a long read
        result = _read(trace, fmt, column_map, time_unit, skip_bad, quiet=as_json)
        _say_read(result)
        jobs = apply_predictions(result.jobs, predict)
        spec = _cluster_for(cluster, result)
        _warn_never_fitting(jobs, spec, oracle)
        runs = sum(1 for j in jobs if j.duration_s is not None) * 8
        with LazyProgress(runs, "simulating", enabled=not as_json) as bar:
            report = audit_jobs(
                jobs, spec, top=top, oracle=oracle, budget_s=sim_budget or None,
                progress=lambda n, what: bar.advance(n, what),
            )  # fmt: skip
        data = {"trace": _trace_dict(trace, result, spec.origin), **report.as_dict()}
        text = json.dumps(data, indent=2, allow_nan=False)
        html_path = _write(out, data, text, trace, spec) if out is not None else None
        if as_json:
            typer.echo(text)
            return
        _print(data)
        if html_path is not None:
            typer.echo(f"report: {html_path}")


# --------------------------------------------------------------------------- reading


def _read(
    trace: Path, fmt: str | None, column_map: str | None, time_unit: str, skip_bad: bool, quiet: bool
) -> TraceResult:
    from gpuplan.traces import ReadOptions, parse_column_map, parse_time_unit, read_trace

    opts = ReadOptions(
        column_map=parse_column_map(column_map) if column_map else {},
        time_unit=parse_time_unit(time_unit),
        skip_bad=skip_bad,
    )
    with _status_after(1.0, f"reading {trace.name}", enabled=not quiet):
        return read_trace(trace, fmt, opts)


@contextmanager
def _status_after(delay_s: float, text: str, enabled: bool = True) -> Iterator[None]:
    """A spinner on stderr, shown only if the work is still running after `delay_s` (a read has no
    progress hook, so a timer starts it) and only on a terminal."""
    from rich.console import Console

    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield
        return
    lock = threading.Lock()
    state: dict[str, Any] = {"closed": False, "status": None}

    def start() -> None:
        with lock:
            if not state["closed"]:
                state["status"] = console.status(text)
                state["status"].start()

    timer = threading.Timer(delay_s, start)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["closed"] = True
            if state["status"] is not None:
                state["status"].stop()


def _say_read(result: TraceResult) -> None:
    """Warnings, skipped rows and what the trace censors, on stderr."""
    for w in result.warnings:
        typer.echo(f"gpuplan: warning: {w}", err=True)
    if result.skipped:
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(result.skipped.items()))
        typer.echo(f"gpuplan: skipped {result.skipped_total} bad row(s): {reasons}", err=True)
    for note in result.censored:
        typer.echo(f"gpuplan: censored: {note}", err=True)


def _warn_never_fitting(jobs: list[Job], spec: ClusterSpec, oracle: bool) -> None:
    """The what-if leaves out jobs that never fit the cluster; say so on stderr, as every command does."""
    from gpuplan.sim.fits import never_fit_warning, split_never_fitting

    ran = [j for j in jobs if j.duration_s is not None]
    _, never = split_never_fitting(ran, spec, oracle)
    if never:
        typer.echo(f"gpuplan: warning: {never_fit_warning(never, len(ran), spec)}", err=True)


def _trace_dict(trace: Path, result: TraceResult, cluster_origin: str) -> dict[str, Any]:
    return {
        "path": str(trace),
        "format": result.format,
        "jobs": len(result.jobs),
        "skipped": dict(result.skipped),
        "skipped_total": result.skipped_total,
        "warnings": list(result.warnings),
        "censored": list(result.censored),
        "missing_fields": list(result.missing_fields),
        "cluster_source": cluster_origin,
    }


def _write(out: Path, data: dict[str, Any], text: str, trace: Path, spec: ClusterSpec) -> Path:
    from gpuplan.errors import GpuplanError
    from gpuplan.report.audit_html import write_audit

    subtitle = f"{trace.name}: {data['jobs']:,} jobs on {spec.describe()}"
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "audit.json").write_text(text + "\n", encoding="utf-8")
        return write_audit(
            data, out / "audit.html", title="gpuplan: audit of a job history", subtitle=subtitle
        )
    except OSError as e:
        raise GpuplanError(
            f"--out {out}: cannot write the report ({e.strerror or e}); give a writable folder"
        ) from e


# --------------------------------------------------------------------------- terminal


def _print(data: dict[str, Any]) -> None:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=150)
    t = data["trace"]
    console.print(
        f"[bold]audit of {t['path']}[/] ({t['format']}): {data['jobs']:,} jobs on {data['cluster']['describe']}"
    )
    for part in (_states, _distributions, _matrix, _articles, _rankings, _achieved, _what_if):
        part(console, data)
    notes = [
        *data["notes"],
        *((data["achieved"] or {}).get("notes", [])),
        *((data["what_if"] or {}).get("notes", [])),
    ]
    for n in notes:
        console.print(f"note: {n}", markup=False, highlight=False)


def _table(title: str, columns: list[str]):  # type: ignore[no-untyped-def]
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    return table


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def _num(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:,.{digits}f}"


def _states(console: Console, data: dict[str, Any]) -> None:
    table = _table("jobs by state (meta state)", ["state", "jobs", "share"])
    total = data["jobs"] or 1
    for state, n in data["states"].items():
        table.add_row(state, f"{n:,}", _pct(n / total))
    console.print(table)


def _distributions(console: Console, data: dict[str, Any]) -> None:
    from gpuplan.report.audit_html import duration_text

    names = {"duration_s": "duration", "gpus": "GPUs", "mem_gb": "GPU memory GB", "gpu_hours": "GPU-hours"}
    table = _table("distributions (per job)", ["", "count", "min", "p50", "p90", "p99", "max", "mean"])
    for key, d in data["distributions"].items():
        fmt = duration_text if key == "duration_s" else (lambda v: _num(v, 2))
        table.add_row(
            names.get(key, key),
            f"{d['count']:,}",
            *(fmt(d[k]) for k in ("min", "p50", "p90", "p99", "max", "mean")),
        )
    console.print(table)


def _matrix(console: Console, data: dict[str, Any]) -> None:
    m = data["matrix"]
    b = m["memory_basis"]
    title = (
        f"profile matrix: jobs (share of GPU-hours); memory low < {b['low_below_gb']:g} GB ≤ moderate ≤ "
        f"{b['high_above_gb']:g} GB < high ({b['kind']})"
    )
    table = _table(title, ["duration · memory", *(f"{g} GPU" for g in m["gpu_classes"])])
    cells = {(c["duration"], c["memory"], c["gpus"]): c for c in m["cells"]}
    for d in m["duration_classes"]:
        for mem in m["memory_classes"]:
            row = [cells.get((d, mem, g)) for g in m["gpu_classes"]]
            if any(row):
                table.add_row(
                    f"{d} · {mem}",
                    *(f"{c['jobs']:,} ({_pct(c['gpu_hour_share'])})" if c else "" for c in row),
                )
    console.print(table)


def _articles(console: Console, data: dict[str, Any]) -> None:
    table = _table(
        "the article's classes (true duration and memory)", ["class", "jobs", "jobs %", "GPU-h", "GPU-h %"]
    )
    for s in data["article_classes"]:
        table.add_row(
            s["name"], f"{s['jobs']:,}", _pct(s["job_share"]), _num(s["gpu_hours"]), _pct(s["gpu_hour_share"])
        )
    console.print(table)


def _rankings(console: Console, data: dict[str, Any]) -> None:
    for key, what in (("top_users", "user"), ("top_queues", "queue")):
        ranking = data[key]
        if not ranking["top"]:
            continue
        table = _table(
            f"top {what}s by GPU-hours (of {ranking['distinct']:,})", [what, "jobs", "GPU-h", "GPU-h %"]
        )
        for s in ranking["top"]:
            table.add_row(s["name"], f"{s['jobs']:,}", _num(s["gpu_hours"]), _pct(s["gpu_hour_share"]))
        console.print(table)


def _achieved(console: Console, data: dict[str, Any]) -> None:
    from gpuplan.report.audit_html import duration_text

    a = data["achieved"]
    if a is None:
        return
    table = _table("what the cluster achieved (from start/end times)", ["", "value"])
    d = a["queue_delay_s"]
    table.add_row("span of the trace", duration_text(a["makespan_s"]))
    table.add_row("utilization (GPUs held / cluster GPUs)", _pct(a["utilization"]))
    table.add_row("GPUs held at the peak", f"{a['peak_allocated_gpus']:,}")
    table.add_row(
        "queueing delay p50 / p90 / p99", " / ".join(duration_text(d[k]) for k in ("p50", "p90", "p99"))
    )
    idle = a["idle_while_waiting"]
    if idle is not None:
        table.add_row("idle GPU-h while jobs waited", _num(idle["total_gpu_h"]))
        table.add_row("  a waiting job fitted (policy, reservations)", _num(idle["usable_gpu_h"]))
        table.add_row("  fragmentation (upper estimate, approx.)", _num(idle["fragmentation_gpu_h"]))
        table.add_row("  too few idle GPUs for any waiting job", _num(idle["too_few_gpu_h"]))
        if idle.get("never_started_fit_gpu_h"):
            table.add_row("  only a job that never started fitted", _num(idle["never_started_fit_gpu_h"]))
    console.print(table)


def _what_if(console: Console, data: dict[str, Any]) -> None:
    from gpuplan.report.audit_html import duration_text

    w = data["what_if"]
    if w is None:
        return
    if w["error"]:
        console.print(f"what-if: {w['error']}", markup=False)
        return
    oracle = " (ORACLE)" if w["oracle"] else ""
    table = _table(
        f"what-if: {w['jobs']:,} jobs replayed, EASY backfill{oracle}",
        ["policy", "makespan", "util %", "mean wait", "mean JCT"],
    )
    for r in w["runs"]:
        label = f"{r['policy']}+{r['backfill']}"
        mark = " ← best" if label == w["best"] else (" ← FIFO" if label == w["fifo"] else "")
        style = "bold green" if mark == " ← best" else ("yellow" if mark else None)
        table.add_row(label + mark, duration_text(r["makespan_s"]), _num(100 * r["utilization"]),
                      duration_text(r["mean_wait_s"]), duration_text(r["mean_jct_s"]), style=style)  # fmt: skip
    console.print(table)
    if w.get("no_winner"):
        line = f"no best policy: {w['no_winner']}"
    elif w["time_saved_s"] is not None and w["time_saved_s"] > 0:
        line = (
            f"best {w['best']}: {duration_text(w['time_saved_s'])} sooner than {w['fifo']} "
            f"→ about {_num(w['gpu_hours_freed'])} GPU-hours freed on {data['cluster']['gpus']:,} GPUs"
        )
    else:
        line = f"no simulated policy finishes sooner than {w['fifo']}: no GPU-hours freed"
    console.print(line, markup=False)

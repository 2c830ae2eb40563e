"""`gpuplan sweep GRID.toml`: traces x predictors x policies x backfills x placers, one table, one report.

Registered by cli.py as `app.command(name="sweep")`. The grid file (docs/sweep.md):

    cluster = "4x8xA100-80GB"        # preset or .toml (relative to the grid file); default: each trace's own
    traces = ["week1.csv"]           # trace files, relative to the grid file
    policies = ["fifo", "sjf"]       # or "all"
    backfills = ["easy"]             # or "all"
    placers = ["first-fit"]          # default ["first-fit"]
    predictors = ["trace"]           # trace | oracle | history | a model file from `gpuplan predict fit`
    seeds = [0, 1, 2]                # one synthetic trace per seed and [[synth]] table
    [[synth]]
    kind = "poisson"                 # synth_poisson's parameters: jobs, load, tail, gpu_mix ...
    jobs = 2000
    load = 0.9

Every run goes through `sim.sweep.run_all`: here, on `--workers N` processes, or on `--dask ADDRESS`.
"""

from __future__ import annotations

import csv
import json
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuplan.commands.common import DaskOpt, JsonOpt, WorkersOpt
from gpuplan.errors import GpuplanError

if TYPE_CHECKING:
    from gpuplan.model import ClusterSpec, Job
    from gpuplan.sim.result import SimResult
    from gpuplan.sim.sweep import Run

__all__ = ["TABLE_COLUMNS", "Grid", "load_grid", "run_grid", "sweep"]

_KEYS = {"cluster", "traces", "synth", "policies", "backfills", "placers", "predictors", "seeds"}
_SYNTH_KEYS = {"kind", "jobs", "load", "rate_per_h", "tail", "gpu_mix"}
TABLE_COLUMNS = (
    "trace", "seed", "predictor", "policy", "backfill", "placer", "jobs", "makespan_s", "utilization",
    "mean_jct_s", "p95_jct_s", "mean_wait_s", "mean_bounded_slowdown", "bound_ratio", "preemptions",
    "wasted_gpu_hours",
)  # fmt: skip


@dataclass
class Grid:
    """A parsed grid file (paths already resolved against its folder)."""

    path: Path
    cluster: str | None = None
    traces: list[Path] = field(default_factory=list)
    synth: list[dict[str, Any]] = field(default_factory=list)
    policies: list[str] = field(default_factory=lambda: ["fifo"])
    backfills: list[str] = field(default_factory=lambda: ["easy"])
    placers: list[str] = field(default_factory=lambda: ["first-fit"])
    predictors: list[str] = field(default_factory=lambda: ["trace"])
    seeds: list[int] = field(default_factory=lambda: [0])


def _bad(grid: Path, key: str, why: str) -> GpuplanError:
    return GpuplanError(f"{grid}: {key}: {why}")


def _names(path: Path, data: dict[str, Any], key: str, default: list[str]) -> list[str]:
    value = data.get(key, default)
    if value == "all":
        return ["all"]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise _bad(path, key, f"give a list of names, e.g. {key} = {default!r}")
    return value


def load_grid(path: Path) -> Grid:
    """Read a grid file; a bad key or value is one error naming the file, the key and the fix.

    Raises:
        GpuplanError: unreadable TOML, an unknown key, a value of the wrong kind, or no trace at all.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise GpuplanError(f"{path}: cannot read the grid file ({e.strerror})") from None
    except tomllib.TOMLDecodeError as e:
        raise GpuplanError(f"{path}: not valid TOML ({e}); see docs/sweep.md") from None
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise _bad(path, unknown[0], f"unknown key; valid keys: {', '.join(sorted(_KEYS))}")
    base = path.parent
    grid = Grid(path)
    if "cluster" in data:
        if not isinstance(data["cluster"], str):
            raise _bad(path, "cluster", 'give a preset name or a .toml file, e.g. cluster = "4x8xA100-80GB"')
        c = data["cluster"]
        grid.cluster = str(base / c) if c.endswith(".toml") else c
    grid.traces = [base / t for t in _names(path, data, "traces", [])] if "traces" in data else []
    synth = data.get("synth", [])
    if not isinstance(synth, list) or not all(isinstance(s, dict) for s in synth):
        raise _bad(path, "synth", 'give [[synth]] tables, e.g. [[synth]] kind = "poisson" jobs = 1000')
    for s in synth:
        bad = sorted(set(s) - _SYNTH_KEYS)
        if bad or s.get("kind", "poisson") != "poisson":
            why = f"unknown key {bad[0]!r}" if bad else f"kind {s.get('kind')!r}"
            raise _bad(
                path, "synth", f'{why}; valid: kind = "poisson", {", ".join(sorted(_SYNTH_KEYS - {"kind"}))}'
            )
    grid.synth = synth
    grid.policies = _names(path, data, "policies", ["fifo"])
    grid.backfills = _names(path, data, "backfills", ["easy"])
    grid.placers = _names(path, data, "placers", ["first-fit"])
    preds = _names(path, data, "predictors", ["trace"])
    grid.predictors = [p if p in ("trace", "oracle", "history") else str(base / p) for p in preds]
    seeds = data.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise _bad(path, "seeds", "give a list of integers, e.g. seeds = [0, 1, 2]")
    grid.seeds = seeds
    if not grid.traces and not grid.synth:
        raise _bad(path, "traces", 'no trace: give traces = ["FILE", ...] or a [[synth]] table')
    return grid


@dataclass(frozen=True)
class Cell:
    """One trace of the grid under one predictor: the key of its jobs in `run_all`."""

    trace: str
    seed: int | None
    predictor: str


def _traces(grid: Grid) -> list[tuple[str, int | None, list[Job], ClusterSpec]]:
    from gpuplan.cluster import load_cluster
    from gpuplan.commands.common import cluster_for, fitting_jobs, load_trace, runnable_jobs
    from gpuplan.synth import synth_poisson

    out: list[tuple[str, int | None, list[Job], ClusterSpec]] = []
    for t in grid.traces:
        result = load_trace(t, None, None, False)
        spec = cluster_for(grid.cluster, result)
        out.append((t.name, None, fitting_jobs(runnable_jobs(result.jobs, "sweep"), spec), spec))
    spec = load_cluster(grid.cluster or "4x8xA100-80GB")
    for k, s in enumerate(grid.synth):
        for seed in grid.seeds:
            mix = s.get("gpu_mix")
            jobs = synth_poisson(
                int(s.get("jobs", 1000)),
                seed=seed,
                load=s.get("load", 0.9 if "rate_per_h" not in s else None),
                rate_per_h=s.get("rate_per_h"),
                total_gpus=spec.total_gpus,
                tail_alpha=s.get("tail"),
                gpu_mix={int(g): float(w) for g, w in mix.items()} if isinstance(mix, dict) else None,
            )
            out.append((f"synth{k}", seed, fitting_jobs(jobs, spec), spec))
    return out


def run_grid(grid: Grid, workers: int = 1, dask: str | None = None) -> list[tuple[Cell, SimResult]]:
    """Every run of the grid, in grid order (trace, predictor, placer, policy, backfill)."""
    from gpuplan.commands.common import apply_predictions, parse_names, parse_specs
    from gpuplan.core.backfill import backfill_names, get_backfill
    from gpuplan.core.placement import placer_names
    from gpuplan.core.policies import get_policy, is_preemptive, policy_names
    from gpuplan.sim.bounds import lower_bound
    from gpuplan.sim.sweep import Run, run_all

    policies = parse_specs(",".join(grid.policies), get_policy, "policy", policy_names())
    backfills = parse_specs(",".join(grid.backfills), get_backfill, "backfill mode", backfill_names())
    placers = parse_names(",".join(grid.placers), placer_names(), "placer")
    data: dict[str, tuple[list[Job], ClusterSpec]] = {}
    runs: list[Run] = []
    cells: list[Cell] = []
    for name, seed, jobs, spec in _traces(grid):
        for pred in grid.predictors:
            cell = Cell(name, seed, pred if pred in ("trace", "oracle", "history") else Path(pred).name)
            key = f"{name}|{seed}|{pred if pred not in ('oracle', 'history') else 'trace'}"
            if key not in data:
                data[key] = (apply_predictions(jobs, [Path(pred)]) if cell.predictor == Path(pred).name
                             and pred not in ("trace", "oracle", "history") else jobs, spec)  # fmt: skip
            bound_s = lower_bound(jobs, spec).value_s
            for placer in placers:
                for p in policies:
                    for b in ["none"] if is_preemptive(p) else backfills:
                        est = "history" if pred == "history" else "trace"
                        runs.append(Run(key, p, b, placer, pred == "oracle", est, None, bound_s))
                        cells.append(cell)
    results = run_all(data, runs, workers, dask)
    return list(zip(cells, results, strict=True))


def table_rows(rows: list[tuple[Cell, SimResult]]) -> list[dict[str, Any]]:
    """One flat row per run (the CSV's and `--json`'s)."""
    out = []
    for cell, r in rows:
        m = r.metrics
        out.append({
            "trace": cell.trace, "seed": cell.seed, "predictor": cell.predictor, "policy": r.policy,
            "backfill": r.backfill, "placer": r.placer, "jobs": m.jobs, "makespan_s": m.makespan_s,
            "utilization": m.utilization, "mean_jct_s": m.mean_jct_s, "p95_jct_s": m.p95_jct_s,
            "mean_wait_s": m.mean_wait_s, "mean_bounded_slowdown": m.mean_bounded_slowdown,
            "bound_ratio": m.bound_ratio, "preemptions": m.preemptions, "wasted_gpu_hours": m.wasted_gpu_hours,
        })  # fmt: skip
    return out


def _write(rows: list[tuple[Cell, SimResult]], out: Path) -> tuple[Path, Path]:
    from gpuplan.report.html import write_report

    out.mkdir(parents=True, exist_ok=True)
    table = out / "sweep.csv"
    with table.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=TABLE_COLUMNS)
        w.writeheader()
        w.writerows(table_rows(rows))
    several = len({c for c, _ in rows}) > 1 or len({r.placer for _, r in rows}) > 1
    shown = [
        replace(r, policy=f"{r.policy} [{c.trace}{'' if c.seed is None else f'#{c.seed}'}, {c.predictor}, {r.placer}]")
        if several else r
        for c, r in rows
    ]  # fmt: skip
    report = write_report(shown, out / "report.html", title="gpuplan sweep", subtitle=f"{len(rows)} runs")
    return table, report


def sweep(
    grid_file: Annotated[Path, typer.Argument(help="The grid: a TOML file (docs/sweep.md).")],
    out: Annotated[Path, typer.Option("--out", help="Folder for sweep.csv (one row per run) and report.html.")] = Path("sweep-out"),
    workers: WorkersOpt = 1,
    dask: DaskOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Run a grid of traces x predictors x policies x backfills x placers (seeds for synthetic traces)."""
    from gpuplan.commands.common import cli_errors

    with cli_errors():
        grid = load_grid(grid_file)
        rows = run_grid(grid, workers, dask)
        table, report = _write(rows, out)
        if as_json:
            typer.echo(json.dumps(table_rows(rows), indent=1))
        else:
            typer.echo(f"{len(rows)} runs: table {table}, report {report}")

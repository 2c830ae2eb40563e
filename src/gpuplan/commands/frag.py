"""`gpuplan frag TRACE`: FGD's fragmentation experiment with gpuplan's placers (docs/fragmentation.md).

Registered by cli.py as `app.command(name="frag")(frag)`. Heavy imports happen inside the command.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["frag", "frag_pods", "parse_seeds"]


def parse_seeds(text: str) -> list[int]:
    """`42-51` or `1,2,7` (or a mix) as a list of seeds."""
    from gpuplan.errors import GpuplanError

    seeds: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part[1:]:
                lo, hi = part.split("-", 1)
                if int(hi) < int(lo):
                    raise ValueError
                seeds.extend(range(int(lo), int(hi) + 1))
            else:
                seeds.append(int(part))
    except ValueError:
        raise GpuplanError(f"--seeds: {text!r} must be integers or ranges such as 42-51 or 1,2,3") from None
    return seeds


def frag(
    trace: Annotated[Path, typer.Argument(help="Pods with CPU, memory and GPU requests (the Alibaba v2023 pods CSV, or any trace gpuplan reads).")],
    cluster: Annotated[str | None, typer.Option("--cluster", "-c", help="Preset name or cluster .toml; default: the cluster the trace describes (the Alibaba node list).")] = None,
    placer: Annotated[str | None, typer.Option("--placer", help="Comma-separated placers, with parameters if any (fgd:step=0.1), or 'all' (the default).")] = None,
    seeds: Annotated[str, typer.Option("--seeds", help="Seeds of the arrival orders: 42-51 or 1,2,3.")] = "42-51",
    arrive_to: Annotated[float, typer.Option("--arrive-to", min=0.01, max=10.0, help="Top the pods up with random draws until their GPU requests reach this share of the capacity.")] = 1.3,
    workers: Annotated[int | None, typer.Option("--workers", min=1, help="Worker processes (default: the CPUs, at most 8).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")] = False,
    report: Annotated[Path | None, typer.Option("--report", help="Write DIR/frag.html: the curves of every placer.")] = None,
) -> None:  # fmt: skip
    """Place pods that never leave, in random arrival orders, with each placer; report the share of the
    GPU capacity each allocates as arrivals grow (FGD's experiment, USENIX ATC '23)."""
    from gpuplan.commands.common import cli_errors as _errors
    from gpuplan.commands.common import parse_specs

    with _errors():
        from gpuplan.core.placement import get_placer, placer_names
        from gpuplan.sim.fragexp import frag_experiment

        all_placers = [p for p in placer_names() if p != "pack"]  # pack is best-fit's alias
        names = parse_specs(placer, get_placer, "placer", all_placers) if placer else all_placers
        seed_list = parse_seeds(seeds)
        jobs, spec, notes = frag_pods(trace, cluster)
        t0 = time.perf_counter()
        results = frag_experiment(jobs, spec, names, seed_list, arrive_to, workers)
        wall = time.perf_counter() - t0
        payload: dict[str, Any] = {
            "trace": str(trace),
            "cluster": spec.as_dict(),
            "pods": len(jobs),
            "seeds": seed_list,
            "arrive_to": arrive_to,
            "wall_s": round(wall, 3),
            "notes": notes,
            "placers": [r.as_dict(spec.total_gpus) for r in results],
        }
        if report is not None:
            from gpuplan.report.frag_html import write_frag_report

            path = write_frag_report(report, payload)
            typer.echo(f"gpuplan: report written to {path}", err=True)
        if as_json:
            typer.echo(json.dumps(payload, indent=1))
            return
        _print(payload)


def frag_pods(trace: Path, cluster: str | None) -> tuple[list[Any], Any, list[str]]:
    """The pods (CPU-only ones included) and the cluster, with sharing on and no cap on pods per GPU
    (shares decide, as in FGD's simulator); GPU memory plays no part (FGD models none)."""
    from gpuplan.commands.common import cluster_for as _cluster_for
    from gpuplan.commands.common import load_trace as _load_trace
    from gpuplan.errors import GpuplanError
    from gpuplan.traces import ReadOptions, detect_reader, read_head
    from gpuplan.traces.alibaba import AlibabaGpuReader

    notes: list[str] = []
    if trace.is_file() and isinstance(detect_reader(trace, read_head(trace)), AlibabaGpuReader):
        result = AlibabaGpuReader(cpu_pods=True).read(trace, ReadOptions())
        for w in result.warnings:
            typer.echo(f"gpuplan: warning: {w}", err=True)
    else:
        result = _load_trace(trace, None, None, False)
    spec = _cluster_for(cluster, result, None)
    jobs = [dataclasses.replace(j, mem_gb=None, est_mem_gb=None) for j in result.jobs]
    if not jobs:
        raise GpuplanError(f"{trace}: no pods to place")
    most = max(spec.max_jobs_per_gpu, 1000)
    spec = dataclasses.replace(spec, sharing=True, max_jobs_per_gpu=most)
    if not spec.has_host_resources:
        notes.append("the cluster gives no CPU or host memory per node: only GPUs constrain placement")
    return jobs, spec, notes


def _print(payload: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"GPU fragmentation experiment: {payload['cluster']['describe']}")
    for col in (
        "placer",
        "alloc % at 100 %",
        f"alloc % at {100 * payload['arrive_to']:.0f} %",
        "GPUs left",
        "failed pods",
        "cpu s",
    ):
        table.add_column(col, justify="right" if col != "placer" else "left")
    for p in sorted(payload["placers"], key=lambda p: -p["alloc_ratio_at_130"]):
        table.add_row(
            p["placer"],
            f"{100 * p['alloc_ratio_at_100']:.2f}",
            f"{100 * p['alloc_ratio_at_130']:.2f}",
            f"{p['unallocated_gpus_at_130']:.0f}",
            f"{p['failed_pods']:.1f}",
            f"{p['cpu_s']:.1f}",
        )
    console.print(table)
    for p in payload["placers"]:
        pts = p["curve"][:: max(1, len(p["curve"]) // 13)]
        curve = " ".join(f"{100 * c['arrived']:.0f}:{100 * c['allocated']:.1f}" for c in pts)
        console.print(f"{p['placer']} curve (arrived %:allocated %): {curve}", highlight=False)
    console.print(
        f"{payload['pods']} pods, seeds {payload['seeds'][0]}..{payload['seeds'][-1]} ({len(payload['seeds'])}), "
        f"{payload['wall_s']:.1f} s wall",
        highlight=False,
    )
    for n in payload["notes"]:
        console.print(f"note: {n}", highlight=False)

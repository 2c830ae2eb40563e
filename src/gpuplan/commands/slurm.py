"""`gpuplan slurm status|history|plan|apply|reset|watch`: gpuplan on a live Slurm cluster (docs/slurm.md).

Slurm's commands come from PATH and honour SLURM_CONF. Registered by cli.py as the `slurm` sub-app.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from gpuplan.slurm.client import SlurmClient
    from gpuplan.slurm.planner import LiveState, QueuePlan

__all__ = ["slurm_app"]

slurm_app = typer.Typer(
    help="Read a live Slurm queue and history, plan the pending jobs' order, apply it and undo it.",
    no_args_is_help=True,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
PartitionOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--partition", "-p", help="Only this partition (repeatable or comma-separated); default: all."
    ),
]
PolicyOpt = Annotated[
    str,
    typer.Option(
        "--policy", help="Ordering policy (see `gpuplan policies`), or 'best': the best simulated one."
    ),
]
SearchOpt = Annotated[
    float,
    typer.Option(
        "--search", min=0.0, help="Seconds of local search (swaps, moves) on top of the policy's order."
    ),
]
PredictOpt = Annotated[
    Path | None,
    typer.Option(
        "--predict", help="A duration model from `gpuplan predict fit`: used instead of the time limits."
    ),
]
StateOpt = Annotated[
    Path | None,
    typer.Option(
        "--state",
        help="File recording the previous priorities (default: ~/.local/state/gpuplan/slurm-applied.json).",
    ),
]
ModeOpt = Annotated[
    str,
    typer.Option(
        "--mode", help="priority: scontrol update Priority=; nice: Nice= (works without privileges)."
    ),
]


def _parts(partition: list[str] | None) -> tuple[str, ...]:
    return tuple(p.strip() for item in partition or [] for p in item.split(",") if p.strip())


def _client() -> SlurmClient:
    from gpuplan.slurm.client import SlurmClient

    return SlurmClient()


def _emit(data: dict[str, Any]) -> None:
    from gpuplan.optimize.planfile import json_safe

    typer.echo(json.dumps(json_safe(data), indent=2))


def _warn(lines: list[str]) -> None:
    for w in lines:
        typer.echo(f"gpuplan: warning: {w}", err=True)


@slurm_app.command("status")
def status(partition: PartitionOpt = None, as_json: JsonOpt = False) -> None:
    """Nodes, GPUs free and used, pending and running jobs, and idle GPUs no pending job can use."""
    from gpuplan.commands.common import cli_errors as _errors

    with _errors():
        from gpuplan.slurm.client import live_state

        state = live_state(_client(), _parts(partition))
        data = _status(state)
        if as_json:
            _emit(data)
            return
        for n in data["nodes"]:
            typer.echo(f"  {n['name']:<12} {n['state']:<12} GPUs {n['gpus_used']}/{n['gpus']} used")
        typer.echo(
            f"GPUs: {data['gpus_used']} used, {data['gpus_free']} free of {data['gpus']}; jobs: {data['running']} "
            f"running, {data['pending']} pending; idle GPUs no pending job can use: {data['fragmented_gpus']}"
        )


def _status(state: LiveState) -> dict[str, Any]:
    nodes = [n for n in state.nodes if not state.partitions or not n.partitions
             or any(p in state.partitions for p in n.partitions)]  # fmt: skip
    pending = [j for j in state.jobs if j.is_pending and state.in_partitions(j) and j.gpus > 0]
    running = [j for j in state.jobs if j.is_running and state.in_partitions(j)]
    return {
        "nodes": [
            {
                "name": n.name,
                "state": n.state,
                "gpus": n.gpus,
                "gpus_used": n.gpus_used,
                "gpus_free": n.gpus_free,
            }
            for n in nodes
        ],
        "gpus": sum(n.gpus for n in nodes),
        "gpus_used": sum(n.gpus_used for n in nodes),
        "gpus_free": sum(n.gpus_free for n in nodes),
        "running": len(running),
        "pending": len([j for j in state.jobs if j.is_pending and state.in_partitions(j)]),
        "fragmented_gpus": fragmented_gpus([n.gpus_free for n in nodes], pending),
    }


def fragmented_gpus(free_by_node: list[int], pending: list[Any]) -> int:
    """Idle GPUs that no pending job's shape can use: on nodes with fewer free GPUs than the smallest
    single-node request, unless a multi-node job could gather them. 0 when nothing waits."""
    if not pending:
        return 0
    if any(j.num_nodes > 1 and j.gpus <= sum(free_by_node) for j in pending):
        return 0
    smallest = min(j.gpus for j in pending)
    return sum(f for f in free_by_node if 0 < f < smallest)


@slurm_app.command("history")
def history(
    since: Annotated[str, typer.Option("--since", help="Start of the window, as sacct -S takes it (2026-11-30, now-7days).")],
    until: Annotated[str, typer.Option("--until", help="End of the window (sacct -E).")] = "now",
    out: Annotated[Path | None, typer.Option("--out", help="Write the jobs as a gpuplan trace (.jsonl or .csv).")] = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Finished and running jobs from sacct, read into gpuplan's own trace format (for audit, predict fit)."""
    from gpuplan.commands.common import cli_errors as _errors

    with _errors():
        import tempfile

        from gpuplan.slurm.cluster import history_cluster
        from gpuplan.traces import ReadOptions, write_trace
        from gpuplan.traces.sacct import SacctReader

        client = _client()
        with tempfile.TemporaryDirectory(prefix="gpuplan-sacct-") as tmp:
            raw = client.write_sacct(since, Path(tmp) / "sacct.txt", until)
            result = SacctReader().read(raw, ReadOptions())
        cluster, assumed = history_cluster(client.nodes())  # the trace keeps its cluster (audit, simulate)
        result.warnings.extend(assumed)
        beside = write_trace(result.jobs, out, cluster) if out is not None else None
        data = {"jobs": len(result.jobs), "skipped": result.skipped, "warnings": result.warnings,
                "out": str(out) if out else None, "cluster": cluster.as_dict(),
                "cluster_file": str(beside) if beside else None}  # fmt: skip
        if as_json:
            _emit(data)
            return
        _warn(result.warnings)
        where = f", written to {out}" if out else " (use --out FILE to keep them)"
        if beside is not None:
            where += f" with its cluster ({cluster.describe()}) in {beside}"
        skipped = f"; left out: {result.skipped}" if result.skipped else ""
        typer.echo(f"read {len(result.jobs)} GPU jobs from sacct since {since}{where}{skipped}")


def _make_plan(client: SlurmClient, partitions: tuple[str, ...], policy: str, search: float,
               predict: Path | None, mode: str = "priority") -> tuple[LiveState, QueuePlan, list[str]]:  # fmt: skip
    from gpuplan.slurm.client import live_state
    from gpuplan.slurm.planner import plan_queue, predicted_durations
    from gpuplan.slurm.setup import setup_warnings

    state = live_state(client, partitions)
    preds = predicted_durations(state, predict)
    plan = plan_queue(state, policy=policy, search_s=search, predictions=preds)
    return state, plan, setup_warnings(state.config, mode)


def _fmt_s(v: float | None) -> str:
    return "never (a job has no time limit)" if v is None else f"{v:.0f} s"


@slurm_app.command("plan")
def plan(
    partition: PartitionOpt = None,
    policy: PolicyOpt = "best",
    search: SearchOpt = 0.0,
    predict: PredictOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The order gpuplan would run the pending jobs in, simulated from the live state, against Slurm's order."""
    from gpuplan.commands.common import cli_errors as _errors

    with _errors():
        _, p, setup = _make_plan(_client(), _parts(partition), policy, search, predict)
        if as_json:
            _emit({**p.as_dict(), "setup_warnings": setup})
            return
        _warn(setup + p.warnings)
        _print_plan(p)


def _print_plan(p: QueuePlan) -> None:
    g = p.gain()
    typer.echo(f"{len(p.order)} pending job(s), {p.running} running on {p.cluster.describe()}; "
               f"policy {p.policy}, simulated as backfill={p.backfill}")  # fmt: skip
    typer.echo(
        f"  Slurm's order : makespan {_fmt_s(p.slurm.makespan_s)}, mean wait {_fmt_s(p.slurm.mean_wait_s)}"
    )
    typer.echo(
        f"  gpuplan order : makespan {_fmt_s(p.planned.makespan_s)}, mean wait {_fmt_s(p.planned.mean_wait_s)}"
    )
    if g["makespan_s"] is not None:
        typer.echo(f"  expected gain : {100 * g['makespan_s']:.1f} % makespan, "
                   f"{100 * (g['mean_wait_s'] or 0):.1f} % mean wait")  # fmt: skip
    shown = " ".join(p.order[:20]) + (" ..." if len(p.order) > 20 else "")
    typer.echo(f"  order: {shown}")


@slurm_app.command("apply")
def apply(
    partition: PartitionOpt = None,
    policy: PolicyOpt = "best",
    search: SearchOpt = 0.0,
    predict: PredictOpt = None,
    mode: ModeOpt = "priority",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the values that would be set; change nothing.")] = False,
    state_file: StateOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Plan, then set that order with `scontrol update` (previous values recorded first; `reset` undoes it)."""
    from gpuplan.commands.common import cli_errors as _errors

    with _errors():
        from gpuplan.slurm.apply import apply_order, check_mode

        check_mode(mode)
        client = _client()
        parts = _parts(partition)
        _, p, setup = _make_plan(client, parts, policy, search, predict, mode)
        res = apply_order(
            client, p.order, mode=mode, partitions=parts, state_path=state_file, dry_run=dry_run
        )
        if as_json:
            _emit({"plan": p.as_dict(), "apply": res.as_dict(), "setup_warnings": setup})
            return
        _warn(setup + p.warnings)
        _print_plan(p)
        verb = "would set" if dry_run else "set"
        typer.echo(f"{verb} {mode} on {len(res.changed)} job(s); skipped {len(res.skipped)}"
                   + ("" if dry_run else f"; previous values in {res.state_path}"))  # fmt: skip
        for jid, why in list(res.skipped.items())[:10]:
            typer.echo(f"  skipped {jid}: {why}")


@slurm_app.command("reset")
def reset(state_file: StateOpt = None, as_json: JsonOpt = False) -> None:
    """Restore the priorities (or nice values) recorded by `apply` on the jobs still pending."""
    from gpuplan.commands.common import cli_errors as _errors

    with _errors():
        from gpuplan.slurm.apply import reset_order

        res = reset_order(_client(), state_file)
        if as_json:
            _emit(res.as_dict())
            return
        typer.echo(f"restored {res.mode} of {len(res.changed)} job(s); {len(res.skipped)} no longer pending")


@slurm_app.command("watch")
def watch(
    interval: Annotated[float, typer.Option("--interval", min=0.1, help="Seconds between looks at the queue.")] = 30.0,
    partition: PartitionOpt = None,
    policy: PolicyOpt = "best",
    predict: PredictOpt = None,
    mode: ModeOpt = "priority",
    state_file: StateOpt = None,
    iterations: Annotated[int | None, typer.Option("--iterations", min=1, help="Stop after this many looks (default: run until interrupted).")] = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Replan and reapply whenever the set of pending or running jobs changes (Ctrl-C stops)."""
    from gpuplan.commands.common import cli_errors as _errors

    with _errors():
        from gpuplan.slurm.apply import check_mode

        check_mode(mode)
        run_watch(_client(), _parts(partition), policy, predict, mode, state_file, interval, iterations,
                  as_json, time.sleep)  # fmt: skip


def run_watch(client: SlurmClient, parts: tuple[str, ...], policy: str, predict: Path | None, mode: str,
              state_file: Path | None, interval: float, iterations: int | None, as_json: bool,
              sleep: Callable[[float], None]) -> int:  # fmt: skip
    """The watch loop (sleep injected); returns how many times it applied."""
    from gpuplan.slurm.apply import apply_order

    last: frozenset[tuple[str, str]] | None = None
    applied = 0
    n = 0
    try:
        while iterations is None or n < iterations:
            if n:
                sleep(interval)
            n += 1
            sig = frozenset((q.job_id, q.state) for q in client.queue(parts))
            if sig == last:
                continue
            _, p, _ = _make_plan(client, parts, policy, 0.0, predict, mode)
            res = apply_order(client, p.order, mode=mode, partitions=parts, state_path=state_file)
            # our own changes do not alter the signature (ids and states only)
            last = frozenset((q.job_id, q.state) for q in client.queue(parts))
            applied += 1
            line = {"time_s": client.clock(), "changed": len(res.changed), "skipped": len(res.skipped),
                    "expected_makespan_s": p.planned.makespan_s, "order": p.order[:10]}  # fmt: skip
            typer.echo(json.dumps(line) if as_json else f"applied: {len(res.changed)} job(s) reordered, "
                       f"{len(res.skipped)} skipped; expected makespan {_fmt_s(p.planned.makespan_s)}")  # fmt: skip
    except KeyboardInterrupt:
        pass
    return applied

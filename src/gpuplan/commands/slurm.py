"""`gpuplan slurm status|history|plan|apply|reset|watch`: gpuplan on a live Slurm cluster (docs/slurm.md).

Slurm's commands come from PATH and honour SLURM_CONF. Registered by cli.py as the `slurm` sub-app.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuplan.commands.common import parse_partitions as _parts

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
        "--policy",
        help="Ordering policy (see `gpuplan policies`), or 'best': the best simulated one; the preemptive "
        "las, tiresias, gittins requeue running jobs (docs/slurm.md).",
    ),
]
MaxRequeuesOpt = Annotated[
    int,
    typer.Option(
        "--max-requeues",
        min=0,
        help="Preemptive policies: at most this many `scontrol requeue` per pass (a requeued job loses "
        "its work unless it checkpoints).",
    ),
]
QuantumOpt = Annotated[
    float | None,
    typer.Option(
        "--quantum-gpu-s",
        help="Preemptive policies: first level boundary in GPU-seconds (las quantum and tiresias "
        "threshold, default 3600; gittins first grid point, default 600).",
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
PlacerOpt = Annotated[
    str | None,
    typer.Option(
        "--placer",
        help="GPU placer of gpuplan's simulation (default best-fit): first-fit, best-fit (pack), spread, "
        "fgd, fgd-pack, with parameters if any (docs/fragmentation.md). Slurm places the jobs itself: the "
        "placer only shapes the forecast and so the order gpuplan plans. Not with a preemptive policy.",
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
        "--mode",
        help="site-factor (default): scontrol update SiteFactor=, every multifactor factor stays live; "
        "priority: Priority= (freezes multifactor for those jobs until reset); nice: Nice= (works "
        "without privileges).",
    ),
]
WeightOpt = Annotated[
    float,
    typer.Option(
        "--weight",
        min=0.0,
        max=1.0,
        help="Site-factor mode: 1 = the plan's exact order; below 1 each job moves only that fraction of "
        "the way from Slurm's own priority (a nudge; the output lists the jobs left out of plan order).",
    ),
]
HorizonOpt = Annotated[
    float,
    typer.Option(
        "--horizon-s",
        min=0.0,
        help="Site-factor mode: keep the order through this many seconds of age growth without a re-set.",
    ),
]


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
               predict: Path | None, mode: str = "site-factor", placer: str | None = None,
               ) -> tuple[LiveState, QueuePlan, list[str]]:  # fmt: skip
    from gpuplan.slurm.client import live_state
    from gpuplan.slurm.planner import DEFAULT_PLACER, plan_queue, predicted_durations
    from gpuplan.slurm.setup import setup_warnings

    state = live_state(client, partitions)
    preds = predicted_durations(state, predict)
    plan = plan_queue(
        state, policy=policy, search_s=search, predictions=preds, placer=placer or DEFAULT_PLACER
    )
    return state, plan, setup_warnings(state.config, mode)


def check_placer(placer: str | None, policy: str) -> str:
    """The placer spec of --placer (default best-fit); an unknown one, or one given with a preemptive
    policy (whose pass does not use it), fails before Slurm is asked.

    Raises:
        GpuplanError: as above, with the valid names.
    """
    from gpuplan.core.placement import get_placer
    from gpuplan.errors import GpuplanError
    from gpuplan.slurm.planner import DEFAULT_PLACER
    from gpuplan.slurm.preempt import is_preemptive

    spec = get_placer(placer or DEFAULT_PLACER).spec
    if placer is not None and is_preemptive(policy):
        raise GpuplanError(
            f"--placer {placer}: a preemptive policy's pass ({policy}) does not use the placer; "
            "leave --placer out, or plan with a non-preemptive policy"
        )
    return spec


def _fmt_s(v: float | None) -> str:
    return "never (a job has no time limit)" if v is None else f"{v:.0f} s"


@slurm_app.command("plan")
def plan(
    partition: PartitionOpt = None,
    policy: PolicyOpt = "best",
    search: SearchOpt = 0.0,
    predict: PredictOpt = None,
    placer: PlacerOpt = None,
    max_requeues: MaxRequeuesOpt = 1,
    quantum_gpu_s: QuantumOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The order gpuplan would run the pending jobs in, simulated from the live state, against Slurm's order."""
    from gpuplan.commands.common import cli_errors as _errors

    with _errors():
        from gpuplan.slurm.fairness import fairness_lines, fairness_table
        from gpuplan.slurm.preempt import is_preemptive

        placer = check_placer(placer, policy)
        if is_preemptive(policy):
            _preempt_pass(
                policy, quantum_gpu_s, max_requeues, _parts(partition), "priority", None, True, as_json
            )
            return
        state, p, setup = _make_plan(_client(), _parts(partition), policy, search, predict, placer=placer)
        table = fairness_table(p, state.jobs)
        if as_json:
            _emit({**p.as_dict(), "fairness": table, "setup_warnings": setup})
            return
        _warn(setup + p.warnings)
        _print_plan(p)
        for line in fairness_lines(table):
            typer.echo(line)


def _print_plan(p: QueuePlan) -> None:
    g = p.gain()
    typer.echo(f"{len(p.order)} pending job(s), {p.running} running on {p.cluster.describe()}; "
               f"policy {p.policy}, simulated as backfill={p.backfill}, placer={p.placer}")  # fmt: skip
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
    placer: PlacerOpt = None,
    mode: ModeOpt = "site-factor",
    weight: WeightOpt = 1.0,
    horizon_s: HorizonOpt = 3600.0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the values that would be set; change nothing.")] = False,
    state_file: StateOpt = None,
    max_requeues: MaxRequeuesOpt = 1,
    quantum_gpu_s: QuantumOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Plan, then set that order with `scontrol update` (previous values recorded first; `reset` undoes it).
    A preemptive policy first requeues the running jobs it preempts (`scontrol requeue`)."""
    from gpuplan.commands.common import cli_errors as _errors

    with _errors():
        from gpuplan.slurm.apply import apply_order, check_mode
        from gpuplan.slurm.preempt import is_preemptive
        from gpuplan.slurm.watch import writer_lock

        check_mode(mode)
        placer = check_placer(placer, policy)
        if is_preemptive(policy):
            _preempt_pass(policy, quantum_gpu_s, max_requeues, _parts(partition), mode, state_file, dry_run,
                          as_json)  # fmt: skip
            return
        client = _client()
        parts = _parts(partition)
        state, p, setup = _make_plan(client, parts, policy, search, predict, mode, placer)
        lock = (
            contextlib.nullcontext()
            if dry_run
            else writer_lock(
                state_file, state.config.get("ClusterName", "") or "slurm", "gpuplan slurm apply"
            )
        )
        with lock:
            res = apply_order(client, p.order, mode=mode, partitions=parts, state_path=state_file, dry_run=dry_run,
                              weight=weight, horizon_s=horizon_s, config=state.config)  # fmt: skip
        if as_json:
            from gpuplan.slurm.fairness import fairness_table

            _emit({"plan": {**p.as_dict(), "fairness": fairness_table(p, state.jobs)}, "apply": res.as_dict(),
                   "setup_warnings": setup})  # fmt: skip
            return
        _warn(setup + p.warnings)
        _print_plan(p)
        for line in apply_lines(res):
            typer.echo(line)


def apply_lines(res: Any) -> list[str]:
    """What apply did, for people: counts, the headroom, jobs out of plan order, where others landed."""
    verb = "would set" if res.dry_run else "set"
    key = {"site-factor": "SiteFactor", "priority": "Priority", "nice": "Nice"}[res.mode]
    out = [f"{verb} {key} on {len(res.changed)} job(s); skipped {len(res.skipped)}"
           + ("" if res.dry_run else f"; previous values in {res.state_path}")]  # fmt: skip
    if res.recovered:
        out.append(f"  finished an interrupted pass first: {len(res.recovered)} job(s) set again")
    d = res.details
    if d:
        h = d["headroom"]
        kept = len(d["site_factor"]) - len(d["changes"])
        out.append(f"  {kept} planned job(s) already in place kept their SiteFactor; the others are set >= "
                   f"{h['base'] + h['drift'] + h['stale']} priority points apart ({h['base']} rounding + {h['drift']} "
                   f"update drift + {h['stale']} PriorityCalcPeriod lag), more where the younger job can still "
                   f"gain age within {h['horizon_s']:.0f} s")  # fmt: skip
        if d["out_of_plan_order"]:
            shown = " ".join(d["out_of_plan_order"][:20])
            out.append(f"  at --weight {d['weight']:g}, {len(d['out_of_plan_order'])} job(s) stay out of plan "
                       f"order: {shown}")  # fmt: skip
        moved = {j: r for j, r in d["unmanaged"].items() if r["rank_before"] != r["rank_after"]}
        out.append(f"  {len(d['unmanaged'])} pending job(s) left alone; {len(moved)} changed rank")
        for jid, r in list(moved.items())[:10]:
            out.append(f"    {jid}: rank {r['rank_before']} -> {r['rank_after']} (priority {r['priority']})")
    for jid, why in list(res.skipped.items())[:10]:
        out.append(f"  skipped {jid}: {why}")
    return out


def _preempt_pass(policy: str, quantum_gpu_s: float | None, max_requeues: int, parts: tuple[str, ...],
                  mode: str, state_file: Path | None, dry_run: bool, as_json: bool) -> None:  # fmt: skip
    """`plan`/`apply` with a preemptive policy: one pass, carried out unless `dry_run`."""
    from gpuplan.slurm.preempt import carry_out, preemptive_policy
    from gpuplan.slurm.setup import setup_warnings

    client = _client()
    pol = preemptive_policy(policy, quantum_gpu_s)
    res = carry_out(client, pol, partitions=parts, max_requeues=max_requeues, mode=mode, state_path=state_file,
                    dry_run=dry_run)  # fmt: skip
    setup = setup_warnings(client.config(), mode)
    if as_json:
        _emit({**res.as_dict(), "dry_run": dry_run, "setup_warnings": setup})
        return
    _warn(setup + res.plan.warnings)
    for line in _preempt_lines(res, dry_run):
        typer.echo(line)


def _preempt_lines(res: Any, dry_run: bool) -> list[str]:
    p = res.plan
    verb = "would requeue" if dry_run else "requeued"
    out = [f"policy {p.policy} (preemptive, by scontrol requeue; at most {p.max_requeues} per pass): "
           f"{verb} {len(p.requeue) if dry_run else len(res.requeued)} running job(s)"]  # fmt: skip
    for jid in p.requeue:
        out.append(
            f"  requeue {jid}: attained {p.attained_gpu_s.get(jid, 0.0):.0f} GPU-s, level {p.levels.get(jid)}"
        )
    for jid, err in res.failed.items():
        out.append(
            f"  requeue {jid} refused by Slurm: {err.strip().splitlines()[-1] if err.strip() else err}"
        )
    if p.deferred:
        out.append(f"  left running by --max-requeues: {' '.join(p.deferred)}")
    if p.starts:
        out.append(f"  expected to start: {' '.join(p.starts)}")
    for jid, why in list(p.protected.items())[:10]:
        out.append(f"  never requeued {jid}: {why}")
    shown = " ".join(p.order[:20]) + (" ..." if len(p.order) > 20 else "")
    out.append(f"  pending order: {shown}")
    a = res.apply
    out.append(
        f"{'would set' if dry_run else 'set'} {a.mode} on {len(a.changed)} job(s); skipped {len(a.skipped)}"
    )
    return out


@slurm_app.command("reset")
def reset(state_file: StateOpt = None, as_json: JsonOpt = False) -> None:
    """Undo `apply` on the jobs still pending: SiteFactor and Nice written back; priority mode's jobs
    handed back to multifactor by hold + release."""
    from gpuplan.commands.common import cli_errors as _errors

    with _errors():
        from gpuplan.slurm.apply import default_state_path, reset_order, state_to_reset
        from gpuplan.slurm.watch import writer_lock

        state_to_reset(state_file or default_state_path())  # before asking Slurm anything
        client = _client()
        with writer_lock(state_file, _cluster_name(client), "gpuplan slurm reset"):
            res = reset_order(client, state_file)
        if as_json:
            _emit(res.as_dict())
            return
        released = (
            f", {len(res.released)} handed back to multifactor (hold + release)" if res.released else ""
        )
        typer.echo(
            f"restored {res.mode} of {len(res.changed)} job(s){released}; {len(res.skipped)} no longer pending"
        )


def _cluster_name(client: SlurmClient) -> str:
    return client.config().get("ClusterName", "") or "slurm"


HealthPortOpt = Annotated[
    int | None,
    typer.Option("--health-port", min=0, max=65535,
                 help="Serve /healthz and Prometheus /metrics on this port (0: any free port, logged)."),
]  # fmt: skip
HealthHostOpt = Annotated[
    str, typer.Option("--health-host", help="Address for --health-port (0.0.0.0: all).")
]


@slurm_app.command("watch")
def watch(
    interval: Annotated[float, typer.Option("--interval", min=0.1, help="Seconds between looks at the queue.")] = 30.0,
    partition: PartitionOpt = None,
    policy: PolicyOpt = "best",
    predict: PredictOpt = None,
    placer: PlacerOpt = None,
    mode: ModeOpt = "site-factor",
    weight: WeightOpt = 1.0,
    horizon_s: HorizonOpt = 3600.0,
    state_file: StateOpt = None,
    iterations: Annotated[int | None, typer.Option("--iterations", min=1, help="Stop after this many looks (default: run until interrupted).")] = None,
    max_requeues: MaxRequeuesOpt = 1,
    quantum_gpu_s: QuantumOpt = None,
    health_port: HealthPortOpt = None,
    health_host: HealthHostOpt = "127.0.0.1",
    max_backoff_s: Annotated[float, typer.Option("--max-backoff-s", min=1.0, help="Longest wait between tries while slurmctld does not answer.")] = 300.0,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Keep the planned order (a service: docs/slurm.md): one watcher per cluster (a lock); site-factor
    mode re-sets only the jobs whose rank drifted, replanning when the queue changes; waits (with
    backoff) while slurmctld is down; an interrupted pass is finished at the next start. A preemptive
    policy makes a pass (requeues included) at every look."""
    from gpuplan.commands.common import cli_errors as _errors

    with _errors():
        from gpuplan.slurm.apply import check_mode
        from gpuplan.slurm.preempt import is_preemptive, preemptive_policy
        from gpuplan.slurm.watch import Metrics, Watcher, WatchOptions, writer_lock

        check_mode(mode)
        placer = check_placer(placer, policy)
        client = _client()
        log = _watch_log(as_json, client)
        metrics = Metrics(client.clock)
        opts = WatchOptions(_parts(partition), policy, predict, mode, weight, horizon_s, state_file, interval,
                            max_backoff_s, placer)  # fmt: skip
        watcher = Watcher(client, opts, log, time.sleep, metrics)
        cluster = _wait_for_cluster_name(watcher)
        with (
            writer_lock(state_file, cluster, "gpuplan slurm watch"),
            _health(metrics, opts, health_port, health_host, log),
        ):
            log({"event": "start", "cluster": cluster, "mode": mode, "interval_s": interval,
                 "message": f"watching Slurm cluster {cluster!r} every {interval:g} s (--mode {mode})"})  # fmt: skip
            if is_preemptive(policy):
                run_preempt_watch(client, opts.partitions, preemptive_policy(policy, quantum_gpu_s), max_requeues,
                                  mode, state_file, interval, iterations, as_json, time.sleep)  # fmt: skip
                return
            watcher.run(iterations)


def _watch_log(as_json: bool, client: SlurmClient) -> Callable[[dict[str, Any]], None]:
    def log(event: dict[str, Any]) -> None:
        if as_json:
            typer.echo(json.dumps({"time_s": client.clock(), **event}))
        elif event.get("event") == "pass":
            typer.echo(f"applied: {event['changed']} job(s) reordered, {event['skipped']} skipped"
                       + (f", {event['recovered']} set again from an interrupted pass" if event["recovered"] else "")
                       + f"; expected makespan {_fmt_s(event['expected_makespan_s'])}")  # fmt: skip
        else:
            typer.echo(f"gpuplan slurm watch: {event.get('message', event)}", err=event["event"] != "start")

    return log


def _wait_for_cluster_name(w: Any) -> str:
    """`ClusterName`, waiting (with the watcher's backoff) while slurmctld does not answer."""
    from gpuplan.slurm.runner import SlurmError

    delay = 0.0
    while True:
        try:
            return _cluster_name(w.client)
        except SlurmError as e:
            delay = w.failed(e, delay)
            if delay == 0.0:
                raise
            w.sleep(delay)


@contextlib.contextmanager
def _health(
    metrics: Any, opts: Any, port: int | None, host: str, log: Callable[[dict[str, Any]], None]
) -> Iterator[None]:
    if port is None:
        yield
        return
    from gpuplan.slurm.health import HealthServer

    server = HealthServer(
        metrics, max(3 * opts.interval_s, opts.max_backoff_s + opts.interval_s), host, port
    ).start()
    log({"event": "health", "port": server.port,
         "message": f"health on http://{host}:{server.port}/healthz and /metrics"})  # fmt: skip
    try:
        yield
    finally:
        server.stop()


def run_preempt_watch(client: SlurmClient, parts: tuple[str, ...], policy: Any, max_requeues: int, mode: str,
                      state_file: Path | None, interval: float, iterations: int | None, as_json: bool,
                      sleep: Callable[[float], None]) -> int:  # fmt: skip
    """The watch loop for a preemptive policy: one pass per look (sleep injected); returns the passes."""
    from gpuplan.slurm.preempt import carry_out

    n = 0
    try:
        while iterations is None or n < iterations:
            if n:
                sleep(interval)
            n += 1
            res = carry_out(client, policy, partitions=parts, max_requeues=max_requeues, mode=mode,
                            state_path=state_file)  # fmt: skip
            line = {"time_s": client.clock(), "requeued": res.requeued, "requeue_failed": res.failed,
                    "deferred": res.plan.deferred, "changed": len(res.apply.changed), "order": res.plan.order[:10]}  # fmt: skip
            typer.echo(json.dumps(line) if as_json else f"pass: requeued {' '.join(res.requeued) or 'none'}; "
                       f"{len(res.apply.changed)} job(s) reordered")  # fmt: skip
    except KeyboardInterrupt:
        pass
    return n

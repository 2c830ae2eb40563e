"""`gpuplan serve`: the live dashboard and `/metrics` (FastAPI + uvicorn, imported only here)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuplan.errors import GpuplanError

if TYPE_CHECKING:
    from gpuplan.agent.paths import AgentPaths
    from gpuplan.web.live import LiveSource, NodeSource
    from gpuplan.web.whatif_serve import WhatIfLimits

__all__ = ["serve"]


def _token(paths: AgentPaths) -> str | None:
    from gpuplan.agent.paths import read_token

    try:
        return read_token(paths) or None
    except FileNotFoundError:
        return None
    except OSError as e:
        raise GpuplanError(
            f"{paths.token}: cannot read the agent's token ({e.strerror}); fix its permissions"
        ) from e


def _token_file(path: Path) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise GpuplanError(
            f"--token-file {path}: cannot read it ({getattr(e, 'strerror', None) or e})"
        ) from e
    if len(token) < 16:
        raise GpuplanError(f"--token-file {path}: holds {len(token)} characters; a token needs at least 16")
    return token


def _whatif_limits(max_upload_mb: float, queue: int, cache: int) -> WhatIfLimits:
    from gpuplan.web.whatif_serve import WhatIfLimits

    if not max_upload_mb > 0 or queue < 0 or cache < 1:
        raise GpuplanError("--max-upload-mb must be > 0, --whatif-queue >= 0 and --whatif-cache >= 1")
    return WhatIfLimits(
        max_upload_bytes=int(max_upload_mb * 1024 * 1024), max_waiting=queue, cache_entries=cache
    )


DEFAULT_GPUS = "fake:8xA100-80GB"


def _running_agent(paths: AgentPaths) -> dict[str, Any] | None:
    """The running agent's `status` (its backend, policy, backfill), None when none answers."""
    from gpuplan.agent.protocol import call

    if not paths.socket.exists():
        return None
    try:
        return call(paths.socket, {"op": "status"}, timeout_s=5.0)
    except GpuplanError:
        return None


def _source(gpus: str | None, paths: AgentPaths, policy: str | None, backfill: str | None) -> NodeSource:
    """The node as the running agent sees it (its backend, policy and backfill), else as given."""
    from gpuplan.agent.gpus import open_backend
    from gpuplan.core.backfill import get_backfill
    from gpuplan.core.policies import get_policy
    from gpuplan.web.live import NodeSource

    agent = _running_agent(paths) or {}
    gpus = gpus or str(agent.get("backend") or DEFAULT_GPUS)
    policy = get_policy(policy or str(agent.get("policy") or "fifo")).spec
    backfill = get_backfill(backfill or str(agent.get("backfill") or "easy")).spec
    # the fake set's id is the agent's home, as the agent itself opens it: both see the same jobs
    backend = open_backend(gpus, set_id=str(paths.home))
    return NodeSource(backend, paths, gpus, policy, backfill)


def serve(
    host: Annotated[str, typer.Option(help="Address to bind; anything but loopback is said on stderr.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    gpus: Annotated[str | None, typer.Option("--gpus", help="GPU backend: nvml or fake:PRESET_OR_TOML (the fake device set); default: the running agent's, else fake:8xA100-80GB.")] = None,
    policy: Annotated[str | None, typer.Option("--policy", help="Policy the queue view plans with when no agent answers; default: the agent's, else fifo. With --slurm: a policy or 'best' (default), as `gpuplan slurm plan`.")] = None,
    backfill: Annotated[str | None, typer.Option("--backfill", help="Backfill mode of that plan; default: the agent's, else easy (not with --slurm: Slurm's SchedulerType decides).")] = None,
    slurm: Annotated[bool, typer.Option("--slurm", help="Show the Slurm cluster that squeue/sinfo on PATH reach (SLURM_CONF), read-only, instead of this node.")] = False,
    partition: Annotated[list[str] | None, typer.Option("--partition", "-p", help="With --slurm: only this partition (repeatable or comma-separated); default: all.")] = None,
    predict: Annotated[Path | None, typer.Option("--predict", help="With --slurm: a duration model from `gpuplan predict fit`, used instead of the time limits.")] = None,
    placer: Annotated[str | None, typer.Option("--placer", help="With --slurm: the GPU placer of the plan's forecast (default best-fit; fgd, spread, first-fit, ...), as `gpuplan slurm plan --placer`. Slurm places jobs itself: the placer only shapes the forecast and the order.")] = None,
    slurm_cache_s: Annotated[float, typer.Option("--slurm-cache-seconds", help="With --slurm: one read of Slurm serves every viewer for this long.")] = 5.0,
    traces: Annotated[Path, typer.Option("--traces", help="What-if paths must lie under this folder.")] = Path("."),
    price: Annotated[list[str] | None, typer.Option("--price", help="USD per GPU-hour of a model, MODEL=USD (repeat).")] = None,
    watts: Annotated[list[str] | None, typer.Option("--watts", help="Power of a model, MODEL=BUSY or MODEL=BUSY/IDLE, in W (repeat).")] = None,
    sample_s: Annotated[float, typer.Option("--sample-seconds", help="Seconds between two live samples.")] = 1.0,
    window_min: Annotated[float, typer.Option("--window-minutes", help="Minutes of history the node view shows.")] = 10.0,
    allowed_hosts: Annotated[str, typer.Option("--allowed-hosts", help="More names a request's Host may give, comma-separated (a proxy's name); '*' turns the check off. Always allowed: the bound address, and localhost names on loopback.")] = "",
    token_file: Annotated[Path | None, typer.Option("--token-file", help="The token that changes and what-if uploads need (Authorization: Bearer TOKEN); default: the agent's $GPUPLAN_HOME/token (none with --slurm).")] = None,
    max_upload_mb: Annotated[float, typer.Option("--max-upload-mb", help="Largest what-if upload, MiB; a larger body is refused (413) once that much is read.")] = 200.0,
    whatif_queue: Annotated[int, typer.Option("--whatif-queue", help="What-ifs that may wait while one simulates; more are refused (429).")] = 4,
    whatif_cache: Annotated[int, typer.Option("--whatif-cache", help="What-if results kept for their Gantt charts (least recently used out).")] = 8,
    as_json: Annotated[bool, typer.Option("--json", help="Print the address and settings as one JSON line, then serve.")] = False,
) -> None:  # fmt: skip
    """The live dashboard of this node or (--slurm) a Slurm cluster: node, queue and what-if views, /metrics, /healthz."""
    from gpuplan.commands.common import cli_errors as _errors

    with _errors():
        if sample_s <= 0 or window_min <= 0:
            raise GpuplanError("--sample-seconds and --window-minutes must be > 0")
        if not traces.is_dir():
            raise GpuplanError(f"--traces {traces}: not a folder")
        from gpuplan.agent.paths import AgentPaths
        from gpuplan.web.access import allowed_hosts as host_rule
        from gpuplan.web.app import ServeConfig, create_app
        from gpuplan.web.savings import parse_costs

        paths = AgentPaths.from_env()
        if slurm:
            source: LiveSource = _slurm_source(
                gpus, policy, backfill, partition, predict, slurm_cache_s, placer
            )
        else:
            if partition or predict is not None:
                raise GpuplanError("--partition and --predict read a Slurm cluster: add --slurm")
            if placer is not None:
                raise GpuplanError("--placer shapes the forecast of a Slurm cluster's queue: add --slurm")
            source = _source(gpus, paths, policy, backfill)
        token = _token_file(token_file) if token_file is not None else None if slurm else _token(paths)
        config = ServeConfig(
            source=source,
            token=token,
            trace_root=traces.resolve(),
            costs=parse_costs(price or [], watts or []),
            sample_s=sample_s,
            window_s=window_min * 60.0,
            hosts=host_rule(host, allowed_hosts.split(",")),
            whatif=_whatif_limits(max_upload_mb, whatif_queue, whatif_cache),
        )
        app = create_app(config)
    _announce(host, port, config.source.label, config.token is not None, as_json, slurm)
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=2)


def _slurm_source(gpus: str | None, policy: str | None, backfill: str | None, partition: list[str] | None,
                  predict: Path | None, cache_s: float, placer: str | None = None) -> LiveSource:  # fmt: skip
    """The Slurm cluster, read-only: its runner retries nothing (the next read, `cache_s` later, does)."""
    from gpuplan.commands.common import parse_partitions
    from gpuplan.core.placement import get_placer
    from gpuplan.slurm.client import SlurmClient
    from gpuplan.slurm.planner import DEFAULT_PLACER, static_policy
    from gpuplan.slurm.runner import SlurmRunner
    from gpuplan.web.slurmview import SlurmSource

    if gpus is not None or backfill is not None:
        raise GpuplanError(
            "--gpus and --backfill describe this node's queue; with --slurm the nodes and the backfill "
            "mode are Slurm's (sinfo, SchedulerType): leave them out"
        )
    if cache_s < 0:
        raise GpuplanError("--slurm-cache-seconds must be >= 0")
    if predict is not None and not predict.is_file():
        raise GpuplanError(f"--predict {predict}: no such model file (make one with `gpuplan predict fit`)")
    policy = policy or "best"
    if policy != "best":
        policy = static_policy(policy)
    spec = get_placer(placer or DEFAULT_PLACER).spec  # an unknown name: one line, before serving
    client = SlurmClient(SlurmRunner(timeout_s=10.0, retries=0))
    return SlurmSource(client, parse_partitions(partition), policy, predict, cache_s, placer=spec)


def _announce(host: str, port: int, label: str, has_token: bool, as_json: bool, slurm: bool = False) -> None:
    from gpuplan.web.access import is_loopback

    url = f"http://{host}:{port}/"
    if not is_loopback(host):
        typer.echo(
            f"gpuplan: warning: listening on {host}, not loopback: anyone who reaches it sees the node",
            err=True,
        )
    mode = "changes and what-if uploads need the token" if has_token else "read-only (no token)"
    if slurm:
        uploads = "what-if uploads need the token" if has_token else "no what-if uploads (no --token-file)"
        mode = f"read-only: `gpuplan slurm apply` changes the order; {uploads}"
    if as_json:
        line = {"url": url, "host": host, "port": port, "source": label, "token": has_token, "slurm": slurm}
        typer.echo(json.dumps({**line, "pid": os.getpid()}))
    else:
        typer.echo(f"gpuplan serve: {url} ({label}; {mode})")

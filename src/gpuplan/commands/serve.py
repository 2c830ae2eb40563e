"""`gpuplan serve`: the live dashboard and `/metrics` (FastAPI + uvicorn, imported only here)."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuplan.errors import GpuplanError

if TYPE_CHECKING:
    from gpuplan.agent.paths import AgentPaths
    from gpuplan.web.live import NodeSource

__all__ = ["serve"]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
    policy = get_policy(policy or str(agent.get("policy") or "fifo")).name
    backfill = get_backfill(backfill or str(agent.get("backfill") or "easy")).name
    # the fake set's id is the agent's home, as the agent itself opens it: both see the same jobs
    backend = open_backend(gpus, set_id=str(paths.home))
    return NodeSource(backend, paths, gpus, policy, backfill)


def serve(
    host: Annotated[str, typer.Option(help="Address to bind; anything but loopback is said on stderr.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    gpus: Annotated[str | None, typer.Option("--gpus", help="GPU backend: nvml or fake:PRESET_OR_TOML (the fake device set); default: the running agent's, else fake:8xA100-80GB.")] = None,
    policy: Annotated[str | None, typer.Option("--policy", help="Policy the queue view plans with when no agent answers; default: the agent's, else fifo.")] = None,
    backfill: Annotated[str | None, typer.Option("--backfill", help="Backfill mode of that plan; default: the agent's, else easy.")] = None,
    traces: Annotated[Path, typer.Option("--traces", help="What-if paths must lie under this folder.")] = Path("."),
    price: Annotated[list[str] | None, typer.Option("--price", help="USD per GPU-hour of a model, MODEL=USD (repeat).")] = None,
    watts: Annotated[list[str] | None, typer.Option("--watts", help="Power of a model, MODEL=BUSY or MODEL=BUSY/IDLE, in W (repeat).")] = None,
    sample_s: Annotated[float, typer.Option("--sample-seconds", help="Seconds between two live samples.")] = 1.0,
    window_min: Annotated[float, typer.Option("--window-minutes", help="Minutes of history the node view shows.")] = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the address and settings as one JSON line, then serve.")] = False,
) -> None:  # fmt: skip
    """The live dashboard: node, queue and what-if views, /metrics for Prometheus, /healthz."""
    from gpuplan.commands.common import cli_errors as _errors

    with _errors():
        if sample_s <= 0 or window_min <= 0:
            raise GpuplanError("--sample-seconds and --window-minutes must be > 0")
        if not traces.is_dir():
            raise GpuplanError(f"--traces {traces}: not a folder")
        from gpuplan.agent.paths import AgentPaths
        from gpuplan.web.app import ServeConfig, create_app
        from gpuplan.web.savings import parse_costs

        paths = AgentPaths.from_env()
        config = ServeConfig(
            source=_source(gpus, paths, policy, backfill),
            token=_token(paths),
            trace_root=traces.resolve(),
            costs=parse_costs(price or [], watts or []),
            sample_s=sample_s,
            window_s=window_min * 60.0,
        )
        app = create_app(config)
    _announce(host, port, config.source.label, config.token is not None, as_json)
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=2)


def _announce(host: str, port: int, label: str, has_token: bool, as_json: bool) -> None:
    url = f"http://{host}:{port}/"
    if not _is_loopback(host):
        typer.echo(
            f"gpuplan: warning: listening on {host}, not loopback: anyone who reaches it sees the node",
            err=True,
        )
    mode = "mutating endpoints need the agent's token" if has_token else "read-only (no agent token)"
    if as_json:
        typer.echo(json.dumps({"url": url, "host": host, "port": port, "source": label, "token": has_token}))
    else:
        typer.echo(f"gpuplan serve: {url} ({label}; {mode})")

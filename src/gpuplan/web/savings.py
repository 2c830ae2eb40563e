"""GPU-hours, money and energy a run saves against FIFO on the same jobs and cluster.

Model (docs/dashboard.md): the cluster is held from the first submit until the last job ends
(the makespan), as a rented or powered-on cluster is.
- GPU-hours saved = (FIFO makespan - run makespan) x GPUs, the `gpu_hours_freed` of the audit's what-if.
- Money saved = the same per GPU model, times its price per GPU-hour.
- Energy = occupied GPU-hours x busy watts + idle GPU-hours x idle watts, per GPU model;
  saved = FIFO's energy - the run's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.model import ClusterSpec
from gpuplan.sim.result import SimResult

__all__ = ["DEFAULT_COSTS", "GpuCost", "cost_of", "parse_costs", "savings_vs_fifo"]


@dataclass(frozen=True, slots=True)
class GpuCost:
    """What one GPU of a model costs to hold and to power.

    Attributes:
        usd_per_h: price of one GPU-hour (None: unknown, money is then not shown).
        busy_w: power while a job runs on it (the board power limit, TDP).
        idle_w: power while it is held but idle.
        source: where the defaults come from.
    """

    usd_per_h: float | None
    busy_w: float
    idle_w: float
    source: str


DEFAULT_COSTS: dict[str, GpuCost] = {
    "A100-80GB": GpuCost(
        5.12, 400.0, 50.0,
        "price: AWS p4de.24xlarge on-demand $40.97/h for 8 GPUs (us-east-1 list price); "
        "400 W: NVIDIA A100 SXM datasheet max TDP; 50 W idle: an assumption, not measured here",
    ),
    "A100-40GB": GpuCost(
        4.10, 400.0, 50.0,
        "price: AWS p4d.24xlarge on-demand $32.77/h for 8 GPUs (us-east-1 list price); "
        "400 W: NVIDIA A100 SXM datasheet max TDP; 50 W idle: an assumption, not measured here",
    ),
    "H200-141GB": GpuCost(
        None, 700.0, 75.0,
        "no price default (give --price H200-141GB=USD); 700 W: NVIDIA H200 SXM datasheet max TDP; "
        "75 W idle: an assumption, not measured here",
    ),
}  # fmt: skip
_FALLBACK = GpuCost(None, 400.0, 50.0, "unknown GPU model: no price; 400 W busy / 50 W idle assumed")


def cost_of(model: str, costs: dict[str, GpuCost]) -> GpuCost:
    """The cost entry of a GPU model, the fallback when the model is not listed."""
    return costs.get(model, _FALLBACK)


def parse_costs(
    prices: Sequence[str], watts: Sequence[str], base: dict[str, GpuCost] | None = None
) -> dict[str, GpuCost]:
    """`base` (default DEFAULT_COSTS) with `--price MODEL=USD` and `--watts MODEL=BUSY[/IDLE]` applied.

    Raises:
        GpuplanError: a value that is not MODEL=NUMBER (the message names the option and the value).
    """
    costs = dict(DEFAULT_COSTS if base is None else base)
    for text in prices:
        model, value = _pair(text, "--price", "A100-80GB=5.12")
        usd = _number(value, "--price", text)
        entry = cost_of(model, costs)
        if usd != entry.usd_per_h:  # the same value keeps its documented source
            costs[model] = replace(entry, usd_per_h=usd, source="--price given")
    for text in watts:
        model, value = _pair(text, "--watts", "A100-80GB=400/50")
        busy, _, idle = value.partition("/")
        entry = cost_of(model, costs)
        busy_w = _number(busy, "--watts", text)
        idle_w = _number(idle, "--watts", text) if idle else entry.idle_w
        if (busy_w, idle_w) != (entry.busy_w, entry.idle_w):
            costs[model] = replace(entry, busy_w=busy_w, idle_w=idle_w, source="--watts given")
    return costs


def _pair(text: str, option: str, example: str) -> tuple[str, str]:
    model, sep, value = text.partition("=")
    if not sep or not model.strip() or not value.strip():
        raise GpuplanError(f"{option}: {text!r} is not MODEL=VALUE (e.g. {example})")
    return model.strip(), value.strip()


def _number(text: str, option: str, whole: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise GpuplanError(f"{option}: {whole!r}: {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise GpuplanError(f"{option}: {whole!r}: {text!r} must be a finite number >= 0")
    return value


def _fifo(results: Sequence[SimResult]) -> SimResult | None:
    """The baseline: FIFO without backfill when present, else the first FIFO run."""
    fifo = [r for r in results if r.policy == "fifo" and not r.oracle]
    plain = [r for r in fifo if r.backfill == "none"]
    chosen = plain or fifo
    return chosen[0] if chosen else None


def _held(r: SimResult, cluster: ClusterSpec, costs: dict[str, GpuCost]) -> tuple[float | None, float]:
    """(USD, kWh) of holding the cluster for the run's makespan."""
    hours = r.metrics.makespan_s / 3600.0
    total = max(cluster.total_gpus, 1)
    usd: float | None = 0.0
    kwh = 0.0
    busy_share = min(1.0, r.metrics.gpu_hours / max(total * hours, 1e-12))
    for node in cluster.nodes:
        c = cost_of(node.gpu.model, costs)
        gpu_h = node.gpus * hours
        usd = None if usd is None or c.usd_per_h is None else usd + gpu_h * c.usd_per_h
        # occupied GPU-hours spread over the models by their share of GPUs
        kwh += gpu_h * (busy_share * c.busy_w + (1 - busy_share) * c.idle_w) / 1000.0
    return usd, kwh


def savings_vs_fifo(
    results: Sequence[SimResult], cluster: ClusterSpec, costs: dict[str, GpuCost]
) -> dict[str, Any]:
    """Per run: GPU-hours, USD and kWh saved against the FIFO baseline (negative: FIFO was better).

    Returns:
        ``{"baseline": label | None, "rows": [{"label", "gpu_hours_saved", "usd_saved",
        "kwh_saved"}...], "costs": {model: {...}}}``; rows are empty without a FIFO run.
    """
    base = _fifo(results)
    models = sorted({n.gpu.model for n in cluster.nodes})
    used = {m: cost_of(m, costs) for m in models}
    out: dict[str, Any] = {
        "baseline": None if base is None else base.label,
        "rows": [],
        "costs": {m: {"usd_per_h": c.usd_per_h, "busy_w": c.busy_w, "idle_w": c.idle_w, "source": c.source}
                  for m, c in used.items()},
    }  # fmt: skip
    if base is None or not math.isfinite(base.metrics.makespan_s):
        return out
    base_usd, base_kwh = _held(base, cluster, costs)
    for r in results:
        if not math.isfinite(r.metrics.makespan_s):
            continue
        usd, kwh = _held(r, cluster, costs)
        saved_h = (base.metrics.makespan_s - r.metrics.makespan_s) * cluster.total_gpus / 3600.0
        out["rows"].append(
            {
                "label": r.label,
                "placer": r.placer,
                "gpu_hours_saved": round(saved_h, 3),
                "usd_saved": None if usd is None or base_usd is None else round(base_usd - usd, 2),
                "kwh_saved": round(base_kwh - kwh, 3),
            }
        )
    return out

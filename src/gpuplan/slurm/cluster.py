"""The cluster a Slurm history ran on, from `sinfo`: every node with GPUs (up or not: past jobs ran on
them), its GPU count and, when Slurm's Gres names a type (`gpu:a100_80g:8`), its GPU model and memory.

Slurm's type names are the site's own, so the memory is read from the name where it says it
(`a100_80g`, `A100-40GB`), else from the few model names whose memory has one value (`h200`, `l40s`),
else assumed; every assumption becomes a warning that says how to fix it (edit the cluster file).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpuplan.errors import GpuplanError
from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec
from gpuplan.slurm.parse import NodeInfo

__all__ = ["ASSUMED_MEM_GB", "history_cluster"]

ASSUMED_MEM_GB = 80.0
"""GPU memory assumed for a type Slurm does not describe (exclusive GPUs consult it only to tell whether
a job's measured memory can fit at all)."""

# Models whose memory has one value whatever the variant (others, such as a100 or v100, have two).
_ONE_SIZE_GB = {
    "h200": 141.0, "gh200": 96.0, "l40s": 48.0, "l40": 48.0, "a40": 48.0, "a10": 24.0, "a10g": 24.0, "a30": 24.0,
    "l4": 24.0, "t4": 16.0, "p100": 16.0, "a16": 16.0, "rtx6000ada": 48.0, "b200": 180.0,
}  # fmt: skip
_MEM_IN_NAME = re.compile(r"(?<![a-z0-9])(\d{2,3})\s*g(?:b)?(?![a-z])", re.IGNORECASE)


def _memory_gb(gpu_type: str) -> float | None:
    """The memory of a Slurm GPU type: said in its name (`a100_80g`, `h100-94gb`), else known, else None."""
    m = _MEM_IN_NAME.search(gpu_type)
    if m is not None:
        return float(m.group(1))
    return _ONE_SIZE_GB.get(re.sub(r"[^a-z0-9]", "", gpu_type.lower()))


def _node(info: NodeInfo, notes: dict[str, str]) -> NodeSpec:
    if not info.gpu_types:
        notes.setdefault(
            "", f"Slurm's Gres names no GPU type (gres gpu:N): GPU memory assumed {ASSUMED_MEM_GB:g} GB"
        )
        return NodeSpec(info.name, info.gpus, GpuSpec("gpu", ASSUMED_MEM_GB))
    gpu_type = max(info.gpu_types, key=lambda t: t[1])[0]
    if len({t for t, _ in info.gpu_types}) > 1:
        kinds = ", ".join(f"{n}x {t}" for t, n in info.gpu_types)
        notes.setdefault(
            f"mixed {info.name}",
            f"node {info.name} holds several GPU types ({kinds}): described as {gpu_type}",
        )
    mem = _memory_gb(gpu_type)
    if mem is None:
        notes.setdefault(
            gpu_type, f"GPU type {gpu_type!r} does not say its memory: assumed {ASSUMED_MEM_GB:g} GB"
        )
        mem = ASSUMED_MEM_GB
    return NodeSpec(info.name, info.gpus, GpuSpec(gpu_type, mem))


def history_cluster(nodes: Sequence[NodeInfo], name: str = "slurm") -> tuple[ClusterSpec, list[str]]:
    """The cluster of every node with GPUs, and what was assumed about it (warnings).

    Raises:
        GpuplanError: no node has GPUs (no GPU gres in sinfo).
    """
    notes: dict[str, str] = {}
    specs = [_node(n, notes) for n in nodes if n.gpus > 0]
    if not specs:
        raise GpuplanError(
            "sinfo shows no node with GPUs (no gres gpu): the history has no cluster to run on; "
            "check `sinfo -N -O NodeList,Gres` and the nodes' Gres=gpu:N"
        )
    warnings = [f"{text}; edit the cluster file to correct it" for text in notes.values()]
    return ClusterSpec(name, tuple(specs), sharing=False), warnings

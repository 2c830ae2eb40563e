"""Cluster descriptions: presets shipped inside the package and user TOML files (docs/formats.md)."""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from gpuplan.errors import ClusterError, UnknownNameError
from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec

__all__ = [
    "DEFAULT_CLUSTER",
    "cluster_from_toml",
    "cluster_to_toml",
    "load_cluster",
    "load_preset",
    "preset_names",
]

DEFAULT_CLUSTER = "8xA100-80GB"
"""The preset a trace that describes no cluster runs on (every command says so when it happens)."""

_NODE_KEYS = {"name", "count", "gpus", "gpu_model", "gpu_mem_gb", "mig", "cpu_milli", "host_mem_gb"}
_TOP_KEYS = {"name", "sharing", "max_jobs_per_gpu", "nodes"}


def preset_names() -> list[str]:
    """Names of the cluster presets shipped with gpuplan."""
    files = resources.files("gpuplan") / "clusters"
    return sorted(p.name.removesuffix(".toml") for p in files.iterdir() if p.name.endswith(".toml"))


def load_cluster(name_or_path: str, sharing: bool | None = None) -> ClusterSpec:
    """Load a preset by name or a cluster TOML file by path.

    Args:
        name_or_path: a preset name (see `preset_names()`) or a path to a `.toml` file.
        sharing: override the file's `sharing` switch when not None.

    Raises:
        UnknownNameError: neither a preset nor an existing file.
        ClusterError: the file is not valid TOML or misses/garbles a key.
    """
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise ClusterError(f"{name_or_path}: no such cluster file (give a preset name or a .toml path)")
        text = path.read_text(encoding="utf-8")
        source = str(path)
    else:
        text, source = _preset_text(name_or_path), f"preset {name_or_path}"
    spec = cluster_from_toml(text, source)
    if sharing is not None and sharing != spec.sharing:
        spec = dataclasses.replace(spec, sharing=sharing)
    return spec


def load_preset(name: str, sharing: bool | None = None) -> ClusterSpec:
    """Load a preset by name; never a file, whatever exists under that name in the working folder.

    Raises:
        UnknownNameError: not a preset (the message lists them).
    """
    spec = cluster_from_toml(_preset_text(name), f"preset {name}")
    return spec if sharing is None or sharing == spec.sharing else dataclasses.replace(spec, sharing=sharing)


def _preset_text(name: str) -> str:
    if name not in preset_names():
        raise UnknownNameError("cluster preset", name, preset_names())
    return (resources.files("gpuplan") / "clusters" / f"{name}.toml").read_text(encoding="utf-8")


def cluster_from_toml(text: str, source: str) -> ClusterSpec:
    """Parse the text of a cluster TOML file; `source` names it in errors."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ClusterError(f"{source}: not valid TOML: {e}") from e
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ClusterError(f"{source}: unknown key(s) {sorted(unknown)}; valid keys: {sorted(_TOP_KEYS)}")
    groups = data.get("nodes")
    if not isinstance(groups, list) or not groups:
        raise ClusterError(f"{source}: needs at least one [[nodes]] table (see docs/formats.md)")
    nodes: list[NodeSpec] = []
    for i, group in enumerate(groups, start=1):
        nodes.extend(_node_group(group, f"{source}: [[nodes]] #{i}", len(nodes)))
    sharing = data.get("sharing", False)
    if not isinstance(sharing, bool):
        raise ClusterError(f"{source}: sharing = {sharing!r} must be true or false")
    max_share = _positive_int(data.get("max_jobs_per_gpu", 4), f"{source}: max_jobs_per_gpu")
    name = str(data.get("name", Path(source).stem))
    return ClusterSpec(name, tuple(nodes), sharing=sharing, max_jobs_per_gpu=max_share)


def _node_group(group: Any, where: str, already: int) -> list[NodeSpec]:
    if not isinstance(group, dict):
        raise ClusterError(f"{where}: must be a table")
    unknown = set(group) - _NODE_KEYS
    if unknown:
        raise ClusterError(f"{where}: unknown key(s) {sorted(unknown)}; valid keys: {sorted(_NODE_KEYS)}")
    for key in ("gpus", "gpu_mem_gb"):
        if key not in group:
            raise ClusterError(f"{where}: missing key {key!r}")
    count = _positive_int(group.get("count", 1), f"{where}: count")
    gpus = _positive_int(group["gpus"], f"{where}: gpus")
    mem = group["gpu_mem_gb"]
    if isinstance(mem, bool) or not isinstance(mem, int | float) or not math.isfinite(mem) or mem <= 0:
        raise ClusterError(f"{where}: gpu_mem_gb = {mem!r} must be a positive number of GiB")
    gpu = GpuSpec(str(group.get("gpu_model", f"GPU-{mem}GB")), float(mem))
    cpu = _optional_amount(group, "cpu_milli", where, "thousandths of a CPU core (64 cores = 64000)")
    ram = _optional_amount(group, "host_mem_gb", where, "GiB of host memory")
    prefix = str(group.get("name", "node"))
    names = (
        [prefix] if count == 1 and "name" in group else [f"{prefix}{already + k + 1}" for k in range(count)]
    )
    if "mig" not in group:
        return [NodeSpec(name, gpus, gpu, cpu, ram) for name in names]
    if cpu is not None or ram is not None:
        raise ClusterError(
            f"{where}: cpu_milli / host_mem_gb cannot be given with mig (slices share their host)"
        )
    layouts = _mig_layouts(group["mig"], gpus, gpu, where)
    from gpuplan.core.mig import MigLayoutError, mig_node_specs

    try:
        return [spec for name in names for spec in mig_node_specs(name, gpu, layouts)]
    except MigLayoutError as e:
        raise ClusterError(f"{where}: mig: {e}") from None


def _optional_amount(group: dict[str, Any], key: str, where: str, unit: str) -> float | None:
    """A node's optional CPU or host memory: a positive finite number, or None when left out."""
    if key not in group:
        return None
    value = group[key]
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ClusterError(
            f"{where}: {key} = {value!r} must be a positive number of {unit} (or leave it out)"
        )
    return float(value)


def _mig_layouts(value: Any, gpus: int, gpu: GpuSpec, where: str) -> list[tuple[str, ...]]:
    """`mig = ["3g.40gb", ...]` (every GPU) or `mig = [[...], [], ...]` (one layout per GPU, [] = whole)."""
    from gpuplan.core.mig import MigLayoutError, mig_gpu

    try:
        table = mig_gpu(gpu.model)
    except MigLayoutError as e:
        raise ClusterError(f"{where}: mig: {e}") from None
    if abs(table.mem_gb - gpu.mem_gb) > 1.0:
        raise ClusterError(
            f"{where}: mig: gpu_mem_gb = {gpu.mem_gb:g} does not match {table.model} ({table.mem_gb:g} GB); "
            "set gpu_mem_gb to the GPU's memory"
        )
    usage = (
        'a list of MIG profile names for every GPU (mig = ["3g.40gb", "4g.40gb"]) or one such list per GPU'
    )
    if not isinstance(value, list) or not value:
        raise ClusterError(f"{where}: mig = {value!r} must be {usage}")
    if all(isinstance(v, str) for v in value):
        return [tuple(value)] * gpus
    if not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in value):
        raise ClusterError(f"{where}: mig = {value!r} must be {usage}")
    if len(value) != gpus:
        raise ClusterError(
            f"{where}: mig has {len(value)} layouts for {gpus} GPUs: give one per GPU ([] = whole GPU)"
        )
    return [tuple(v) for v in value]


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ClusterError(f"{where} = {value!r} must be a positive integer")
    return value


def cluster_to_toml(spec: ClusterSpec) -> str:
    """A cluster file that `load_cluster` reads back as an equal ClusterSpec (node names kept).

    Consecutive nodes of one GPU model and size share a `[[nodes]]` table when their names are the
    running numbers `load_cluster` would give them; every other node gets its own named table.
    """
    lines = [f"name = {json.dumps(spec.name)}", f"sharing = {str(spec.sharing).lower()}"]
    lines.append(f"max_jobs_per_gpu = {spec.max_jobs_per_gpu}")
    i = 0
    while i < len(spec.nodes):
        node = spec.nodes[i]
        count = 1
        if node.name == f"node{i + 1}":
            while (
                i + count < len(spec.nodes)
                and spec.nodes[i + count].name == f"node{i + count + 1}"
                and _same_kind(spec.nodes[i + count], node)
            ):
                count += 1
        lines += ["", "[[nodes]]"]
        lines.append(f"count = {count}" if node.name == f"node{i + 1}" else f"name = {json.dumps(node.name)}")
        lines += [f"gpus = {node.gpus}", f"gpu_model = {json.dumps(node.gpu.model)}"]
        lines.append(f"gpu_mem_gb = {node.gpu.mem_gb!r}")
        if node.cpu_milli is not None:
            lines.append(f"cpu_milli = {node.cpu_milli!r}")
        if node.host_mem_gb is not None:
            lines.append(f"host_mem_gb = {node.host_mem_gb!r}")
        i += count
    return "\n".join(lines) + "\n"


def _same_kind(a: NodeSpec, b: NodeSpec) -> bool:
    return (a.gpus, a.gpu, a.cpu_milli, a.host_mem_gb) == (b.gpus, b.gpu, b.cpu_milli, b.host_mem_gb)

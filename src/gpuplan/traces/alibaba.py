"""Alibaba's GPU cluster trace v2023 (the "openb" trace of Weng et al., USENIX ATC '23).

Two CSV files: the pods (`openb_pod_list_*.csv`) and the GPU nodes (`openb_node_list_*.csv`). The node
list becomes `TraceResult.cluster`; it is found next to the pods file unless given to the reader.
See docs/formats.md, "Alibaba GPU trace v2023", for the mapping and what it assumes.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from gpuplan.errors import InputError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.traces.base import ReadOptions, TraceError, TraceReader, TraceResult, register_reader
from gpuplan.traces.rows import (
    CsvRecord,
    RowSink,
    checked_header,
    csv_records,
    header_names,
    header_record,
    ignored_option_warnings,
    row_cells,
)

__all__ = [
    "GPU_MEM_GB",
    "GUESSED_MEM_GB",
    "NODE_COLUMNS",
    "POD_COLUMNS",
    "AlibabaGpuReader",
    "NodeList",
    "gpu_mem_gb",
    "read_node_list",
]

POD_COLUMNS: tuple[str, ...] = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
# cpu_milli, memory_mib, gpu_spec and qos may be left out.
_POD_REQUIRED = tuple(c for c in POD_COLUMNS if c not in ("cpu_milli", "memory_mib", "gpu_spec", "qos"))
NODE_COLUMNS: tuple[str, ...] = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
_NODE_REQUIRED = ("sn", "gpu", "model")
# Memory of one GPU of the models named in the trace, in GB (NVIDIA's data sheets).
GPU_MEM_GB: dict[str, float] = {
    "P100": 16.0,
    "T4": 16.0,
    "V100M16": 16.0,
    "V100M32": 32.0,
    "A10": 24.0,
}
# G1, G2 and G3 are undisclosed internal codes: their memory is a guess, the smallest of the known
# models, so the simulation never assumes more memory than the hardware may have.
GUESSED_MEM_GB = 16.0
_MEM_SUFFIX = re.compile(r".*?M(\d+)")  # V100M16: memory in the name
_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
_SKIP_CPU = "CPU-only pod (num_gpu 0)"
_FULL = 1000


def gpu_mem_gb(model: str) -> float | None:
    """The memory of one GPU of `model` in GB: from GPU_MEM_GB, or a name like `V100M32`; None if unknown."""
    if model in GPU_MEM_GB:
        return GPU_MEM_GB[model]
    match = _MEM_SUFFIX.fullmatch(model)
    return float(match[1]) if match and int(match[1]) > 0 else None


# ---- cells ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Cells:
    """One CSV row by column name, with checked conversions that fail as `InputError` at its line."""

    path: Path
    line: int
    row: dict[str, str]

    def fail(self, column: str, expected: str, what: str, value: str | None = None) -> InputError:
        raw = self.row.get(column, "") if value is None else value
        return InputError(str(self.path), self.line, column, raw, expected, f"{column}: {what}")

    def text(self, column: str) -> str:
        return self.row.get(column, "").strip()

    def integer(
        self, column: str, low: int = 0, high: int | None = None, required: bool = False
    ) -> int | None:
        """An integer from `low` to `high`; None for an empty cell unless `required`."""
        s = self.text(column)
        expected = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
        if not s:
            if required:
                raise self.fail(column, expected, "missing")
            return None
        try:
            value = int(s)
        except ValueError:
            raise self.fail(column, expected, "not an integer") from None
        if value < low or (high is not None and value > high):
            raise self.fail(column, expected, "out of range")
        return value

    def seconds(self, column: str, required: bool = False) -> float | None:
        """Seconds from the trace start; None for an empty cell unless `required`."""
        s = self.text(column)
        expected = "seconds from the trace start, a number >= 0"
        if not s:
            if required:
                raise self.fail(column, expected, "missing")
            return None
        try:
            value = float(s)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0:
            raise self.fail(column, expected, "invalid")
        return value


# ---- node list ------------------------------------------------------------------------------------


@dataclass(slots=True)
class NodeList:
    """What a node list gives: the cluster (None without a GPU node) and what to tell the user."""

    cluster: ClusterSpec | None
    warnings: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    guessed: list[str] = field(default_factory=list)
    # The memory of the smallest GPU of the cluster whose model's memory is known (not guessed).
    smallest_known_gb: float | None = None


def _checked_columns(
    path: Path, rec: CsvRecord, required: tuple[str, ...], known: tuple[str, ...]
) -> list[str]:
    return checked_header(path, rec, required, f"expected {','.join(known)}")


def _node(path: Path, header: list[str], rec: CsvRecord) -> tuple[str, int, str, int | None, int | None]:
    c = _Cells(path, rec.line, dict(zip(header, row_cells(path, header, rec), strict=True)))
    name, model = c.text("sn"), c.text("model")
    if not name:
        raise c.fail("sn", "a node name", "missing")
    gpus = c.integer("gpu", required=True) or 0
    if gpus and (not model or model.lower() == "nan"):
        raise c.fail("model", "a GPU model for a node with GPUs", "missing")
    return name, gpus, model, c.integer("cpu_milli"), c.integer("memory_mib")


def read_node_list(path: str | Path, skip_bad: bool = False) -> NodeList:
    """Read an openb node list (`sn,cpu_milli,memory_mib,gpu,model`) into a heterogeneous cluster.

    Nodes without GPUs are left out. Nodes are grouped by (GPU count, model), groups in the order they
    first appear, so `ClusterSpec.describe()` reads like '549x8x G2, 387x2x T4, ...'. GPU memory comes
    from `gpu_mem_gb`; models it does not know get GUESSED_MEM_GB and are listed in `guessed`.

    Raises:
        TraceError: the file is missing, empty, or has a bad header; or a node name appears twice.
        InputError: an invalid row (unless `skip_bad`).
    """
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such node list file")
    records = csv_records(path)
    header = _checked_columns(path, header_record(path, records), _NODE_REQUIRED, NODE_COLUMNS)
    rows: list[tuple[str, int, str, int | None, int | None]] = []
    seen: dict[str, int] = {}
    skipped: Counter[str] = Counter()
    for rec in records:
        if rec.is_blank:
            continue
        try:
            row = _node(path, header, rec)
            name = row[0]
            if name in seen:
                expected = f"a unique node name; line {seen[name]} already has it"
                raise InputError(str(path), rec.line, "sn", name, expected, "sn: duplicate")
        except InputError as e:
            if not skip_bad:
                raise
            skipped[f"node list: {e.reason}"] += 1
            continue
        seen[name] = rec.line
        rows.append(row)
    return _node_list(path, rows, skipped)


def _node_list(
    path: Path, rows: list[tuple[str, int, str, int | None, int | None]], skipped: Counter[str]
) -> NodeList:
    groups: dict[tuple[int, str], list[tuple[str, int | None, int | None]]] = {}
    for name, gpus, model, cpu, mem_mib in rows:
        if gpus:
            groups.setdefault((gpus, model), []).append((name, cpu, mem_mib))
    models = dict.fromkeys(model for _, model in groups)
    guessed = [m for m in models if gpu_mem_gb(m) is None]
    specs = {m: GpuSpec(m, gpu_mem_gb(m) or GUESSED_MEM_GB) for m in models}
    nodes = tuple(
        NodeSpec(n, g, specs[m], cpu, None if mem_mib is None else mem_mib / 1024)
        for (g, m), names in groups.items()
        for n, cpu, mem_mib in names
    )
    notes: list[str] = []
    cpu_only = sum(1 for row in rows if not row[1])
    if cpu_only:
        notes.append(f"{path.name}: {cpu_only} nodes without GPUs left out of the cluster")
    if guessed:
        notes.append(
            f"GPU memory of {', '.join(guessed)} is not published: guessed {GUESSED_MEM_GB:g} GB each "
            "(the smallest known model; docs/formats.md)"
        )
    cluster = ClusterSpec(path.stem, nodes) if nodes else None
    if cluster is None:
        notes.append(f"{path.name}: no node with GPUs: no cluster")
    known = [gpu_mem_gb(m) for m in models]
    smallest = min((m for m in known if m is not None), default=None)
    return NodeList(cluster, notes, skipped, guessed, smallest)


def _find_node_list(pods: Path) -> tuple[Path | None, list[str]]:
    """The node list next to a pods file: `*node_list_gpu_node*.csv` first, else the first `*node_list*.csv`."""
    found = sorted(p for p in pods.parent.glob("*node_list*.csv") if p.is_file() and p != pods)
    if not found:
        return None, [f"no *node_list*.csv next to {pods.name}: no cluster from the trace"]
    preferred = [p for p in found if "gpu_node" in p.name] or found
    chosen = preferred[0]
    notes = [f"cluster from the node list {chosen}"]
    others = [p.name for p in found if p != chosen]
    if others:
        notes.append(f"other node lists in the folder not used: {', '.join(others)}")
    return chosen, notes


# ---- pods -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Context:
    """What every pod row needs: the header and how to turn a GPU share into GB."""

    header: list[str]
    nodes: NodeList | None
    extras: list[str]
    cpu_pods: bool = False

    def share_basis_gb(self, spec: list[str]) -> float | None:
        """GB that a share of 1.0 stands for: the smallest GPU the pod may use, when its memory is known."""
        if spec:
            known = [m for m in (gpu_mem_gb(s) for s in spec) if m is not None]
            return min(known) if known else None
        return self.nodes.smallest_known_gb if self.nodes else None


def _pod_cells(c: _Cells) -> dict[str, Any]:
    """The checked values of one pod row."""
    v: dict[str, Any] = {"name": c.text("name"), "phase": c.text("pod_phase")}
    if not v["name"]:
        raise c.fail("name", "a pod name", "missing")
    v["cpu_milli"] = c.integer("cpu_milli")
    v["memory_mib"] = c.integer("memory_mib")
    v["num_gpu"] = c.integer("num_gpu", required=True)
    v["gpu_milli"] = c.integer("gpu_milli", 0, _FULL, required=True)
    if v["phase"] not in _PHASES:
        raise c.fail("pod_phase", f"one of {', '.join(_PHASES)}", "unknown phase")
    v["creation_time"] = c.seconds("creation_time", required=True)
    v["deletion_time"] = c.seconds("deletion_time")
    v["scheduled_time"] = c.seconds("scheduled_time")
    _check_share(c, v)
    _check_times(c, v)
    return v


def _check_share(c: _Cells, v: dict[str, Any]) -> None:
    gpus, milli = v["num_gpu"], v["gpu_milli"]
    if gpus == 0 and milli != 0:
        expected = "0 for a pod without GPUs (num_gpu 0)"
    elif gpus == 1 and milli == 0:
        expected = "1 to 1000 (the share of its GPU) for a pod with num_gpu 1"
    elif gpus > 1 and milli != _FULL:
        expected = "1000 (whole GPUs) for a pod with num_gpu > 1"
    else:
        return
    raise c.fail("gpu_milli", expected, "does not match num_gpu")


def _check_times(c: _Cells, v: dict[str, Any]) -> None:
    created, deleted, scheduled = v["creation_time"], v["deletion_time"], v["scheduled_time"]
    if scheduled is None and v["phase"] not in ("Pending", "Unknown"):
        raise c.fail("scheduled_time", f"the time a {v['phase']} pod was scheduled", "missing")
    if scheduled is not None and scheduled < created:
        raise c.fail(
            "scheduled_time", f"a time >= creation_time {c.text('creation_time')}", "before creation"
        )
    which = "scheduled_time" if scheduled is not None else "creation_time"
    if deleted is not None and deleted < (scheduled if scheduled is not None else created):
        raise c.fail("deletion_time", f"a time >= {which} {c.text(which)}", f"before {which}")


def _pod_job(v: dict[str, Any], ctx: _Context, extra: dict[str, str]) -> Job:
    ran = v["phase"] not in ("Pending", "Unknown") and v["deletion_time"] is not None
    meta: dict[str, Any] = {"phase": v["phase"]}
    for key in ("qos", "cpu_milli", "memory_mib"):  # also in meta: predictors' features read them there
        if v.get(key) not in (None, ""):
            meta[key] = v[key]
    if v["scheduled_time"] is not None:
        meta["start_s"] = v["scheduled_time"]
    if v["deletion_time"] is not None:
        meta["end_s"] = v["deletion_time"]
    if v["gpu_spec"]:
        meta["gpu_spec"] = "|".join(v["gpu_spec"])
    mem_gb = share = None
    if v["num_gpu"] == 1 and v["gpu_milli"] < _FULL:
        share = meta["gpu_share"] = v["gpu_milli"] / _FULL
        basis = ctx.share_basis_gb(v["gpu_spec"])
        mem_gb = None if basis is None else share * basis
    meta.update(extra)
    return Job(
        id=v["name"],
        submit_s=v["creation_time"],
        gpus=v["num_gpu"],
        mem_gb=mem_gb,
        duration_s=v["deletion_time"] - v["scheduled_time"] if ran else None,
        duration_includes_sharing=True,  # measured on the real cluster, where pods shared GPUs
        meta=meta,
        cpu_milli=v["cpu_milli"],
        host_mem_gb=None if v["memory_mib"] is None else v["memory_mib"] / 1024,
        gpu_share=share,
    )


@dataclass(slots=True)
class _Pods:
    """The pod rows read so far."""

    sink: RowSink
    dropped: Counter[str] = field(default_factory=Counter)
    last_s: float = 0.0


def _read_row(path: Path, ctx: _Context, rec: CsvRecord, pods: _Pods) -> None:
    try:
        row = dict(zip(ctx.header, row_cells(path, ctx.header, rec), strict=True))
        v = _pod_cells(_Cells(path, rec.line, row))
    except InputError as e:
        pods.sink.reject(e)
        return
    for key in ("creation_time", "deletion_time", "scheduled_time"):
        if v[key] is not None and v[key] > pods.last_s:
            pods.last_s = v[key]
    if v["num_gpu"] == 0 and not ctx.cpu_pods:
        pods.dropped[_SKIP_CPU] += 1
        return
    v["qos"] = row.get("qos", "").strip()
    spec = (s.strip() for s in row.get("gpu_spec", "").split("|"))
    v["gpu_spec"] = [s for s in spec if s and s.lower() != "nan"]
    extra = {k: row[k] for k in ctx.extras if row[k].strip()}
    pods.sink.add(rec.line, partial(_pod_job, v, ctx, extra), _pod_column)


def _pod_column(field_name: str) -> str:
    return "name" if field_name == "id" else field_name


def _censor(jobs: list[Job], end_s: float) -> list[str]:
    """Mark the pods the trace end cuts off; notes on every pod whose duration is not a plain measurement."""
    cut = [j for j in jobs if j.meta["phase"] == "Running" and j.meta.get("end_s") == end_s]
    for job in cut:
        job.meta["censored"] = True
    no_end = [j for j in jobs if j.meta["phase"] not in ("Pending", "Unknown") and "end_s" not in j.meta]
    for job in no_end:
        job.meta["censored"] = True
    never = sum(1 for j in jobs if j.meta["phase"] in ("Pending", "Unknown"))
    notes = []
    if cut:
        notes.append(
            f"{len(cut)} Running pods are still running at the trace end (deletion_time = {end_s:.0f} s, the "
            "last time in the file): their durations are lower bounds (meta censored=True)"
        )
    if no_end:
        notes.append(
            f"{len(no_end)} scheduled pods have no deletion_time: duration unknown (meta censored=True)"
        )
    if never:
        notes.append(
            f"{never} Pending (or Unknown) pods were never scheduled: duration unknown (None); meta end_s "
            "is when they were deleted"
        )
    return notes


def _share_notes(jobs: list[Job], ctx: _Context) -> list[str]:
    shared = [j for j in jobs if j.gpu_share is not None]
    if not shared:
        return []
    known = [j for j in shared if j.mem_gb is not None]
    notes = [
        f"{len(shared)} GPU-sharing pods (num_gpu 1, gpu_milli < 1000): gpu_share is the requested share "
        "of one GPU's compute; mem_gb = gpu_share x the memory of the smallest GPU the pod may use (a request, "
        "not measured memory)"
    ]
    if len(known) < len(shared):
        why = "no node list" if ctx.nodes is None or ctx.nodes.cluster is None else "unknown GPU memory"
        notes.append(f"{len(shared) - len(known)} GPU-sharing pods have mem_gb unknown ({why})")
    return notes


def _shared_cluster(cluster: ClusterSpec | None, jobs: list[Job]) -> ClusterSpec | None:
    """The cluster with GPU sharing on when the trace has GPU-sharing pods, as the openb cluster had."""
    shares = [j.gpu_share for j in jobs if j.gpu_share is not None]
    if cluster is None or not shares:
        return cluster
    most = max(2, math.floor(1 / min(shares) + 1e-9))
    return ClusterSpec(cluster.name, cluster.nodes, sharing=True, max_jobs_per_gpu=most)


def _finish(path: Path, pods: _Pods, fmt: str, notes: list[str]) -> TraceResult:
    if not pods.sink.jobs and pods.dropped:
        bad = dict(pods.sink.skipped)
        raise TraceError(
            f"{path}: the trace holds no usable pod (skipped: {dict(pods.dropped)}{f', invalid: {bad}' if bad else ''})"
        )
    said = [f"{n} pods skipped: {reason}" for reason, n in pods.dropped.items()]
    result = pods.sink.result(fmt, notes + said)
    for reason, n in pods.dropped.items():
        result.skipped[reason] = result.skipped.get(reason, 0) + n
    return result


@register_reader
class AlibabaGpuReader(TraceReader):
    """Reads the Alibaba GPU trace v2023 (openb) pods file, with the node list as the cluster.

    Args:
        node_list: the node list CSV; None looks for `*node_list*.csv` next to the pods file.
        cpu_pods: keep the pods without GPUs (num_gpu 0) as jobs of 0 GPUs that take CPU and host
            memory only (`gpuplan frag` places them; the schedulers skip them by default).
    """

    name = "alibaba-gpu-v2023"
    description = "Alibaba GPU cluster trace v2023 (openb pods CSV; the node list next to it is the cluster)"
    priority = 5

    def __init__(self, node_list: str | Path | None = None, cpu_pods: bool = False) -> None:
        self.node_list = Path(node_list) if node_list is not None else None
        self.cpu_pods = cpu_pods

    def detect(self, path: Path, head: str) -> bool:
        names = header_names(head) or []
        return {"name", "num_gpu", "gpu_milli", "pod_phase", "creation_time"} <= set(names)

    def read(self, path: Path, options: ReadOptions) -> TraceResult:
        records = csv_records(path)
        header = _checked_columns(path, header_record(path, records), _POD_REQUIRED, POD_COLUMNS)
        notes = ignored_option_warnings(options, self.name)
        nodes, node_notes = self._nodes(path, options.skip_bad)
        extras = [h for h in header if h not in POD_COLUMNS]
        if extras:
            notes.append(f"{len(extras)} unknown column(s) kept in each pod's meta: {', '.join(extras)}")
        ctx = _Context(header, nodes, extras, self.cpu_pods)
        pods = _Pods(RowSink(path, options.skip_bad))
        for rec in records:
            if not rec.is_blank:
                _read_row(path, ctx, rec, pods)
        result = _finish(path, pods, self.name, notes + node_notes + _share_notes(pods.sink.jobs, ctx))
        result.censored = _censor(result.jobs, pods.last_s)
        result.cluster = _shared_cluster(nodes.cluster if nodes else None, result.jobs)
        if nodes:
            for reason, n in nodes.skipped.items():
                result.skipped[reason] = result.skipped.get(reason, 0) + n
        return result

    def _nodes(self, path: Path, skip_bad: bool) -> tuple[NodeList | None, list[str]]:
        chosen: Path | None = self.node_list
        notes = [f"cluster from the node list {chosen}"]
        if chosen is None:
            chosen, notes = _find_node_list(path)
        if chosen is None:
            return None, notes
        nodes = read_node_list(chosen, skip_bad)
        return nodes, notes + nodes.warnings

"""The what-if view's work: read a trace (a path or an upload), simulate policies, keep the runs.

The comparison table and figures come from `gpuplan.report.html.report_parts`, the same code that
draws `gpuplan simulate --out`; this module only runs the simulations and adds the savings.
"""

from __future__ import annotations

import itertools
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.model import ClusterSpec, Job
from gpuplan.sim.result import SimResult
from gpuplan.web.savings import GpuCost, savings_vs_fifo

__all__ = ["MAX_UPLOAD_BYTES", "WhatIfRequest", "WhatIfStore", "run_whatif"]

MAX_UPLOAD_BYTES = 200 * 1024 * 1024
_TRACE_CLUSTER = "trace"  # cluster choice: the one the trace describes (SWF header, Alibaba nodes)
AUTO_CLUSTER = "auto"
"""Cluster choice of the CLI's rule: the trace's own cluster when it describes one, else the default
preset (gpuplan.cluster.DEFAULT_CLUSTER), said in the notes."""


@dataclass(slots=True)
class WhatIfRequest:
    """One what-if: a trace, a cluster, and the policies to compare.

    Attributes:
        trace_path: a trace file on the server (under the server's trace root), or
        upload: the bytes of an uploaded trace, with `upload_name` (its extension picks the reader).
        cluster: a preset, "trace" for the cluster the trace describes, or "auto" (the default): the
            trace's own when it has one, else the default preset, as every CLI command decides.
        policies, backfills: names; FIFO without backfill is always added as the baseline.
    """

    trace_path: Path | None = None
    upload: bytes | None = None
    upload_name: str = "upload.csv"
    cluster: str = AUTO_CLUSTER
    policies: list[str] = field(default_factory=lambda: ["fifo"])
    backfills: list[str] = field(default_factory=lambda: ["easy"])
    placer: str = "first-fit"
    oracle: bool = False
    skip_bad: bool = False
    fmt: str | None = None


class WhatIfStore:
    """The last few what-if results by id, so the page can fetch one run's Gantt later."""

    def __init__(self, keep: int = 8) -> None:
        self._keep = keep
        self._runs: OrderedDict[str, list[SimResult]] = OrderedDict()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def put(self, runs: list[SimResult]) -> str:
        with self._lock:
            key = str(next(self._ids))
            self._runs[key] = runs
            while len(self._runs) > self._keep:
                self._runs.popitem(last=False)
            return key

    def get(self, key: str) -> list[SimResult] | None:
        with self._lock:
            return self._runs.get(key)


def _read(req: WhatIfRequest) -> Any:
    from gpuplan.traces import ReadOptions, read_trace

    opts = ReadOptions(skip_bad=req.skip_bad)
    if req.upload is None:
        if req.trace_path is None:
            raise GpuplanError("no trace given: choose a file to upload or give a path")
        return read_trace(req.trace_path, req.fmt, opts)
    if len(req.upload) > MAX_UPLOAD_BYTES:
        raise GpuplanError(
            f"{req.upload_name}: {len(req.upload):,} bytes is over the {MAX_UPLOAD_BYTES:,}-byte limit"
        )
    # readers detect the format from the name and the first line, and report errors as NAME:LINE
    safe = Path(req.upload_name).name or "upload.csv"
    with tempfile.TemporaryDirectory(prefix="gpuplan-upload-") as tmp:
        path = Path(tmp) / safe
        path.write_bytes(req.upload)
        try:
            return read_trace(path, req.fmt, opts)
        except GpuplanError as e:
            raise GpuplanError(str(e).replace(str(path), safe)) from e


def _cluster(req: WhatIfRequest, trace_cluster: ClusterSpec | None, notes: list[str]) -> ClusterSpec:
    from gpuplan.cluster import DEFAULT_CLUSTER, load_cluster

    if req.cluster == AUTO_CLUSTER:
        if trace_cluster is not None:
            notes.append(f"the trace's own cluster: {trace_cluster.describe()}")
            return trace_cluster
        notes.append(
            f"the trace does not describe its cluster: the default {DEFAULT_CLUSTER}; pick one above"
        )
        return load_cluster(DEFAULT_CLUSTER)
    if req.cluster == _TRACE_CLUSTER:
        if trace_cluster is None:
            raise GpuplanError("cluster 'trace': this trace describes no cluster; pick a preset")
        return trace_cluster
    return load_cluster(req.cluster)


def _matrix(req: WhatIfRequest, jobs: list[Job], cluster: ClusterSpec) -> list[SimResult]:
    from gpuplan.sim.matrix import run_matrix

    pairs = {(p, b) for p in req.policies for b in req.backfills}
    results = run_matrix(
        jobs, cluster, req.policies, req.backfills, req.placer, req.oracle, show_progress=False
    )
    if ("fifo", "none") not in pairs:  # the baseline every saving is measured against
        results += run_matrix(jobs, cluster, ["fifo"], ["none"], req.placer, False, show_progress=False)
    return results


def run_whatif(req: WhatIfRequest, costs: dict[str, GpuCost], store: WhatIfStore) -> dict[str, Any]:
    """Simulate the request and return what the page shows, as JSON-ready data.

    Raises:
        GpuplanError: an unreadable trace (the message names file, line and field), an unknown
            cluster or policy, or a trace with no job that can be simulated.
    """
    from gpuplan.report.html import report_parts

    trace = _read(req)
    notes = list(trace.warnings)
    cluster = _cluster(req, trace.cluster, notes)
    jobs = [j for j in trace.jobs if j.duration_s is not None]
    if not jobs:
        raise GpuplanError(f"{trace.source or 'trace'}: no job has a duration; nothing to simulate")
    results = _matrix(req, jobs, cluster)
    parts = report_parts(results)
    key = store.put(parts.runs)
    if len(jobs) < len(trace.jobs):
        notes.append(f"{len(trace.jobs) - len(jobs)} of {len(trace.jobs)} jobs have no duration: left out")
    if trace.skipped:
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(trace.skipped.items()))
        notes.append(f"skipped {trace.skipped_total} bad row(s): {reasons}")
    return {
        "id": key,
        "trace": {"source": Path(trace.source).name if trace.source else req.upload_name,
                  "format": trace.format, "jobs": len(jobs), "skipped": trace.skipped_total},
        "cluster": {"name": cluster.name, "describe": cluster.describe(), "gpus": cluster.total_gpus},
        "notes": notes,
        "summary_html": parts.summary_html,
        "data": parts.data,
        "savings": savings_vs_fifo(parts.runs, cluster, costs),
        "figures": {"compare": parts.compare, "util": parts.util},
        "best": parts.best,
    }  # fmt: skip

"""The what-if view's work: read a trace (a path or an upload), simulate policies, keep the runs.

The comparison table and figures come from `gpuplan.report.html.report_parts`, the same code that
draws `gpuplan simulate --out`; this module only runs the simulations and adds the savings.
"""

from __future__ import annotations

import itertools
import stat
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuplan.errors import ClusterError, GpuplanError
from gpuplan.model import ClusterSpec, Job
from gpuplan.sim.result import SimResult
from gpuplan.web.savings import GpuCost, savings_vs_fifo

__all__ = ["MAX_CLUSTER_FILE_BYTES", "MAX_UPLOAD_BYTES", "WhatIfRequest", "WhatIfStore", "run_whatif"]

MAX_UPLOAD_BYTES = 200 * 1024 * 1024
"""Default limit of an uploaded trace (`gpuplan serve --max-upload-mb`)."""
MAX_CLUSTER_FILE_BYTES = 1024 * 1024
"""A cluster TOML file larger than this is refused unread (the presets are a few hundred bytes)."""
_TRACE_CLUSTER = "trace"  # cluster choice: the one the trace describes (SWF header, Alibaba nodes)
AUTO_CLUSTER = "auto"
"""Cluster choice of the CLI's rule: the trace's own cluster when it describes one, else the default
preset (gpuplan.cluster.DEFAULT_CLUSTER), said in the notes."""


@dataclass(slots=True)
class WhatIfRequest:
    """One what-if: a trace, a cluster, and the policies to compare.

    Attributes:
        trace_path: the trace file: one under the server's trace root, or an upload saved to a
            temporary file named as the upload (its extension picks the reader).
        trace_name: the name the answer gives the trace (relative to the trace root, or the
            upload's name).
        cluster: a preset, "trace" for the cluster the trace describes, or "auto" (the default): the
            trace's own when it has one, else the default preset, as every CLI command decides.
            With `cluster_file`, the name the request gave that file (for messages).
        cluster_file: a cluster TOML file, already checked to lie under the trace root.
        policies, backfills: names; FIFO without backfill is always added as the baseline.
    """

    trace_path: Path | None = None
    trace_name: str = ""
    cluster: str = AUTO_CLUSTER
    cluster_file: Path | None = None
    policies: list[str] = field(default_factory=lambda: ["fifo"])
    backfills: list[str] = field(default_factory=lambda: ["easy"])
    placer: str = "first-fit"
    oracle: bool = False
    skip_bad: bool = False
    fmt: str | None = None


@dataclass(frozen=True, slots=True)
class _Kept:
    """One run as the cache keeps it: what its Gantt draws (the first GANTT_MAX_RECORDS jobs)."""

    result: SimResult
    jobs: int  # the run's jobs in all


class WhatIfStore:
    """The most recently used what-if results by id, so the page can fetch one run's Gantt later.

    Bounded twice, least recently used first out: at most `max_entries` what-ifs, and at most
    `max_records` job records in all (the newest what-if is always kept). Each run keeps only the
    records its Gantt draws (report.gantt.GANTT_MAX_RECORDS) and no utilization timeline, so one
    what-if holds at most runs x 5,000 records whatever the trace's size.
    """

    def __init__(self, max_entries: int = 8, max_records: int = 200_000) -> None:
        if max_entries < 1 or max_records < 1:
            raise GpuplanError(
                f"what-if cache of {max_entries} entries, {max_records} records: both must be >= 1"
            )
        self.max_entries = max_entries
        self.max_records = max_records
        self._runs: OrderedDict[str, list[_Kept]] = OrderedDict()
        self._records = 0
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def put(self, runs: list[SimResult]) -> str:
        from gpuplan.report.gantt import gantt_records

        kept = [_Kept(replace(r, records=gantt_records(r), util_timeline=[]), len(r.records)) for r in runs]
        with self._lock:
            key = str(next(self._ids))
            self._runs[key] = kept
            self._records += sum(len(k.result.records) for k in kept)
            while len(self._runs) > 1 and (
                len(self._runs) > self.max_entries or self._records > self.max_records
            ):
                _, old = self._runs.popitem(last=False)
                self._records -= sum(len(k.result.records) for k in old)
            return key

    def get(self, key: str) -> list[tuple[SimResult, int]] | None:
        """The runs of what-if `key` (each with its number of jobs), None when it is not kept."""
        with self._lock:
            runs = self._runs.get(key)
            if runs is None:
                return None
            self._runs.move_to_end(key)
            return [(k.result, k.jobs) for k in runs]

    def stats(self) -> dict[str, int]:
        """What the cache holds now, and its bounds."""
        with self._lock:
            return {
                "entries": len(self._runs),
                "records": self._records,
                "max_entries": self.max_entries,
                "max_records": self.max_records,
            }


def _read(req: WhatIfRequest) -> Any:
    from gpuplan.traces import ReadOptions, read_trace

    if req.trace_path is None:
        raise GpuplanError("no trace given: choose a file to upload or give a path")
    return read_trace(req.trace_path, req.fmt, ReadOptions(skip_bad=req.skip_bad))


def _cluster(req: WhatIfRequest, trace_cluster: ClusterSpec | None, notes: list[str]) -> ClusterSpec:
    from gpuplan.cluster import DEFAULT_CLUSTER, load_preset

    if req.cluster == AUTO_CLUSTER:
        if trace_cluster is not None:
            notes.append(f"the trace's own cluster: {trace_cluster.describe()}")
            return trace_cluster
        notes.append(
            f"the trace does not describe its cluster: the default {DEFAULT_CLUSTER}; pick one above"
        )
        return load_preset(DEFAULT_CLUSTER)
    if req.cluster == _TRACE_CLUSTER:
        if trace_cluster is None:
            raise GpuplanError("cluster 'trace': this trace describes no cluster; pick a preset")
        return trace_cluster
    if req.cluster_file is not None:
        return _cluster_file(req.cluster_file, req.cluster)
    return load_preset(req.cluster)


def _cluster_file(path: Path, name: str) -> ClusterSpec:
    from gpuplan.cluster import cluster_from_toml

    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise ClusterError(f"{name}: not a file (give a cluster .toml file under the trace folder)")
        if info.st_size > MAX_CLUSTER_FILE_BYTES:
            raise ClusterError(f"{name}: {info.st_size:,} bytes is too large for a cluster file")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ClusterError(f"{name}: no such cluster file under the trace folder") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ClusterError(
            f"{name}: cannot read the cluster file ({getattr(e, 'strerror', None) or e})"
        ) from e
    return cluster_from_toml(text, name)


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
        "trace": {"source": req.trace_name or Path(trace.source).name,
                  "format": trace.format, "jobs": len(jobs), "skipped": trace.skipped_total},
        "cluster": {"name": cluster.name, "describe": cluster.describe(), "gpus": cluster.total_gpus},
        "notes": notes,
        "summary_html": parts.summary_html,
        "data": parts.data,
        "savings": savings_vs_fifo(parts.runs, cluster, costs),
        "figures": {"compare": parts.compare, "util": parts.util},
        "best": parts.best,
    }  # fmt: skip

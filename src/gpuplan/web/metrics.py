"""`/metrics`: the node and its queue in Prometheus text format (prometheus-client).

Per-GPU gauges keep the DCGM exporter's names, units and labels where they mean the same
(`DCGM_FI_DEV_GPU_UTIL` %, `DCGM_FI_DEV_FB_USED` / `_FREE` MiB, `DCGM_FI_DEV_POWER_USAGE` W,
`DCGM_FI_DEV_GPU_TEMP` °C; labels `gpu`, `UUID`, `modelName`, `Hostname`), so dashboards built
for dcgm-exporter read them. Those camelCase labels are why `promtool check metrics` exits 3 on
the DCGM series; they stay, being dcgm-exporter's own. What DCGM lacks is under `gpuplan_`, with
snake_case labels (`uuid`, `model_name`, `hostname`) that pass promtool's lint: per-process and
per-job GPU memory and utilization, queue length, jobs by state, and a histogram of queue wait.
Grafana dashboard on these names: docs/grafana-dashboard.json.
A reading the device does not give is left out for that GPU only.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuplan.errors import GpuplanError
from gpuplan.web.live import GpuStatus, LiveSource, ProcStatus, QueueRow

__all__ = ["DCGM_SERIES", "WAIT_BUCKETS_S", "LiveCollector"]

_MIB_PER_GB = 1024.0  # readings are GiB (the gpuplan convention); DCGM reports MiB
WAIT_BUCKETS_S = (10.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 3 * 3600.0, 6 * 3600.0, 24 * 3600.0)

DCGM_SERIES: dict[str, tuple[str, Callable[[GpuStatus], float | None]]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("GPU utilization (in %).", lambda g: g.util_pct),
    "DCGM_FI_DEV_FB_USED": (
        "Framebuffer memory used (in MiB).",
        lambda g: None if g.mem_used_gb is None else g.mem_used_gb * _MIB_PER_GB,
    ),
    "DCGM_FI_DEV_FB_FREE": (
        "Framebuffer memory free (in MiB).",
        lambda g: None if g.mem_used_gb is None else (g.mem_total_gb - g.mem_used_gb) * _MIB_PER_GB,
    ),
    "DCGM_FI_DEV_POWER_USAGE": ("Power draw (in W).", lambda g: g.power_w),
    "DCGM_FI_DEV_GPU_TEMP": ("GPU temperature (in C).", lambda g: g.temp_c),
}
_GPU_LABELS = ("gpu", "UUID", "modelName", "Hostname")  # dcgm-exporter's names: DCGM_FI_* only
_OWN_GPU_LABELS = ("gpu", "uuid", "model_name", "hostname")  # gpuplan_* series: snake_case (promtool)
_PROC_LABELS = ("gpu", "uuid", "pid", "job_id", "user")
_JOB_LABELS = ("job_id", "user", "name")
STATES = ("running", "suspended", "held", "waiting")


class LiveCollector(Collector):
    """Reads the source on every scrape (one snapshot, one queue read per scrape)."""

    def __init__(self, source: LiveSource, clock: Callable[[], float] = time.time) -> None:
        self.source = source
        self.clock = clock
        self._waits = _WaitHistogram()

    def collect(self) -> Iterator[Metric]:
        snap = self.source.snapshot()
        try:
            rows: list[QueueRow] | None = self.source.queue()
        except GpuplanError:  # an unreadable store: the GPU series still go out
            rows = None
        readable = GaugeMetricFamily(
            "gpuplan_queue_readable", "0 when the queue (the agent's store, or Slurm) cannot be read."
        )
        readable.add_metric([], 0.0 if rows is None else 1.0)
        yield readable
        yield from _gpu_metrics(snap.gpus)
        lost = GaugeMetricFamily(
            "gpuplan_gpu_lost", "1 when the GPU stopped answering.", labels=_OWN_GPU_LABELS
        )
        for g in snap.gpus:
            lost.add_metric([str(g.index), g.uuid, g.model, g.node], 1.0 if g.lost else 0.0)
        yield lost
        uuid = {g.index: g.uuid for g in snap.gpus}
        yield from _process_metrics(snap.processes, uuid)
        yield from _job_metrics(snap.processes)
        if rows is not None:
            yield from _queue_metrics(rows, self.clock())
            yield self._waits.observe(rows)
        yield from self.source.extra_metrics()
        info = GaugeMetricFamily("gpuplan_fake_devices", "1 when the readings come from a fake device set.")
        info.add_metric([], 1.0 if self.source.is_fake else 0.0)
        yield info


def _gpu_metrics(gpus: tuple[GpuStatus, ...]) -> Iterator[Metric]:
    for name, (doc, read) in DCGM_SERIES.items():
        fam = GaugeMetricFamily(name, doc, labels=_GPU_LABELS)
        for g in gpus:
            value = read(g)
            if value is not None:
                fam.add_metric([str(g.index), g.uuid, g.model, g.node], value)
        yield fam


def _process_metrics(procs: tuple[ProcStatus, ...], uuid: dict[int, str]) -> Iterator[Metric]:
    mem = GaugeMetricFamily(
        "gpuplan_process_gpu_memory_used_mib",
        "GPU memory one process holds on one GPU (MiB).",
        labels=_PROC_LABELS,
    )
    util = GaugeMetricFamily(
        "gpuplan_process_gpu_util_percent",
        "GPU utilization of one process on one GPU (%).",
        labels=_PROC_LABELS,
    )
    for p in procs:
        labels = [str(p.gpu), uuid.get(p.gpu, ""), str(p.pid), p.job_id, p.user]
        if p.mem_gb is not None:
            mem.add_metric(labels, p.mem_gb * _MIB_PER_GB)
        if p.util_pct is not None:
            util.add_metric(labels, p.util_pct)
    yield mem
    yield util


def _job_metrics(procs: tuple[ProcStatus, ...]) -> Iterator[Metric]:
    mem = GaugeMetricFamily(
        "gpuplan_job_gpu_memory_used_mib",
        "GPU memory a job holds, summed over its GPUs (MiB).",
        labels=_JOB_LABELS,
    )
    util = GaugeMetricFamily(
        "gpuplan_job_gpu_util_percent", "Mean GPU utilization over a job's GPUs (%).", labels=_JOB_LABELS
    )
    by_job: dict[tuple[str, str, str], list[ProcStatus]] = defaultdict(list)
    for p in procs:
        if p.job_id:
            by_job[(p.job_id, p.user, p.name)].append(p)
    for key, ps in sorted(by_job.items()):
        mems = [p.mem_gb for p in ps if p.mem_gb is not None]
        utils = [p.util_pct for p in ps if p.util_pct is not None]
        if mems:
            mem.add_metric(list(key), sum(mems) * _MIB_PER_GB)
        if utils:
            util.add_metric(list(key), sum(utils) / len(utils))
    yield mem
    yield util


def _queue_metrics(rows: list[QueueRow], now: float) -> Iterator[Metric]:
    counts: dict[str, int] = dict.fromkeys(STATES, 0)
    for r in rows:
        counts[r.state] = counts.get(r.state, 0) + 1
    length = GaugeMetricFamily("gpuplan_queue_length", "Jobs not running: waiting, held or suspended.")
    length.add_metric([], sum(n for state, n in counts.items() if state != "running"))
    yield length
    by_state = GaugeMetricFamily("gpuplan_jobs", "Jobs by state.", labels=["state"])
    for state, n in sorted(counts.items()):
        by_state.add_metric([state], n)
    yield by_state
    oldest = GaugeMetricFamily(
        "gpuplan_queue_oldest_wait_seconds", "How long the longest-waiting job has waited."
    )
    oldest.add_metric([], max((now - r.submit_s for r in rows if r.state != "running"), default=0.0))
    yield oldest


class _WaitHistogram:
    """Queue wait (start - submit) of every job seen started, counted once per job: a cumulative
    histogram, so `rate()` and `histogram_quantile()` work as on any Prometheus histogram. A job that
    starts and ends between two scrapes is not seen."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._counts = [0] * len(WAIT_BUCKETS_S)
        self._count = 0
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, rows: list[QueueRow]) -> Metric:
        with self._lock:
            for r in rows:
                if r.start_s is None or r.job_id in self._seen:
                    continue
                self._seen.add(r.job_id)
                wait = max(0.0, r.start_s - r.submit_s)
                self._count += 1
                self._sum += wait
                for i, edge in enumerate(WAIT_BUCKETS_S):
                    if wait <= edge:
                        self._counts[i] += 1
            buckets: list[tuple[str, Any]] = [(_edge(e), n) for e, n in zip(WAIT_BUCKETS_S, self._counts)]
            buckets.append(("+Inf", self._count))
            hist = HistogramMetricFamily(
                "gpuplan_job_wait_seconds", "Queue wait of jobs seen started (start - submit)."
            )
            hist.add_metric([], buckets, sum_value=self._sum)
            return hist


def _edge(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)

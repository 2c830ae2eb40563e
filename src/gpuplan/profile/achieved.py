"""What a cluster really achieved, from the start and end times a trace records (meta start_s/end_s):
utilization over time, queueing delay, and the idle GPUs while jobs waited, split by cause.

Times in meta have the origin of `Job.submit_s`. The split of idle GPUs is an approximation because
traces rarely say on which node a job ran; docs/audit.md gives the definitions.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuplan.model import ClusterSpec, Job
from gpuplan.profile.stats import Distribution, distribution, meta_seconds

__all__ = ["Achieved", "IdleSplit", "Timeline", "achieved"]

_INF = math.inf
_ALLOC, _WAIT, _NEVER = 0, 1, 2


@dataclass(slots=True, frozen=True)
class IdleSplit:
    """Idle GPU-hours while at least one job waited, split by whether a waiting job could use them.

    Attributes:
        total_gpu_h: idle GPUs x time, summed over the times some job waited.
        usable_gpu_h: some waiting job fitted whatever the placement of the running jobs (it may span
            nodes and needed no more than the idle GPUs, or it needed at most ceil(idle / nodes) GPUs,
            which some node must have had free): idle by policy, reservations or the trace's own delays.
        fragmentation_gpu_h: enough idle GPUs in number for the smallest waiting single-node job, but
            more than ceil(idle / nodes): it fitted only if the idle GPUs sat together on one node,
            which the trace does not say. An upper estimate of fragmentation.
        too_few_gpu_h: fewer idle GPUs than the smallest waiting job needs (or than one node holds):
            no waiting job could use them on any placement. Wide jobs waiting for GPUs to drain.
        never_started_fit_gpu_h: no waiting job that later started fitted, but one that never started
            did (pending until cancelled or until the trace ends). Its wait was not for GPUs alone:
            held, cancelled, or a constraint the trace does not show. Counted apart, not as usable.

    The four parts sum to `total_gpu_h`; usable, fragmentation and too few look at the jobs that
    started first, so a trace without never-started jobs has never_started_fit_gpu_h 0.
    """

    total_gpu_h: float
    usable_gpu_h: float
    fragmentation_gpu_h: float
    too_few_gpu_h: float
    never_started_fit_gpu_h: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "total_gpu_h": self.total_gpu_h,
            "usable_gpu_h": self.usable_gpu_h,
            "fragmentation_gpu_h": self.fragmentation_gpu_h,
            "too_few_gpu_h": self.too_few_gpu_h,
            "never_started_fit_gpu_h": self.never_started_fit_gpu_h,
            "method": "approximation without node placement: idle GPUs vs the smallest waiting job (docs/audit.md)",
        }


@dataclass(slots=True)
class Timeline:
    """Time-weighted means over equal bins from the first event on; `t_s` are bin starts in seconds
    from `origin_s` (trace time). `utilization` is allocated / cluster GPUs (None without a cluster)."""

    origin_s: float
    bin_s: float
    t_s: list[float]
    allocated_gpus: list[float]
    waiting_jobs: list[float]
    utilization: list[float] | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "origin_s": self.origin_s,
            "bin_s": self.bin_s,
            "t_s": self.t_s,
            "allocated_gpus": self.allocated_gpus,
            "waiting_jobs": self.waiting_jobs,
            "utilization": self.utilization,
        }


@dataclass(slots=True)
class Achieved:
    """The history as it ran.

    Attributes:
        jobs_started: jobs with a start time.
        jobs_never_started: jobs without one (waiting until their end_s or the end of the trace).
        window_s: (first event, last event) in trace time.
        makespan_s: last event - first event.
        allocated_gpu_hours: GPUs held x time over the window.
        utilization: allocated_gpu_hours / (cluster GPUs x window); None without a cluster. It may
            exceed 1 when the trace holds more GPUs than the cluster has (shared GPUs, wrong cluster).
        peak_allocated_gpus: most GPUs held at once.
        queue_delay_s: start - submit of the started jobs (a start before the submit counts as 0).
        idle_while_waiting: see IdleSplit; None without a cluster.
        notes: what was assumed (running jobs, jobs that never started, odd times).
    """

    jobs_started: int
    jobs_never_started: int
    window_s: tuple[float, float]
    makespan_s: float
    allocated_gpu_hours: float
    utilization: float | None
    peak_allocated_gpus: int
    queue_delay_s: Distribution
    timeline: Timeline
    idle_while_waiting: IdleSplit | None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "jobs_started": self.jobs_started,
            "jobs_never_started": self.jobs_never_started,
            "window_s": list(self.window_s),
            "makespan_s": self.makespan_s,
            "allocated_gpu_hours": self.allocated_gpu_hours,
            "utilization": self.utilization,
            "peak_allocated_gpus": self.peak_allocated_gpus,
            "queue_delay_s": self.queue_delay_s.as_dict(),
            "timeline": self.timeline.as_dict(),
            "idle_while_waiting": None
            if self.idle_while_waiting is None
            else self.idle_while_waiting.as_dict(),
            "notes": list(self.notes),
        }


@dataclass(slots=True)
class _Events:
    """(time, kind, delta, gpus, spans) rows and the counts behind the notes; kind _NEVER is a wait
    of a job that never started."""

    rows: list[tuple[float, int, int, int, bool]] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)
    started: int = 0
    never_started: int = 0
    running_at_end: int = 0
    start_before_submit: int = 0
    end_before_start: int = 0


def achieved(jobs: Sequence[Job], cluster: ClusterSpec | None = None, bins: int = 200) -> Achieved | None:
    """What the history achieved; None when no job has a start time (meta 'start_s').

    A started job holds its GPUs from start_s to end_s, else to start_s + duration_s, else to the end
    of the trace (still running). A job without start_s waits from submit_s to its end_s (cancelled
    while pending), else to the end of the trace.
    """
    starts = [meta_seconds(j, "start_s") for j in jobs]
    if all(s is None for s in starts):
        return None
    ends = [meta_seconds(j, "end_s") for j in jobs]
    horizon = _horizon(jobs, starts, ends)
    ev = _events(jobs, starts, ends, horizon, cluster)
    ev.rows.sort(key=lambda r: r[0])
    times, alloc, waiting, idle = _sweep(ev.rows, cluster)
    t0, t1 = times[0], times[-1]
    area = _area(times, alloc)
    total_gpus = cluster.total_gpus if cluster is not None else None
    window = t1 - t0
    return Achieved(
        jobs_started=ev.started,
        jobs_never_started=ev.never_started,
        window_s=(t0, t1),
        makespan_s=window,
        allocated_gpu_hours=float(area[-1]) / 3600.0,
        utilization=float(area[-1]) / (total_gpus * window) if total_gpus and window > 0 else None,
        peak_allocated_gpus=int(max(alloc)),
        queue_delay_s=distribution(ev.delays),
        timeline=_timeline(times, alloc, waiting, bins, total_gpus),
        idle_while_waiting=idle,
        notes=_notes(ev, cluster, int(max(alloc))),
    )


def _horizon(jobs: Sequence[Job], starts: list[float | None], ends: list[float | None]) -> float:
    """The last time the trace knows of: a submit, start, end or start + duration."""
    last = max(j.submit_s for j in jobs)
    for j, s, e in zip(jobs, starts, ends):
        if s is not None:
            last = max(last, s + (j.duration_s or 0.0))
        if e is not None:
            last = max(last, e)
    return last


def _events(
    jobs: Sequence[Job],
    starts: list[float | None],
    ends: list[float | None],
    horizon: float,
    cluster: ClusterSpec | None,
) -> _Events:
    ev = _Events()
    widest = cluster.max_node_gpus if cluster is not None else 0
    for j, start, end in zip(jobs, starts, ends):
        spans = j.may_span_nodes or (cluster is not None and j.gpus > widest)
        if start is None:
            ev.never_started += 1
            until = end if end is not None and end > j.submit_s else horizon
            ev.rows += [(j.submit_s, _NEVER, 1, j.gpus, spans), (until, _NEVER, -1, j.gpus, spans)]
            continue
        ev.started += 1
        if start < j.submit_s:
            ev.start_before_submit += 1
        ev.delays.append(max(start - j.submit_s, 0.0))
        if start > j.submit_s:
            ev.rows += [(j.submit_s, _WAIT, 1, j.gpus, spans), (start, _WAIT, -1, j.gpus, spans)]
        ev.rows += [
            (start, _ALLOC, j.gpus, 0, False),
            (_run_end(j, start, end, horizon, ev), _ALLOC, -j.gpus, 0, False),
        ]
    return ev


def _run_end(job: Job, start: float, end: float | None, horizon: float, ev: _Events) -> float:
    if end is not None:
        if end < start:
            ev.end_before_start += 1
        return max(end, start)
    if job.duration_s is not None:
        return start + job.duration_s
    ev.running_at_end += 1
    return max(horizon, start)


def _sweep(
    rows: list[tuple[float, int, int, int, bool]], cluster: ClusterSpec | None
) -> tuple[list[float], list[int], list[int], IdleSplit | None]:
    """Step functions (distinct times, GPUs held and jobs waiting from then on) and the idle split."""
    times: list[float] = []
    alloc_at: list[int] = []
    wait_at: list[int] = []
    alloc = waiting = 0
    # GPU counts of waiting jobs that may span nodes, and of those that need one node: [0] of the jobs
    # that later started, [1] of those that never started
    span_wait: tuple[Counter[int], Counter[int]] = (Counter(), Counter())
    node_wait: tuple[Counter[int], Counter[int]] = (Counter(), Counter())
    split = [0.0, 0.0, 0.0, 0.0]  # usable, fragmentation, too few, a never-started job fitted (GPU-s)
    # (cluster GPUs, nodes, GPUs of the largest node), computed once: the spec recomputes them per call
    shape = None if cluster is None else (cluster.total_gpus, len(cluster.nodes), cluster.max_node_gpus)
    i, n = 0, len(rows)
    while i < n:
        now = rows[i][0]
        while i < n and rows[i][0] == now:
            _, kind, delta, gpus, spans = rows[i]
            if kind == _ALLOC:
                alloc += delta
            else:
                waiting += delta
                _count((span_wait if spans else node_wait)[kind == _NEVER], gpus, delta)
            i += 1
        if shape is not None and waiting and i < n:
            _split(split, shape[1], shape[2], shape[0] - alloc, span_wait, node_wait, rows[i][0] - now)
        times.append(now)
        alloc_at.append(alloc)
        wait_at.append(waiting)
    idle = None
    if cluster is not None:
        usable, frag, few, never = (s / 3600.0 for s in split)
        idle = IdleSplit(usable + frag + few + never, usable, frag, few, never)
    return times, alloc_at, wait_at, idle


def _count(counter: Counter[int], gpus: int, delta: int) -> None:
    counter[gpus] += delta
    if counter[gpus] <= 0:
        del counter[gpus]


def _split(
    split: list[float],
    nodes: int,
    widest: int,
    idle: int,
    span_wait: tuple[Counter[int], Counter[int]],
    node_wait: tuple[Counter[int], Counter[int]],
    dt: float,
) -> None:
    """Add idle x dt to the part it belongs to (see IdleSplit); `widest` is the largest node's GPUs."""
    if idle <= 0 or dt <= 0:
        return
    started = _part(nodes, widest, idle, min(span_wait[0], default=_INF), min(node_wait[0], default=_INF))
    if started != 0:  # no job that later started fitted: did one that never started?
        smallest_span = min(min(span_wait[0], default=_INF), min(span_wait[1], default=_INF))
        smallest_node = min(min(node_wait[0], default=_INF), min(node_wait[1], default=_INF))
        every = _part(nodes, widest, idle, smallest_span, smallest_node)
        started = 3 if every == 0 else every
    split[started] += idle * dt


def _part(nodes: int, widest: int, idle: int, smallest_span: float, smallest_node: float) -> int:
    """0 usable, 1 fragmentation, 2 too few (see IdleSplit), for the smallest waiting jobs given."""
    sure_on_one_node = -(-idle // nodes)  # pigeonhole: some node has this many free
    if smallest_span <= idle or smallest_node <= sure_on_one_node:
        return 0
    if smallest_node <= min(idle, widest):
        return 1
    return 2


def _area(times: list[float], alloc: list[int]) -> np.ndarray:
    """Cumulative GPU-seconds held at each time of the step function."""
    t = np.asarray(times, float)
    return np.concatenate([[0.0], np.cumsum(np.diff(t) * np.asarray(alloc[:-1], float))])


def _timeline(
    times: list[float], alloc: list[int], waiting: list[int], bins: int, total_gpus: int | None
) -> Timeline:
    t = np.asarray(times, float)
    t0, t1 = float(t[0]), float(t[-1])
    if t1 <= t0 or bins < 1:
        return Timeline(t0, 0.0, [], [], [], None if total_gpus is None else [])
    edges = np.linspace(t0, t1, bins + 1)
    width = (t1 - t0) / bins

    def means(levels: list[int]) -> np.ndarray:
        area = np.concatenate([[0.0], np.cumsum(np.diff(t) * np.asarray(levels[:-1], float))])
        return np.diff(np.interp(edges, t, area)) / width

    held, queued = means(alloc), means(waiting)
    util = None if not total_gpus else [round(float(x), 6) for x in held / total_gpus]
    return Timeline(
        origin_s=t0,
        bin_s=width,
        t_s=[round(float(x - t0), 3) for x in edges[:-1]],
        allocated_gpus=[round(float(x), 4) for x in held],
        waiting_jobs=[round(float(x), 4) for x in queued],
        utilization=util,
    )


def _notes(ev: _Events, cluster: ClusterSpec | None, peak: int) -> list[str]:
    notes = []
    if ev.running_at_end:
        notes.append(
            f"{ev.running_at_end} started job(s) have neither end_s nor duration_s: counted as running "
            "until the end of the trace (censored)"
        )
    if ev.never_started:
        notes.append(
            f"{ev.never_started} job(s) never started: counted as waiting until their end_s "
            "(cancelled while pending) or the end of the trace"
        )
    if ev.start_before_submit:
        notes.append(f"{ev.start_before_submit} job(s) start before their submit time: counted as no wait")
    if ev.end_before_start:
        notes.append(f"{ev.end_before_start} job(s) end before they start: counted as running 0 s")
    if cluster is not None and peak > cluster.total_gpus:
        notes.append(
            f"the trace holds up to {peak} GPUs at once, more than the cluster's {cluster.total_gpus}: "
            "GPUs were shared or the cluster is not the one the trace ran on; utilization can exceed 100 %"
        )
    return notes

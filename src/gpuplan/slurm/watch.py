"""`gpuplan slurm watch` as a service a site can leave running (contrib/systemd, docs/slurm.md).

- One writer per cluster: `writer_lock` takes an exclusive `fcntl.flock` on a file in the state
  directory named after the cluster (`ClusterName`); a second watcher (or an `apply`/`reset` while a
  watcher runs) exits with a message naming the holder: pid, host, since when. The kernel drops the
  lock when its process dies, kill -9 included.
- A pass cut short is finished on the next pass from the journal in the state file (slurm/apply.py).
- Site-factor mode looks at Slurm's priorities at every look and re-sets only the jobs whose rank
  drifted (age grows, fair-share decays); it replans when the set of jobs (or their states) changes.
  Priority and nice modes apply only when the queue changes, as before.
- While slurmctld does not answer, the watcher logs one line per try and waits 2 s, 4 s, ... up to
  `max_backoff_s` between tries; it logs again when Slurm answers.
- `Metrics` counts passes, jobs moved, errors and the last success for Prometheus; slurm/health.py
  serves them with `/healthz`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from gpuplan.errors import GpuplanError
from gpuplan.slurm.apply import DEFAULT_HORIZON_S, DEFAULT_MODE, apply_order, default_state_path
from gpuplan.slurm.client import SlurmClient, live_state
from gpuplan.slurm.planner import DEFAULT_PLACER, QueuePlan, plan_queue, predicted_durations
from gpuplan.slurm.runner import SlurmCommandError, SlurmError, SlurmPermissionError, is_transient

__all__ = ["Metrics", "WatchOptions", "Watcher", "lock_path", "writer_lock"]


def lock_path(state_path: Path, cluster: str) -> Path:
    """The lock file of `cluster`, beside the state file."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in cluster) or "cluster"
    return state_path.parent / f"gpuplan-slurm-{safe}.lock"


@contextlib.contextmanager
def writer_lock(state_path: Path | None, cluster: str, role: str, clock: Callable[[], float] = time.time
                ) -> Iterator[Path]:  # fmt: skip
    """Hold the cluster's writer lock while the block runs.

    Raises:
        GpuplanError: another process holds it (the message names its pid, host, role and start).
    """
    path = lock_path(state_path or default_state_path(), cluster)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise GpuplanError(_held_message(path, cluster)) from None
        since = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(clock()))
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": since,
            "role": role,
            "cluster": cluster,
        }
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(info).encode())
        os.fsync(fd)
        yield path
    finally:
        os.close(fd)  # closing drops the flock


def _held_message(path: Path, cluster: str) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    who = (f"pid {info.get('pid', '?')} on {info.get('host', '?')}, {info.get('role', 'gpuplan')} since "
           f"{info.get('since', '?')}")  # fmt: skip
    return (
        f"another gpuplan writes to Slurm cluster {cluster!r}: {who} (lock {path}); one watcher per cluster: "
        "stop it first (`systemctl stop gpuplan-slurm-watch`, or kill that pid), or use another --state directory "
        "for another cluster"
    )


class Metrics:
    """The watcher's Prometheus metrics, in their own registry (several watchers in one test process)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.registry = CollectorRegistry()
        r = self.registry
        self.passes = Counter("gpuplan_slurm_watch_passes", "Looks at the queue that completed", registry=r)
        self.moved = Counter(
            "gpuplan_slurm_watch_jobs_moved", "scontrol update lines that went through", registry=r
        )
        self.errors = Counter(
            "gpuplan_slurm_watch_errors", "Looks that failed, by kind", ["kind"], registry=r
        )
        self.last_success = Gauge("gpuplan_slurm_watch_last_success_timestamp_seconds",
                                  "Unix time of the last completed look", registry=r)  # fmt: skip
        self.plan_age = Gauge("gpuplan_slurm_watch_plan_age_seconds", "Seconds since the plan in force was made",
                              registry=r)  # fmt: skip
        self.managed = Gauge(
            "gpuplan_slurm_watch_managed_jobs", "Pending jobs in the plan in force", registry=r
        )
        self.plan_time: float | None = None
        self.last_ok: float | None = None
        self.last_error = ""
        self.plan_age.set_function(
            lambda: self.clock() - self.plan_time if self.plan_time is not None else -1.0
        )

    def health(self, stale_after_s: float) -> tuple[bool, dict[str, Any]]:
        """(healthy, body): healthy when a look completed within `stale_after_s`."""
        now = self.clock()
        age = None if self.last_ok is None else now - self.last_ok
        ok = age is not None and age <= stale_after_s
        status = "ok" if ok else ("starting" if self.last_ok is None else "stale")
        return ok, {"status": status, "last_success_age_s": age, "stale_after_s": stale_after_s,
                    "plan_age_s": None if self.plan_time is None else now - self.plan_time,
                    "last_error": self.last_error or None}  # fmt: skip


@dataclass
class WatchOptions:
    """What each pass plans and how it applies (the options of `gpuplan slurm watch`)."""

    partitions: tuple[str, ...] = ()
    policy: str = "best"
    predict: Path | None = None
    mode: str = DEFAULT_MODE
    weight: float = 1.0
    horizon_s: float = DEFAULT_HORIZON_S
    state_path: Path | None = None
    interval_s: float = 30.0
    max_backoff_s: float = 300.0
    placer: str = DEFAULT_PLACER  # how the forecast places jobs; Slurm places them itself


@dataclass
class Watcher:
    """The watch loop: `run` looks every `interval_s` (sleep and clock injected) and logs one line per
    pass that changed something, per error and per recovery (`log` gets a dict; the CLI prints it)."""

    client: SlurmClient
    options: WatchOptions
    log: Callable[[dict[str, Any]], None]
    sleep: Callable[[float], None] = time.sleep
    metrics: Metrics = field(default_factory=Metrics)
    plan: QueuePlan | None = None
    _signature: frozenset[tuple[str, str]] | None = None
    _down_since: float | None = None

    def run(self, iterations: int | None = None) -> int:
        """Look `iterations` times (None: until interrupted); returns the looks that changed something.

        Raises:
            SlurmPermissionError: the caller may not change priorities (a service cannot recover from it).
        """
        changed = 0
        delay = 0.0
        n = 0
        try:
            while iterations is None or n < iterations:
                if n:
                    self.sleep(delay or self.options.interval_s)
                n += 1
                try:
                    changed += bool(self.look())
                    delay = 0.0
                except SlurmPermissionError:
                    raise
                except SlurmError as e:
                    delay = self.failed(e, delay)
        except KeyboardInterrupt:
            pass
        return changed

    def look(self) -> int:
        """One look: replan if the queue changed, (re)apply where needed; returns the jobs changed."""
        o = self.options
        c = self.client
        jobs = c.queue(o.partitions)
        sig = frozenset((q.job_id, q.state) for q in jobs)
        replan = sig != self._signature or self.plan is None
        if self._down_since is not None:
            self.log({"event": "slurm_back", "down_s": round(c.clock() - self._down_since, 1),
                      "message": f"slurmctld answers again after {c.clock() - self._down_since:.0f} s; resuming"})  # fmt: skip
            self._down_since = None
        n_changed = 0
        if replan or o.mode == "site-factor":
            if replan:
                state = live_state(c, o.partitions)
                preds = predicted_durations(state, o.predict)
                self.plan = plan_queue(state, policy=o.policy, predictions=preds, placer=o.placer)
                self.metrics.plan_time = c.clock()
                config = state.config
            else:
                config = c.config()
            assert self.plan is not None
            res = apply_order(c, self.plan.order, mode=o.mode, partitions=o.partitions, state_path=o.state_path,
                              weight=o.weight, horizon_s=o.horizon_s, config=config)  # fmt: skip
            n_changed = len(res.changed) + len(res.recovered)
            self.metrics.moved.inc(n_changed)
            self.metrics.managed.set(len(self.plan.order))
            self._signature = frozenset((q.job_id, q.state) for q in c.queue(o.partitions))
            if n_changed or replan:
                p = self.plan
                self.log({"event": "pass", "replanned": replan, "changed": len(res.changed),
                          "recovered": len(res.recovered), "skipped": len(res.skipped), "pending": len(p.order),
                          "expected_makespan_s": p.planned.makespan_s, "order": p.order[:10],
                          "out_of_plan_order": res.details.get("out_of_plan_order", [])[:10]})  # fmt: skip
        self.metrics.passes.inc()
        self.metrics.last_ok = c.clock()
        self.metrics.last_success.set(self.metrics.last_ok)
        self.metrics.last_error = ""
        return n_changed

    def failed(self, e: SlurmError, delay: float) -> float:
        """Log the failure; returns the wait before the next try (backoff while Slurm is down; 0 for
        other errors: the next look comes after the usual interval)."""
        down = _unreachable(e)
        kind = "slurm_unreachable" if down else "error"
        self.metrics.errors.labels(kind).inc()
        self.metrics.last_error = str(e)
        if down:
            if self._down_since is None:
                self._down_since = self.client.clock()
            delay = min(max(delay * 2, 2.0), self.options.max_backoff_s)
            self.log({"event": kind, "retry_in_s": delay, "error": str(e),
                      "message": f"slurmctld is not answering ({_short(e)}); next try in {delay:.0f} s"})  # fmt: skip
            return delay
        self.log({"event": kind, "error": str(e), "retry_in_s": self.options.interval_s,
                  "message": f"pass failed: {_short(e)}; next try in {self.options.interval_s:.0f} s"})  # fmt: skip
        return 0.0


def _unreachable(e: BaseException) -> bool:
    """slurmctld down or not answering (rather than refusing): worth waiting for."""
    for err in (e, e.__cause__):
        if isinstance(err, SlurmCommandError) and (err.returncode is None or is_transient(err.stderr)):
            return True
    return False


def _short(e: BaseException) -> str:
    text = str(e)
    return text if len(text) <= 240 else text[:237] + "..."

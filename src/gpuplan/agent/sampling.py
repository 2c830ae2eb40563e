"""GPU sampling: one snapshot of the GPUs and their processes (agent/gpus.py) per round that is due.

Each reading is stored (GPU rows and per-job rows, what `gpuplan show` profiles and the dashboard and
/metrics read); a job's peak memory per GPU is kept (an OOM retry asks for more; a preemptive policy's
suspension keeps that much booked); GPU processes the agent did not start are listed and their peak
memory booked (`Engine.set_foreign`); a lost GPU goes out of service until it answers again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gpuplan.agent.gpus import GpuBackend, ProcReading, Snapshot
from gpuplan.agent.store import Store

if TYPE_CHECKING:
    from gpuplan.agent.attempts import Run
    from gpuplan.agent.engine import Engine

__all__ = ["Sampler"]

log = logging.getLogger("gpuplan.agent")


class Sampler:
    """Reads the GPUs, records the readings, and tells the Engine what it cannot give out."""

    def __init__(self, backend: GpuBackend, store: Store, engine: Engine, runs: dict[int, Run]) -> None:
        self.backend = backend
        self.store = store
        self.engine = engine
        self.runs = runs
        self.external: list[ProcReading] = []  # GPU processes the agent did not start, as last sampled
        self._foreign_peak: dict[int, float] = {}

    def sample(self, now: float) -> None:
        """One snapshot: store it, track peaks and foreign processes, apply the GPUs' health."""
        try:
            snap = self.backend.snapshot()
        except Exception as e:  # a monitor never dies on one bad reading
            log.warning("GPU snapshot failed: %s", e)
            return
        by_pgid = {run.pgid: run for run in self.runs.values() if run.pgid is not None}
        job_rows = []
        external: list[ProcReading] = []
        foreign: dict[int, float] = {}
        for p in snap.procs:
            run = by_pgid.get(p.pgid) if p.pgid is not None else None
            if run is not None:
                job_rows.append((run.jid, run.attempt, p.gpu, p.pid, p.mem_gb, p.util_pct))
                if p.mem_gb is not None:
                    run.peak_gb[p.gpu] = max(run.peak_gb.get(p.gpu, 0.0), p.mem_gb)
                    if self.engine.preemptive and self.engine.is_running(run.jid):
                        self.engine.observe_mem(run.jid, run.peak_gb[p.gpu])
            elif p.pgid is not None:
                external.append(p)
                if p.mem_gb:
                    self._foreign_peak[p.pid] = max(self._foreign_peak.get(p.pid, 0.0), p.mem_gb)
                    foreign[p.gpu] = foreign.get(p.gpu, 0.0) + self._foreign_peak[p.pid]
        self.external = external
        live_pids = {p.pid for p in snap.procs}
        self._foreign_peak = {pid: v for pid, v in self._foreign_peak.items() if pid in live_pids}
        self._apply_gpu_health(snap, foreign)
        gpu_rows = [
            (g.index, g.name, g.util_pct, g.mem_used_gb, g.mem_total_gb, g.power_w, g.temp_c, g.lost)
            for g in snap.gpus
        ]
        self.store.add_samples(now, gpu_rows, job_rows)

    def _apply_gpu_health(self, snap: Snapshot, foreign: dict[int, float]) -> None:
        for g in snap.gpus:
            if g.lost and g.index not in self.engine.offline:
                log.warning("GPU %d is lost: out of service until it answers again", g.index)
            self.engine.set_offline(g.index, g.lost)
            self.engine.set_foreign(g.index, foreign.get(g.index, 0.0))

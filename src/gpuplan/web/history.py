"""The last N minutes of per-GPU readings, kept in memory for the node view's charts."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from gpuplan.web.live import NodeStatus

__all__ = ["History", "snapshot_json"]


def snapshot_json(snap: NodeStatus) -> dict[str, Any]:
    """A snapshot as the JSON the pages and the SSE stream carry."""
    return {
        "time_s": snap.time_s,
        "origin": snap.origin,
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "model": g.model,
                "node": g.node,
                "util_pct": g.util_pct,
                "mem_used_gb": g.mem_used_gb,
                "mem_total_gb": g.mem_total_gb,
                "power_w": g.power_w,
                "temp_c": g.temp_c,
            }
            for g in snap.gpus
        ],
        "processes": [
            {
                "gpu": p.gpu,
                "pid": p.pid,
                "job_id": p.job_id,
                "user": p.user,
                "name": p.name,
                "mem_gb": p.mem_gb,
                "util_pct": p.util_pct,
            }
            for p in snap.processes
        ],
    }


class History:
    """Snapshots of the last `window_s` seconds (by their own timestamps, not the wall clock)."""

    def __init__(self, window_s: float = 600.0) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.window_s = window_s
        self._snaps: deque[NodeStatus] = deque()
        self._lock = threading.Lock()

    def add(self, snap: NodeStatus) -> None:
        """Keep `snap`; drop what is older than the window before it."""
        with self._lock:
            self._snaps.append(snap)
            while self._snaps and self._snaps[0].time_s < snap.time_s - self.window_s:
                self._snaps.popleft()

    def latest(self) -> NodeStatus | None:
        with self._lock:
            return self._snaps[-1] if self._snaps else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._snaps)

    def series(self) -> dict[str, Any]:
        """Per-GPU lines: ``{"time_s": [...], "util_pct": [[per GPU]...], "mem_used_gb": [...]}``.

        The outer lists of util_pct and mem_used_gb are per GPU (index order); a reading that was
        not available is None (a gap in the chart).
        """
        with self._lock:
            snaps = list(self._snaps)
        n = max((len(s.gpus) for s in snaps), default=0)
        util: list[list[float | None]] = [[] for _ in range(n)]
        mem: list[list[float | None]] = [[] for _ in range(n)]
        for s in snaps:
            by_index = {g.index: g for g in s.gpus}
            for i in range(n):
                g = by_index.get(i)
                util[i].append(None if g is None else g.util_pct)
                mem[i].append(None if g is None else g.mem_used_gb)
        return {"time_s": [s.time_s for s in snaps], "util_pct": util, "mem_used_gb": mem}

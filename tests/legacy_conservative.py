"""The conservative backfill planner as it was before it became fast (frozen copy, commit bfd2544).

It rebuilds its whole reservation plan on every pass, plainly: a free-GPU count per node at each
breakpoint (exclusive clusters) or booked intervals per GPU with a fresh ClusterState for every
candidate window (sharing clusters). tests/test_conservative_fast.py drives it and the production
`Conservative` through the same random event sequences and requires identical decisions, reservations
and reservation notes at every pass. Do not "fix" or speed up this file: it is the oracle.
"""

from __future__ import annotations

import bisect
import math

from gpuplan.core.backfill import Backfill
from gpuplan.core.state import ClusterState
from gpuplan.core.view import JobSlot, SchedulerView, Started

__all__ = ["LegacyConservative"]

_INF = math.inf


class LegacyConservative(Backfill):
    """Every waiting job gets a reservation in policy order (up to `depth` jobs, like Slurm's
    bf_max_job_test); a job starts now only where no earlier reservation needs its GPUs during its run.

    Exclusive clusters plan with a free-GPU count per node over time (GPUs of a node are interchangeable
    until a job starts); sharing clusters plan per GPU with its memory.
    """

    name = "conservative"  # the same mode: results are compared as such
    description = "conservative: every waiting job gets a reservation; no start may delay an earlier one"

    def __init__(self, depth: int = 500) -> None:
        super().__init__()
        self.depth = depth

    def select(self, s: SchedulerView, now: float) -> list[Started]:
        started: list[Started] = []
        reserved: dict[int, float] = {}
        self.reserved = reserved
        plan: _CountPlan | _GpuPlan = _GpuPlan(s, now) if s.state.sharing else _CountPlan(s, now)
        for i, slot in enumerate(s.waiting()):
            if i >= self.depth and not s.state.sharing and s.state.idle_total == 0:
                break
            t, where = plan.earliest(slot, only_now=i >= self.depth)
            if t == _INF and i < self.depth:
                break  # no known start (it needs GPUs a job without an estimate holds): as EASY's head, it blocks the rest
            if where is None:
                continue
            if t <= now:
                gpus = plan.gpus_now(slot, where)
                s.start(slot, gpus, now, started)
                plan.book_started(slot, gpus)
            else:
                slot.reservation = plan.book(slot, t, where)  # kept there by later passes
                reserved[slot.jid] = t
        return started


def _booked_end(t: float, plan_s: float) -> float:
    """End of a booking from t: a job planned to take no time still holds its GPUs for an instant."""
    return max(t + plan_s, math.nextafter(t, _INF))


class _CountPlan:
    """Exclusive clusters: free GPUs per node at each breakpoint time (a step function)."""

    def __init__(self, s: SchedulerView, now: float) -> None:
        self.s = s
        self.now = now
        self.times: list[float] = [now]
        self.free: list[list[int]] = [list(s.state.node_idle)]
        node_of, held = s.state.gpu_node, s.state.held
        for r in s.running():
            end = max(
                r.expected_end_s, math.nextafter(now, _INF)
            )  # past its estimate: ends at the next instant
            if end == _INF:
                continue
            per_node: dict[int, int] = {}
            for g in r.alloc:
                if held and g in held:
                    continue  # offline, or held by another process: not freed by this job's end
                per_node[node_of[g]] = per_node.get(node_of[g], 0) + 1
            i = self._breakpoint(end)
            for row in self.free[i:]:
                for n, k in per_node.items():
                    row[n] += k

    def _breakpoint(self, t: float) -> int:
        """Index of the breakpoint at time t, inserting one (a copy of the step before) if needed."""
        i = bisect.bisect_left(self.times, t)
        if i < len(self.times) and self.times[i] == t:
            return i
        self.times.insert(i, t)
        self.free.insert(i, list(self.free[i - 1]))
        return i

    def _earliest_on(self, nodes_fit, g: int, d: float) -> tuple[float, int]:  # type: ignore[no-untyped-def]
        """Earliest start (and breakpoint index) where `nodes_fit(row) >= g` holds for d seconds."""
        times, free = self.times, self.free
        cand = -1
        for i, row in enumerate(free):
            if nodes_fit(row) < g:
                cand = -1
                continue
            if cand < 0:
                cand = i
            if i + 1 == len(times) or times[i + 1] >= times[cand] + d:
                return times[cand], cand
        return _INF, -1

    def _earliest_spanning(self, nodes: list[int], g: int, d: float) -> float:
        """Earliest start where the GPUs free on each node throughout [t, t+d) add up to g: a spanning
        job holds the same GPUs for its whole run."""
        for i, t in enumerate(self.times):
            row = self.free[i]
            if sum(row[n] for n in nodes) < g:
                continue  # not even free at t: no need to look over the window
            window_min = self._window_min(i, d)
            if sum(window_min[n] for n in nodes) >= g:
                return t
        return _INF

    def earliest(self, slot: JobSlot, only_now: bool) -> tuple[float, list[int] | None]:
        s = self.s
        g, d, mem = slot.gpus, slot.plan_s, slot.mem_gb
        caps = s.state.node_cap_gb
        nodes = [n for n in range(len(caps)) if mem is None or mem <= caps[n]]
        best_t, best_nodes = _INF, None
        for n in nodes:
            t, _i = self._earliest_on(lambda row, n=n: row[n], g, d)
            if t < best_t:
                best_t, best_nodes = t, [n]
            elif t == best_t and best_nodes is not None:
                best_nodes.append(n)
        if slot.may_span and best_t > self.now:
            # free GPUs of several nodes together may host it before any single node can
            span_t = self._earliest_spanning(nodes, g, d)
            if span_t < best_t:
                best_t, best_nodes = span_t, nodes
        note = slot.reservation
        if best_nodes is not None and len(best_nodes) > 1 and isinstance(note, dict) and len(note) == 1:
            (kept,) = note
            if kept in best_nodes and not (slot.may_span and best_nodes is nodes):
                best_nodes = [kept]  # the node it was reserved on, whatever the placer ranks first
        if only_now and best_t > self.now:
            return best_t, None
        return best_t, best_nodes

    def gpus_now(self, slot: JobSlot, nodes: list[int]) -> list[int]:
        """GPUs for a start now, on the nodes whose plan allows it, chosen by the placer (a spanning job
        reserved across nodes takes its reserved share of each, when it still fits)."""
        s = self.s
        window_min = self._window_min(0, slot.plan_s)
        kept = self._kept(slot, window_min)
        if kept is not None and len(kept) > 1:
            njobs = s.state.gpu_njobs
            return sorted(
                g for n, k in kept.items() for g in [x for x in s.state.node_gpus[n] if njobs[x] == 0][:k]
            )
        masked = s.state.copy()
        allowed = set(nodes)
        for n in range(len(masked.node_idle)):
            masked.node_idle[n] = min(masked.node_idle[n], window_min[n]) if n in allowed else 0
        masked.idle_total = sum(masked.node_idle)
        gpus = s.placer.find(masked, slot.gpus, slot.mem_gb, slot.may_span)
        assert gpus is not None, "the count plan said the job fits now"
        return gpus

    def _window_min(self, i: int, d: float) -> list[int]:
        t_end = self.times[i] + d
        rows = [self.free[i]] + [r for t, r in zip(self.times[i + 1 :], self.free[i + 1 :]) if t < t_end]
        return [min(col) for col in zip(*rows)]

    def book_started(self, slot: JobSlot, gpus: list[int]) -> None:
        per_node: dict[int, int] = {}
        for g in gpus:
            n = self.s.state.gpu_node[g]
            per_node[n] = per_node.get(n, 0) + 1
        self._take(self.now, _booked_end(self.now, slot.plan_s), per_node)

    @staticmethod
    def _kept(slot: JobSlot, window_min: list[int]) -> dict[int, int] | None:
        """The GPUs per node the job was last reserved on, if they are all free over this window."""
        note = slot.reservation
        if isinstance(note, dict) and note and all(window_min[n] >= k for n, k in note.items()):
            return note
        return None

    def book(self, slot: JobSlot, t: float, nodes: list[int]) -> dict[int, int]:
        """Reserve the job from t on `nodes`; returns the GPUs taken per node."""
        g = slot.gpus
        i = bisect.bisect_left(self.times, t)
        window_min = self._window_min(i, slot.plan_s)
        kept = self._kept(slot, window_min) if slot.may_span and len(nodes) > 1 else None
        if kept is not None and sum(kept.values()) == g:
            self._take(t, _booked_end(t, slot.plan_s), kept)
            return kept
        per_node: dict[int, int] = {}
        for n in sorted(nodes, key=lambda n: -window_min[n]) if len(nodes) > 1 else nodes:
            take = min(window_min[n], g - sum(per_node.values()))
            if take > 0:
                per_node[n] = take
            if sum(per_node.values()) == g:
                break
        if len(nodes) > 1 and not slot.may_span:
            per_node = {nodes[0]: g}  # a single-node job: the first node that fits earliest
        self._take(t, _booked_end(t, slot.plan_s), per_node)
        return per_node

    def _take(self, t0: float, t1: float, per_node: dict[int, int]) -> None:
        i0 = self._breakpoint(t0)
        i1 = self._breakpoint(t1) if t1 < _INF else len(self.times)
        for row in self.free[i0:i1]:
            for n, k in per_node.items():
                row[n] -= k


class _GpuPlan:
    """Sharing clusters: booked intervals per GPU (running jobs and reservations) with their memory."""

    def __init__(self, s: SchedulerView, now: float) -> None:
        self.s = s
        self.now = now
        self.base = s.state.without_jobs()  # offline GPUs and memory held by others stay
        self.booked: list[list[tuple[float, float, float | None]]] = [[] for _ in s.state.gpu_node]
        self.times: set[float] = {now}
        for r in s.running():
            self._book(now, max(r.expected_end_s, math.nextafter(now, _INF)), r.alloc, r.mem_gb)

    def _book(self, t0: float, t1: float, gpus: tuple[int, ...] | list[int], mem: float | None) -> None:
        for g in gpus:
            self.booked[g].append((t0, t1, mem))
        if t1 < _INF:
            self.times.add(t1)

    def earliest(self, slot: JobSlot, only_now: bool) -> tuple[float, list[int] | None]:
        s = self.s
        d = slot.plan_s
        note = slot.reservation
        for t in sorted(x for x in self.times if x >= self.now):
            window = self._window(t, _booked_end(t, d))
            if isinstance(note, list) and all(window.gpu_fits(g, slot.mem_gb) for g in note):
                return t, list(note)  # the GPUs it was reserved on, whatever the placer ranks first
            gpus = s.placer.find(window, slot.gpus, slot.mem_gb, slot.may_span)
            if gpus is not None or only_now:
                return t, gpus
        return _INF, None

    def gpus_now(self, slot: JobSlot, gpus: list[int]) -> list[int]:
        return gpus

    def book_started(self, slot: JobSlot, gpus: list[int]) -> None:
        self._book(self.now, _booked_end(self.now, slot.plan_s), gpus, slot.mem_gb)

    def book(self, slot: JobSlot, t: float, gpus: list[int]) -> list[int]:
        """Reserve the job from t on `gpus`; returns them."""
        self._book(t, _booked_end(t, slot.plan_s), gpus, slot.mem_gb)
        return gpus

    def _window(self, t0: float, t1: float) -> ClusterState:
        """The cluster as a job running over [t0, t1) sees it: everything booked then counts."""
        st = self.base.copy()
        for g, booked in enumerate(self.booked):
            for a, b, mem in booked:
                if a < t1 and b > t0:
                    st.place((g,), mem)
        return st

"""Conservative backfill's pass on exclusive clusters: each waiting job's earliest fit on the kept
availability profile (core/profile.py: free GPUs per node over time).

A pass drops the last pass's reservations and books its own, job by job in queue order (or keeps them,
`keep`, where core/backfill.py's `Conservative._kept_books` shows it would book them again); the running
jobs' layer is not rebuilt: the scheduler tells the profile of every start, end and moved end
(`SchedulerView.observe`). A job's earliest start is found per node on the node's own breakpoints; a
node without reservations needs no scan (it only gains GPUs over time).

The rules are those of docs/architecture.md ("conservative"); tests/legacy_conservative.py keeps the
plain planner this one must agree with decision for decision (tests/test_conservative_fast.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from gpuplan.core.profile import CountProfile, booked_end
from gpuplan.core.view import JobSlot, SchedulerView

__all__ = ["CountPlan", "booked_end"]

_INF = math.inf


class CountPlan:
    """One pass over the profile: earliest fits, starts now and reservations (booked on the profile)."""

    def __init__(self, s: SchedulerView, now: float, profile: CountProfile, keep: bool = False) -> None:
        self.s = s
        self.now = now
        self.p = profile
        if not keep:  # `keep`: the last pass's reservations stand (`Conservative`'s kept pass)
            profile.drop_reservations()
        self.caps = s.state.node_cap_gb
        # jobs beyond the depth only ask "does it start now?": shapes that did not, with the shortest
        # duration that did not (the plan only fills up during a pass, and a longer job needs a
        # superset of the rows a shorter one needs: a miss stays a miss)
        self._no_start: dict[tuple[int, float | None, bool], float] = {}

    @property
    def horizon_s(self) -> float:
        """The first breakpoint after now: until then, with nothing changed, a pass plans the same."""
        first = next(iter(self.s.running()), None)
        end = _INF if first is None else first.expected_end_s
        if end < _INF:
            end = max(end, math.nextafter(self.now, _INF))
        return min(end, self.p.first_start_s)

    def _nodes_for(self, mem: float | None) -> list[int]:
        """Nodes whose GPUs hold `mem` (shared: callers must not change it)."""
        return self.p.nodes_holding(mem)[0]

    def earliest(self, slot: JobSlot, only_now: bool) -> tuple[float, list[int] | None]:
        """(earliest start, nodes it may use then); (inf, None) when it never fits in the plan.

        `only_now`: the job is beyond the depth, only a start now matters: (now, nodes) when it can
        start now, else (inf, None) (its real earliest start is not computed)."""
        nodes = self._nodes_for(slot.mem_gb)
        if only_now:
            best_t, best_nodes = self._now_only(slot, nodes)
        else:
            best_nodes = self._fit_now(slot.gpus, slot.plan_s, slot.mem_gb)
            best_t = self.now
            if not best_nodes:
                best_t, best_nodes = self._earliest_later(slot.gpus, slot.plan_s, slot.mem_gb)
            if slot.may_span and best_t > self.now:
                # free GPUs of several nodes together may host it before any single node can
                span_t = self._earliest_spanning(nodes, slot.gpus, slot.plan_s, best_t)
                if span_t < best_t:
                    best_t, best_nodes = span_t, nodes
        note = slot.reservation
        if best_nodes is not None and len(best_nodes) > 1 and isinstance(note, dict) and len(note) == 1:
            (kept,) = note
            if kept in best_nodes and not (slot.may_span and best_nodes is nodes):
                best_nodes = [kept]  # the node it was reserved on, whatever the placer ranks first
        return best_t, best_nodes

    def _fit_now(self, g: int, d: float, mem: float | None) -> list[int]:
        """The nodes (holding `mem`) with g GPUs free over a run from now, in node order."""
        fit = self.p.fits_now(g)
        usable = self.p.nodes_holding(mem)[1]
        if usable is not None:
            fit = [n for n in fit if n in usable]
        reserved = self.p.reserved_nodes
        if reserved and fit:
            now, window_min = self.now, self.p.window_min
            fit = [n for n in fit if n not in reserved or window_min(n, now, d, now) >= g]
        return fit

    def _earliest_later(self, g: int, d: float, mem: float | None) -> tuple[float, list[int] | None]:
        """The earliest start after now on one node, and every node where it is that early (none fits
        now). Nodes without reservations come sorted from the profile; those with are scanned."""
        p, now = self.p, self.now
        usable = p.nodes_holding(mem)[1]
        reserved = p.reserved_nodes
        best_t, ties = p.first_fit_later(g, now, reserved, usable)
        best_nodes = ties if ties else None
        grown = False
        for n in sorted(reserved) if len(reserved) > 1 else reserved:
            if usable is not None and n not in usable:
                continue
            t = p.earliest_on(n, g, d, now, best_t)
            if t < best_t:
                best_t, best_nodes, grown = t, [n], False
            elif t == best_t and best_nodes is not None:
                best_nodes.append(n)
                grown = True
        if grown and best_nodes is not None:
            best_nodes.sort()  # in node order, as a scan in node order lists them
        return best_t, best_nodes

    def _earliest_spanning(self, nodes: list[int], g: int, d: float, bound: float) -> float:
        """Earliest start (< bound) where the GPUs free on each node throughout [t, t+d) add up to g:
        a spanning job holds the same GPUs for its whole run."""
        if not nodes:
            return _INF
        p, now = self.p, self.now
        for t in p.breakpoints(nodes, now):
            if t >= bound:
                break
            if sum(p.free_at(n, t, now) for n in nodes) < g:
                continue  # not even free at t: no need to look over the window
            if sum(p.window_min(n, t, d, now) for n in nodes) >= g:
                return t
        return _INF

    def may_start_now(self, slot: JobSlot) -> bool:
        """False when a job of its shape whose run is no longer than its own already failed to start
        now in this pass (`earliest(slot, only_now=True)` would answer (inf, None) from that alone)."""
        missed = self._no_start.get((slot.gpus, slot.mem_gb, slot.may_span))
        return missed is None or slot.plan_s < missed

    def _now_only(self, slot: JobSlot, nodes: list[int]) -> tuple[float, list[int] | None]:
        """`earliest` for a job beyond the depth: the nodes a run from now fits on, or (inf, None)."""
        g, d = slot.gpus, slot.plan_s
        key = (g, slot.mem_gb, slot.may_span)
        missed = self._no_start.get(key)
        if missed is not None and d >= missed:
            return _INF, None
        fit = self._fit_now(g, d, slot.mem_gb)
        if fit:
            return self.now, fit
        if slot.may_span:
            now, window_min = self.now, self.p.window_min
            if sum(window_min(n, now, d, now) for n in nodes) >= g:
                return self.now, nodes
        self._no_start[key] = d if missed is None else min(d, missed)
        return _INF, None

    def _window_min(self, t: float, d: float) -> list[int]:
        """Per node, the fewest GPUs free over a run from t for d seconds."""
        p, now = self.p, self.now
        if t == now and not p.reserved_nodes:
            return self.s.state.node_idle
        return [p.window_min(n, t, d, now) for n in range(len(self.caps))]

    def gpus_now(self, slot: JobSlot, nodes: list[int]) -> list[int]:
        """GPUs for a start now, on the nodes whose plan allows it, chosen by the placer (a spanning job
        reserved across nodes takes its reserved share of each, when it still fits)."""
        s = self.s
        window_min = self._window_min(self.now, slot.plan_s)
        kept = self._kept(slot, window_min)
        if kept is not None and len(kept) > 1:
            njobs = s.state.gpu_njobs
            return sorted(
                g for n, k in kept.items() for g in [x for x in s.state.node_gpus[n] if njobs[x] == 0][:k]
            )
        allowed = set(nodes)
        idle = s.state.node_idle
        masked = s.state.masked([min(idle[n], w) if n in allowed else 0 for n, w in enumerate(window_min)])
        gpus = s.placer.find(masked, slot.gpus, slot.mem_gb, slot.may_span, slot.need)
        assert gpus is not None, "the count plan said the job fits now"
        return gpus

    def book_started(self, slot: JobSlot, gpus: list[int]) -> None:
        """A job started now: the profile has it as a running job (the scheduler told it)."""
        if slot.jid not in self.p.jobs:  # a view that does not report its starts
            self.p.start(slot.jid, booked_end(self.now, slot.plan_s), gpus)

    @staticmethod
    def _kept(slot: JobSlot, window_min: Mapping[int, int] | list[int]) -> dict[int, int] | None:
        """The GPUs per node the job was last reserved on, if they are all free over this window."""
        note = slot.reservation
        if isinstance(note, dict) and note and all(window_min[n] >= k for n, k in note.items()):
            return note
        return None

    def book(self, slot: JobSlot, t: float, nodes: list[int]) -> dict[int, int]:
        """Reserve the job from t on `nodes`; returns the GPUs taken per node."""
        g = slot.gpus
        end = booked_end(t, slot.plan_s)
        if not slot.may_span:
            per_node = {nodes[0]: g}  # a single-node job: the first node that fits earliest
            self.p.reserve(t, end, per_node)
            return per_node
        note = slot.reservation
        p, now, d = self.p, self.now, slot.plan_s
        # the fewest GPUs free over the run, on the nodes it may use (and those of its note)
        window_min = {
            n: p.window_min(n, t, d, now) for n in {*nodes, *(note if isinstance(note, dict) else ())}
        }
        kept = self._kept(slot, window_min) if len(nodes) > 1 else None
        if kept is not None and sum(kept.values()) == g:
            p.reserve(t, end, kept)
            return kept
        per_node = {}
        for n in sorted(nodes, key=lambda n: -window_min[n]) if len(nodes) > 1 else nodes:
            take = min(window_min[n], g - sum(per_node.values()))
            if take > 0:
                per_node[n] = take
            if sum(per_node.values()) == g:
                break
        p.reserve(t, end, per_node)
        return per_node

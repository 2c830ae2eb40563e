"""Conservative backfill's reservation plan on exclusive clusters: free GPUs per node over time.

A step function: `times[i]` is a breakpoint (times[0] is now) and `cols[n][i]` the GPUs of node n free
from times[i] until the next breakpoint, if running jobs end at their expected ends and every
reservation booked so far holds its GPUs. One column per node, so that a job's earliest start on a node
is one scan of one list (the hot loop of a pass with a long queue).

The rules are those of docs/architecture.md ("conservative"); tests/legacy_conservative.py keeps the
plain planner this one must agree with decision for decision (tests/test_conservative_fast.py).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping

from gpuplan.core.view import JobSlot, SchedulerView

__all__ = ["CountPlan", "booked_end"]

_INF = math.inf


def booked_end(t: float, plan_s: float) -> float:
    """End of a booking from t: a job planned to take no time still holds its GPUs for an instant."""
    return max(t + plan_s, math.nextafter(t, _INF))


class CountPlan:
    """Exclusive clusters: free GPUs per node at each breakpoint time (GPUs of a node are
    interchangeable until a job starts)."""

    def __init__(self, s: SchedulerView, now: float) -> None:
        self.s = s
        self.now = now
        st = s.state
        self.caps = st.node_cap_gb
        self._usable: dict[float | None, list[int]] = {}
        # jobs beyond the depth only ask "does it start now?": shapes that did not, with the shortest
        # duration that did not (the plan only fills up during a pass, and a longer job needs a
        # superset of the rows a shorter one needs: a miss stays a miss)
        self._no_start: dict[tuple[int, float | None, bool], float] = {}
        # the running jobs' ends, all at once: free GPUs of a node at a breakpoint are its idle GPUs
        # plus those of every job ended by then (integers: the order of the sums does not matter)
        node_of, held = st.gpu_node, st.held
        soon = math.nextafter(now, _INF)
        freed: dict[float, dict[int, int]] = {}
        for r in s.running():
            end = max(r.expected_end_s, soon)  # past its estimate: ends at the next instant
            if end == _INF:
                continue
            per_node = freed.setdefault(end, {})
            for g in r.alloc:
                if held and g in held:
                    continue  # offline, or held by another process: not freed by this job's end
                per_node[node_of[g]] = per_node.get(node_of[g], 0) + 1
        self.times: list[float] = [now, *sorted(freed)]
        steps = [[0] * len(self.times) for _ in st.node_idle]
        for i, t in enumerate(self.times[1:], 1):
            for n, k in freed[t].items():
                steps[n][i] += k
        self.cols: list[list[int]] = []
        for n, idle in enumerate(st.node_idle):
            steps[n][0] = idle
            self.cols.append(list(itertools.accumulate(steps[n])))

    @property
    def horizon_s(self) -> float:
        """The first breakpoint after now: until then, with nothing changed, a pass plans the same."""
        return self.times[1] if len(self.times) > 1 else _INF

    def _breakpoint(self, t: float) -> int:
        """Index of the breakpoint at time t, inserting one (a copy of the step before) if needed."""
        times = self.times
        i = bisect.bisect_left(times, t)
        if i < len(times) and times[i] == t:
            return i
        times.insert(i, t)
        for col in self.cols:
            col.insert(i, col[i - 1])
        return i

    def _window_end(self, i: int, d: float) -> int:
        """One past the last breakpoint a run from times[i] for d seconds covers (at least i + 1)."""
        return bisect.bisect_left(self.times, self.times[i] + d, i + 1)

    def _earliest_on(self, col: list[int], g: int, d: float, bound: float) -> float:
        """Earliest breakpoint from which `col >= g` holds for d seconds, if it is <= bound; else inf.

        The earliest start is always a breakpoint (the plan is a step function); a failing row rules
        out every start before it whose run covers it, so the scan resumes after it."""
        times = self.times
        rows = len(times)
        starts = rows if bound == _INF else bisect.bisect_right(times, bound)  # later starts lose
        i = 0
        while i < starts:
            if col[i] < g:
                i += 1
                continue
            t = times[i]
            end = t + d
            j = i + 1
            while j < rows and times[j] < end:
                if col[j] < g:
                    break
                j += 1
            else:
                return t
            i = j + 1
        return _INF

    def _earliest_spanning(self, nodes: list[int], g: int, d: float, bound: float) -> float:
        """Earliest start (< bound) where the GPUs free on each node throughout [t, t+d) add up to g:
        a spanning job holds the same GPUs for its whole run."""
        cols, times = self.cols, self.times
        if not nodes:
            return _INF
        totals = [sum(vals) for vals in zip(*(cols[n] for n in nodes))]
        for i, t in enumerate(times):
            if t >= bound:
                break
            if totals[i] < g:
                continue  # not even free at t: no need to look over the window
            j = self._window_end(i, d)
            if sum(min(cols[n][i:j]) for n in nodes) >= g:
                return t
        return _INF

    def _nodes_for(self, mem: float | None) -> list[int]:
        """Nodes whose GPUs hold `mem` (a fresh list: callers may keep it)."""
        nodes = self._usable.get(mem)
        if nodes is None:
            nodes = self._usable[mem] = [n for n, cap in enumerate(self.caps) if mem is None or mem <= cap]
        return list(nodes)

    def earliest(self, slot: JobSlot, only_now: bool) -> tuple[float, list[int] | None]:
        """(earliest start, nodes it may use then); (inf, None) when it never fits in the plan.

        `only_now`: the job is beyond the depth, only a start now matters: (now, nodes) when it can
        start now, else (inf, None) (its real earliest start is not computed)."""
        g, d, mem = slot.gpus, slot.plan_s, slot.mem_gb
        nodes = self._nodes_for(mem)
        if only_now:
            best_t, best_nodes = self._now_only(slot, nodes)
        else:
            best_t, best_nodes = _INF, None
            cols = self.cols
            # nodes with room now first: a start now bounds every other node's scan to its first row
            for n in [n for n in nodes if cols[n][0] >= g] + [n for n in nodes if cols[n][0] < g]:
                t = self._earliest_on(cols[n], g, d, best_t)
                if t < best_t:
                    best_t, best_nodes = t, [n]
                elif t == best_t and best_nodes is not None:
                    best_nodes.append(n)
            if best_nodes is not None:
                best_nodes.sort()  # in node order, as a scan in node order lists them
            if slot.may_span and best_t > self.now:
                # free GPUs of several nodes together may host it before any single node can
                span_t = self._earliest_spanning(nodes, g, d, best_t)
                if span_t < best_t:
                    best_t, best_nodes = span_t, nodes
        note = slot.reservation
        if best_nodes is not None and len(best_nodes) > 1 and isinstance(note, dict) and len(note) == 1:
            (kept,) = note
            if kept in best_nodes and not (slot.may_span and best_nodes is nodes):
                best_nodes = [kept]  # the node it was reserved on, whatever the placer ranks first
        return best_t, best_nodes

    def _now_only(self, slot: JobSlot, nodes: list[int]) -> tuple[float, list[int] | None]:
        """`earliest` for a job beyond the depth: the nodes a run from now fits on, or (inf, None)."""
        g, d = slot.gpus, slot.plan_s
        key = (g, slot.mem_gb, slot.may_span)
        missed = self._no_start.get(key)
        if missed is not None and d >= missed:
            return _INF, None
        j = self._window_end(0, d)
        cols = self.cols
        fit = [n for n in nodes if min(cols[n][:j]) >= g]
        if fit:
            return self.now, fit
        if slot.may_span and sum(min(cols[n][:j]) for n in nodes) >= g:
            return self.now, nodes
        self._no_start[key] = d if missed is None else min(d, missed)
        return _INF, None

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
        gpus = s.placer.find(masked, slot.gpus, slot.mem_gb, slot.may_span, slot.need)
        assert gpus is not None, "the count plan said the job fits now"
        return gpus

    def _window_min(self, i: int, d: float) -> list[int]:
        """Per node, the fewest GPUs free over a run from times[i] for d seconds."""
        j = self._window_end(i, d)
        return [min(col[i:j]) for col in self.cols]

    def book_started(self, slot: JobSlot, gpus: list[int]) -> None:
        per_node: dict[int, int] = {}
        for g in gpus:
            n = self.s.state.gpu_node[g]
            per_node[n] = per_node.get(n, 0) + 1
        self._take(self.now, booked_end(self.now, slot.plan_s), per_node)

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
        if len(nodes) > 1 and not slot.may_span:
            per_node = {nodes[0]: g}  # a single-node job: the first node that fits earliest
            self._take(t, booked_end(t, slot.plan_s), per_node)
            return per_node
        i = bisect.bisect_left(self.times, t)
        note = slot.reservation
        j = self._window_end(i, slot.plan_s)
        cols = self.cols
        # the fewest GPUs free over the run, on the nodes it may use (and those of its note)
        window_min = {n: min(cols[n][i:j]) for n in {*nodes, *(note if isinstance(note, dict) else ())}}
        kept = self._kept(slot, window_min) if slot.may_span and len(nodes) > 1 else None
        if kept is not None and sum(kept.values()) == g:
            self._take(t, booked_end(t, slot.plan_s), kept)
            return kept
        per_node = {}
        for n in sorted(nodes, key=lambda n: -window_min[n]) if len(nodes) > 1 else nodes:
            take = min(window_min[n], g - sum(per_node.values()))
            if take > 0:
                per_node[n] = take
            if sum(per_node.values()) == g:
                break
        self._take(t, booked_end(t, slot.plan_s), per_node)
        return per_node

    def _take(self, t0: float, t1: float, per_node: dict[int, int]) -> None:
        i0 = self._breakpoint(t0)
        i1 = self._breakpoint(t1) if t1 < _INF else len(self.times)
        cols = self.cols
        for n, k in per_node.items():
            col = cols[n]
            col[i0:i1] = [v - k for v in col[i0:i1]]

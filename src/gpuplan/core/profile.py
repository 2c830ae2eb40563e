"""The availability profile of an exclusive cluster: free GPUs per node over time, kept across passes.

Conservative backfill (core/backfill.py, core/count_plan.py) asks, for every waiting job, the earliest
time some node has enough free GPUs for the job's whole planned run. The answer rests on two layers,
both kept here and changed only by what changes them:

- the running jobs: per node, the planned end of each of its busy GPUs (one entry per GPU, sorted),
  updated when a job starts, ends (early or late), is preempted or its expected end moves;
- the reservations: per node, the (start, end, GPUs) bookings made during the current pass; each is
  made when a job gets its reservation and all are dropped when the next pass plans the queue again.

Free GPUs on node n at time t >= now (the step function every query reads):

    idle_n + #{busy GPUs of n whose planned end e has max(e, now+) <= t} - sum{k : t0 <= t < t1}

where idle_n is the live cluster's idle count (offline GPUs and memory held by others are not idle and
are never freed by a job's end), `now+` is the next instant after now (a job past its estimate is
planned to end then), and (t0, t1, k) are the node's reservations. A node without reservations only
gains GPUs over time, so its earliest fit is read from its sorted ends directly; only nodes with
reservations are scanned step by step, over their own breakpoints (a handful), never over the whole
cluster's. tests/test_profile_structure.py checks it by hand and against a rebuild from scratch after
every operation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from gpuplan.core.sortedseq import bisect_left_f, bisect_right_f
from gpuplan.core.state import ClusterState
from gpuplan.core.view import JobSlot

__all__ = ["CountProfile", "booked_end"]

_INF = math.inf
_Steps = tuple[list[float], list[int]]  # breakpoints from now (times[0] == now) and free GPUs from each


def _order_index(order: list[tuple[float, int]], key: float, n: int) -> int:
    """`bisect.bisectbisect_left_f(order, (key, n))` on (key, node) pairs, comparing the numbers in C."""
    lo, hi = 0, len(order)
    while lo < hi:
        mid = (lo + hi) >> 1
        k, m = order[mid]
        if k < key or (k == key and m < n):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _split(times: list[float], free: list[int], t: float) -> int:
    """Index of the breakpoint at t (>= times[0]), inserting one (the value before it) if needed."""
    i = bisect_left_f(times, t)
    if i < len(times) and times[i] == t:
        return i
    times.insert(i, t)
    free.insert(i, free[i - 1])
    return i


def booked_end(t: float, plan_s: float) -> float:
    """End of a booking from t: a job planned to take no time still holds its GPUs for an instant."""
    return max(t + plan_s, math.nextafter(t, _INF))


class CountProfile:
    """Free GPUs per node over time on an exclusive cluster (GPUs of a node are interchangeable until a
    job starts): the running jobs' planned ends and the current pass's reservations.

    `state` is the live cluster: its idle counts are the profile's value at `now`. The caller keeps the
    two in step (a job placed on the state is `start`ed here, a released one `stop`ped).
    """

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.held = frozenset(state.held)
        """GPUs with a hold that is not a job when the profile was built: their jobs' ends free nothing."""
        n = len(state.node_gpus)
        self.ends: list[list[float]] = [[] for _ in range(n)]
        """Per node, the planned end of each busy GPU of a running job (not held), sorted."""
        self.reservations: list[list[tuple[float, float, int]]] = [[] for _ in range(n)]
        """Per node, the reservations (start, end, GPUs) booked since the last `drop_reservations`."""
        self.reserved_nodes: set[int] = set()
        self.first_start_s = _INF
        """The earliest start of a reservation booked since the last `drop_reservations`."""
        self.jobs: dict[int, tuple[float, dict[int, int]]] = {}
        """Running jobs: handle -> (planned end, GPUs per node that its end frees)."""
        self._steps: dict[int, _Steps] = {}
        self._steps_now = -_INF
        self._floors: dict[int, dict[int, float]] = {}
        """Per node and GPU count g, a time before which every row of the node's kept `steps` has
        fewer than g free GPUs (where `earliest_on` may start its scan). Only `reserve` changes kept
        steps in place, and it only takes GPUs away, so a floor holds until its steps are dropped."""
        # per GPU count g: every node's `fit_key` sorted as (key, node), the keys by node, and the nodes
        # whose running jobs changed since (refreshed when g is next asked for)
        self._fit_order: dict[int, list[tuple[float, int]]] = {}
        self._fit_keys: dict[int, list[float]] = {}
        self._fit_pending: dict[int, set[int]] = {}
        self._caps = sorted(set(state.node_cap_gb))
        self._holding: dict[float, tuple[list[int], set[int] | None]] = {}

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        state: ClusterState,
        running: Iterable[tuple[int, float, Iterable[int]]],
        reservations: Iterable[tuple[float, float, dict[int, int]]] = (),
    ) -> CountProfile:
        """A profile from scratch: `running` as (handle, planned end, GPUs), then `reservations`."""
        profile = cls(state)
        for jid, end_s, gpus in running:
            profile.start(jid, end_s, gpus)
        for t0, t1, per_node in reservations:
            profile.reserve(t0, t1, per_node)
        return profile

    # -- the running jobs ------------------------------------------------------------------------
    def start(self, jid: int, end_s: float, gpus: Iterable[int]) -> None:
        """A job started (or was adopted) on `gpus`, planned to end at `end_s` (inf: unknown)."""
        per_node: dict[int, int] = {}
        node_of, held = self.state.gpu_node, self.held
        for g in gpus:
            if held and g in held:
                continue  # offline, or held by another process: not freed by this job's end
            n = node_of[g]
            per_node[n] = per_node.get(n, 0) + 1
        self.jobs[jid] = (end_s, per_node)
        self._insert(end_s, per_node)

    def stop(self, jid: int) -> None:
        """A running job ended or was preempted (at any time: early, at or after its planned end)."""
        end_s, per_node = self.jobs.pop(jid)
        ends = self.ends
        for n, k in per_node.items():
            col = ends[n]
            i = bisect_left_f(col, end_s)
            del col[i : i + k]
            self._touch(n)

    def move(self, jid: int, end_s: float) -> None:
        """A running job's planned end moved to `end_s`."""
        old, per_node = self.jobs[jid]
        if old == end_s:
            return
        self.stop(jid)
        self.jobs[jid] = (end_s, per_node)
        self._insert(end_s, per_node)

    def _insert(self, end_s: float, per_node: dict[int, int]) -> None:
        ends = self.ends
        for n, k in per_node.items():
            col = ends[n]
            i = bisect_right_f(col, end_s)
            col[i:i] = [end_s] * k
            self._touch(n)

    def _touch(self, n: int) -> None:
        """Node n's running jobs (and so its idle count) changed."""
        self._steps.pop(n, None)
        self._floors.pop(n, None)
        for pending in self._fit_pending.values():
            pending.add(n)

    # -- the reservations ------------------------------------------------------------------------
    def reserve(self, t0: float, t1: float, per_node: dict[int, int]) -> None:
        """Book `per_node` GPUs over [t0, t1) (t0 after now: a start now is a running job)."""
        for n, k in per_node.items():
            self.reservations[n].append((t0, t1, k))
            self.reserved_nodes.add(n)
            steps = self._steps.get(n)
            if steps is not None:  # kept: the step function changes over [t0, t1) only
                times, free = steps
                i0 = _split(times, free, t0)
                i1 = _split(times, free, t1) if t1 < _INF else len(times)
                free[i0:i1] = [v - k for v in free[i0:i1]]
        if t0 < self.first_start_s:
            self.first_start_s = t0

    def unreserve(self, t0: float, t1: float, per_node: dict[int, int]) -> None:
        """Drop one reservation booked by `reserve` with the same arguments."""
        for n, k in per_node.items():
            books = self.reservations[n]
            books.remove((t0, t1, k))
            if not books:
                self.reserved_nodes.discard(n)
            self._steps.pop(n, None)
            self._floors.pop(n, None)
        self.first_start_s = min(
            (b[0] for n in self.reserved_nodes for b in self.reservations[n]), default=_INF
        )

    def drop_reservations(self) -> None:
        """Drop every reservation (a new pass plans the queue again)."""
        for n in self.reserved_nodes:
            self.reservations[n].clear()
            self._steps.pop(n, None)
            self._floors.pop(n, None)
        self.reserved_nodes.clear()
        self.first_start_s = _INF

    # -- queries ---------------------------------------------------------------------------------
    def steps(self, n: int, now: float) -> _Steps:
        """Node n's free GPUs from now on: breakpoints (the first is now) and the count from each on."""
        if now != self._steps_now:
            self._steps.clear()
            self._floors.clear()
            self._steps_now = now
        got = self._steps.get(n)
        if got is None:
            got = self._steps[n] = self._build_steps(n, now)
        return got

    def _build_steps(self, n: int, now: float) -> _Steps:
        soon = math.nextafter(now, _INF)
        delta: dict[float, int] = {}
        for e in self.ends[n]:
            if e == _INF:
                break
            t = e if e > soon else soon
            delta[t] = delta.get(t, 0) + 1
        for t0, t1, k in self.reservations[n]:
            delta[t0] = delta.get(t0, 0) - k
            if t1 < _INF:
                delta[t1] = delta.get(t1, 0) + k
        times = [now]
        free = [self.state.node_idle[n]]
        value = free[0]
        for t in sorted(delta):
            value += delta[t]
            if t == now:  # a reservation never starts now (it would be a start); kept exact anyway
                free[0] = value
                continue
            times.append(t)
            free.append(value)
        return times, free

    def free_at(self, n: int, t: float, now: float) -> int:
        """Free GPUs of node n at time t (>= now)."""
        times, free = self.steps(n, now)
        return free[bisect_right_f(times, t) - 1]

    def window_min(self, n: int, t: float, d: float, now: float) -> int:
        """The fewest GPUs free on node n over a run from t (>= now) for d seconds (at t when d is 0)."""
        if n not in self.reserved_nodes and t == now:
            return self.state.node_idle[n]  # only gains GPUs from now on
        times, free = self.steps(n, now)
        i = bisect_right_f(times, t) - 1
        j = bisect_left_f(times, t + d, i + 1)
        return min(free[i:j]) if j > i + 1 else free[i]

    def earliest_on(self, n: int, g: int, d: float, now: float, bound: float = _INF) -> float:
        """Earliest time (>= now, <= bound) from which node n has g free GPUs for d seconds; inf if none.

        The earliest start is always one of the node's breakpoints (a step function); a failing step
        rules out every start before it whose run covers it, so the scan resumes after it."""
        if n not in self.reserved_nodes:
            need = g - self.state.node_idle[n]
            if need <= 0:
                return now
            col = self.ends[n]
            if need > len(col):
                return _INF
            t = col[need - 1]
            soon = math.nextafter(now, _INF)
            t = t if t > soon else soon
            return t if t <= bound else _INF
        times, free = self.steps(n, now)
        rows = len(times)
        starts = rows if bound == _INF else bisect_right_f(times, bound)
        floors = self._floors.get(n)
        if floors is None:
            floors = self._floors[n] = {}
        floor = floors.get(g)
        i = 0 if floor is None else bisect_left_f(times, floor)
        while i < starts and free[i] < g:
            i += 1
        if i < rows:
            floors[g] = times[i]  # no row before it has g free GPUs (a deep queue's reservations stack up)
        while i < starts:
            if free[i] < g:
                i += 1
                continue
            end = times[i] + d
            j = i + 1
            while j < rows and times[j] < end:
                if free[j] < g:
                    break
                j += 1
            else:
                return times[i]
            i = j + 1
        return _INF

    def nodes_holding(self, mem: float | None) -> tuple[list[int], set[int] | None]:
        """The nodes whose GPUs hold `mem` per GPU (None: any), in node order, and the same as a set
        (None when every node does). Shared lists: do not change them."""
        caps = self._caps
        i = 0 if mem is None else bisect_left_f(caps, mem)
        cap = caps[i] if i < len(caps) else _INF  # the smallest capacity that holds it
        got = self._holding.get(cap)
        if got is None:
            nodes = [n for n, c in enumerate(self.state.node_cap_gb) if c >= cap]
            got = self._holding[cap] = (
                nodes,
                None if len(nodes) == len(self.state.node_cap_gb) else set(nodes),
            )
        return got

    def fit_key(self, n: int, g: int) -> float:
        """When node n has g free GPUs if it had no reservations: -inf when it has them now, else the
        planned end that frees the last of them (before clamping to now+; inf: never)."""
        need = g - self.state.node_idle[n]
        if need <= 0:
            return -_INF
        col = self.ends[n]
        return col[need - 1] if need <= len(col) else _INF

    def fit_order(self, g: int) -> list[tuple[float, int]]:
        """Every node as (`fit_key`, node) for g GPUs, sorted (kept from call to call: only the nodes
        whose running jobs changed since are placed again)."""
        order = self._fit_order.get(g)
        if order is None:
            keys = self._fit_keys[g] = [self.fit_key(n, g) for n in range(len(self.ends))]
            order = self._fit_order[g] = sorted(zip(keys, range(len(keys))))
            self._fit_pending[g] = set()
            return order
        pending = self._fit_pending[g]
        if pending:
            keys = self._fit_keys[g]
            for n in pending:
                order.pop(_order_index(order, keys[n], n))
                keys[n] = key = self.fit_key(n, g)
                order.insert(_order_index(order, key, n), (key, n))
            pending.clear()
        return order

    def fits_now(self, g: int) -> list[int]:
        """The nodes with g idle GPUs now, in node order (reservations not considered)."""
        order = self.fit_order(g)
        return [n for _, n in order[: _order_index(order, -_INF, len(order))]]

    def first_fit_later(
        self, g: int, now: float, skip: set[int], usable: set[int] | None
    ) -> tuple[float, list[int]]:
        """The earliest time after now at which a node not in `skip` (and in `usable`, None: all) has g
        free GPUs if it had no reservations, and every such node then (in node order); (inf, []) if
        none ever has. Nodes with g idle GPUs now must all be in `skip` or out of `usable`."""
        soon = math.nextafter(now, _INF)
        best = _INF
        ties: list[int] = []
        for key, n in self.fit_order(g):
            if n in skip or (usable is not None and n not in usable):
                continue
            t = now if key == -_INF else key if key > soon else soon
            if t > best or t == _INF:
                break
            best = t
            ties.append(n)
        if len(ties) > 1:
            ties.sort()
        return best, ties

    def breakpoints(self, nodes: Iterable[int], now: float) -> list[float]:
        """Every breakpoint of these nodes from now on, sorted (now first)."""
        merged = {t for n in nodes for t in self.steps(n, now)[0]}
        merged.add(now)
        return sorted(merged)

    # -- kept current by the scheduler (core/view.py's RunningObserver) ---------------------------
    stale: bool = False
    """Set when the cluster's holds changed: the owner rebuilds the profile before its next pass."""
    ends_log: list[float] | None = None
    """While armed (`arm`): the planned ends of the running jobs that stopped since, or None once
    anything else changed the running jobs (a start, a moved end) or nobody armed it."""

    def arm(self) -> None:
        """Start recording which planned ends the running jobs stop at (`ends_log`)."""
        self.ends_log = []

    def disarm(self) -> list[float] | None:
        """The planned ends of the jobs stopped since `arm` (None: something else changed); stops."""
        log, self.ends_log = self.ends_log, None
        return log

    def job_started(self, slot: JobSlot) -> None:
        self.ends_log = None
        self.start(slot.jid, slot.expected_end_s, slot.alloc)

    def job_stopped(self, slot: JobSlot) -> None:
        if self.ends_log is not None:
            self.ends_log.append(slot.expected_end_s if slot.jid in self.jobs else -_INF)
        if slot.jid in self.jobs:
            self.stop(slot.jid)

    def end_moved(self, slot: JobSlot) -> None:
        self.ends_log = None
        if slot.jid in self.jobs:
            self.move(slot.jid, slot.expected_end_s)

    def holds_changed(self) -> None:
        self.stale = True

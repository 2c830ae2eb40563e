"""The search's objective: simulate one order and return every job's end, as fast as the cluster allows.

`Evaluator.ends(order)` gives the same end times as `simulate(jobs, cluster, FixedOrder(...), backfill)`,
by one of two paths:

- exclusive GPUs, first-fit, no job that may span nodes, backfill none or EASY: a dedicated list
  scheduler on free-GPU counts per node (GPUs of a node are interchangeable until a job starts), which
  mirrors `NoBackfill` and `Easy` step by step, caches included; 3-25x faster than `simulate`;
- everything else (conservative backfill, other placers, GPU sharing, jobs that may span
  nodes): `simulate` itself.

The mirror is checked against `simulate` when an Evaluator is built (two orders); if the scheduling core
has changed and they disagree, the Evaluator falls back to `simulate`, so a plan is never scored by a
stale copy of the rules. A hypothesis property (tests/test_invariants.py,
test_plan_evaluator_gives_the_simulators_schedule) checks that it takes the fast path and gives the
simulator's ends for random traces, clusters and orders of every kind it accepts, so the copy cannot
drift unnoticed. Memory is booked by the core's `booked_mem_gb`.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from gpuplan.core.backfill import Backfill, Easy, NoBackfill, get_backfill
from gpuplan.core.booking import booked_mem_gb
from gpuplan.core.placement import FirstFit, Placer, get_placer
from gpuplan.core.policies import Policy
from gpuplan.core.scheduler import Scheduler
from gpuplan.errors import GpuplanError, ScheduleError, UnknownNameError
from gpuplan.model import ClusterSpec, Job

if TYPE_CHECKING:
    from gpuplan.core.interference import InterferenceModel

__all__ = ["OBJECTIVES", "Evaluator", "objective_value"]

_INF = math.inf

OBJECTIVES = ("makespan", "mean-jct", "weighted")
"""makespan: last end; mean-jct: mean (end - submit); weighted: GPU-weighted mean JCT, Σ g·JCT / Σ g."""


def check_objective(objective: str) -> str:
    """The objective's name, or UnknownNameError listing the valid ones."""
    if objective not in OBJECTIVES:
        raise UnknownNameError("objective", objective, list(OBJECTIVES))
    return objective


def objective_value(
    objective: str, ends: Sequence[float], rel: Sequence[float], gpus: Sequence[int]
) -> float:
    """The objective (seconds) of one run from each job's end and release, times from the first submit."""
    if objective == "makespan":
        return max(ends)
    if objective == "mean-jct":
        return sum(e - r for e, r in zip(ends, rel)) / len(ends)
    return sum(g * (e - r) for e, r, g in zip(ends, rel, gpus)) / sum(gpus)


class _IndexOrder(Policy):
    """FixedOrder by trace index (the simulator's job handle), for the inner loop."""

    name = "fixed-order"

    def __init__(self, position: list[int]) -> None:
        self.position = position

    def key(self, job: Job, seq: int, oracle: bool) -> tuple[float, ...]:
        return (self.position[seq],)


class Evaluator:
    """Simulates orders of one trace on one cluster; counts the evaluations.

    Args:
        jobs: the trace; each job needs a true duration (the outcome is the simulated one).
        cluster: where it runs.
        backfill, placer: as for `simulate`.
        oracle: the scheduler's decisions (backfill reservations, memory for placement) use the true
            durations and memory instead of the estimates.
        interference: the sharing model (sharing clusters only; default as in `simulate`).

    Raises:
        ScheduleError: a job has no true duration or can never fit on the cluster.
        UnknownNameError: an unknown backfill mode or placer.
    """

    def __init__(
        self,
        jobs: Sequence[Job],
        cluster: ClusterSpec,
        backfill: Backfill | str = "easy",
        placer: Placer | str = "first-fit",
        *,
        oracle: bool = False,
        interference: InterferenceModel | None = None,
    ) -> None:
        from gpuplan.sim.engine import require_durations

        require_durations(jobs, "plan", "fill duration_s, or plan on the estimates (--forecast)")
        self.jobs = list(jobs)
        self.cluster = cluster
        self.backfill = get_backfill(backfill) if isinstance(backfill, str) else backfill
        self.placer = get_placer(placer) if isinstance(placer, str) else placer
        self.oracle = oracle
        self.interference = interference
        t0 = min(j.submit_s for j in jobs)
        self.rel = [j.submit_s - t0 for j in jobs]
        self.gpus = [j.gpus for j in jobs]
        self.dur = [float(j.duration_s or 0.0) for j in jobs]
        self.arrival = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
        self.count = 0
        self._check_fits()
        self._run: Callable[[list[int]], list[float]] = self._pick_path()

    @property
    def path(self) -> str:
        """Which path evaluates: 'list-scheduler' (the mirror) or 'simulate'."""
        return "list-scheduler" if self._run in (self._none_fast, self._easy_fast) else "simulate"

    def ends(self, order: Sequence[int]) -> list[float]:
        """Each job's end (seconds from the first submit, by trace index) when run in `order`.

        `order` lists trace indices, every job once.
        """
        n = len(self.jobs)
        if len(order) != n:
            raise GpuplanError(f"an order of {len(order)} jobs for a trace of {n}: give every job once")
        position = [0] * n
        for p, i in enumerate(order):
            position[i] = p
        self.count += 1
        return self._run(position)

    def value(self, objective: str, ends: Sequence[float]) -> float:
        return objective_value(objective, ends, self.rel, self.gpus)

    # -- paths ------------------------------------------------------------------------------------
    def _check_fits(self) -> None:
        probe = Scheduler(self.cluster, "fifo", self.backfill, self.placer, oracle=self.oracle)
        for i, job in enumerate(self.jobs):  # raises JobNeverFitsError with the simulator's own message
            probe.submit(i, job, book_mem_gb=booked_mem_gb(job, self.oracle))

    def _pick_path(self) -> Callable[[list[int]], list[float]]:
        if self.cluster.sharing:
            return self._simulate
        mode = type(self.backfill)
        if (
            mode in (NoBackfill, Easy)
            and type(self.placer) is FirstFit
            and not self.cluster.has_host_resources
            and not any(j.may_span_nodes for j in self.jobs)
        ):
            self._mem = [booked_mem_gb(j, self.oracle) for j in self.jobs]
            self._node_cap = [n.gpu.mem_gb for n in self.cluster.nodes]
            self._node_gpus = [n.gpus for n in self.cluster.nodes]
            min_cap = min(self._node_cap)
            self._fits_key = [
                (g, None if m is None or m <= min_cap else m) for g, m in zip(self.gpus, self._mem)
            ]
            plan = [j.planning_duration_s(self.oracle) for j in self.jobs]
            self._plan = [_INF if p is None else max(p, 0.0) for p in plan]
            fast = self._none_fast if mode is NoBackfill else self._easy_fast
            if self._agrees(fast):
                return fast
        return self._simulate

    def _agrees(self, fast: Callable[[list[int]], list[float]]) -> bool:
        """Whether the mirror gives simulate's ends on the trace order and on its reverse."""
        n = len(self.jobs)
        for position in (list(range(n)), list(range(n - 1, -1, -1))):
            if fast(position) != self._simulate(position):
                return False
        return True

    def _first_fit(self, idle: list[int], j: int) -> int:
        g, mem, caps = self.gpus[j], self._mem[j], self._node_cap
        for n, k in enumerate(idle):
            if k >= g and (mem is None or mem <= caps[n]):
                return n
        return -1

    def _none_fast(self, position: list[int]) -> list[float]:
        """Strict order, exclusive GPUs, first-fit: start the queue's head while it fits."""
        rel, dur, gpus, arrival = self.rel, self.dur, self.gpus, self.arrival
        n = len(rel)
        idle = list(self._node_gpus)
        node_of = [-1] * n
        ends = [0.0] * n
        heap: list[tuple[float, int, int]] = []
        waiting: list[tuple[int, int]] = []
        seq = itertools.count()
        ai = 0
        while ai < n or heap:
            t_arr = rel[arrival[ai]] if ai < n else _INF
            now = min(t_arr, heap[0][0] if heap else _INF)
            while heap and heap[0][0] <= now:
                _, _, j = heapq.heappop(heap)
                idle[node_of[j]] += gpus[j]
                ends[j] = now
            while ai < n and rel[arrival[ai]] <= now:
                j = arrival[ai]
                heapq.heappush(waiting, (position[j], j))
                ai += 1
            while waiting:
                j = waiting[0][1]
                node = self._first_fit(idle, j)
                if node < 0:
                    break
                heapq.heappop(waiting)
                idle[node] -= gpus[j]
                node_of[j] = node
                heapq.heappush(heap, (now + dur[j], next(seq), j))
            if not heap and ai >= n and waiting:
                raise ScheduleError(
                    f"{len(waiting)} job(s) can never start; nothing runs and nothing arrives"
                )
        return ends

    def _easy_fast(self, position: list[int]) -> list[float]:
        """EASY on free-GPU counts per node: `Easy.select`, `_reservation` and `_Projection` in one loop."""
        rel, dur, arrival = self.rel, self.dur, self.arrival
        n = len(rel)
        run = _EasyRun(self, n)
        ends = [0.0] * n
        heap: list[tuple[float, int, int]] = []
        seq = itertools.count()
        ai = 0
        while ai < n or heap:
            t_arr = rel[arrival[ai]] if ai < n else _INF
            now = min(t_arr, heap[0][0] if heap else _INF)
            while heap and heap[0][0] <= now:
                _, _, j = heapq.heappop(heap)
                run.finish(j)
                ends[j] = now
            while ai < n and rel[arrival[ai]] <= now:
                j = arrival[ai]
                bisect.insort(run.waiting, (position[j], j))
                ai += 1
            if run.waiting:
                for j in run.select(now):
                    heapq.heappush(heap, (now + dur[j], next(seq), j))
            if not heap and ai >= n and run.waiting:
                raise ScheduleError(
                    f"{len(run.waiting)} job(s) can never start; nothing runs and nothing arrives"
                )
        return ends

    def _simulate(self, position: list[int]) -> list[float]:
        from gpuplan.sim.engine import simulate

        result = simulate(
            self.jobs, self.cluster, _IndexOrder(position), self.backfill, self.placer,
            oracle=self.oracle, interference=self.interference,
        )  # fmt: skip
        index = {j.id: i for i, j in enumerate(self.jobs)}
        ends = [0.0] * len(self.jobs)
        for r in result.records:
            ends[index[r.job_id]] = r.end_s
        return ends


class _EasyRun:
    """The mutable state of one EASY run on counts: free GPUs per node, running jobs by expected end."""

    def __init__(self, ev: Evaluator, n: int) -> None:
        self.ev = ev
        self.idle = list(ev._node_gpus)
        self.idle_total = sum(self.idle)
        self.node_of = [-1] * n
        self.running: list[tuple[float, int]] = []  # (expected end, jid), sorted
        self.expected = [0.0] * n
        self.waiting: list[tuple[int, int]] = []  # (position, jid), sorted

    def start(self, j: int, node: int, now: float, started: list[int]) -> None:
        g = self.ev.gpus[j]
        self.idle[node] -= g
        self.idle_total -= g
        self.node_of[j] = node
        end = now + self.ev._plan[j]
        self.expected[j] = end
        bisect.insort(self.running, (end, j))
        started.append(j)

    def finish(self, j: int) -> None:
        g = self.ev.gpus[j]
        self.idle[self.node_of[j]] += g
        self.idle_total += g
        self.running.remove((self.expected[j], j))

    def select(self, now: float) -> list[int]:
        ev, idle = self.ev, self.idle
        started: list[int] = []
        waiting = self.waiting
        head, k = -1, len(waiting)
        for k, (_, j) in enumerate(waiting):  # noqa: B007
            node = ev._first_fit(idle, j)
            if node < 0:
                head = j
                break
            self.start(j, node, now, started)
        if head >= 0 and self.idle_total > 0:
            shadow, freed = self._reservation(head, now)
            if shadow < _INF:
                self._backfill(now, head, shadow, freed, k + 1, started)
        if started:
            done = set(started)
            self.waiting = [w for w in waiting if w[1] not in done]
        return started

    def _head_nodes(self, head: int) -> tuple[int, list[int] | None]:
        """The head's GPU count and the nodes its memory allows (None: every node)."""
        ev = self.ev
        hg, hmem, caps = ev.gpus[head], ev._mem[head], ev._node_cap
        if hmem is None or hmem <= min(caps):
            return hg, None
        return hg, [m for m, cap in enumerate(caps) if hmem <= cap]

    @staticmethod
    def _fits(counts: list[int], hg: int, nodes: list[int] | None) -> bool:
        if nodes is None:
            return max(counts) >= hg
        return any(counts[m] >= hg for m in nodes)

    def _reservation(self, head: int, now: float) -> tuple[float, list[int]]:
        hg, nodes = self._head_nodes(head)
        ok = None if nodes is None else set(nodes)
        counts = list(self.idle)
        gpus, node_of = self.ev.gpus, self.node_of
        freed: list[int] = []
        shadow = _INF
        for end, j in self.running:
            if end > shadow:
                break
            if end == _INF:
                return _INF, []
            freed.append(j)
            if shadow < _INF:
                continue
            node = node_of[j]
            counts[node] += gpus[j]
            if counts[node] >= hg and (ok is None or node in ok):
                shadow = max(end, now)
        return (shadow, freed) if shadow < _INF else (_INF, [])

    def _backfill(self, now: float, head: int, shadow: float, freed: list[int], first: int, started: list[int]) -> None:  # fmt: skip
        ev, idle = self.ev, self.idle
        proj = list(idle)  # the cluster at the shadow time, built before any backfill
        for r in freed:
            proj[self.node_of[r]] += ev.gpus[r]
        no_fit: set[tuple[int, float | None]] = set()
        hurts_head: set[tuple[int, float | None]] = set()
        head_fit = self._head_nodes(head)
        for _, j in self.waiting[first:]:
            if self.idle_total == 0:
                break
            fk = ev._fits_key[j]
            if fk in no_fit:
                continue
            node = ev._first_fit(idle, j)
            if node < 0:
                no_fit.add(fk)
                continue
            if now + ev._plan[j] <= shadow:
                self.start(j, node, now, started)
                continue
            if fk in hurts_head:
                continue
            if not self._book(proj, node, j, head_fit):
                node = self._elsewhere(proj, j, head_fit)
                if node < 0:
                    hurts_head.add(fk)
                    continue
            self.start(j, node, now, started)

    def _book(self, proj: list[int], node: int, j: int, head_fit: tuple[int, list[int] | None]) -> bool:
        """Book j on `node` in the projection; undo it and say False if the head no longer fits."""
        proj[node] -= self.ev.gpus[j]
        if self._fits(proj, *head_fit):
            return True
        proj[node] += self.ev.gpus[j]
        return False

    def _elsewhere(self, proj: list[int], j: int, head_fit: tuple[int, list[int] | None]) -> int:
        """First-fit for j away from the nodes the head could use at the shadow time, or -1."""
        hg, nodes = head_fit
        masked = list(self.idle)
        for m in range(len(proj)) if nodes is None else nodes:
            if proj[m] >= hg:
                masked[m] = 0
        node = self.ev._first_fit(masked, j)
        if node < 0 or not self._book(proj, node, j, head_fit):
            return -1
        return node

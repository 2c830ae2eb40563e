"""core/clock.py: the one event loop of every virtual clock (the simulator's, the forecast's), and the
seam that keeps it one: no driver has a heap or a loop of its own."""

from __future__ import annotations

import ast
import math
import random
from pathlib import Path

import pytest

from gpuplan.core.clock import EndHeap, EventClock
from gpuplan.core.forecast import forecast
from gpuplan.core.preemption import Preempted
from gpuplan.core.scheduler import Scheduler
from gpuplan.core.view import Started
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.preempt import PreemptiveRun

SRC = Path(__file__).resolve().parents[1] / "src" / "gpuplan"
ONE_NODE = ClusterSpec("1x2", (NodeSpec("n0", 2, GpuSpec("A100-80GB", 80.0)),))


class _Log(EventClock):
    """A driver that records every hook call and ends each job `work_s` after its start."""

    def __init__(self, sched: Scheduler, work_s: dict[int, float]) -> None:
        super().__init__(sched)
        self.work_s = work_s
        self.log: list[tuple[str, int, float]] = []
        self.stop_after: int | None = None
        self.seen_passes = 0

    def on_end(self, jid: int, t: float) -> None:
        self.log.append(("end", jid, t))
        if jid in self.sched:
            self.sched.finish(jid, t)

    def on_arrival(self, jid: int, t: float) -> None:
        self.log.append(("arrive", jid, t))
        self.sched.submit(jid, Job(str(jid), t, 2, duration_s=self.work_s[jid]), now=t)

    def on_start(self, st: Started, t: float) -> None:
        self.log.append(("start", st.jid, t))
        self.expect_end(st.jid, t + self.work_s[st.jid])

    def on_preempt(self, p: Preempted, t: float) -> None:
        self.log.append(("preempt", p.jid, t))
        self.cancel_end(p.jid)

    def after_pass(self, t: float, t_next: float) -> bool:
        self.log.append(("pass", -1, t))
        self.seen_passes += 1
        return self.stop_after is not None and self.seen_passes >= self.stop_after

    def drained(self, t: float) -> None:
        self.log.append(("drained", -1, t))

    def too_many_passes(self, t: float, passes: int) -> None:
        self.log.append(("too many", passes, t))


def test_an_instant_runs_ends_then_entries_then_one_pass() -> None:
    clock = _Log(Scheduler(ONE_NODE, "fifo", "none"), {0: 5.0, 1: 3.0, 2: 1.0})
    clock.set_arrivals([0.0, 5.0], [0, 1])
    clock.enter_at(5.0, 2)  # found as the run goes: after the known entries of the same instant
    clock.loop()
    assert clock.log == [
        ("arrive", 0, 0.0), ("start", 0, 0.0), ("pass", -1, 0.0),
        ("end", 0, 5.0), ("arrive", 1, 5.0), ("arrive", 2, 5.0), ("start", 1, 5.0), ("pass", -1, 5.0),
        ("end", 1, 8.0), ("start", 2, 8.0), ("pass", -1, 8.0),
        ("end", 2, 9.0), ("pass", -1, 9.0),
        ("drained", -1, 9.0),
    ]  # fmt: skip
    assert clock.passes == 4


def test_a_moved_end_skips_the_stale_entry_and_a_fixed_end_is_never_stale() -> None:
    clock = _Log(Scheduler(ONE_NODE, "fifo", "none"), {0: 5.0})
    clock.set_arrivals([0.0], [0])
    clock.stop_after = 1
    clock.loop()  # job 0 started, its end expected at 5
    clock.expect_end(0, 7.0)  # its rate changed: the end at 5 no longer holds
    clock.stop_after = None
    clock.loop()
    assert [e for e in clock.log if e[0] == "end"] == [("end", 0, 7.0)]
    fixed = _Log(Scheduler(ONE_NODE, "fifo", "none"), {})
    fixed.push_end(9, 2.0)
    fixed.cancel_end(9)  # a fixed end never moves: it still comes
    fixed.loop()
    assert ("end", 9, 2.0) in fixed.log


def test_the_safety_net_and_a_driver_stop_end_the_loop() -> None:
    clock = _Log(Scheduler(ONE_NODE, "fifo", "none"), {0: 1.0, 1: 1.0, 2: 1.0})
    clock.set_arrivals([0.0, 10.0, 20.0], [0, 1, 2])
    clock.max_passes = 2
    clock.loop()
    assert clock.log[-1] == ("too many", 2, 10.0)  # passes at 0 and 1 (job 0 ends); none at 10
    assert ("arrive", 1, 10.0) not in clock.log
    stopped = _Log(Scheduler(ONE_NODE, "fifo", "none"), {0: 1.0, 1: 1.0})
    stopped.set_arrivals([0.0, 10.0], [0, 1])
    stopped.stop_after = 1
    stopped.loop()
    assert stopped.log == [("arrive", 0, 0.0), ("start", 0, 0.0), ("pass", -1, 0.0)]


def test_a_preemptive_clock_stops_at_level_changes_and_preempts_before_it_starts() -> None:
    sched = Scheduler(ONE_NODE, "las:quantum=60", "none")
    clock = _Log(sched, {0: 100.0, 1: 100.0})
    clock.set_arrivals([0.0, 1.0], [0, 1])
    clock.max_passes = 20  # this driver keeps no work across a preemption: the two trade places for ever
    clock.loop()
    assert clock.log[-1][0] == "too many"
    preempts = [e for e in clock.log if e[0] == "preempt"]
    assert preempts, clock.log
    first = clock.log.index(preempts[0])
    assert clock.log[first + 1][0] == "start" and clock.log[first + 1][2] == preempts[0][2]
    # the preemption came at a level change, not at an end or an entry
    assert preempts[0][2] not in {0.0, 1.0} and all(
        e[2] != preempts[0][2] for e in clock.log if e[0] == "end"
    )


def test_every_virtual_clock_is_a_driver_of_the_one_loop() -> None:
    assert issubclass(PreemptiveRun, EventClock)
    sched = Scheduler(ONE_NODE, "fifo", "easy")
    sched.submit(0, Job("a", 0.0, 2, duration_s=5.0))
    assert forecast(sched, 0.0)[0].start_s == 0.0
    for rel in ("sim/engine.py", "sim/preempt.py", "core/forecast.py"):
        tree = ast.parse((SRC / rel).read_text())
        assert _drivers(tree), f"{rel}: no subclass of EventClock"
        imported = {
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) for a in n.names
        }
        assert "heapq" not in imported, f"{rel} keeps a heap of its own: use EventClock's"
        names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        assert not names & {"heappop", "heappush", "schedule", "decide", "next_event_s"}, (
            f"{rel} drives the Scheduler's passes itself: that is EventClock.loop's job"
        )
        loops = [n.lineno for n in ast.walk(tree) if _is_event_loop(n)]
        assert not loops, f"{rel}: an event loop of its own at line(s) {loops}"
    # the plan search scores its orders with simulate, never with a loop of its own
    for rel in ("optimize/evaluate.py", "optimize/search.py"):
        text = (SRC / rel).read_text()
        assert "heapq" not in text and ".schedule(" not in text and ".decide(" not in text, rel
        assert "simulate(" in text, rel


def _is_event_loop(node: ast.AST) -> bool:
    """`while heap ...` or `for passes in itertools.count()`: the forms the clocks' own loops had."""
    if isinstance(node, ast.While):
        return "heap" in ast.unparse(node.test) or "arrival" in ast.unparse(node.test)
    return isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and "count" in ast.unparse(node.iter)


def _drivers(tree: ast.Module) -> set[str]:
    """The classes of a module that subclass EventClock (directly or through another of its classes)."""
    found = {"EventClock"}
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    for c in classes:  # classes come after their bases in a module
        if any(isinstance(b, ast.Name) and b.id in found for b in c.bases):
            found.add(c.name)
    return found - {"EventClock"}


@pytest.mark.parametrize("seed", range(4))
def test_the_end_heap_pops_holding_ends_in_time_then_push_order_and_keeps_stale_times(seed: int) -> None:
    """Against a plain model: many ends at one instant (ties broken by push order), infinite and negative
    times, fixed ends and ends that move (a new one replaces the job's earlier end, a cancel takes it
    out: its time stays a stop that pops as -1, before the ends that hold of a later time only), stale
    times dropped before a bound, pops that empty the heap and pushes that refill it."""
    rng = random.Random(seed)
    ends, seq = EndHeap(), 0
    holds: list[tuple[float, int, int]] = []  # (time, seq, jid) of every end that holds
    live: dict[int, tuple[float, int, int]] = {}  # the end of a job whose end may move
    stale: list[float] = []

    def first_holding() -> tuple[float, int, int] | None:
        return min(holds) if holds else None

    def pop_and_check() -> None:
        """The model's earliest (a stale time first while it comes before every end that holds)."""
        top = first_holding()
        if stale and (top is None or min(stale) < top[0]):
            stale.remove(min(stale))
            assert ends.pop() == -1
            return
        assert top is not None
        holds.remove(top)
        if live.get(top[2]) == top:
            del live[top[2]]
        assert ends.pop() == top[2]

    for _ in range(5000):
        roll = rng.random()
        top = first_holding()
        if (holds or stale) and roll < 0.4:
            want = min([*stale, top[0] if top else math.inf])
            assert ends.first_s() == want
            assert ends.stale_top() == (bool(stale) and (top is None or min(stale) < top[0]))
            pop_and_check()
        elif roll < 0.5:
            jid = rng.randrange(40)
            if jid in live:
                old = live.pop(jid)
                holds.remove(old)
                stale.append(old[0])
            ends.cancel(jid)
        elif roll < 0.53:
            bound = rng.uniform(-5, 30)
            upto = min(bound, top[0] if top else math.inf)
            stale[:] = [x for x in stale if x >= upto]
            ends.drop_stale(bound)
        else:
            at_s = rng.choice([float(rng.randrange(30)), rng.uniform(-5, 30), math.inf, 0.0, -0.0])
            jid, moves = rng.randrange(40), rng.random() < 0.7
            entry = (at_s, seq, jid)
            if moves:
                if jid in live:
                    old = live.pop(jid)
                    holds.remove(old)
                    stale.append(old[0])
                live[jid] = entry
            ends.push(at_s, jid, moves)
            holds.append(entry)
            seq += 1
        assert len(ends) == len(holds) + len(stale) and bool(ends) == bool(holds or stale)
        assert all(ends.entries[k].pos == k for k in range(len(ends.entries)))
    while holds or stale:
        pop_and_check()
    assert ends.first_s() == math.inf and not ends

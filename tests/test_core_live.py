"""The scheduling core driven live through its public names: a fake wall clock, withdrawals, GPUs out
of service, memory held by other processes, jobs adopted while running, simulations from a live state,
and a backfill mode registered from outside. Every expected schedule is worked out by hand in comments."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from gpuplan.core.backfill import Backfill, NoBackfill, backfill_names, get_backfill, register_backfill
from gpuplan.core.booking import booked_mem_gb, fits_empty_cluster, never_fits_message
from gpuplan.core.placement import get_placer
from gpuplan.core.scheduler import Scheduler
from gpuplan.core.view import SchedulerView, Started
from gpuplan.errors import ScheduleError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.engine import RunningJob, simulate

A100 = GpuSpec("A100-80GB", 80.0)
SRC = Path(__file__).resolve().parents[1] / "src" / "gpuplan"


def _cluster(*sizes: int, sharing: bool = False, gpu: GpuSpec = A100) -> ClusterSpec:
    return ClusterSpec("test", tuple(NodeSpec(f"n{i}", g, gpu) for i, g in enumerate(sizes)), sharing=sharing)


class FakeClock:
    """A wall clock the test moves by hand (the agent reads time.time() instead)."""

    def __init__(self) -> None:
        self.now = 0.0

    def advance_to(self, t: float) -> float:
        assert t >= self.now
        self.now = t
        return t


def test_submit_cancel_gpu_loss_finish_on_a_fake_wall_clock() -> None:
    # 1 node x 4 GPUs, fifo + EASY + first-fit, driven the way the agent drives it.
    # t=0: A (2 GPUs, est 100) -> GPUs 0,1; B (2 GPUs, est 50) -> GPUs 2,3; C (4 GPUs) blocks; D (1 GPU) waits.
    # t=5: C is cancelled. t=10: GPU 3 fails (B keeps running there). t=50: B ends; E (2 GPUs) arrives;
    # D -> GPU 2 (3 is out of service). t=80: D ends: GPU 2 is free but E needs 2 and GPU 3 is out: waits.
    # t=100: A ends -> E on GPUs 0,1. GPU 3 comes back; F (4 GPUs) arrives, starts when E ends at 110.
    clock = FakeClock()
    s = Scheduler(_cluster(4), "fifo", "easy", "first-fit")
    for jid, (name, g, est) in enumerate([("A", 2, 100.0), ("B", 2, 50.0), ("C", 4, 10.0), ("D", 1, 30.0)]):
        s.submit(jid, Job(name, clock.now, g, est_duration_s=est))
    assert s.schedule(clock.now) == [Started(0, (0, 1)), Started(1, (2, 3))]
    assert [x.job.id for x in s.waiting()] == ["C", "D"]
    assert [(x.job.id, x.start_s, x.expected_end_s, x.alloc) for x in s.running()] == [
        ("B", 0.0, 50.0, (2, 3)),
        ("A", 0.0, 100.0, (0, 1)),
    ]
    clock.advance_to(5.0)
    assert s.withdraw(2).job.id == "C"
    assert s.schedule(clock.now) == [] and [x.job.id for x in s.waiting()] == ["D"]
    clock.advance_to(10.0)
    s.set_offline(3)
    assert s.slot(1).alloc == (2, 3)  # B still runs on the failed GPU
    clock.advance_to(50.0)
    assert s.finish(1).job.id == "B"
    s.submit(4, Job("E", clock.now, 2, est_duration_s=10.0))
    assert s.schedule(clock.now) == [Started(3, (2,))]
    clock.advance_to(80.0)
    s.finish(3)
    assert s.state.idle_total == 1 and s.schedule(clock.now) == []
    clock.advance_to(100.0)
    s.finish(0)
    assert s.schedule(clock.now) == [Started(4, (0, 1))]
    s.set_offline(3, False)
    s.submit(5, Job("F", clock.now, 4, est_duration_s=5.0))
    assert s.schedule(clock.now) == []
    clock.advance_to(110.0)
    s.finish(4)
    assert s.schedule(clock.now) == [Started(5, (0, 1, 2, 3))]
    assert s.waiting_count == 0 and s.running_count == 1


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_a_job_ending_on_an_offline_gpu_frees_nothing_for_a_reservation(backfill: str) -> None:
    # 1 node x 3 GPUs. R1 (est 100) on GPU 0, R2 (est 10) on GPU 1, then GPU 1 goes out of service.
    # H (2 GPUs) can only start when R1 ends (GPUs 0 and 2) at 100, not when R2 ends at 10 (GPU 1 stays
    # out). So L (1 GPU, est 50, ends 50 <= 100) backfills on GPU 2 now.
    s = Scheduler(_cluster(3), "fifo", backfill, "first-fit")
    s.adopt(0, Job("R1", 0.0, 1, est_duration_s=100.0), (0,), 0.0)
    s.adopt(1, Job("R2", 0.0, 1, est_duration_s=10.0), (1,), 0.0)
    s.set_offline(1)
    s.submit(2, Job("H", 0.0, 2, est_duration_s=10.0))
    s.submit(3, Job("L", 0.0, 1, est_duration_s=50.0))
    assert s.schedule(0.0) == [Started(3, (2,))]


def test_external_memory_counts_on_its_gpu() -> None:
    # One 80 GB GPU shared. Another process holds 50 GB: a 40 GB job does not fit; at 20 GB held it does.
    s = Scheduler(_cluster(1, sharing=True), "fifo", "easy", "first-fit")
    s.hold_external(0, 50.0)
    s.submit(0, Job("j", 0.0, 1, mem_gb=40.0, est_duration_s=10.0))
    assert s.schedule(0.0) == []
    s.hold_external(0, 20.0)  # a new observed figure replaces the old one
    assert s.schedule(0.0) == [Started(0, (0,))]
    assert s.state.gpu_free_gb[0] == pytest.approx(20.0)
    s.finish(0)
    s.hold_external(0, 0.0)
    assert s.state.gpu_free_gb[0] == 80.0 and s.state.idle_total == 1
    # exclusive: any memory held by another process makes the GPU not free
    x = Scheduler(_cluster(2), "fifo", "none", "first-fit")
    x.hold_external(0, 1.0)
    x.submit(0, Job("k", 0.0, 1, est_duration_s=1.0))
    assert x.schedule(0.0) == [Started(0, (1,))]
    with pytest.raises(ValueError, match="no GPU 7"):
        x.hold_external(7, 1.0)


def test_adopt_seeds_a_running_job_and_withdraw_refuses_it() -> None:
    # 1 node x 2 GPUs. R runs on GPU 1 since t=-30, expected to end at 70 (so it plans 100 s). At t=10
    # H (2 GPUs) is reserved at 70: L (1 GPU, est 61) would hold GPU 0 until 71 and may not start; S
    # (est 60) ends by 70 and starts on GPU 0.
    s = Scheduler(_cluster(2), "fifo", "easy", "first-fit")
    r = s.adopt(0, Job("R", -30.0, 1), (1,), -30.0, expected_end_s=70.0)
    assert r.plan_s == 100.0 and r.is_running
    s.submit(1, Job("H", 10.0, 2, est_duration_s=5.0))
    s.submit(2, Job("L", 10.0, 1, est_duration_s=61.0))
    assert s.schedule(10.0) == []  # L would end at 71 > 70 on the GPU H needs
    s.submit(3, Job("S", 10.0, 1, est_duration_s=60.0))
    assert s.schedule(10.0) == [Started(3, (0,))]
    with pytest.raises(ScheduleError, match="running, not waiting"):
        s.withdraw(0)
    with pytest.raises(ScheduleError, match="unknown"):
        s.withdraw(99)
    with pytest.raises(ScheduleError, match="already in use"):
        s.submit(0, Job("again", 0.0, 1))
    with pytest.raises(ScheduleError, match=r"GPUs 0\.\.1"):
        s.adopt(9, Job("far", 0.0, 1), (5,), 0.0)
    assert s.projected_state(70.0).idle_total == 2  # R and S both expected to end at 70
    assert s.projected_state(69.0).idle_total == 0 and s.state.idle_total == 0


def test_simulate_from_a_live_state() -> None:
    # 1 node x 4 GPUs, now = 1000. R runs on GPUs 0,1 since 900, expected to end at 1100 (est 200), really
    # ends at 1050. Waiting: W1 (4 GPUs, 10 s) and W2 (2 GPUs, 30 s). EASY: W1 is reserved at 1100;
    # W2 ends at 1030 <= 1100: starts now on GPUs 2,3. R ends at 1050: W1 runs [1050, 1060).
    # Times from now: R [-100, 50), W2 [0, 30), W1 [50, 60). Lower bound: nothing starts before now and
    # R has 50 s left: GPU-area (4*10 + 2*30 + 2*50) / 4 = 50.
    running = [RunningJob(Job("R", 800.0, 2, est_duration_s=200.0), (0, 1), 900.0, remaining_s=50.0)]
    waiting = [
        Job("W1", 950.0, 4, duration_s=10.0, est_duration_s=10.0),
        Job("W2", 960.0, 2, duration_s=30.0, est_duration_s=30.0),
    ]
    res = simulate(waiting, _cluster(4), "fifo", "easy", running=running, now_s=1000.0)
    got = {r.job_id: (r.submit_s, r.start_s, r.end_s, r.gpus) for r in res.records}
    assert got == {
        "R": (-200.0, -100.0, 50.0, (0, 1)),
        "W2": (-40.0, 0.0, 30.0, (2, 3)),
        "W1": (-50.0, 50.0, 60.0, (0, 1, 2, 3)),
    }
    assert res.metrics.makespan_s == 60.0 and res.metrics.lower_bound_s == 50.0
    # strict order: W2 waits behind W1: [60, 90)
    strict = simulate(waiting, _cluster(4), "fifo", "none", running=running, now_s=1000.0)
    assert {r.job_id: r.start_s for r in strict.records} == {"R": -100.0, "W1": 50.0, "W2": 60.0}
    with pytest.raises(ScheduleError, match="need now_s"):
        simulate(waiting, _cluster(4), running=running)


@pytest.mark.parametrize("sharing", [False, True])
@pytest.mark.parametrize("backfill", ["none", "easy", "conservative"])
def test_a_live_start_at_now_replays_the_plain_simulation(sharing: bool, backfill: str) -> None:
    # A job running since now with its whole duration left is the same as that job starting at now:
    # the live run and the plain run give the same schedule (sharing: the same slowdowns too).
    gpu = GpuSpec("G", 100.0)
    first = Job("first", 0.0, 1, duration_s=100.0, est_duration_s=100.0, mem_gb=30.0, gpu_util_pct=80.0)
    rest = [
        Job(f"j{i}", 0.0 + i, 1 + i % 2, duration_s=20.0 + 7 * i, est_duration_s=25.0 + 5 * i, mem_gb=20.0 + 9 * i,
            gpu_util_pct=30.0 + 10 * i)
        for i in range(6)
    ]  # fmt: skip
    cluster = _cluster(2, sharing=sharing, gpu=gpu)
    plain = simulate([first, *rest], cluster, "fifo", backfill)
    gpus = next(r.gpus for r in plain.records if r.job_id == "first")
    live = simulate(rest, cluster, "fifo", backfill, running=[RunningJob(first, gpus, 0.0, 100.0)], now_s=0.0)
    as_set = {(r.job_id, r.start_s, round(r.end_s, 9), r.gpus) for r in live.records}
    assert as_set == {(r.job_id, r.start_s, round(r.end_s, 9), r.gpus) for r in plain.records}


class _ShortestWaitingOnly(Backfill):
    """A third-party mode: start only the first waiting job that fits (one per pass)."""

    name = "one-per-pass"
    description = "test mode: at most one start per scheduling pass"

    def select(self, s: SchedulerView, now: float) -> list[Started]:
        started: list[Started] = []
        for slot in s.waiting():
            gpus = s.placer.find(s.state, slot.gpus, slot.mem_gb, slot.may_span)
            if gpus is not None:
                s.start(slot, gpus, now, started)
                break
        return started


def test_register_backfill_adds_a_mode_usable_by_name() -> None:
    register_backfill(_ShortestWaitingOnly)
    try:
        assert "one-per-pass" in backfill_names()
        # two 1-GPU jobs at 0 on 2 GPUs: one start per pass, and a pass runs at each event (0, then 10)
        jobs = [Job(f"j{i}", 0.0, 1, duration_s=10.0) for i in range(2)]
        res = simulate(jobs, _cluster(2), "fifo", "one-per-pass")
        assert sorted((r.job_id, r.start_s) for r in res.records) == [("j0", 0.0), ("j1", 10.0)]
        assert isinstance(get_backfill("none"), NoBackfill)
    finally:
        from gpuplan.core import backfill as module

        del module._BACKFILLS["one-per-pass"]  # the test's own registration; keep the registry as it was


def test_booking_rules_are_public() -> None:
    cluster = _cluster(8)
    assert booked_mem_gb(Job("a", 0.0, 1, mem_gb=30.0, est_mem_gb=20.0)) == 30.0  # too low an estimate
    assert booked_mem_gb(Job("b", 0.0, 1, est_mem_gb=20.0)) == 20.0
    assert booked_mem_gb(Job("c", 0.0, 1)) is None
    assert fits_empty_cluster(cluster, get_placer("first-fit"), 8, 80.0, False)
    assert not fits_empty_cluster(cluster, get_placer("first-fit"), 9, None, True)
    assert "can never start" in never_fits_message(cluster, Job("big", 0.0, 9), None)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
    return out


def test_no_private_names_cross_modules_and_no_import_circles() -> None:
    # a package may share private helpers between its own modules, never with another package
    for path in SRC.rglob("*.py"):
        package = ".".join(("gpuplan", *path.relative_to(SRC).parts[:-1]))
        for module, names in _imports(path):
            if module.startswith("gpuplan") and not module.startswith(package + ".") and module != package:
                private = [n for n in names if n.startswith("_") and not n.startswith("__")]
                assert not private, f"{path.relative_to(SRC)} imports private {private} from {module}"
    for path in (SRC / "commands").glob("*.py"):
        assert all(m != "gpuplan.cli" for m, _ in _imports(path)), f"{path.name} imports gpuplan.cli"
    assert all(m != "gpuplan.core.scheduler" for m, _ in _imports(SRC / "core" / "backfill.py"))
    assert all(m != "gpuplan.core.scheduler" for m, _ in _imports(SRC / "core" / "view.py"))
    assert math.isinf(Scheduler(_cluster(1)).adopt(0, Job("x", 0.0, 1), (0,), 0.0).expected_end_s)

"""Fair-share in the core: the decayed usage ledger and the ranking, computed by hand."""

from __future__ import annotations

import math

import pytest

from gpuplan.core.fairshare import FairShare, UsageLedger, decayed_run_gpu_s
from gpuplan.core.scheduler import Scheduler
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec

SPEC = ClusterSpec("two", (NodeSpec("n", 2, GpuSpec("A100-80GB", 80.0)),))
H = 100.0  # half-life of these tests, in seconds


def _job(jid: str, user: str, submit_s: float = 0.0, gpus: int = 1, dur: float = 50.0) -> Job:
    return Job(jid, submit_s, gpus, duration_s=dur, est_duration_s=dur, user=user)


def test_a_run_decays_by_the_closed_form() -> None:
    # 2 GPUs for 100 s with a 100 s half-life: 2 * 100 / ln 2 * (1 - 1/2) = 100 / ln 2
    assert decayed_run_gpu_s(2, 0.0, 100.0, H) == pytest.approx(100.0 / math.log(2))
    assert decayed_run_gpu_s(2, 0.0, 100.0, math.inf) == 200.0
    led = UsageLedger(H)
    led.start(1, "alice", 2, 0.0)
    # live: at 100 s a running job counts what it would be charged if it ended then
    assert led.usage("alice", 100.0) == pytest.approx(100.0 / math.log(2))
    led.stop(1, 100.0)
    assert led.usage("alice", 100.0) == pytest.approx(100.0 / math.log(2))
    assert led.usage("alice", 200.0) == pytest.approx(50.0 / math.log(2))  # one half-life later


def _ranked(half_life_s: float, now: float) -> list[str]:
    """carol used 800 GPU-s long ago (t=0), dave 300 GPU-s at t=200, erin runs 1 GPU since t=250."""
    s = Scheduler(SPEC, FairShare(half_life_s=half_life_s), "easy")
    s.restore_usage({"carol": 800.0}, 0.0)
    s.restore_usage({"dave": 300.0}, 200.0)
    s.adopt(0, _job("e0", "erin", 250.0, dur=1e6), (0,), 250.0)
    s.adopt(1, _job("x0", "", 0.0, dur=1e6), (1,), 0.0)  # the other GPU is busy too: nothing starts
    s.restore_usage({"": 1e9}, 0.0)
    for jid, user in ((2, "carol"), (3, "dave"), (4, "erin")):
        s.submit(jid, _job(f"{user}1", user, 260.0))
    assert s.schedule(now) == []
    return [slot.job.user for slot in s.waiting()]


def test_ranking_by_decayed_usage_computed_by_hand() -> None:
    # at t=300: carol 800 * 2^-3 = 100; dave 300 * 2^-1 = 150;
    # erin 1 GPU for 50 s: 100 / ln 2 * (1 - 2^-0.5) = 42.26  -> erin, carol, dave
    assert _ranked(H, 300.0) == ["erin", "carol", "dave"]
    # at t=400: carol 800 * 2^-4 = 50; dave 300 * 2^-2 = 75;
    # erin 150 s: 100 / ln 2 * (1 - 2^-1.5) = 93.27  -> carol, dave, erin
    assert _ranked(H, 400.0) == ["carol", "dave", "erin"]
    # without decay: erin 50, dave 300, carol 800
    assert _ranked(math.inf, 400.0) == ["erin", "dave", "carol"]


def test_usage_figures_of_the_ranking() -> None:
    s = Scheduler(SPEC, FairShare(half_life_s=H), "easy")
    s.restore_usage({"carol": 800.0}, 0.0)
    s.adopt(0, _job("e0", "erin", 250.0, dur=1e6), (0,), 250.0)
    use = s.user_usage(400.0)
    assert use["carol"] == pytest.approx(50.0)
    assert use["erin"] == pytest.approx(100.0 / math.log(2) * (1 - 2**-1.5))
    assert s.charged_usage(400.0) == {"carol": pytest.approx(50.0)}


def test_a_user_who_ran_waits_behind_one_who_did_not_then_sjf_among_ties() -> None:
    s = Scheduler(SPEC, FairShare(half_life_s=H, then="sjf"), "none")
    s.submit(0, _job("a0", "alice", 0.0, gpus=2, dur=100.0))
    assert [st.jid for st in s.schedule(0.0)] == [0]
    # alice (running) floods; bob and carol (never ran, tied at 0) interleave shortest first
    s.submit(1, _job("a1", "alice", 10.0, dur=1.0))
    s.submit(2, _job("b1", "bob", 20.0, dur=30.0))
    s.submit(3, _job("c1", "carol", 30.0, dur=20.0))
    s.submit(4, _job("b2", "bob", 40.0, dur=10.0))
    s.schedule(50.0)
    assert [slot.job.id for slot in s.waiting()] == ["b2", "c1", "b1", "a1"]
    s.finish(0, 100.0)
    started = s.schedule(100.0)
    assert [s.slot(st.jid).job.id for st in started] == ["b2", "c1"]


def test_the_queue_reorders_when_usage_crosses_and_the_version_moves() -> None:
    s = Scheduler(SPEC, FairShare(half_life_s=H), "conservative")
    s.adopt(0, _job("a0", "alice", 0.0, dur=1e6), (0,), 0.0)  # alice runs from 0
    s.adopt(1, _job("b0", "bob", 0.0, dur=1e6), (1,), 0.0)
    s.finish(1, 10.0)  # bob ran 10 s only
    s.adopt(1, _job("x", "zed", 10.0, dur=1e6), (1,), 10.0)
    s.submit(2, _job("a1", "alice", 10.0))
    s.submit(3, _job("b1", "bob", 10.0))
    s.schedule(20.0)
    assert [slot.job.user for slot in s.waiting()] == ["bob", "alice"]
    v = s.version
    s.schedule(20.0)
    assert s.version == v  # nothing moved: the standing pass may stand
    s.restore_usage({"bob": 1e6}, 30.0)
    s.schedule(30.0)
    assert [slot.job.user for slot in s.waiting()] == ["alice", "bob"]
    assert s.version > v


def test_fairshare_needs_a_static_second_policy() -> None:
    with pytest.raises(ValueError, match="static"):
        FairShare(then="las")
    with pytest.raises(ValueError, match="half-life"):
        FairShare(half_life_s=0)

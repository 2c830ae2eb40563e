"""Per-user quotas in the core: over-quota jobs are passed by with a reason; impossible ones refused."""

from __future__ import annotations

import pytest

from gpuplan.core.quotas import QuotaNeverFitsError, Quotas, UserQuota
from gpuplan.core.scheduler import Scheduler
from gpuplan.errors import JobNeverFitsError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec

SPEC = ClusterSpec("eight", (NodeSpec("n", 8, GpuSpec("A100-80GB", 80.0)),))


def _job(jid: str, user: str, gpus: int = 2, submit_s: float = 0.0) -> Job:
    return Job(jid, submit_s, gpus, duration_s=100.0, est_duration_s=100.0, user=user)


@pytest.mark.parametrize("backfill", ["none", "easy", "conservative"])
def test_a_third_two_gpu_job_waits_on_the_quota_without_blocking_others(backfill: str) -> None:
    s = Scheduler(SPEC, "fifo", backfill, quotas=Quotas(max_gpus=4))
    for i in range(3):
        s.submit(i, _job(f"a{i}", "alice"))
    s.submit(3, _job("b0", "bob"))
    started = {st.jid for st in s.schedule(0.0)}
    assert started == {0, 1, 3}  # alice's third waits; bob's job behind it is not blocked
    assert s.state.idle_total == 2  # GPUs are free, yet it waits
    assert s.quota_reason(2) == "quota: alice uses 4 of 4 GPUs"
    assert s.quota_reason(3) is None  # running
    s.finish(0, 100.0)
    assert s.quota_reason(2) is None
    assert [st.jid for st in s.schedule(100.0)] == [2]


def test_max_jobs_and_a_per_user_override() -> None:
    q = Quotas(max_jobs=1, per_user={"bob": UserQuota(max_jobs=3)})
    s = Scheduler(SPEC, "fifo", "easy", quotas=q)
    for i, user in enumerate(["alice", "alice", "bob", "bob", "bob"]):
        s.submit(i, _job(f"j{i}", user, gpus=1))
    assert {st.jid for st in s.schedule(0.0)} == {0, 2, 3, 4}
    assert s.quota_reason(1) == "quota: alice runs 1 of 1 jobs"


def test_partial_use_names_what_the_job_asks() -> None:
    s = Scheduler(SPEC, "fifo", "easy", quotas=Quotas(max_gpus=4))
    s.submit(0, _job("a0", "alice", gpus=2))
    s.submit(1, _job("a1", "alice", gpus=4))
    s.schedule(0.0)
    assert s.quota_reason(1) == "quota: alice uses 2 of 4 GPUs (this job asks for 4)"


def test_a_job_over_the_quota_forever_is_refused_at_submit() -> None:
    s = Scheduler(SPEC, "fifo", "easy", quotas=Quotas(max_gpus=4, per_user={"root": UserQuota(max_gpus=8)}))
    with pytest.raises(QuotaNeverFitsError, match=r"asks for 6 GPUs but alice may hold at most 4") as e:
        s.submit(0, _job("a0", "alice", gpus=6))
    assert isinstance(e.value, JobNeverFitsError)  # every clock already handles never-fits jobs
    s.submit(1, _job("r0", "root", gpus=6))


def test_quotas_change_live_and_bump_the_version() -> None:
    s = Scheduler(SPEC, "fifo", "conservative", quotas=Quotas(max_gpus=2))
    s.submit(0, _job("a0", "alice"))
    s.submit(1, _job("a1", "alice"))
    assert [st.jid for st in s.schedule(0.0)] == [0]
    v = s.version
    s.set_quotas(Quotas(max_gpus=4))
    assert s.version > v
    assert [st.jid for st in s.schedule(1.0)] == [1]
    s.set_quotas(None)
    assert s.quotas is None
    with pytest.raises(ValueError, match="at least 1"):
        Quotas(max_gpus=0)


def test_quotas_set_later_count_the_jobs_already_running() -> None:
    s = Scheduler(SPEC, "fifo", "easy")  # no quota: the scheduler keeps no per-user use
    s.submit(0, _job("a0", "alice"))
    s.submit(1, _job("a1", "alice"))
    assert {st.jid for st in s.schedule(0.0)} == {0, 1}
    s.submit(2, _job("a2", "alice"))
    s.set_quotas(Quotas(max_gpus=4))  # alice already holds 4 GPUs
    assert s.quota_reason(2) == "quota: alice uses 4 of 4 GPUs"
    assert s.schedule(1.0) == []
    s.set_quotas(None)
    s.finish(0, 100.0)  # ends while no quota is set
    s.set_quotas(Quotas(max_gpus=2))  # alice holds 2 now: one more 2-GPU job would go over
    assert s.quota_reason(2) == "quota: alice uses 2 of 2 GPUs"
    s.finish(1, 101.0)
    assert s.quota_reason(2) is None
    assert [st.jid for st in s.schedule(101.0)] == [2]

"""No leakage: an online estimate depends only on jobs that finished before the estimated job's submit
(hypothesis over random traces, driven through the simulator that feeds the estimator)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.core.estimates import Estimate, OnlineEstimator
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.engine import simulate

SPEC = ClusterSpec("2x4", tuple(NodeSpec(f"n{i}", 4, GpuSpec("A", 80.0)) for i in (1, 2)))


class _Recording(OnlineEstimator):
    """Remembers, per estimated job, its estimate and the jobs observed before it."""

    def __init__(self) -> None:
        super().__init__(k=3, k_all=5)
        self.seen: list[str] = []
        self.estimates: dict[str, Estimate | None] = {}
        self.seen_before: dict[str, list[str]] = {}

    def observe(self, job: Job, duration_s: float) -> None:
        self.seen.append(job.id)
        super().observe(job, duration_s)

    def estimate(self, job: Job) -> Estimate | None:
        self.seen_before[job.id] = list(self.seen)
        self.estimates[job.id] = super().estimate(job)
        return self.estimates[job.id]


_job = st.tuples(
    st.integers(0, 50),  # submit gap
    st.sampled_from([1, 2, 4]),
    st.integers(1, 200),  # duration
    st.sampled_from(["", "ann", "bob"]),
    st.sampled_from(["", "train", "eval"]),
)


def _jobs(rows: list[tuple[int, int, int, str, str]]) -> list[Job]:
    t, out = 0.0, []
    for i, (gap, gpus, dur, user, name) in enumerate(rows):
        t += gap
        out.append(Job(f"j{i}", t, gpus, duration_s=float(dur), user=user, name=name, est_duration_s=7.0))
    return out


def _run(jobs: list[Job], policy: str) -> _Recording:
    est = _Recording()
    simulate(jobs, SPEC, policy, "easy", estimator=est)
    return est


@settings(max_examples=60, deadline=None)
@given(st.lists(_job, min_size=2, max_size=25), st.data(), st.sampled_from(["fifo", "sjf", "gpu-time"]))
def test_estimates_never_see_the_job_itself_or_the_future(rows, data, policy) -> None:  # type: ignore[no-untyped-def]
    jobs = _jobs(rows)
    est = _run(jobs, policy)
    result = simulate(jobs, SPEC, policy, "easy", estimator=OnlineEstimator(k=3, k_all=5))
    end = {r.job_id: r.end_s for r in result.records}
    submit = {j.id: j.submit_s for j in jobs}
    for j in jobs:
        before = est.seen_before[j.id]
        assert j.id not in before
        assert all(end[o] <= submit[j.id] for o in before)  # finished by its submit (t0 is 0 here)
    # Changing the duration of job k and every later one changes no estimate made up to k's submit.
    k = data.draw(st.integers(0, len(jobs) - 1))
    new = [
        d * 3 + 1 for d in data.draw(st.lists(st.integers(1, 300), min_size=len(jobs), max_size=len(jobs)))
    ]
    changed = [replace(j, duration_s=float(new[i])) if i >= k else j for i, j in enumerate(jobs)]
    est2 = _run(changed, policy)
    for j in jobs:
        if j.submit_s <= jobs[k].submit_s:
            assert est2.estimates[j.id] == est.estimates[j.id], j.id

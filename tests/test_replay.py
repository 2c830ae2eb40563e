"""A replay reproduces its trace: durations that already include GPU sharing are never slowed again.

Small hand-made traces cover the rule both ways; the real Alibaba and NASA traces (when present) must
replay to within 5 % of their own span when no job waits.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.errors import InputError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.engine import simulate
from gpuplan.traces import read_trace, write_trace

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces"
ALIBABA = DATA / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"
NASA = DATA / "pwa-nasa-ipsc-1993" / "NASA-iPSC-1993-3.1-cln.swf"
ALIBABA_FIXTURE = Path(__file__).parent / "fixtures" / "alibaba" / "pods_default.csv"

ONE_SHARED_GPU = ClusterSpec("one", (NodeSpec("n0", 1, GpuSpec("H200", 141.0)),), sharing=True)


def _pair(includes: tuple[bool, bool]) -> list[Job]:
    """Two busy jobs that fit together on one GPU, both submitted at 0."""
    return [
        Job(f"j{i}", 0.0, 1, mem_gb=10.0, duration_s=1000.0, gpu_util_pct=90.0, duration_includes_sharing=inc)
        for i, inc in enumerate(includes)
    ]


def _ends(jobs: list[Job]) -> dict[str, float]:
    result = simulate(jobs, ONE_SHARED_GPU, "fifo", "none")
    assert all(r.start_s == 0.0 for r in result.records), "both jobs share the GPU from t=0"
    return {r.job_id: r.end_s for r in result.records}


def test_durations_measured_alone_are_slowed_by_sharing() -> None:
    ends = _ends(_pair((False, False)))
    assert ends["j0"] > 1000.0 and ends["j1"] > 1000.0


def test_durations_that_include_sharing_are_replayed_as_recorded() -> None:
    assert _ends(_pair((True, True))) == {"j0": 1000.0, "j1": 1000.0}


def test_the_rule_is_per_job() -> None:
    ends = _ends(_pair((True, False)))
    assert ends["j0"] == 1000.0
    assert ends["j1"] > 1000.0


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_the_flag_survives_every_own_format(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"t{suffix}"
    write_trace(_pair((True, False)), path)
    jobs = read_trace(path).jobs
    assert [j.duration_includes_sharing for j in jobs] == [True, False]


def test_a_bad_flag_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("id,submit_s,gpus,duration_includes_sharing\na,0,1,maybe\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_trace(path)
    assert "duration_includes_sharing" in str(e.value) and "t.csv:2" in str(e.value)


def test_the_alibaba_reader_says_its_durations_include_sharing() -> None:
    jobs = read_trace(ALIBABA_FIXTURE).jobs
    assert jobs and all(j.duration_includes_sharing for j in jobs)


def _own_span_s(jobs: list[Job]) -> float:
    """When the trace itself says its last job ended, from its first submit."""
    ran = [j for j in jobs if j.duration_s is not None]
    ends = [j.meta.get("end_s", j.meta.get("start_s", j.submit_s) + (j.duration_s or 0.0)) for j in ran]
    return max(ends) - min(j.submit_s for j in ran)


@pytest.mark.parametrize("path", [ALIBABA, NASA], ids=["alibaba", "nasa"])
def test_real_trace_replays_to_its_own_span(path: Path) -> None:
    if not path.is_file():
        pytest.skip(f"shared data absent: {path}")
    trace = read_trace(path)
    assert trace.cluster is not None
    jobs = [j for j in trace.jobs if j.duration_s is not None]
    result = simulate(jobs, trace.cluster, "fifo", "easy")
    own = _own_span_s(trace.jobs)
    assert abs(result.metrics.makespan_s - own) <= 0.05 * own, (result.metrics.makespan_s, own)


def test_a_run_leaves_the_garbage_collector_as_it_found_it() -> None:
    import gc

    jobs = _pair((False, False))
    assert gc.isenabled()
    simulate(jobs, ONE_SHARED_GPU, "fifo", "conservative")
    assert gc.isenabled()
    gc.disable()
    try:
        simulate(jobs, ONE_SHARED_GPU, "fifo", "conservative")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_run_matrix_gives_each_run_the_bound_simulate_computes() -> None:
    from gpuplan.sim.matrix import run_matrix

    jobs = [Job(f"j{i}", 10.0 * i, 1, mem_gb=30.0 + 9 * i, duration_s=100.0 + 7 * i) for i in range(8)]
    runs = run_matrix(jobs, ONE_SHARED_GPU, ["fifo", "ljf"], ["none", "conservative"], show_progress=False)
    for r in runs:
        alone = simulate(jobs, ONE_SHARED_GPU, r.policy, r.backfill)
        assert r.metrics == alone.metrics


def test_policies_with_one_order_are_simulated_once_and_match_their_own_run() -> None:
    """Without estimates sjf and gpu-time order jobs as fifo does: run_matrix shares fifo's schedule
    under their names, and each shared run equals that policy's own simulation, warnings included."""
    from gpuplan.sim.engine import queue_order
    from gpuplan.sim.matrix import run_matrix

    jobs = [Job(f"j{i}", 10.0 * i, 1, mem_gb=30.0 + 9 * i, duration_s=100.0 + 7 * i) for i in range(8)]
    assert (
        queue_order(jobs, "sjf", False)
        == queue_order(jobs, "fifo", False)
        != queue_order(jobs, "mem-desc", False)
    )
    policies, backfills = ["fifo", "sjf", "gpu-time", "mem-desc"], ["none", "easy", "conservative"]
    runs = run_matrix(jobs, ONE_SHARED_GPU, policies, backfills, show_progress=False)
    assert len(runs) == 12
    for r in runs:
        alone = simulate(jobs, ONE_SHARED_GPU, r.policy, r.backfill)
        assert (r.policy, r.metrics, r.records, r.warnings, r.estimates) == (
            alone.policy,
            alone.metrics,
            alone.records,
            alone.warnings,
            alone.estimates,
        )
    fifo_none = next(r for r in runs if r.label == "fifo+none")
    sjf_none = next(r for r in runs if r.label == "sjf+none")
    assert sjf_none.records is fifo_none.records  # shared, not simulated again

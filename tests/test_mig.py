"""MIG: every profile table (NVIDIA MIG user guide), layouts refused with the reason, MIG nodes in cluster
TOML, a job's speed on a slice, hand-computed schedules on small MIG clusters, and `mig plan`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuplan.cluster import cluster_from_toml
from gpuplan.core.mig import (
    COMPUTE_SLICES,
    MEMORY_SLICES,
    MIG_GPUS,
    MigLayoutError,
    mig_gpu,
    mig_node_specs,
    place_layout,
    slice_slowdown,
    valid_layouts,
)
from gpuplan.errors import ClusterError, GpuplanError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.optimize.mig_plan import format_mig_plan, plan_mig
from gpuplan.sim.engine import simulate

# The profile names of each GPU's table in the guide (A100-SXM4-80GB names follow the memory proportion).
GUIDE_NAMES = {
    "A100-40GB": ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
    "A100-80GB": ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "H100-80GB": ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "H200-141GB": ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
}


# --- the profile tables ------------------------------------------------------------------------------------


def test_the_four_gpu_models_have_the_guides_profile_names() -> None:
    assert {m: list(g.profiles) for m, g in MIG_GPUS.items()} == GUIDE_NAMES


@pytest.mark.parametrize("model", list(GUIDE_NAMES))
def test_every_profile_fits_its_gpu(model: str) -> None:
    gpu = mig_gpu(model)
    for p in gpu.profiles.values():
        compute, mem = re.fullmatch(r"(\d)g\.(\d+)gb(\+me)?", p.name).groups()[:2]  # type: ignore[union-attr]
        assert p.compute_slices == int(compute) and p.mem_gb == float(mem)
        assert 1 <= p.compute_slices <= COMPUTE_SLICES and 1 <= p.memory_slices <= MEMORY_SLICES
        # the name's memory is the slices' share of the GPU, to within the guide's rounding
        assert p.mem_gb == pytest.approx(gpu.mem_gb * p.memory_slices / MEMORY_SLICES, rel=0.03)
        assert p.max_count * p.compute_slices <= COMPUTE_SLICES
        assert p.max_count * p.memory_slices <= MEMORY_SLICES
        assert all(s + p.memory_slices <= MEMORY_SLICES for s in p.placements)
        assert len(p.placements) >= p.max_count
        assert p.compute_fraction == pytest.approx(p.compute_slices / 7)
        # the largest count of a profile is a valid layout; one more is refused
        if not p.name.endswith("+me"):
            assert len(place_layout(model, [p.name] * p.max_count)) == p.max_count
        with pytest.raises(MigLayoutError, match=f"at most {p.max_count}"):
            place_layout(model, [p.name] * (p.max_count + 1))


@pytest.mark.parametrize("model", list(GUIDE_NAMES))
def test_every_listed_layout_is_valid_and_full_ones_take_nothing_more(model: str) -> None:
    layouts = valid_layouts(model)
    full = valid_layouts(model, full_only=True)
    assert set(full) <= set(layouts) and (GUIDE_NAMES[model][-1],) in full
    profiles = mig_gpu(model).profiles
    for layout in layouts:
        slices = place_layout(model, layout)
        used = [x for s in slices for x in s.slices]
        assert len(used) == len(set(used))  # no memory slice twice
        assert sum(profiles[n].compute_slices for n in layout) <= COMPUTE_SLICES
    for layout in full:
        for extra in GUIDE_NAMES[model]:
            if not extra.endswith("+me"):
                with pytest.raises(MigLayoutError):
                    place_layout(model, [*layout, extra])


def test_placements_by_hand() -> None:
    # 4g only at 0, so 3g goes to 4
    assert [(s.profile.name, s.start) for s in place_layout("A100-80GB", ["3g.40gb", "4g.40gb"])] == [
        ("3g.40gb", 4),
        ("4g.40gb", 0),
    ]
    # 3g at 0 would leave one 2g placement (4): the search must put 3g at 4 and the 2g at 0 and 2
    got = place_layout("H100-80GB", ["2g.20gb", "3g.40gb", "2g.20gb"])
    assert sorted((s.profile.name, s.start) for s in got) == [("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4)]
    # seven 1g slices take memory slices 0-6; the eighth slice is left over
    assert [s.start for s in place_layout("H200-141GB", ["1g.18gb"] * 7)] == list(range(7))


@pytest.mark.parametrize(
    ("model", "layout", "reason"),
    [
        ("A100-80GB", ["3g.40gb", "3g.40gb", "1g.10gb"], "9 memory slices, the GPU has 8"),
        ("A100-40GB", ["4g.20gb", "2g.10gb", "2g.10gb"], "8 compute slices, the GPU has 7"),
        ("H100-80GB", ["4g.40gb", "4g.40gb"], "2 x 4g.40gb, at most 1 per GPU"),
        ("H200-141GB", ["1g.18gb+me", "1g.18gb+me"], "at most 1"),
        ("H200-141GB", ["3g.40gb"], "unknown profile '3g.40gb'; H200-141GB profiles: 1g.18gb"),
        ("A100-80GB", [], "empty"),
        ("V100-32GB", ["1g.5gb"], "GPU model 'V100-32GB' has no MIG profile table"),
    ],
)
def test_invalid_layouts_are_refused_with_the_reason(model: str, layout: list[str], reason: str) -> None:
    with pytest.raises(MigLayoutError) as info:
        place_layout(model, layout)
    assert reason in str(info.value)
    assert isinstance(info.value, GpuplanError)


def test_model_names_are_matched_loosely() -> None:
    assert mig_gpu("h200").model == "H200-141GB"
    assert mig_gpu("a100-40gb").model == "A100-40GB"
    assert mig_gpu(" H100 ").model == "H100-80GB"
    assert place_layout("A100-80GB", ["MIG 7g.80gb"])[0].profile.name == "7g.80gb"


# --- speed on a slice --------------------------------------------------------------------------------------


def test_slice_slowdown_from_the_jobs_compute_need() -> None:
    assert slice_slowdown(20.0, 2 / 7) == 1.0  # a 20 % busy job loses nothing on a 2/7 slice
    assert slice_slowdown(100.0, 2 / 7) == pytest.approx(3.5)
    assert slice_slowdown(50.0, 1 / 7) == pytest.approx(3.5)
    assert slice_slowdown(None, 3 / 7) == pytest.approx(7 / 3)  # unknown: fully busy
    assert slice_slowdown(float("nan"), 1 / 7) == pytest.approx(7.0)
    assert slice_slowdown(100.0, 1.0) == 1.0


# --- MIG in the cluster model -----------------------------------------------------------------------------

_TOML = """
name = "mig-test"
[[nodes]]
name = "m"
gpus = 2
gpu_model = "A100-80GB"
gpu_mem_gb = 80
mig = MIG
"""


def _cluster(mig: str) -> ClusterSpec:
    return cluster_from_toml(_TOML.replace("MIG", mig), "t.toml")


def test_cluster_toml_with_one_layout_for_every_gpu() -> None:
    spec = _cluster('["3g.40gb", "2g.20gb", "2g.20gb"]')
    assert spec.total_gpus == 6
    assert [n.name for n in spec.nodes[:3]] == ["m/gpu0:3g.40gb@4", "m/gpu0:2g.20gb@0", "m/gpu0:2g.20gb@2"]
    assert [(n.gpu.mem_gb, n.gpu.mig_profile) for n in spec.nodes[:3]] == [
        (40.0, "3g.40gb"),
        (20.0, "2g.20gb"),
        (20.0, "2g.20gb"),
    ]
    assert spec.describe().startswith("2 GPUs (2 cut into 6 MIG slices) on 1 node(s)")


def test_cluster_toml_with_a_layout_per_gpu_and_a_whole_gpu() -> None:
    spec = _cluster('[["4g.40gb", "3g.40gb"], []]')
    assert [(n.name, n.gpus) for n in spec.nodes] == [
        ("m", 1),
        ("m/gpu0:4g.40gb@0", 1),
        ("m/gpu0:3g.40gb@4", 1),
    ]


@pytest.mark.parametrize(
    ("mig", "message"),
    [
        ('["3g.40gb", "3g.40gb", "2g.20gb"]', "t.toml: [[nodes]] #1: mig: MIG layout"),
        ('[["7g.80gb"]]', "mig has 1 layouts for 2 GPUs"),
        ("[1, 2]", "must be a list of MIG profile names"),
        ('"3g.40gb"', "must be a list of MIG profile names"),
    ],
)
def test_bad_mig_keys_name_the_node_and_the_fix(mig: str, message: str) -> None:
    with pytest.raises(ClusterError, match=re.escape(message)):
        _cluster(mig)


def test_mig_needs_a_model_with_tables_and_its_memory() -> None:
    text = _TOML.replace("MIG", '["1g.5gb"]')
    with pytest.raises(ClusterError, match="has no MIG profile table"):
        cluster_from_toml(text.replace("A100-80GB", "L40S-48GB"), "t.toml")
    with pytest.raises(ClusterError, match="gpu_mem_gb = 40 does not match A100-80GB"):
        cluster_from_toml(text.replace("gpu_mem_gb = 80", "gpu_mem_gb = 40"), "t.toml")


# --- hand-computed schedules on small MIG clusters -----------------------------------------------------------


def _mig(layout: list[str], whole: int = 0) -> ClusterSpec:
    gpu = GpuSpec("A100-80GB", 80.0)
    return ClusterSpec("m", tuple(mig_node_specs("n", gpu, [tuple(layout)] + [()] * whole)))


def _job(
    jid: str, dur: float, mem: float, util: float, gpus: int = 1, submit: float = 0.0, **kw: object
) -> Job:
    return Job(jid, submit, gpus, mem_gb=mem, duration_s=dur, gpu_util_pct=util, **kw)  # type: ignore[arg-type]


def _schedule(
    jobs: list[Job], spec: ClusterSpec, backfill: str = "none"
) -> dict[str, tuple[float, float, str]]:
    res = simulate(jobs, spec, "fifo", backfill)
    label = {g: spec_gpu for g, spec_gpu in enumerate(n.name for n in spec.nodes for _ in range(n.gpus))}
    return {r.job_id: (r.start_s, r.end_s, label[r.gpus[0]]) for r in res.records}


def test_small_jobs_run_side_by_side_on_slices_at_their_own_speed() -> None:
    # [3g.40gb, 2g.20gb, 2g.20gb]: a (30 GB, 100 % busy, 70 s) only fits the 3g slice: 70 · 7/3 = 163.3 s.
    # b and c (10 GB, 20 % busy, 60 s) need at most 2/7: full speed on the 2g slices, 60 s.
    # d (10 GB, 20 %, 30 s) waits for a 2g slice: starts at 60, ends at 90.
    spec = _mig(["3g.40gb", "2g.20gb", "2g.20gb"])
    got = _schedule(
        [_job("a", 70, 30, 100), _job("b", 60, 10, 20), _job("c", 60, 10, 20), _job("d", 30, 10, 20)], spec
    )
    assert got["a"][:2] == pytest.approx((0.0, 70 * 7 / 3)) and got["a"][2].endswith("3g.40gb@4")
    assert got["b"][:2] == pytest.approx((0.0, 60.0)) and got["c"][:2] == pytest.approx((0.0, 60.0))
    assert got["d"][:2] == pytest.approx((60.0, 90.0))


def test_only_the_gpu_phase_slows_on_a_slice() -> None:
    # 100 s job, 40 s of start-up + init, 60 % busy over 100 s = 100 % busy in its 60 s GPU phase;
    # on a 1g slice (1/7) its GPU phase takes 60 · 7 = 420 s: 40 + 420 = 460 s.
    spec = _mig(["1g.10gb"] * 7)
    got = _schedule([_job("a", 100, 5, 60, startup_s=10.0, init_s=30.0)], spec)
    assert got["a"][:2] == pytest.approx((0.0, 460.0))


def test_multi_gpu_jobs_never_use_slices_even_when_they_may_span() -> None:
    spec = _mig(["3g.40gb", "4g.40gb"], whole=2)
    got = _schedule([_job("big", 50, 30, 90, gpus=2, may_span_nodes=True), _job("s", 10, 30, 90)], spec)
    assert got["big"][2] == "n" and got["big"][:2] == pytest.approx((0.0, 50.0))
    assert got["s"][2].startswith("n/gpu0:") and got["s"][0] == 0.0
    cut_only = _mig(["3g.40gb", "4g.40gb"])
    with pytest.raises(GpuplanError, match="can never start"):
        simulate([_job("big", 50, 30, 90, gpus=2, may_span_nodes=True)], cut_only, "fifo", "none")


def test_a_job_too_big_for_every_slice_never_fits() -> None:
    with pytest.raises(GpuplanError, match="can never start"):
        simulate([_job("fat", 10, 50, 90)], _mig(["3g.40gb", "4g.40gb"]), "fifo", "none")


# --- mig plan ---------------------------------------------------------------------------------------------


def _inference_mix() -> list[Job]:
    """Eight 1-GPU inference jobs of 8 GB at 10 % busy, 100 s each, on a node of two A100-80GB."""
    return [_job(f"i{k}", 100.0, 8.0, 10.0) for k in range(8)]


def test_mig_plan_cuts_gpus_for_many_small_light_jobs() -> None:
    # Exclusive: 8 jobs on 2 GPUs: 4 rounds of 100 s = 400 s. On 7 x 1g.10gb (1/7 compute, 10 % busy: no
    # slowdown) per GPU, all 8 run at once: 100 s.
    spec = ClusterSpec("two", (NodeSpec("n", 2, GpuSpec("A100-80GB", 80.0)),))
    plan = plan_mig(_inference_mix(), spec, backfill="none")
    assert plan.exclusive.makespan_s == pytest.approx(400.0)
    assert plan.mig is not None and plan.mig.makespan_s == pytest.approx(100.0)
    assert plan.winner.mode == "mig"
    assert plan.gain_vs(plan.exclusive) == pytest.approx(0.75)
    text = format_mig_plan(plan)
    assert "winner: mig" in text and "+75.0 % vs exclusive" in text
    assert plan.as_dict()["modes"]["mig"]["makespan_s"] == pytest.approx(100.0)


def test_mig_plan_keeps_whole_gpus_for_jobs_that_need_them() -> None:
    # A 2-GPU job needs both GPUs whole: no static layout can cut any GPU, so every MIG candidate is
    # infeasible and the plan says so (exclusive wins).
    spec = ClusterSpec("two", (NodeSpec("n", 2, GpuSpec("A100-80GB", 80.0)),))
    plan = plan_mig([_job("big", 100, 60, 95, gpus=2), *_inference_mix()[:2]], spec, backfill="none")
    assert plan.mig is None and plan.infeasible == plan.evaluated - 2
    assert plan.winner.mode in ("exclusive", "sharing")
    assert "(no feasible layout)" in format_mig_plan(plan)


def test_mig_plan_with_one_reconfiguration_by_hand() -> None:
    # The 2-GPU job runs first on whole GPUs (0-100 s) while the eight small jobs wait behind it (FIFO).
    # Re-cut: the switch is when it starts (0); the node drains at 100, re-cuts for 50 s, and from 150 the
    # eight small jobs run at once on 1g slices (10 % busy <= 1/7: full speed): all end at 250.
    # Exclusive: 100 + four rounds of 100 s = 500. Static MIG cannot host the 2-GPU job.
    spec = ClusterSpec("two", (NodeSpec("n", 2, GpuSpec("A100-80GB", 80.0)),))
    jobs = [_job("big", 100, 60, 95, gpus=2), *_inference_mix()]
    plan = plan_mig(jobs, spec, backfill="none", reconfigure=True, drain_cost_s=50.0)
    assert plan.mig is None
    assert plan.exclusive.makespan_s == pytest.approx(500.0)
    again = plan.reconfigured
    assert again is not None and again.switch_s == pytest.approx(150.0)
    assert again.makespan_s == pytest.approx(250.0)
    assert again.mean_jct_s == pytest.approx((100.0 + 8 * 250.0) / 9)
    assert "then from 0.04 h" in again.describe()
    assert (
        "MIG, re-cut" in format_mig_plan(plan)
        and plan.as_dict()["modes"]["mig_reconfigured"]["switch_s"] == 150.0
    )


def test_mig_plan_needs_a_mig_gpu_and_a_known_objective() -> None:
    spec = ClusterSpec("l40", (NodeSpec("n", 2, GpuSpec("L40S-48GB", 48.0)),))
    with pytest.raises(GpuplanError, match="no GPU of the cluster has MIG tables"):
        plan_mig(_inference_mix(), spec)
    with pytest.raises(GpuplanError, match="unknown objective"):
        plan_mig(_inference_mix(), spec, objective="fastest")


def test_mig_plan_cli_json(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpuplan.cli import app
    from gpuplan.traces import write_trace

    trace = tmp_path / "t.jsonl"
    write_trace(_inference_mix(), trace)
    cluster = tmp_path / "c.toml"
    cluster.write_text('[[nodes]]\nname = "n"\ngpus = 2\ngpu_model = "A100-80GB"\ngpu_mem_gb = 80\n')
    res = CliRunner().invoke(
        app, ["mig", "plan", str(trace), "--cluster", str(cluster), "--backfill", "none", "--json"]
    )
    assert res.exit_code == 0, res.output
    import json

    doc = json.loads(res.stdout)
    assert doc["winner"] == "mig" and doc["modes"]["exclusive"]["makespan_s"] == pytest.approx(400.0)
    bad = CliRunner().invoke(app, ["mig", "plan", str(trace), "--cluster", str(cluster), "--objective", "x"])
    assert bad.exit_code != 0 and "unknown objective" in bad.output


def test_small_inference_stream_is_seeded_and_in_range() -> None:
    from gpuplan.synth import synth_article, synth_small_inference

    a, b = synth_small_inference(40, seed=3), synth_small_inference(40, seed=3)
    assert [(j.submit_s, j.duration_s, j.mem_gb) for j in a] == [
        (j.submit_s, j.duration_s, j.mem_gb) for j in b
    ]
    assert [j.submit_s for j in a] == sorted(j.submit_s for j in a)
    assert all(
        j.gpus == 1 and 4.0 <= (j.mem_gb or 0) <= 16.0 and 10 <= (j.gpu_util_pct or 0) <= 35 for j in a
    )
    assert all(0 <= j.submit_s <= 8 * 3600 and 120 <= (j.duration_s or 0) <= 1800 for j in a)
    ids = {j.id for j in synth_article(3)} | {j.id for j in a}
    assert len(ids) == 80 + 40  # no id shared with the article's jobs
    with pytest.raises(ValueError, match="n_jobs"):
        synth_small_inference(-1)

"""FGD's fragmentation measure by hand on three nodes, the fgd placer, the frag experiment, and a property:
no placer ever overbooks GPUs, GPU memory, GPU share, CPU or host memory."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpuplan.cli import app
from gpuplan.core.fragmentation import Workload, cluster_fragmentation, node_key
from gpuplan.core.placement import get_placer, placer_names
from gpuplan.core.state import ClusterState, Need
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.fragexp import arrival_order, frag_experiment

GPU = GpuSpec("T4", 16.0)
DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "traces" / "alibaba-gpu-v2023"
FIXTURE = Path(__file__).parent / "fixtures" / "alibaba_frag"


def three_nodes() -> ClusterState:
    spec = ClusterSpec(
        "three",
        (
            NodeSpec("n0", 2, GPU, 8000, None),
            NodeSpec("n1", 1, GPU, 6000, None),
            NodeSpec("n2", 2, GPU, 8000, None),
        ),
        sharing=True,
        max_jobs_per_gpu=8,
    )
    state = ClusterState(spec)
    state.place([1], None, Need(gpu_share=0.7))  # n0: free shares 1.0 and 0.3, 8000 milli-CPU
    state.place([2], None, Need(cpu_milli=4000, gpu_share=0.4))  # n1: 0.6 free, 2000 milli-CPU
    state.place([3], None)  # n2: both GPUs taken whole
    state.place([4], None)
    return state


# two job types, equally frequent: A = one whole GPU; B = half a GPU with 4 cores
WORKLOAD = Workload.from_counts(Counter({(1, 1.0, 0.0, 0.0): 1, (1, 0.5, 4000.0, 0.0): 1}))


def test_fragmentation_by_hand_on_three_nodes() -> None:
    state = three_nodes()
    # n0: A fits (GPU 0 is free), the 0.3 GPU is below A's need: 0.3; B fits, 0.3 < 0.5: 0.3 -> 0.3
    assert WORKLOAD.node_fragmentation(node_key(state, 0)) == pytest.approx(0.3)
    # n1: A does not fit (no whole GPU): all 0.6; B: 2000 < 4000 milli-CPU, no fit: all 0.6 -> 0.6
    assert WORKLOAD.node_fragmentation(node_key(state, 1)) == pytest.approx(0.6)
    # n2: nothing free, nothing fragmented
    assert WORKLOAD.node_fragmentation(node_key(state, 2)) == pytest.approx(0.0)
    assert cluster_fragmentation(state, WORKLOAD) == pytest.approx(0.9)


def test_fgd_takes_the_move_that_raises_fragmentation_least() -> None:
    state = three_nodes()
    fgd = get_placer("fgd")
    fgd.set_workload(WORKLOAD)  # type: ignore[attr-defined]
    # a 0.3-share job: on n0's 0.3 GPU it removes the 0.3 fragment (rise -0.3); on GPU 0 it would
    # strand 0.7 < 1 for A (rise +0.35); n1 (no CPU need) 0.6 -> 0.3: fragment of 0.3, rise -0.3 too,
    # and the tie goes to the node with less free GPU capacity: n1 (0.6 < 1.3)
    found = fgd.choose(state, 1, None, Need(gpu_share=0.3))
    assert found == (1, [2])
    before = cluster_fragmentation(state, WORKLOAD)
    state.place([2], None, Need(gpu_share=0.3))
    assert cluster_fragmentation(state, WORKLOAD) == pytest.approx(before - 0.3)
    # best-fit's answer for the same job is the node with the fewest fitting GPUs, too: it agrees here
    assert get_placer("best-fit").choose(three_nodes(), 1, None, Need(gpu_share=0.3))[0] == 1  # type: ignore[index]


def test_fgd_learns_the_workload_from_submits() -> None:
    fgd = get_placer("fgd")
    fgd.learn(Job("a", 0.0, 1, gpu_share=0.5))
    fgd.learn(Job("b", 0.0, 2))
    assert fgd.workload is not None and fgd.workload.types == 2  # type: ignore[attr-defined]


sizes = st.integers(1, 4)


@st.composite
def clusters(draw: st.DrawFn) -> ClusterSpec:
    nodes = []
    for i in range(draw(st.integers(1, 4))):
        cpu = draw(st.none() | st.sampled_from([2000.0, 8000.0, 16000.0]))
        ram = draw(st.none() | st.sampled_from([8.0, 32.0]))
        nodes.append(
            NodeSpec(f"n{i}", draw(sizes), GpuSpec("g", draw(st.sampled_from([16.0, 32.0]))), cpu, ram)
        )
    return ClusterSpec(
        "c", tuple(nodes), sharing=draw(st.booleans()), max_jobs_per_gpu=draw(st.integers(1, 5))
    )


jobs_st = st.lists(
    st.tuples(
        st.integers(0, 5),  # GPUs
        st.none() | st.sampled_from([0.1, 0.25, 0.5, 0.7, 1.0]),  # share
        st.none() | st.sampled_from([2.0, 8.0, 20.0]),  # GPU memory
        st.sampled_from([0.0, 1000.0, 4000.0]),  # CPU
        st.sampled_from([0.0, 4.0, 16.0]),  # host memory
        st.booleans(),  # may span
        st.booleans(),  # ends right after
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(spec=clusters(), jobs=jobs_st, placer=st.sampled_from(placer_names()))  # every registered placer
def test_no_placer_overbooks_any_resource(spec: ClusterSpec, jobs: list, placer: str) -> None:
    state = ClusterState(spec)
    p = get_placer(placer)
    booked: list[tuple[list[int], int, float | None, Need]] = []
    for gpus, share, mem, cpu, ram, span, ends in jobs:
        need = Need(cpu, ram, share if gpus == 1 and state.sharing else None)
        if gpus == 0:
            found = p.choose(state, 0, mem, need)
            if found is None:
                continue
            node, got = found
            assert got == []
            state.place_node(node, need)
        else:
            got_gpus = p.find(state, gpus, mem, span, need)
            if got_gpus is None:
                continue
            assert len(got_gpus) == gpus == len(set(got_gpus))
            node = state.gpu_node[got_gpus[0]]
            if not span:
                assert {state.gpu_node[g] for g in got_gpus} == {node}
            got = got_gpus
            state.place(got, mem, need)
        booked.append((got, node, mem, need))
        _check(spec, booked)
        if ends:
            got, node, mem, need = booked.pop()
            if got:
                state.release(got, mem, need)
            else:
                state.release_node(node, need)


def _check(spec: ClusterSpec, booked: list[tuple[list[int], int, float | None, Need]]) -> None:
    """Recount every resource from the bookings, independently of ClusterState."""
    state = ClusterState(spec)  # for the layout only
    cpu: Counter[int] = Counter()
    ram: Counter[int] = Counter()
    jobs_on: Counter[int] = Counter()
    mem_on: Counter[int] = Counter()
    share_on: Counter[int] = Counter()
    whole: set[int] = set()
    for gpus, node, mem, need in booked:
        parts = Counter(state.gpu_node[g] for g in gpus) if gpus else Counter({node: 1})
        total = sum(parts.values())
        for n, k in parts.items():
            cpu[n] += need.cpu_milli * k / total
            ram[n] += need.host_mem_gb * k / total
        for g in gpus:
            jobs_on[g] += 1
            if mem is None and need.gpu_share is None:
                whole.add(g)
            mem_on[g] += mem or 0.0
            share_on[g] += need.gpu_share if need.gpu_share is not None else (1.0 if mem is None else 0.0)
    for n, node in enumerate(spec.nodes):
        if node.cpu_milli is not None:
            assert cpu[n] <= node.cpu_milli + 1e-6
        if node.host_mem_gb is not None:
            assert ram[n] <= node.host_mem_gb + 1e-6
    for g in range(state.total_gpus):
        limit = spec.max_jobs_per_gpu if spec.sharing else 1
        assert jobs_on[g] <= limit
        if g in whole:
            assert jobs_on[g] == 1
        if spec.sharing:
            assert mem_on[g] <= state.gpu_cap_gb[g] + 1e-6
            assert share_on[g] <= 1.0 + 1e-6


def test_arrivals_top_up_to_the_target() -> None:
    jobs = [Job(str(i), 0.0, 1) for i in range(10)]
    order = arrival_order(jobs, 10.0, 1.3, 42)
    assert len(order) == 13 and set(order) == set(range(10))  # every pod, and 3 drawn again
    assert order == arrival_order(jobs, 10.0, 1.3, 42) != arrival_order(jobs, 10.0, 1.3, 43)


def test_frag_experiment_on_the_fixture_cli(tmp_path: Path) -> None:
    trace = str(FIXTURE / "openb_pod_list_small.csv")
    res = CliRunner().invoke(
        app, ["frag", trace, "--seeds", "1-3", "--workers", "1", "--json", "--report", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    # --report: one line per placer in DIR/frag.html, the --json curve in percent
    page = (tmp_path / "frag.html").read_text(encoding="utf-8")
    start = page.index('<script type="application/json" id="frag-curves-data">')
    block = page[page.index(">", start) + 1 : page.index("</script>", start)]
    lines = {d["name"].split(" ")[0]: d for d in json.loads(block)["data"]}
    assert set(lines) == {p["placer"] for p in data["placers"]}
    for p in data["placers"]:
        assert lines[p["placer"]]["x"] == [100 * c["arrived"] for c in p["curve"]]
        assert lines[p["placer"]]["y"] == [100 * c["allocated"] for c in p["curve"]]
    got = {p["placer"]: p for p in data["placers"]}
    assert set(got) == {n for n in placer_names() if n != "pack"}
    for p in got.values():
        assert 0 < p["alloc_ratio_at_130"] <= 1 and p["seeds"] == [1, 2, 3]
        arrived = [c["arrived"] for c in p["curve"]]
        assert arrived == sorted(arrived) and arrived[-1] >= 1.0
        # a point is the mean over seeds at each 1 % step arrived (one pod may overshoot a step)
        assert all(c["allocated"] <= c["arrived"] + 0.1 for c in p["curve"])
    bad = CliRunner().invoke(app, ["frag", str(FIXTURE / "openb_pod_list_small.csv"), "--seeds", "x"])
    assert bad.exit_code == 2 and "--seeds" in bad.output


def test_frag_on_the_alibaba_trace() -> None:
    pods = DATA / "openb_pod_list_default.csv"
    if not pods.is_file():
        pytest.skip(f"the Alibaba v2023 trace is not in {DATA} (../shared/data)")
    from gpuplan.commands.frag import frag_pods

    jobs, spec, _ = frag_pods(pods, None)
    assert spec.total_gpus == 6212 and len(jobs) == 8152
    res = {r.placer: r for r in frag_experiment(jobs, spec, ["best-fit", "fgd"], [42], 1.3, workers=1)}
    assert res["fgd"].alloc_ratio_at_130 > res["best-fit"].alloc_ratio_at_130


def test_fragmentation_over_a_simulated_run_by_hand() -> None:
    from gpuplan.sim.engine import simulate
    from gpuplan.sim.fragseries import fragmentation_series

    spec = ClusterSpec("one", (NodeSpec("n", 2, GPU),), sharing=True)
    jobs = [
        Job("a", 0.0, 1, duration_s=10.0, gpu_share=0.5, duration_includes_sharing=True),
        Job("b", 0.0, 1, duration_s=20.0, duration_includes_sharing=True),
    ]
    res = simulate(jobs, spec, "fifo", "none", "first-fit")
    series = fragmentation_series(res, jobs)
    assert series is not None
    # 0-10 s: GPU 0 half free (a), GPU 1 taken whole (b): the half-GPU type fits and strands nothing,
    # the whole-GPU type fits nowhere: 0.5 x 0.5 = 0.25 GPU. From 10 s: GPU 0 idle, nothing stranded.
    assert series.times_s == [0.0, 10.0, 20.0] and series.frag_gpus == pytest.approx([0.25, 0.0, 0.0])
    assert series.mean_gpus == pytest.approx(0.125) and series.at_peak_gpus == pytest.approx(0.25)


def test_simulate_reports_fragmentation(tmp_path: Path) -> None:
    trace = FIXTURE / "openb_pod_list_small.csv"
    res = CliRunner().invoke(
        app, ["simulate", str(trace), "--placer", "fgd", "--json", "--out", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    (run,) = json.loads(res.stdout[res.stdout.index("[") :])
    assert run["placer"] == "fgd" and run["fragmentation_max_gpus"] >= run["fragmentation_mean_gpus"] >= 0
    assert 'id="fig-frag"' in (tmp_path / "report.html").read_text(encoding="utf-8")


def test_audit_what_if_reports_fragmentation(tmp_path: Path) -> None:
    trace = FIXTURE / "openb_pod_list_small.csv"
    res = CliRunner().invoke(app, ["audit", str(trace), "--json", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    runs = json.loads(res.stdout[res.stdout.index("{") :])["what_if"]["runs"]
    assert runs and all(r["fragmentation_max_gpus"] >= r["fragmentation_mean_gpus"] >= 0 for r in runs)
    assert "fragmented GPUs (at peak)" in (tmp_path / "audit.html").read_text(encoding="utf-8")

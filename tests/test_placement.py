"""Placers on hand-made, partly busy cluster states: which GPUs first-fit, best-fit and spread choose."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.core.placement import BestFit, FirstFit, get_placer, placer_names
from gpuplan.core.state import ClusterState
from gpuplan.errors import UnknownNameError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.engine import simulate

A100_80 = GpuSpec("A100-80GB", 80.0)
A100_40 = GpuSpec("A100-40GB", 40.0)
PLACERS = ("first-fit", "best-fit", "spread")


def _cluster(*sizes: int, gpu: GpuSpec = A100_80, sharing: bool = False, max_share: int = 4) -> ClusterSpec:
    nodes = tuple(NodeSpec(f"n{i}", g, gpu) for i, g in enumerate(sizes))
    return ClusterSpec("test", nodes, sharing=sharing, max_jobs_per_gpu=max_share)


def _three_nodes_partly_busy() -> ClusterState:
    """3 nodes x 4 GPUs. node0: GPUs 0,1,2 busy (GPU 3 free); node1: GPU 4 busy (5,6,7 free); node2 empty."""
    state = ClusterState(_cluster(4, 4, 4))
    state.place([0, 1, 2], None)
    state.place([4], 50.0)
    return state


# ---- exclusive clusters -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("placer", "gpus", "expected"),
    [
        # first-fit: the lowest-numbered node that fits, its lowest GPUs
        ("first-fit", 1, [3]),
        ("first-fit", 2, [5, 6]),
        ("first-fit", 3, [5, 6, 7]),
        ("first-fit", 4, [8, 9, 10, 11]),
        # best-fit: the node with the fewest free GPUs that still fit (node0 has 1, node1 3, node2 4)
        ("best-fit", 1, [3]),
        ("best-fit", 2, [5, 6]),
        ("best-fit", 3, [5, 6, 7]),
        ("best-fit", 4, [8, 9, 10, 11]),
        # spread: the node with the most free GPUs (node2, empty)
        ("spread", 1, [8]),
        ("spread", 2, [8, 9]),
        ("spread", 3, [8, 9, 10]),
        ("spread", 4, [8, 9, 10, 11]),
    ],
)
def test_exclusive_single_node_choice(placer: str, gpus: int, expected: list[int]) -> None:
    state = _three_nodes_partly_busy()
    assert get_placer(placer).find(state, gpus, 30.0, False) == expected


def test_best_fit_and_first_fit_differ_when_the_first_node_is_roomier() -> None:
    # node0 empty (4 free), node1 has 1 free GPU (GPU 7): a 1-GPU job
    state = ClusterState(_cluster(4, 4))
    state.place([4, 5, 6], None)
    assert get_placer("first-fit").find(state, 1, None) == [0]
    assert get_placer("best-fit").find(state, 1, None) == [7]  # packs the nearly full node
    assert get_placer("spread").find(state, 1, None) == [0]


def test_spread_breaks_ties_by_lowest_node() -> None:
    state = ClusterState(_cluster(4, 4, 4))
    state.place([0], None)  # node0 has 3 free, node1 and node2 have 4: tie -> node1
    assert get_placer("spread").find(state, 2, None) == [4, 5]


@pytest.mark.parametrize("placer", PLACERS)
def test_no_single_node_fits_and_no_span_gives_none(placer: str) -> None:
    state = _three_nodes_partly_busy()  # 8 GPUs free in all, at most 4 on one node
    assert get_placer(placer).find(state, 5, None, may_span=False) is None


@pytest.mark.parametrize("placer", PLACERS)
def test_span_takes_the_roomiest_nodes_first(placer: str) -> None:
    # 5 GPUs: node2 gives its 4 free, node1 (3 free) gives its lowest free one, node0 none
    state = _three_nodes_partly_busy()
    assert get_placer(placer).find(state, 5, None, may_span=True) == [5, 8, 9, 10, 11]
    # 8 GPUs: all free ones
    assert get_placer(placer).find(state, 8, None, may_span=True) == [3, 5, 6, 7, 8, 9, 10, 11]
    # 9 GPUs: only 8 free
    assert get_placer(placer).find(state, 9, None, may_span=True) is None


@pytest.mark.parametrize("placer", PLACERS)
def test_span_prefers_one_node_when_one_fits(placer: str) -> None:
    state = _three_nodes_partly_busy()
    gpus = get_placer(placer).find(state, 3, None, may_span=True)
    assert gpus is not None
    assert len({state.gpu_node[g] for g in gpus}) == 1


@pytest.mark.parametrize("placer", PLACERS)
def test_place_then_release_restores_the_state(placer: str) -> None:
    state = _three_nodes_partly_busy()
    before = (list(state.node_idle), state.idle_total, list(state.gpu_njobs))
    gpus = get_placer(placer).find(state, 3, None)
    assert gpus is not None
    state.place(gpus, None)
    assert state.idle_total == before[1] - 3
    state.release(gpus, None)
    assert (list(state.node_idle), state.idle_total, list(state.gpu_njobs)) == before


# ---- heterogeneous nodes -----------------------------------------------------------------------------


def _hetero() -> ClusterSpec:
    """node0: 4x A100-40GB (GPUs 0-3), node1: 4x A100-80GB (GPUs 4-7)."""
    return ClusterSpec("hetero", (NodeSpec("small", 4, A100_40), NodeSpec("big", 4, A100_80)))


@pytest.mark.parametrize("placer", PLACERS)
def test_big_memory_job_only_goes_to_the_big_gpu_node(placer: str) -> None:
    state = ClusterState(_hetero())
    assert get_placer(placer).find(state, 1, 70.0) == [4]
    assert get_placer(placer).find(state, 4, 70.0) == [4, 5, 6, 7]
    state.place([4, 5], 70.0)
    assert get_placer(placer).find(state, 2, 70.0) == [6, 7]
    # 3 GPUs of 70 GB: only 2 big GPUs are free; the 40 GB ones never count, spanning or not
    assert get_placer(placer).find(state, 3, 70.0) is None
    assert get_placer(placer).find(state, 3, 70.0, may_span=True) is None


def test_small_memory_job_may_use_either_node() -> None:
    state = ClusterState(_hetero())
    state.place([4, 5], None)  # big node: 2 free, small node: 4 free
    assert get_placer("first-fit").find(state, 1, 30.0) == [0]
    assert get_placer("best-fit").find(state, 1, 30.0) == [6]
    assert get_placer("spread").find(state, 1, 30.0) == [0]
    # unknown memory: exclusive GPUs of any size
    assert get_placer("best-fit").find(state, 2, None) == [6, 7]


@pytest.mark.parametrize("placer", PLACERS)
def test_simulated_big_memory_job_waits_for_the_big_node(placer: str) -> None:
    # t=0: B (1 GPU, 30 GB, 100 s), H and K (4 GPUs, 70 GB, 10 s each) arrive. B fits both nodes, which
    # are both empty: every placer takes the lower node (GPU 0). H fits only on the big node: GPUs 4-7.
    jobs = [
        Job("B", 0.0, 1, mem_gb=30.0, duration_s=100.0, est_duration_s=100.0),
        Job("H", 0.0, 4, mem_gb=70.0, duration_s=10.0, est_duration_s=10.0),
        Job("K", 0.0, 4, mem_gb=70.0, duration_s=10.0, est_duration_s=10.0),
    ]
    res = simulate(jobs, _hetero(), "fifo", "easy", placer)
    got = {r.job_id: (r.start_s, r.end_s, r.gpus) for r in res.records}
    assert got["B"] == (0.0, 100.0, (0,))
    assert got["H"] == (0.0, 10.0, (4, 5, 6, 7))
    # K (70 GB) also needs the big node: it waits for H although GPUs 1-3 are idle
    assert got["K"] == (10.0, 20.0, (4, 5, 6, 7))


# ---- sharing clusters --------------------------------------------------------------------------------


def _shared_state() -> ClusterState:
    """1 node x 4 GPUs of 80 GB, sharing. GPU 0 holds 50 GB (30 free), GPU 1 holds 20 GB (60 free)."""
    state = ClusterState(_cluster(4, sharing=True))
    state.place([0], 50.0)
    state.place([1], 20.0)
    return state


@pytest.mark.parametrize(
    ("placer", "gpus", "mem", "expected"),
    [
        # 20 GB fits everywhere: first-fit lowest GPU, best-fit the fullest GPU, spread an empty GPU
        ("first-fit", 1, 20.0, [0]),
        ("best-fit", 1, 20.0, [0]),
        ("spread", 1, 20.0, [2]),
        # 40 GB does not fit on GPU 0 (30 free)
        ("first-fit", 1, 40.0, [1]),
        ("best-fit", 1, 40.0, [1]),
        ("spread", 1, 40.0, [2]),
        ("first-fit", 2, 40.0, [1, 2]),
        ("best-fit", 2, 40.0, [1, 2]),
        ("spread", 2, 40.0, [2, 3]),
        # 70 GB only fits empty GPUs
        ("first-fit", 2, 70.0, [2, 3]),
        ("best-fit", 1, 70.0, [2]),
        # unknown memory takes whole GPUs: only empty ones
        ("first-fit", 1, None, [2]),
        ("best-fit", 2, None, [2, 3]),
        ("spread", 1, None, [2]),
        ("first-fit", 3, None, None),
        # 3 GPUs of 40 GB: GPUs 1, 2, 3
        ("best-fit", 3, 40.0, [1, 2, 3]),
        ("spread", 4, 40.0, None),
    ],
)
def test_sharing_gpu_choice(placer: str, gpus: int, mem: float | None, expected: list[int] | None) -> None:
    assert get_placer(placer).find(_shared_state(), gpus, mem) == expected


def test_sharing_respects_max_jobs_per_gpu() -> None:
    state = ClusterState(_cluster(1, sharing=True, max_share=2))
    placer = get_placer("first-fit")
    state.place([0], 10.0)
    assert placer.find(state, 1, 10.0) == [0]
    state.place([0], 10.0)
    assert placer.find(state, 1, 10.0) is None  # 60 GB free, but already 2 jobs
    state.release([0], 10.0)
    assert placer.find(state, 1, 10.0) == [0]


def test_sharing_memory_is_given_back_on_release() -> None:
    state = ClusterState(_cluster(1, sharing=True))
    state.place([0], 50.0)
    state.place([0], 25.0)
    assert state.gpu_free_gb[0] == pytest.approx(5.0)
    assert not state.gpu_fits(0, 6.0)
    state.release([0], 50.0)
    assert state.gpu_free_gb[0] == pytest.approx(55.0)
    state.release([0], 25.0)
    assert state.gpu_free_gb[0] == 80.0 and state.idle_total == 1


def test_sharing_best_fit_node_is_the_one_with_fewest_fitting_gpus() -> None:
    # node0 (GPUs 0,1) both empty; node1 (GPUs 2,3): GPU 2 holds 70 GB so a 20 GB job fits only on GPU 3
    state = ClusterState(_cluster(2, 2, sharing=True))
    state.place([2], 70.0)
    assert get_placer("best-fit").find(state, 1, 20.0) == [3]
    assert get_placer("first-fit").find(state, 1, 20.0) == [0]
    # spread: node0 has 2 fitting GPUs
    assert get_placer("spread").find(state, 1, 20.0) == [0]
    # 5 GB fits on GPU 2 too: both nodes now have 2 fitting GPUs, and best-fit breaks the tie by node index
    assert get_placer("best-fit").find(state, 1, 5.0) == [0]


# ---- registry ----------------------------------------------------------------------------------------


def test_registry_names_and_aliases() -> None:
    assert set(PLACERS) <= set(placer_names())
    assert isinstance(get_placer("pack"), BestFit)
    for name in PLACERS:
        assert get_placer(name).name == name
        assert get_placer(name) is not get_placer(name)  # a new placer each time


def test_unknown_placer_lists_valid_names() -> None:
    with pytest.raises(UnknownNameError) as err:
        get_placer("worst-fit")
    msg = str(err.value)
    assert "worst-fit" in msg
    for name in PLACERS:
        assert name in msg


# ---- the first-fit hint ------------------------------------------------------------------------------


class _PlainFirstFit(FirstFit):
    """First-fit by a plain scan of every node (no hint): what the hinted scan must reproduce."""

    def choose_node(self, state: ClusterState, counts: list[int], gpus: int) -> int:
        return next((n for n, k in enumerate(counts) if k >= gpus), -1)


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.sampled_from([1, 1, 2, 3, 4, 8])), min_size=1, max_size=60))
def test_first_fit_hint_picks_what_a_plain_scan_picks(ops: list[tuple[bool, int]]) -> None:
    spec = ClusterSpec("h", tuple(NodeSpec(f"n{i}", 8, GpuSpec("G", 80.0)) for i in range(6)))
    state = ClusterState(spec)
    hinted, plain = FirstFit(), _PlainFirstFit()
    held: list[list[int]] = []
    for start, gpus in ops:
        if start or not held:
            want = plain.find(state, gpus, None)
            got = hinted.find(state, gpus, None)
            assert got == want
            if got is not None:
                state.place(got, None)
                held.append(got)
        else:
            state.release(held.pop(len(held) // 2), None)
        copy = state.copy()  # copies carry the hint and stay consistent
        assert hinted.find(copy, 2, None) == plain.find(copy, 2, None)


def test_a_masked_view_lowers_the_idle_counts_for_find_and_leaves_the_state_as_it_was() -> None:
    """`ClusterState.masked`: the placer sees only the GPUs the mask leaves; its first-fit hint moves on
    the view's own, so the state's hint still finds the state's own first fit."""
    from gpuplan.core.placement import get_placer
    from gpuplan.core.state import ClusterState
    from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec

    spec = ClusterSpec("3x4", tuple(NodeSpec(f"n{i}", 4, GpuSpec("A100-80GB", 80.0)) for i in range(3)))
    state = ClusterState(spec)
    state.place([0], None)  # node 0: 3 idle; nodes 1 and 2: 4
    placer = get_placer("first-fit")
    view = state.masked([0, 2, 4])  # the plan keeps node 0 and half of node 1
    assert view.idle_total == 6
    assert placer.find(view, 3, None) == [8, 9, 10]  # node 2: the first with 3 in the mask
    assert placer.find(state, 3, None) == [1, 2, 3]  # node 0 for the state itself: its hint unmoved
    assert state.node_idle == [3, 4, 4] and state.idle_total == 11 and state.gpu_njobs[0] == 1

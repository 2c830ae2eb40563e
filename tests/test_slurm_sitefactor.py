"""sprio parsing (captured Slurm 22.05 output) and the SiteFactor arithmetic (slurm/sitefactor.py)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.errors import GpuplanError, InputError
from gpuplan.slurm.parse import PrioRow, parse_sprio
from gpuplan.slurm.sitefactor import SITE_FACTOR_MAX, Headroom, headroom_for, nice_values, site_factor_plan

FIX = Path(__file__).parent / "fixtures" / "slurm"


def _row(jid: str, prio: int, site: int = 0, age: int = 0, size: int = 0, nice: int = 0) -> PrioRow:
    return PrioRow(jid, "u", prio, site, age, 0, 0, size, 0, 0, nice)


def test_sprio_capture_parses_with_site_frozen_and_clamped_jobs() -> None:
    rows = {r.job_id: r for r in parse_sprio((FIX / "sprio_o_gpuplan.txt").read_text(), "sprio.txt")}
    # the same moment's squeue %Q: sprio's PRIORITY is the job's priority
    squeue = dict(line.split("|")[:2] for line in (FIX / "sprio_o_gpuplan.squeue.txt").read_text().split())
    assert {j: r.priority for j, r in rows.items()} == {j: int(p) for j, p in squeue.items()}
    assert rows["6"].site == 1000 and rows["6"].age == 107 and rows["6"].job_size == 129
    assert rows["6"].base == 235 and not rows["6"].frozen
    assert rows["11"].frozen and rows["11"].priority == 500  # Priority=500: every factor shows 0
    assert [j for j, r in rows.items() if r.frozen] == ["11"]
    assert rows["8"].priority == 1 and rows["8"].base == 236  # clamped at 1: base from the parts
    assert rows["12"].site == SITE_FACTOR_MAX and rows["20"].nice == 100 and rows["20"].base == 28


def test_sprio_wrong_format_is_one_clear_error() -> None:
    with pytest.raises(InputError) as e:
        parse_sprio("JOBID PARTITION PRIORITY\n5 gpu 128\n", "sprio.txt")
    msg = str(e.value)
    assert msg.startswith("sprio.txt:1: column header") and "sprio -o" in msg and "\n" not in msg
    with pytest.raises(InputError, match="s:2: column AGE"):
        parse_sprio(
            "JOBID|USER|PRIORITY|SITE|AGE|ASSOC|FAIRSHARE|JOBSIZE|PARTITION|QOS|NICE|TRES|\n5|u|1|0|x|0|0|0|0|0|0||\n",
            "s",
        )


def test_headroom_from_the_test_clusters_config() -> None:
    cfg = {"PriorityWeightAge": "1000", "PriorityMaxAge": "00:05:00", "PriorityCalcPeriod": "00:01:00"}
    h = headroom_for(cfg, 60.0)
    assert h.stale == 200 and h.base == 3  # 1000 / 300 s x 60 s: what a job updated now gains on the rest
    assert h.drift == 7  # 2 s of age between reading sprio and the update
    assert h.gap(0, 900) == 210  # the younger above: it only gains on the older one
    assert h.gap(900, 0) == 210 + 100  # the older stops at 1000 after 30 s; the younger gains 200 in 60 s
    assert h.gap(900, 0, keep=True) == 109  # enough to keep a value: 2 + drift + the age lead
    assert h.age_points(30) == 100 and h.age_points(10_000) == 1000
    assert headroom_for({}, 3600).stale == 0  # no age weight: rounding only


def test_already_in_order_changes_nothing_and_one_move_is_one_change() -> None:
    rows = {str(i): _row(str(i), 10_000 - 1000 * i) for i in range(6)}
    order = [str(i) for i in range(6)]
    assert site_factor_plan(order, rows, {}).changes == []
    moved = ["5", *order[:5]]  # the last job to the front
    sf = site_factor_plan(moved, rows, {})
    assert [j for j, _, _ in sf.changes] == ["5"]
    assert sf.expected_priority["5"] >= rows["0"].priority + 3 and sf.out_of_order == []


def test_planned_order_is_strict_with_gaps_and_others_keep_their_place() -> None:
    rows = {j: _row(j, 128, size=129) for j in "abcd"} | {"x": _row("x", 257), "y": _row("y", 28, nice=100)}
    h = Headroom(stale=200)
    sf = site_factor_plan(["d", "c", "b", "a"], rows, {}, ["x", "y"], h)
    p = [sf.expected_priority[j] for j in "dcba"]
    assert all(a - b >= 203 for a, b in itertools.pairwise(p)) and p[-1] == 128
    assert len(sf.changes) == 3 and sf.kept == ["a"]
    assert sf.unmanaged["y"] == {"rank_before": 6, "rank_after": 6, "priority": 28}  # still last
    assert (
        sf.unmanaged["x"]["rank_before"] == 1 and sf.unmanaged["x"]["rank_after"] > 1
    )  # the plan needs room


def test_weight_below_one_nudges_and_says_who_stays_out_of_order() -> None:
    rows = {str(i): _row(str(i), 1000 - 100 * i) for i in range(5)}
    order = ["4", "3", "2", "1", "0"]  # the reverse of Slurm's
    exact = site_factor_plan(order, rows, {}, weight=1.0)
    assert exact.out_of_order == []
    none = site_factor_plan(order, rows, {}, weight=0.0)
    assert none.changes == [] and none.out_of_order == ["4", "3", "1", "0"]
    half = site_factor_plan(order, rows, {}, weight=0.5)
    for j in order:  # each job moved half-way from its own priority to the exact plan's
        assert abs(half.expected_priority[j] - (rows[j].priority + exact.expected_priority[j]) / 2) <= 1
    assert 0 < len(half.out_of_order) < 5
    with pytest.raises(GpuplanError, match="--weight"):
        site_factor_plan(order, rows, {}, weight=1.5)


def test_nudge_is_stable_across_passes() -> None:
    """Below weight 1 the values come from the recorded originals: a second pass changes nothing."""
    rows = {str(i): _row(str(i), 1000 - 100 * i) for i in range(5)}
    first = site_factor_plan(["4", "3", "2", "1", "0"], rows, {}, weight=0.5)
    after = {j: _row(j, r.base + first.site[j], site=first.site[j]) for j, r in rows.items()}
    second = site_factor_plan(["4", "3", "2", "1", "0"], after, {j: 0 for j in rows}, weight=0.5)
    assert second.changes == []


def test_out_of_range_site_factor_is_refused() -> None:
    rows = {"1": _row("1", 5), "2": _row("2", 5)}
    with pytest.raises(GpuplanError, match="outside Slurm's range"):
        site_factor_plan(["1", "2"], rows, {}, headroom=Headroom(base=SITE_FACTOR_MAX + 10))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 80), min_size=1, max_size=7),
    st.integers(2, 30),
    st.randoms(use_true_random=False),
)
def test_fewest_changes_and_exact_order(prios: list[int], gap: int, rnd) -> None:  # type: ignore[no-untyped-def]
    rows = {str(i): _row(str(i), p, site=0) for i, p in enumerate(prios)}
    order = list(rows)
    rnd.shuffle(order)
    h = Headroom(base=gap)  # full gap `gap`; a kept neighbour needs 2
    sf = site_factor_plan(order, rows, {}, headroom=h)
    got = [sf.expected_priority[j] for j in order]
    assert all(a - b >= 2 for a, b in itertools.pairwise(got)) and min(got) >= 1 and sf.out_of_order == []
    moved = {j for j, _, _ in sf.changes}
    for (a, pa), (b, pb) in itertools.pairwise(zip(order, got)):
        if a in moved or b in moved:  # a value set now gets the full gap to its neighbours
            assert pa - pb >= gap, (order, got, moved)
    # brute force: the largest set of jobs that can keep their priority under the same rules
    p = [rows[j].priority for j in order]
    n = len(order)
    best = max(len(sub) for r in range(n + 1) for sub in itertools.combinations(range(n), r)
               if _feasible(p, sub, gap))  # fmt: skip
    assert n - len(sf.changes) == best


def _feasible(p: list[int], kept: tuple[int, ...], gap: int) -> bool:
    """Kept neighbours 2 apart; kept jobs with k jobs between them (k + 1) x gap apart; the last kept
    one leaves room for the jobs below it at full gaps down to 1."""
    for a, b in itertools.pairwise(kept):
        if p[a] - p[b] < (2 if b == a + 1 else gap * (b - a)):
            return False
    return not kept or p[kept[-1]] >= 1 + gap * (len(p) - 1 - kept[-1])


def test_a_kept_job_leads_the_next_both_now_and_once_recomputed() -> None:
    """Every job eligible 60 s (200 age points); sprio shows `mid` as of the last PriorityCalcPeriod (age
    0: it will read 200 more once recomputed), the others recomputed just now."""
    h = headroom_for(
        {"PriorityWeightAge": "1000", "PriorityMaxAge": "00:05:00", "PriorityCalcPeriod": "00:01:00"}, 0
    )
    rows = {"top": _row("top", 3000, age=200, size=2800), "mid": _row("mid", 1000, age=0, size=1000),
            "low": _row("low", 5000, age=200, size=4800)}  # fmt: skip
    ages = dict.fromkeys(rows, 60.0)
    sf = site_factor_plan(["top", "mid", "low"], rows, {}, headroom=h, ages_s=ages)
    assert sf.kept == ["top", "mid"] and [j for j, _, _ in sf.changes] == ["low"]
    assert sf.expected_priority["mid"] == 1200
    assert 1000 - sf.expected_priority["low"] >= h.base + h.stale  # under mid now, so after too
    tight = {**rows, "top": _row("top", 1100, age=200, size=900)}  # above mid now, under it once recomputed
    assert site_factor_plan(["top", "mid", "low"], tight, {}, headroom=h).kept == [
        "top",
        "mid",
    ]  # blind to lag
    sf = site_factor_plan(["top", "mid", "low"], tight, {}, headroom=h, ages_s=ages)
    assert (
        "top" not in sf.kept and sf.expected_priority["top"] - sf.expected_priority["mid"] >= h.base + h.stale
    )


def _ranked(rows: dict[str, PrioRow], nice: dict[str, int]) -> list[str]:
    """Slurm's order once each job runs at `nice`: the sum without nice, minus it, at least 1."""
    prio = {j: max(r.base + r.site + r.nice - nice[j], 1) for j, r in rows.items()}
    return sorted(rows, key=lambda j: -prio[j])


def test_nice_values_rank_the_plan_against_job_size_and_age_with_no_negative_nice() -> None:
    room = Headroom(base=3, stale=34, drift=7)
    # the plan puts the smallest, youngest job first: multifactor ranks it last by hundreds of points;
    # job "b" already carries a nice of 50 from its user, which the new value replaces
    rows = {
        "c": _row("c", 129, size=129),
        "b": _row("b", 208, size=258, nice=50),
        "a": _row("a", 600, age=84, size=516),
    }
    values = nice_values(["c", "b", "a"], rows, room)
    assert values[0] == 0 and min(values) >= 0
    assert _ranked(rows, dict(zip("cba", values))) == ["c", "b", "a"]
    assert values[1] == 258 - (129 - room.gap(0, 0)) and values[2] == 600 - (129 - 2 * room.gap(0, 0))
    assert nice_values(["a", "b", "c"], rows, room) == [0, 0, 0]  # already that far apart: nothing to lower


def test_nice_values_near_slurms_floor_keep_the_smallest_gap_instead_of_ties_at_1() -> None:
    room = Headroom(base=3, stale=200, drift=7)  # a full gap of 210 points: two of them reach below 1
    rows = {"c": _row("c", 128, size=128), "b": _row("b", 257, size=257), "a": _row("a", 515, size=515)}
    values = nice_values(["c", "b", "a"], rows, room)
    nice = dict(zip("cba", values))
    prio = {j: r.base - nice[j] for j, r in rows.items()}
    assert prio == {"c": 128, "b": 11, "a": 1} and _ranked(rows, nice) == ["c", "b", "a"]
    low = {**rows, "c": _row("c", 5, size=5)}  # no room left below the first: ties at 1, never above it
    nice = dict(zip("cba", nice_values(["c", "b", "a"], low, room)))
    assert {j: max(r.base - nice[j], 1) for j, r in low.items()} == {"c": 5, "b": 1, "a": 1}

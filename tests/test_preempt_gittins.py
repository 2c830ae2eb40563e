"""Gittins' shortcuts give what the plain rules give.

- `gittins_table` counts and sums the samples once per grid point: the floats of the plain double loop
  (bisect per pair, a list of prefix sums), bit for bit, on random samples and grids.
- Its levels come from a compiled `LevelRule` that reads the tables the policy learns (one object the
  policy owns), and a rebuilt table ranks again only the jobs it ranks (`LevelRule.reranks`): the
  schedules of asking the policy itself and ranking every job again (`PolicyLevels`) on random traces.
- A copy (a forked scheduler's, a pickled one) keeps the policy and its rule one: what the copy learns
  its rule sees, and the original does not.
"""

from __future__ import annotations

import copy
import pickle
import random
from bisect import bisect_right

import pytest

from gpuplan.core.preemptive import Gittins, PolicyLevels, gittins_table
from gpuplan.core.scheduler import Scheduler
from gpuplan.core.view import JobSlot
from gpuplan.errors import GpuplanError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.engine import simulate

A100 = GpuSpec("A100-80GB", 80.0)


def _plain_table(samples: list[float], grid: list[float]) -> list[float]:
    """The table's definition as a double loop (gittins_table before it counted once per point)."""
    s = sorted(samples)
    prefix = [0.0]
    for v in s:
        prefix.append(prefix[-1] + v)
    n, out = len(s), []
    for k, a in enumerate(grid):
        lo, best = bisect_right(s, a), 0.0
        for b in [*grid[k + 1 :], s[-1] if s else a]:
            if b <= a or lo >= n:
                continue
            hi = bisect_right(s, b)
            cost = (prefix[hi] - prefix[lo]) - (hi - lo) * a + (n - hi) * (b - a)
            if cost > 0:
                best = max(best, (hi - lo) / cost)
        out.append(best)
    return out


def test_the_table_is_the_plain_loops_bit_for_bit() -> None:
    rng = random.Random(7)
    for _ in range(400):
        n = rng.choice([0, 1, 2, 3, 10, 200])
        samples = [
            rng.choice(
                [rng.paretovariate(1.1) * 100.0, rng.expovariate(1 / 3000.0), rng.randint(0, 5) * 600.0]
            )
            for _ in range(n)
        ]
        grid = [0.0, *(rng.choice([1.0, 50.0, 600.0]) * 2.0**k for k in range(rng.randint(1, 24)))]
        if rng.random() < 0.1:
            rng.shuffle(grid)  # any grid, not only the policy's increasing one
        mine, plain = gittins_table(samples, grid), _plain_table(samples, grid)
        assert [x.hex() for x in mine] == [x.hex() for x in plain]


def _cluster(nodes: int, per_node: int) -> ClusterSpec:
    return ClusterSpec(f"{nodes}x{per_node}", tuple(NodeSpec(f"n{i}", per_node, A100) for i in range(nodes)))


def _trace(rng: random.Random, n: int) -> list[Job]:
    jobs, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(1 / 30.0)
        gpus = rng.choice([1, 1, 1, 2, 2, 3, 4, 4, 6, 8])
        mode = rng.choice(["checkpoint", "checkpoint", "suspend", "never"])
        duration_s = float(rng.choice([20, 60, 200, 900, 3000])) * rng.uniform(0.5, 1.5)
        jobs.append(Job(f"j{i}", round(t, 1), gpus, mem_gb=rng.choice([10.0, 30.0, 70.0]), duration_s=duration_s,
                        may_span_nodes=gpus > 4, meta={"preempt": mode}))  # fmt: skip
    return jobs


def _schedules(traces: list[list[Job]], spec: str) -> list[tuple[tuple[object, ...], int]]:
    out: list[tuple[tuple[object, ...], int]] = []
    for jobs in traces:
        r = simulate(jobs, _cluster(3, 4), spec, "none")
        out.append((tuple(sorted((x.job_id, x.start_s, x.end_s) for x in r.records)), r.metrics.preemptions))
    return out


@pytest.mark.parametrize(
    "spec", ["gittins:first=50,min_samples=3", "gittins:first=20,levels=6,min_samples=1"]
)
def test_the_rule_and_its_reranks_give_the_schedules_of_asking_the_policy(
    spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(spec)
    traces = [_trace(rng, rng.randint(60, 150)) for _ in range(6)]
    fast = _schedules(traces, spec)
    monkeypatch.setattr(Gittins, "level_rule", lambda self: PolicyLevels(self))
    assert fast == _schedules(traces, spec)
    assert sum(p for _, p in fast) > 30  # the traces do preempt


def test_a_rebuilt_table_reranks_only_the_jobs_it_ranks() -> None:
    g = Gittins(first_gpu_s=100.0, levels=4, min_samples=2)
    rule = g.level_rule()
    one, two, four = (JobSlot(k, Job(f"j{k}", 0.0, k), k, None, 100.0, False) for k in (1, 2, 4))
    assert not g.observe(Job("a", 0.0, 2), 50.0)  # one sample: no table ranks anyone yet
    assert not rule.reranks(one)
    assert g.observe(Job("b", 0.0, 2), 150.0)  # bucket 2's and the pooled table are built
    assert rule.reranks(one) and rule.reranks(two)  # one by the pooled table, two by its own
    rule.reranked()
    assert not g.observe(Job("c", 0.0, 1), 80.0)  # bucket 1 below min_samples, pooled not rebuilt
    assert not rule.reranks(one) and not rule.reranks(two)
    assert g.observe(Job("d", 0.0, 1), 90.0)  # bucket 1's own table, and the pooled one, rebuilt
    assert rule.reranks(one) and rule.reranks(four) and not rule.reranks(two)  # two keeps its own
    assert rule.level(one, 0.0) == g.level(one, 0.0) < 0.0
    rule.reranked()
    assert not rule.reranks(one) and not rule.reranks(four)
    assert PolicyLevels(g).reranks(two)  # a policy's own levels: every job


def test_the_rules_levels_are_minus_the_table_at_the_grid_point() -> None:
    """The rule's level and next change, asked in any order (it keeps the last grid point it found),
    are those of bisecting the grid for each question."""
    g = Gittins(first_gpu_s=60.0, levels=8, min_samples=1)
    rule = g.level_rule()
    for k in range(40):
        g.observe(Job(f"f{k}", 0.0, 1 + k % 4), 30.0 * 1.3**k)
    rng = random.Random(3)
    slots = [JobSlot(k, Job(f"j{k}", 0.0, 1 + k % 4), 1 + k % 4, None, 100.0, False) for k in range(6)]
    for _ in range(2000):
        slot = rng.choice(slots)
        if rng.random() < 0.3:
            slot.start_s = rng.choice([None, rng.uniform(0.0, 5000.0)])
            slot.service_gpu_s = rng.choice([0.0, 60.0, rng.uniform(0.0, 20000.0)])
        now = rng.choice([5000.0, rng.uniform(5000.0, 9000.0)])
        attained = slot.service_gpu_s + (0.0 if slot.start_s is None else slot.gpus * (now - slot.start_s))
        k = bisect_right(g.grid, attained) - 1
        if rng.random() < 0.5:
            assert rule.level(slot, now) == -g.level_rule().learned.table(slot.gpus)[k]  # type: ignore[attr-defined]
        else:
            plain = float("inf")
            if slot.start_s is not None and k + 1 < len(g.grid):
                plain = slot.start_s + (g.grid[k + 1] - slot.service_gpu_s) / slot.gpus
            assert rule.next_change_s(slot, now) == plain


def test_the_grid_starts_above_zero() -> None:
    """The grid ascends (the rule scans it from the bottom): a first point <= 0 is refused."""
    for first in (0.0, -5.0, float("nan")):
        with pytest.raises(GpuplanError, match="must be > 0"):
            Gittins(first_gpu_s=first)


def test_a_copy_keeps_the_policy_and_its_rule_one() -> None:
    g = Gittins(first_gpu_s=100.0, levels=4, min_samples=1)
    waiting = JobSlot(1, Job("w", 0.0, 1), 1, None, 100.0, False)
    for copied in (copy.deepcopy((g, g.level_rule())), pickle.loads(pickle.dumps((g, g.level_rule())))):
        twin, rule = copied
        assert rule.level(waiting, 0.0) == 0.0 and twin.fallback_jobs == 1  # the LAS fallback, counted
        assert twin.observe(Job("a", 0.0, 1), 150.0)
        assert rule.level(waiting, 0.0) == twin.level(waiting, 0.0) < 0.0  # the copy's table
    assert g.level(waiting, 0.0) == 0.0 and g.fallback_jobs == 1  # the original learned nothing

    spec = _cluster(1, 4)
    live = Scheduler(spec, g, "none")
    fork = live.fork()
    fork.policy.observe(Job("b", 0.0, 1), 150.0)  # type: ignore[attr-defined]
    assert fork.policy.level_rule().level(waiting, 0.0) < 0.0  # type: ignore[attr-defined]
    assert g.level(waiting, 0.0) == 0.0

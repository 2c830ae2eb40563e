"""SiteFactor mode on the real slurmctld as sites run it: sched/backfill + priority/multifactor with
non-zero Age and JobSize weights (tests/slurm/harness.py), a blocker on every GPU, 14 pending jobs."""

from __future__ import annotations

import json

from harness import GPUS_PER_NODE, NODES, SlurmCluster
from typer.testing import CliRunner

from gpuplan.cli import app
from gpuplan.slurm import SlurmClient

runner = CliRunner()
SHAPES = [("1", 1), ("1", 8), ("2", 8), ("1", 2), ("1", 4), ("3", 8), ("1", 1), ("1", 6), ("2", 8), ("1", 3),
          ("1", 1), ("4", 8), ("1", 2), ("1", 5)]  # (nodes, GPUs per node): job sizes differ  # fmt: skip


def _json(*args: str) -> dict:
    r = runner.invoke(app, ["slurm", *args])
    assert r.exit_code == 0, (r.stdout, r.stderr)
    return json.loads(r.stdout)


def _blocked_queue(c: SlurmCluster) -> list[str]:
    c.set_partition(up=True)
    blockers = [c.sbatch("--gres=gpu:8", "--time=10", script="sleep 300") for _ in range(NODES)]
    c.wait_running(blockers, 30)
    return [c.sbatch("-N", n, f"--gres=gpu:{g}", f"--time={1 + i % 5}", script="sleep 1")
            for i, (n, g) in enumerate(SHAPES)]  # fmt: skip


def _squeue_order(c: SlurmCluster, ids: list[str]) -> list[str]:
    prios = c.priorities()
    return sorted(ids, key=lambda j: -prios[j])


def test_site_factor_orders_the_queue_and_keeps_multifactor_live(slurm_backfill: SlurmCluster) -> None:
    c = slurm_backfill
    assert c.weights["Age"] > 0 and c.weights["JobSize"] > 0 and GPUS_PER_NODE * NODES == 32
    ids = _blocked_queue(c)
    c.run("scontrol", "update", f"JobId={ids[3]}", "SiteFactor=40")  # a site's own value, to be restored
    frozen = c.sbatch("--gres=gpu:1", "--time=1", script="sleep 1")
    c.run("scontrol", "update", f"JobId={frozen}", "Priority=300")  # an admin froze it: gpuplan leaves it
    sprio = {r.job_id: r for r in SlurmClient().prio().values()}
    before = {j: sprio[j].site for j in ids}
    assert len({sprio[j].job_size for j in ids}) > 1  # the weights are live: job sizes differ
    plan = _json("plan", "--json", "--policy", "sjf")  # who gains and who loses, before applying
    (user,) = plan["fairness"]["by_user"]
    assert (
        user["name"] == "root" and user["jobs"] == len(ids) + 1 and len(plan["fairness"]["by_account"]) == 1
    )
    assert abs(user["slurm_mean_wait_s"] - plan["slurm_order_expected"]["mean_wait_s"]) < 1e-6
    assert abs(user["plan_mean_wait_s"] - plan["expected"]["mean_wait_s"]) < 1e-6
    out = _json("apply", "--json", "--policy", "sjf")
    order = out["plan"]["order"]
    assert order == plan["order"] and sorted(order) == sorted([*ids, frozen])
    assert "priority set explicitly" in out["apply"]["skipped"][frozen]
    landed = out["apply"]["unmanaged"][frozen]  # where the job left alone lands among all pending jobs
    assert (
        landed["priority"] == 300
        and landed["rank_before"] >= 1
        and landed["rank_after"] >= landed["rank_before"]
    )
    order = [j for j in order if j != frozen]
    assert order != [j for j in out["plan"]["slurm_order"] if j != frozen]
    assert out["apply"]["mode"] == "site-factor" and out["apply"]["out_of_plan_order"] == []
    # one scontrol line per changed job at most; Slurm's own priority now ranks them as planned
    assert 0 < len(out["apply"]["changed"]) < len(ids)
    assert _squeue_order(c, ids) == order
    rows = SlurmClient().prio()
    assert [j for j in ids if rows[j].frozen] == [] and all(rows[j].job_size > 0 for j in ids)
    assert {j: rows[j].site for j in ids} == {j: out["apply"]["site_factor"][j] for j in ids}
    again = _json("apply", "--json", "--policy", "sjf")  # in place already: nothing to change
    assert again["apply"]["changed"] == {}
    reset = _json("reset", "--json")
    assert reset["mode"] == "site-factor" and set(reset["changed"]) == set(out["apply"]["changed"])
    rows = SlurmClient().prio()
    assert {j: rows[j].site for j in ids} == before
    assert [j for j in ids if rows[j].frozen] == [] and all(rows[j].job_size > 0 for j in ids)

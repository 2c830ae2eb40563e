"""The same cluster restarted on sched/backfill + priority/multifactor (runs last: one restart)."""

from __future__ import annotations

import json

from harness import SlurmCluster
from typer.testing import CliRunner

from gpuplan.cli import app

runner = CliRunner()


def _json(*args: str) -> dict:
    r = runner.invoke(app, ["slurm", *args])
    assert r.exit_code == 0, (r.stdout, r.stderr)
    return json.loads(r.stdout)


def test_backfill_cluster_plan_warns_and_order_is_followed(slurm_backfill: SlurmCluster) -> None:
    c = slurm_backfill
    ids = [c.sbatch("-N", "4", "--gres=gpu:8", f"--time={m}", script="sleep 1") for m in (3, 2, 1)]
    plan = _json("plan", "--json", "--policy", "sjf")
    assert plan["backfill"] == "conservative" and plan["order"] == list(reversed(ids))
    assert any("sched/backfill" in w for w in plan["setup_warnings"])
    _json("apply", "--json", "--policy", "sjf")
    c.set_partition(up=True)
    c.wait_done(ids, 60)
    times = c.sacct_times(ids)
    assert sorted(ids, key=lambda j: times[j][0]) == plan["order"]


def test_backfill_starts_a_short_job_in_a_hole_as_the_plan_says(slurm_backfill: SlurmCluster) -> None:
    c = slurm_backfill
    c.set_partition(up=True)
    blocker = c.sbatch("-N", "3", "--gres=gpu:8", "--time=3", script="sleep 20")
    c.wait_running([blocker], 30)
    c.set_partition(up=False)
    wide = c.sbatch("-N", "2", "--gres=gpu:8", "--time=2", script="sleep 1")  # waits for the blocker
    short = c.sbatch("--gres=gpu:8", "--time=1", script="sleep 1")  # fits on the free node, ends in time
    plan = _json("plan", "--json", "--policy", "fifo")
    # FIFO puts wide first, but the simulated backfill starts short at once: the order is the start order
    assert plan["order"] == [short, wide] and plan["slurm_order"] == [wide, short]
    assert plan["expected_start_s"][short] == 0.0 and plan["expected_start_s"][wide] > 60
    c.set_partition(up=True)
    c.wait_running([short], 30)  # Slurm's backfill does the same with its own order
    assert c.run("squeue", "-h", "-j", wide, "-o", "%T").stdout.strip() == "PENDING"

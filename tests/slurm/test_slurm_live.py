"""gpuplan slurm on a real slurmctld + 4 slurmd x 8 fake GPUs + slurmdbd (sched/builtin, multifactor)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import SlurmCluster
from typer.testing import CliRunner, Result

from gpuplan.cli import app
from gpuplan.commands.slurm import run_watch
from gpuplan.slurm import SlurmClient, SlurmError, apply_order, live_state, plan_queue, reset_order
from gpuplan.slurm.client import UpdateOutcome

runner = CliRunner()


def _cli(*args: str) -> Result:
    return runner.invoke(app, ["slurm", *args])


def _ok(result: Result) -> dict:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return json.loads(result.stdout)


def _whole_cluster_jobs(c: SlurmCluster, limits_min: list[int], sleep_s: int = 1) -> list[str]:
    """Jobs that each take all 32 GPUs: they can only run one after another."""
    return [c.sbatch("-N", "4", "--gres=gpu:8", f"--time={m}", f"--job-name=whole-{m}", script=f"sleep {sleep_s}")
            for m in limits_min]  # fmt: skip


def test_plan_apply_then_jobs_start_in_planned_order(slurm: SlurmCluster) -> None:
    ids = _whole_cluster_jobs(slurm, [4, 3, 2, 1])
    plan = _ok(_cli("plan", "--json"))
    assert sorted(plan["order"]) == sorted(ids) and plan["setup_warnings"] == []
    # shortest limit first minimises the mean wait: the reverse of submission (= Slurm's own) order
    assert plan["order"] == list(reversed(ids)) and plan["slurm_order"] == ids
    assert plan["gain"]["mean_wait_s"] > 0.3
    applied = _ok(_cli("apply", "--json"))
    assert applied["plan"]["order"] == plan["order"] and set(applied["apply"]["changed"]) == set(ids)
    prios = slurm.priorities()
    assert [prios[j] for j in plan["order"]] == sorted(prios.values(), reverse=True)
    slurm.set_partition(up=True)
    slurm.wait_done(ids, 90)
    times = slurm.sacct_times(ids)
    started = sorted(ids, key=lambda j: times[j][0])
    assert started == plan["order"], {j: times[j] for j in ids}
    for a, b in itertools.pairwise(started):
        assert times[b][0] >= times[a][1]  # each waited for the one planned before it


def test_reset_restores_recorded_priorities(slurm: SlurmCluster) -> None:
    ids = _whole_cluster_jobs(slurm, [1, 2, 3])
    slurm.run("scontrol", "update", f"JobId={ids[2]}", "Priority=5")
    # a job gpuplan leaves alone (it waits on a dependency) with a higher admin priority
    dep = slurm.sbatch("--gres=gpu:1", f"--dependency=afterok:{ids[0]}", script="true")
    slurm.run("scontrol", "update", f"JobId={dep}", "Priority=7")
    before = slurm.priorities()
    assert before == {ids[0]: 1, ids[1]: 1, ids[2]: 5, dep: 7}
    out = _ok(_cli("apply", "--json", "--policy", "sjf"))
    changed = out["apply"]["changed"]
    assert changed == {ids[0]: 10, ids[1]: 9, ids[2]: 8}  # above the untouched job's priority
    assert list(out["plan"]["unmanaged"]) == [dep] and "not eligible yet" in out["plan"]["unmanaged"][dep]
    assert slurm.priorities() == {**changed, dep: 7}
    # applying twice records nothing new: reset still returns the first values
    _ok(_cli("apply", "--json", "--policy", "ljf"))
    reset = _ok(_cli("reset", "--json"))
    assert reset["changed"] == {j: before[j] for j in ids} and slurm.priorities() == before
    again = _cli("reset")
    assert again.exit_code == 2 and "nothing to reset" in again.stderr


def test_job_cancelled_between_plan_and_apply_is_skipped(slurm: SlurmCluster) -> None:
    ids = _whole_cluster_jobs(slurm, [4, 3, 2, 1])
    client = SlurmClient()
    plan = plan_queue(live_state(client), policy="sjf")
    assert plan.order == list(reversed(ids))
    slurm.run("scancel", ids[1])
    res = apply_order(client, plan.order)
    assert ids[1] in res.skipped and "no longer pending" in res.skipped[ids[1]]
    assert list(res.changed) == [ids[3], ids[2], ids[0]]
    prios = slurm.priorities()
    assert prios[ids[3]] > prios[ids[2]] > prios[ids[0]] > 1


def test_job_gone_during_the_update_batch_is_skipped(slurm: SlurmCluster) -> None:
    _whole_cluster_jobs(slurm, [3, 2, 1])
    client = SlurmClient()
    order = plan_queue(live_state(client), policy="sjf").order

    class CancelsFirst(SlurmClient):
        def update_jobs(self, changes):  # type: ignore[no-untyped-def]
            slurm.run("scancel", order[0])  # leaves after apply read the queue, before scontrol ran
            slurm.wait_done([order[0]], 20)
            return super().update_jobs(changes)

    res = apply_order(CancelsFirst(), order)
    assert set(res.skipped) == {order[0]} and set(res.changed) == set(order[1:])


def test_slurm_stopped_during_apply_leaves_no_inverted_order(slurm: SlurmCluster) -> None:
    ids = _whole_cluster_jobs(slurm, [6, 5, 4, 3, 2, 1])
    order = plan_queue(live_state(SlurmClient()), policy="sjf").order

    class StopsSlurm(SlurmClient):
        calls = 0

        def update_jobs(self, changes):  # type: ignore[no-untyped-def]
            self.calls += 1
            if self.calls == 2:
                slurm.stop_ctld()  # really stopped, by PID, between two batches
            return super().update_jobs(changes)

    client = StopsSlurm()
    client.runner.retries = 0
    try:
        with pytest.raises(SlurmError) as e:
            apply_order(client, order, chunk=2)
        msg = str(e.value)
        assert "Slurm stopped answering during apply" in msg and "gpuplan slurm reset" in msg
    finally:
        slurm.start_ctld()
    prios = slurm.priorities()
    got = [prios[j] for j in order]
    # the first batch (2 jobs) is set, in plan order and above the rest; the rest untouched
    assert got[0] > got[1] > 1 and got[2:] == [1, 1, 1, 1], got
    res = reset_order(SlurmClient())
    assert set(res.changed) == set(order) and set(slurm.priorities().values()) == {1}
    assert sorted(ids) == sorted(order)


def test_permission_denied_is_explained_and_dry_run_works(
    slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = _whole_cluster_jobs(slurm, [2, 1])
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for cmd in ("squeue", "sinfo", "scontrol", "sacct"):  # the real commands, run as an unprivileged user
        path = bindir / cmd
        path.write_text(f'#!/bin/sh\nexec runuser -u nobody -- /usr/bin/{cmd} "$@"\n')
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    state = tmp_path / "state.json"
    dry = _ok(_cli("apply", "--dry-run", "--json", "--policy", "sjf", "--state", str(state)))
    assert list(dry["apply"]["changed"]) == list(reversed(ids)) and dry["apply"]["dry_run"]
    denied = _cli("apply", "--policy", "sjf", "--state", str(state))
    assert denied.exit_code == 2
    err = denied.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("gpuplan: error: `scontrol")
    assert "needs root, the SlurmUser, or a Slurm Operator" in err and "--dry-run" in err
    assert slurm.priorities() == {ids[0]: 1, ids[1]: 1}


def test_status_history_and_a_real_subprocess(slurm: SlurmCluster, tmp_path: Path) -> None:
    small = slurm.sbatch("--gres=gpu:3", "--time=1", script="sleep 40")
    wide = slurm.sbatch("-N", "2", "--gres=gpu:8", "--time=2", script="sleep 30")
    status = _ok(_cli("status", "--json"))
    assert status["gpus"] == 32 and status["pending"] == 2 and status["running"] == 0
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 2))
    slurm.set_partition(up=True)
    deadline = time.monotonic() + 20
    while (status := _ok(_cli("status", "--json")))["running"] < 2 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert status["gpus_used"] == 19 and status["gpus_free"] == 13 and status["fragmented_gpus"] == 0
    p = subprocess.run([sys.executable, "-m", "gpuplan.cli", "slurm", "status", "--json"], env=slurm.env,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.returncode == 0 and json.loads(p.stdout)["gpus_used"] == 19
    ids = slurm.run("squeue", "-h", "-o", "%A").stdout.split()
    slurm.run("scancel", *ids)
    slurm.wait_done(ids, 30)
    out = tmp_path / "hist.jsonl"
    deadline = time.monotonic() + 20
    while (hist := _ok(_cli("history", "--since", since, "--out", str(out), "--json")))["jobs"] < 2:
        assert time.monotonic() < deadline, hist
        time.sleep(0.5)
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows[small]["gpus"] == 3 and rows[wide]["gpus"] == 16  # GPUs summed over the 2 nodes
    assert rows[wide]["meta"]["state"] == rows[small]["meta"]["state"] == "CANCELLED"


def test_watch_reapplies_when_the_queue_changes(slurm: SlurmCluster) -> None:
    first = _whole_cluster_jobs(slurm, [3, 2])
    added: list[str] = []

    def sleep(_: float) -> None:
        if not added:
            added.extend(_whole_cluster_jobs(slurm, [1]))

    applied = run_watch(SlurmClient(), (), "sjf", None, "priority", None, 5.0, 3, True, sleep)
    assert applied == 2  # at start, then once after the new job; not on the unchanged third look
    prios = slurm.priorities()
    assert prios[added[0]] > prios[first[1]] > prios[first[0]]


def test_update_outcome_names_each_failed_job(slurm: SlurmCluster) -> None:
    (jid,) = _whole_cluster_jobs(slurm, [1])
    out = SlurmClient().update_jobs([(jid, "Priority=5"), ("999999", "Priority=4")])
    assert isinstance(out, UpdateOutcome) and list(out.errors) == ["999999"]
    assert "Invalid job id" in out.errors["999999"] and slurm.priorities()[jid] == 5


def test_bench_code_runs_on_a_small_queue(slurm: SlurmCluster) -> None:
    """`make bench`'s Slurm case must not rot: its code on 20 jobs (no timing asserted)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from bench_slurm import _measure

    row = _measure(slurm, 20)
    assert row["pending_jobs"] == 20 and row["changed"] == 20 and row["cli_changed"] == 20
    assert {"plan_s", "apply_s", "plan_plus_apply_s", "cli_apply_wall_s", "within_floor"} <= set(row)

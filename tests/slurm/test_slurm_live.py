"""gpuplan slurm on a real slurmctld + 4 slurmd x 8 fake GPUs + slurmdbd (sched/builtin, multifactor)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import SlurmCluster
from typer.testing import CliRunner, Result

from gpuplan.cli import app
from gpuplan.slurm import SlurmClient, SlurmError, apply_order, live_state, plan_queue, reset_order
from gpuplan.slurm.apply import PAUSE_ENV
from gpuplan.slurm.client import UpdateOutcome
from gpuplan.slurm.watch import Watcher, WatchOptions

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
    assert applied["plan"]["order"] == plan["order"] and applied["apply"]["mode"] == "site-factor"
    assert set(applied["apply"]["changed"]) == set(ids[1:])  # the last planned job keeps its priority
    prios = slurm.priorities()
    assert [prios[j] for j in plan["order"]] == sorted(prios.values(), reverse=True)
    slurm.set_partition(up=True)
    slurm.wait_done(ids, 90)
    times = slurm.sacct_times(ids)
    started = sorted(ids, key=lambda j: times[j][0])
    assert started == plan["order"], {j: times[j] for j in ids}
    for a, b in itertools.pairwise(started):
        assert times[b][0] >= times[a][1]  # each waited for the one planned before it


def test_priority_mode_reset_unfreezes_by_hold_and_release(slurm: SlurmCluster) -> None:
    ids = _whole_cluster_jobs(slurm, [1, 2, 3])
    slurm.run("scontrol", "update", f"JobId={ids[2]}", "Priority=5")  # set explicitly before gpuplan
    # a job gpuplan leaves alone (it waits on a dependency) with a higher admin priority
    dep = slurm.sbatch("--gres=gpu:1", f"--dependency=afterok:{ids[0]}", script="true")
    slurm.run("scontrol", "update", f"JobId={dep}", "Priority=7000")
    before = slurm.priorities()
    assert before[ids[2]] == 5 and before[dep] == 7000 and before[ids[0]] == before[ids[1]] > 1
    out = _ok(_cli("apply", "--json", "--policy", "sjf", "--mode", "priority"))
    changed = out["apply"]["changed"]
    assert changed == {ids[0]: 7003, ids[1]: 7002, ids[2]: 7001}  # above the untouched job's priority
    assert list(out["plan"]["unmanaged"]) == [dep] and "not eligible yet" in out["plan"]["unmanaged"][dep]
    assert any("freezes" in w for w in out["setup_warnings"])
    assert slurm.priorities() == {**changed, dep: 7000}
    assert all(
        _prio(slurm, ids)[j]["frozen"] for j in ids
    )  # what --mode priority costs: no factor moves them
    # applying twice records nothing new; another mode is refused until reset
    _ok(_cli("apply", "--json", "--policy", "ljf", "--mode", "priority"))
    mixed = _cli("apply", "--json")
    assert mixed.exit_code == 2 and "run `gpuplan slurm reset` first" in mixed.stderr
    reset = _ok(_cli("reset", "--json"))
    assert reset["changed"] == {ids[2]: 5} and sorted(reset["released"]) == sorted(ids[:2])
    prio = _prio(slurm, ids)
    assert [prio[j]["frozen"] for j in ids[:2]] == [False, False] and all(
        prio[j]["job_size"] > 0 for j in ids[:2]
    )
    after = slurm.priorities()  # multifactor computes them again: age moved them on
    assert after[ids[2]] == 5 and after[dep] == 7000
    assert after[ids[0]] >= before[ids[0]] and after[ids[1]] >= before[ids[1]]
    again = _cli("reset")
    assert again.exit_code == 2 and "nothing to reset" in again.stderr


def _prio(c: SlurmCluster, ids: list[str] | None = None) -> dict[str, dict]:
    """sprio's view of the pending jobs, read by gpuplan's own parser, once it lists every one of `ids`
    (default: every pending job; a job just released shows in sprio again once Slurm has recomputed it,
    and sprio never lists a job waiting on a dependency)."""
    deadline = time.monotonic() + 15
    want = set(ids) if ids is not None else set(c.priorities())
    while not want <= set(rows := SlurmClient().prio()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return {j: {"frozen": r.frozen, "job_size": r.job_size, "site": r.site, "priority": r.priority}
            for j, r in rows.items()}  # fmt: skip


def test_job_cancelled_between_plan_and_apply_is_skipped(slurm: SlurmCluster) -> None:
    ids = _whole_cluster_jobs(slurm, [4, 3, 2, 1])
    client = SlurmClient()
    plan = plan_queue(live_state(client), policy="sjf")
    assert plan.order == list(reversed(ids))
    slurm.run("scancel", ids[1])
    res = apply_order(client, plan.order)
    assert ids[1] in res.skipped and "no longer pending" in res.skipped[ids[1]]
    assert list(res.changed) == [ids[3], ids[2]]  # ids[0], planned last, keeps its priority
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

    res = apply_order(CancelsFirst(), order, mode="priority")
    assert set(res.skipped) == {order[0]} and set(res.changed) == set(order[1:])


def test_slurm_stopped_during_apply_then_the_watcher_backs_off_and_finishes_it(slurm: SlurmCluster) -> None:
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
    logs: list[dict] = []
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        if len(sleeps) == 2:
            slurm.start_ctld()  # back after two failed looks

    try:
        with pytest.raises(SlurmError) as e:
            apply_order(client, order, chunk=2)
        msg = str(e.value)
        assert "Slurm stopped answering during apply" in msg and "journaled" in msg
        # a watcher started meanwhile waits for slurmctld (the watcher's own backoff), then finishes the pass
        watch_client = SlurmClient()
        watch_client.runner.retries = 0
        Watcher(watch_client, WatchOptions(policy="sjf", interval_s=5.0), logs.append, sleep).run(3)
    finally:
        if "slurmctld" not in slurm.pids:
            slurm.start_ctld()
    down = [e for e in logs if e["event"] == "slurm_unreachable"]
    assert [e["retry_in_s"] for e in down] == [2.0, 4.0] and sleeps == [2.0, 4.0]
    assert "slurmctld is not answering" in down[0]["message"] and "squeue" in down[0]["message"]
    passes = [e for e in logs if e["event"] == "pass"]
    assert [e["event"] for e in logs][-2:] == ["slurm_back", "pass"]
    assert passes[0]["recovered"] == 5 and passes[0]["changed"] == 0  # the journal's lines, nothing else
    prios = slurm.priorities()
    assert [prios[j] for j in order] == sorted(prios.values(), reverse=True)
    assert not any(p["frozen"] for p in _prio(slurm).values())
    res = reset_order(SlurmClient())
    assert len(res.changed) == 5 and set(res.changed) < set(order)  # the jobs gpuplan ever changed
    assert {j: p["site"] for j, p in _prio(slurm).items()} == {j: 0 for j in ids}
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
    before = slurm.priorities()
    dry = _ok(_cli("apply", "--dry-run", "--json", "--policy", "sjf", "--state", str(state)))
    assert list(dry["apply"]["changed"]) == [ids[1]] and dry["apply"]["dry_run"]  # ids[0] stays, last
    denied = _cli("apply", "--policy", "sjf", "--state", str(state))
    assert denied.exit_code == 2
    err = denied.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("gpuplan: error: `scontrol")
    assert "needs root, the SlurmUser, or a Slurm Operator" in err and "--dry-run" in err
    assert slurm.priorities() == before


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

    opts = WatchOptions(policy="sjf", mode="priority", interval_s=5.0)
    applied = Watcher(SlurmClient(), opts, lambda e: None, sleep).run(3)
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
    assert (
        row["pending_jobs"] == 20
        and 0 < row["changed"] <= 20
        and row["scontrol_update_lines"] == row["changed"]
    )
    assert row["reapply_changed"] == 0 and row["reset_restored"] == row["changed"] == row["cli_changed"]
    assert {"plan_s", "apply_s", "plan_plus_apply_s", "cli_apply_wall_s", "within_floor"} <= set(row)


def test_watcher_killed_mid_apply_restarts_into_the_planned_order(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    ids = _whole_cluster_jobs(slurm, [6, 5, 4, 3, 2, 1])
    state, marker = tmp_path / "applied.json", tmp_path / "paused"
    cmd = [sys.executable, "-m", "gpuplan.cli", "slurm", "watch", "--policy", "sjf", "--interval", "1",
           "--state", str(state)]  # fmt: skip
    # TEST-ONLY hook: one update line per scontrol process, a pause after the first one
    err = tmp_path / "first.err"
    with err.open("w") as f:
        first = subprocess.Popen(
            cmd, env={**slurm.env, PAUSE_ENV: str(marker)}, stdout=subprocess.DEVNULL, stderr=f
        )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert first.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.1)
        second = subprocess.run(cmd, env=slurm.env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 2 and f"pid {first.pid} on {socket.gethostname()}" in second.stderr
        assert "gpuplan slurm watch since" in second.stderr and len(second.stderr.strip().splitlines()) == 1
        first.send_signal(signal.SIGKILL)  # between two scontrol calls
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    journal = json.loads(state.read_text())["journal"]
    assert len(journal["lines"]) == 5  # 6 jobs, the last planned keeps its priority
    assert sum(p["site"] != 0 for p in _prio(slurm).values()) == 1  # half-applied: one line went through
    again = subprocess.run([*cmd, "--iterations", "1", "--json"], env=slurm.env, capture_output=True, text=True,
                           timeout=60)  # fmt: skip
    assert again.returncode == 0, again.stderr
    events = [json.loads(line) for line in again.stdout.splitlines()]
    passes = [e for e in events if e["event"] == "pass"]
    assert len(passes) == 1 and passes[0]["recovered"] == 5 and passes[0]["changed"] == 0
    assert "journal" not in json.loads(state.read_text())
    prios = slurm.priorities()
    assert sorted(ids, key=lambda j: -prios[j]) == list(reversed(ids))  # the new order, exactly (sjf)


def test_nice_mode_as_a_user_who_is_not_an_operator(slurm: SlurmCluster, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    user = "gpuplan-nonop"
    subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", user], check=True, capture_output=True)
    try:
        # the shortest job is the smallest: multifactor's JobSize (and the age of the earlier ones) ranks
        # it last by hundreds of points, far more than a nice of 1 or 2
        ids = [slurm.run("runuser", "-u", user, "--", "sbatch", "--parsable", f"--chdir={slurm.root}/out",
                         "-o", "/dev/null", "-N", str(n), "--gres=gpu:8", f"--time={m}", "--wrap=sleep 1"
                         ).stdout.strip() for n, m in ((4, 3), (2, 2), (1, 1))]  # fmt: skip
        before = slurm.priorities()
        assert sorted(ids, key=lambda j: -before[j]) == ids  # Slurm's own order: the reverse of the plan
        bindir = tmp_path / "bin"
        bindir.mkdir()
        for cmd in ("squeue", "sinfo", "scontrol", "sprio", "sacct"):  # every Slurm command runs as that user
            path = bindir / cmd
            path.write_text(f'#!/bin/sh\nexec runuser -u {user} -- /usr/bin/{cmd} "$@"\n')
            path.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
        state = str(tmp_path / "applied.json")
        denied = _cli("apply", "--policy", "sjf", "--state", state)  # SiteFactor needs an operator
        assert denied.exit_code == 2 and "Operator" in denied.stderr and "--mode nice" in denied.stderr
        out = _ok(_cli("apply", "--json", "--policy", "sjf", "--mode", "nice", "--state", state))
        nice = out["apply"]["changed"]
        assert out["plan"]["order"] == list(reversed(ids)) and list(nice) == list(reversed(ids))
        assert nice[ids[2]] == 0 and 0 < nice[ids[1]] < nice[ids[0]]  # never negative: that needs an operator
        prios = slurm.priorities()
        assert sorted(ids, key=lambda j: -prios[j]) == list(reversed(ids))
        reset = _ok(_cli("reset", "--json", "--state", state))
        assert reset["mode"] == "nice" and set(reset["changed"]) == set(ids)
        nice = slurm.run("squeue", "-h", "-j", ",".join(ids), "-o", "%i %y").stdout.split()
        assert nice[1::2] == ["0", "0", "0"]
    finally:
        slurm.run("scancel", "-u", user, check=False)
        subprocess.run(["userdel", user], capture_output=True)

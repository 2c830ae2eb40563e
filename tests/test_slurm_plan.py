"""The Slurm planner, runner and setup checks without a live Slurm: captured state, injected sleeps."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpuplan.commands.slurm import fragmented_gpus
from gpuplan.errors import GpuplanError
from gpuplan.model import Job
from gpuplan.optimize.order import FixedOrder
from gpuplan.slurm.apply import default_state_path, target_values
from gpuplan.slurm.parse import NodeInfo, QueueJob, parse_config, parse_local_time, parse_sinfo, parse_squeue
from gpuplan.slurm.planner import LiveState, Seed, cluster_from_nodes, plan_queue, simulate_queue, slurm_order
from gpuplan.slurm.runner import SlurmCommandError, SlurmNotFoundError, SlurmPermissionError, SlurmRunner
from gpuplan.slurm.setup import setup_warnings

FIX = Path(__file__).parent / "fixtures" / "slurm"


def _live_state(scheduler: str = "sched/builtin") -> LiveState:
    nodes = parse_sinfo((FIX / "sinfo_N_O_gpuplan.txt").read_text())
    jobs = parse_squeue((FIX / "squeue_O_gpuplan.txt").read_text())
    now = parse_local_time((FIX / "squeue_O_gpuplan.now").read_text())
    assert now is not None
    return LiveState(nodes, jobs, now, {"SchedulerType": scheduler, "PriorityType": "priority/multifactor"})


def _four_nodes() -> list[NodeInfo]:
    return [NodeInfo(f"node{i}", "idle", 8, 0, ("gpu",)) for i in range(1, 5)]


def test_plan_from_captured_state_seeds_running_jobs() -> None:
    plan = plan_queue(_live_state())
    # pending GPU jobs gpuplan may reorder: big (2x8), odd|name (1), nolimit (2); the rest are left alone
    assert sorted(plan.order) == ["11", "13", "14"]
    assert set(plan.unmanaged) == {"10", "12", "15", "16"}
    assert plan.running == 4 and plan.backfill == "none"
    # 'nolimit' has no time limit: the plan says it never ends, and warns
    assert plan.planned.makespan_s is None and any("no time limit" in w for w in plan.warnings)
    # node4 is idle: under the plan something starts at once
    assert min(s for s in plan.planned.starts.values() if s is not None) == 0.0
    assert plan.slurm_order == ["11", "13", "14"]  # equal priorities: by job id


def test_running_jobs_hold_their_nodes_until_their_limit() -> None:
    spec = cluster_from_nodes(_four_nodes())
    seeds = [Seed("r1", {"node1": 8, "node2": 8, "node3": 8, "node4": 8}, 100.0)]
    jobs = [Job("a", -5.0, 8, requested_s=50.0), Job("b", -5.0, 32, requested_s=10.0, may_span_nodes=True)]
    out = simulate_queue(spec, seeds, jobs, FixedOrder(["b", "a"]))
    assert out.starts == {"b": 100.0, "a": 110.0} and out.makespan_s == 160.0
    assert out.mean_wait_s == pytest.approx((105.0 + 115.0) / 2)


def test_strict_order_blocks_and_backfill_does_not() -> None:
    spec = cluster_from_nodes(_four_nodes())
    seeds = [Seed("r1", {"node1": 8, "node2": 8, "node3": 8}, 100.0)]
    jobs = [
        Job("wide", 0.0, 16, requested_s=10.0, may_span_nodes=True),
        Job("small", 0.0, 1, requested_s=10.0),
    ]
    strict = simulate_queue(spec, seeds, jobs, FixedOrder(["wide", "small"]), "none")
    filled = simulate_queue(spec, seeds, jobs, FixedOrder(["wide", "small"]), "conservative")
    assert strict.starts["small"] == 100.0 and filled.starts["small"] == 0.0


def test_best_plan_beats_or_equals_slurm_order() -> None:
    nodes = _four_nodes()
    from gpuplan.slurm.parse import QueueJob

    def q(jid: str, gpus: int, limit: float) -> QueueJob:
        return QueueJob(
            jid, f"j{jid}", "u", "gpu", "PENDING", limit, 0.0, 1, gpus, 1, 0, "Priority", 0.0, None, ""
        )

    # long jobs submitted last: Slurm's order finishes late, longest-first does not
    jobs = [q(str(i), 8, 60.0) for i in range(1, 5)] + [q(str(i), 8, 600.0) for i in range(5, 8)]
    plan = plan_queue(LiveState(nodes, jobs, 0.0, {"SchedulerType": "sched/builtin"}))
    assert plan.slurm.makespan_s == 660.0 and plan.planned.makespan_s == 600.0
    assert plan.order[:3] == ["5", "6", "7"] and plan.gain()["makespan_s"] == pytest.approx(1 - 600 / 660)
    fixed = plan_queue(LiveState(nodes, jobs, 0.0, {}), policy="fifo")
    assert (
        fixed.policy == "fifo"
        and fixed.order == [str(i) for i in range(1, 8)]
        and fixed.backfill == "conservative"
    )


def test_policy_ties_break_by_submit_then_id_whatever_squeue_shows() -> None:
    """sjf ties (same limit) must not follow squeue's row order, which follows priorities that move
    between two reads (age, PriorityCalcPeriod): plan and the apply right after it agree."""
    from gpuplan.slurm.parse import QueueJob

    def q(jid: str, submit_s: float, priority: int) -> QueueJob:
        return QueueJob(jid, f"j{jid}", "u", "gpu", "PENDING", 120.0, 0.0, 4, 32, priority, 0, "Priority",
                        submit_s, None, "")  # fmt: skip

    cfg = {"SchedulerType": "sched/builtin"}
    first = [q("12", 10.0, 50), q("9", 10.0, 40), q("10", 10.0, 30), q("8", 11.0, 20)]
    later = [q("8", 11.0, 90), q("10", 10.0, 80), q("12", 10.0, 70), q("9", 10.0, 60)]  # priorities moved
    orders = [
        plan_queue(LiveState(_four_nodes(), jobs, 30.0, cfg), policy="sjf").order for jobs in (first, later)
    ]
    assert orders == [["9", "10", "12", "8"]] * 2  # equal limits: submit time, then job id


def test_search_never_worse_than_its_start() -> None:
    state = _live_state("sched/backfill")
    base = plan_queue(state, policy="sjf")
    searched = plan_queue(state, policy="sjf", search_s=0.2)
    assert searched.policy == "sjf+search"
    assert (searched.planned.mean_wait_s or 0) <= (base.planned.mean_wait_s or 0) + 1e-9


def test_no_usable_nodes_is_a_clear_error() -> None:
    with pytest.raises(GpuplanError, match="no usable Slurm node with GPUs"):
        cluster_from_nodes([NodeInfo("n1", "down*", 8, 0, ())])


def test_slurm_order_priority_then_id() -> None:
    jobs = parse_squeue((FIX / "squeue_O.txt").read_text())
    order = slurm_order([j for j in jobs if j.is_pending])
    assert order[0] == "20" and order[1:4] == ["13", "14", "15"]


def test_target_values_keep_the_order_above_everyone_else() -> None:
    assert target_values(["a", "b", "c"], "priority", 1) == [4, 3, 2]
    assert target_values(["a", "b"], "priority", 500) == [502, 501]
    assert target_values(["a", "b", "c"], "nice", 1) == [0, 1, 2]


def test_state_path_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUPLAN_SLURM_STATE", str(tmp_path / "s.json"))
    assert default_state_path() == tmp_path / "s.json"


def test_setup_warnings() -> None:
    cfg = parse_config((FIX / "scontrol_show_config_builtin.txt").read_text())
    assert setup_warnings(cfg) == []
    basic = setup_warnings({"SchedulerType": "sched/builtin", "PriorityType": "priority/basic"})
    assert (
        len(basic) == 1
        and "cannot take effect" in basic[0]
        and "PriorityType=priority/multifactor" in basic[0]
    )
    assert any("backfill" in w for w in setup_warnings({"SchedulerType": "sched/backfill"}))
    weights = {
        "SchedulerType": "sched/builtin",
        "PriorityType": "priority/multifactor",
        "PriorityWeightAge": "1000",
    }
    assert any("overtake" in w for w in setup_warnings(weights))
    assert any("--mode nice" in w for w in setup_warnings({"PriorityType": "priority/basic"}, "nice"))


def test_fragmentation() -> None:
    from gpuplan.slurm.parse import QueueJob

    def q(gpus: int, nodes: int = 1) -> QueueJob:
        return QueueJob("1", "n", "u", "gpu", "PENDING", 60.0, 0.0, nodes, gpus, 1, 0, "", 0.0, None, "")

    assert fragmented_gpus([2, 3, 8], [q(4)]) == 5
    assert fragmented_gpus([2, 3], [q(4, nodes=2)]) == 0
    assert fragmented_gpus([2, 3], []) == 0


# -- the runner: real processes, injected sleep -------------------------------------------------------
def _script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}


def test_runner_retries_transient_errors_with_backoff(tmp_path: Path) -> None:
    count = tmp_path / "count"
    _script(tmp_path, "flaky", f'n=$(cat {count} 2>/dev/null || echo 0); echo $((n+1)) > {count}\n'
            'if [ "$n" -lt 2 ]; then echo "slurm_load_jobs error: Socket timed out on send/recv operation" >&2; exit 1; fi\n'
            "echo ok\n")  # fmt: skip
    waits: list[float] = []
    runner = SlurmRunner(retries=3, backoff_s=0.5, env=_env(tmp_path), sleep=waits.append)
    assert runner.run(["flaky"]) == "ok\n"
    assert waits == [0.5, 1.0] and len(runner.calls) == 3


def test_runner_error_names_command_code_and_stderr(tmp_path: Path) -> None:
    _script(tmp_path, "broken", 'echo "squeue: error: Invalid user: bob" >&2; exit 3\n')
    runner = SlurmRunner(env=_env(tmp_path), sleep=lambda s: None)
    with pytest.raises(SlurmCommandError) as e:
        runner.run(["broken", "-u", "bob"])
    assert "`broken -u bob` exited 3: squeue: error: Invalid user: bob" in str(e.value)
    assert len(runner.calls) == 1  # not transient: no retry


def test_runner_gives_up_after_retries_and_explains(tmp_path: Path) -> None:
    _script(
        tmp_path,
        "down",
        'echo "slurm_load_partitions: Unable to contact slurm controller (connect failure)" >&2; exit 1\n',
    )
    waits: list[float] = []
    runner = SlurmRunner(retries=2, backoff_s=0.1, env=_env(tmp_path), sleep=waits.append)
    with pytest.raises(SlurmCommandError, match="is it running"):
        runner.run(["down"])
    assert waits == [0.1, 0.2]


def test_runner_permission_and_timeout_and_missing(tmp_path: Path) -> None:
    _script(tmp_path, "denied", 'echo "Invalid user id for job 7" >&2; exit 1\n')
    _script(tmp_path, "slow", "sleep 5\n")
    runner = SlurmRunner(timeout_s=0.2, retries=0, env=_env(tmp_path), sleep=lambda s: None)
    with pytest.raises(SlurmPermissionError, match="Operator"):
        runner.run(["denied"])
    with pytest.raises(SlurmCommandError, match="timed out"):
        runner.run(["slow"])
    with pytest.raises(SlurmNotFoundError, match="not on PATH"):
        runner.run(["no-such-slurm-command"])


# -- bad input on the command line: one line on stderr, exit 2, before Slurm is asked -----------------
def _cli(*args: str):  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from gpuplan.cli import app

    return CliRunner().invoke(app, ["slurm", *args])


def test_unknown_mode_is_refused_before_slurm_is_asked() -> None:
    r = _cli("apply", "--mode", "loud")
    assert (
        r.exit_code == 2
        and r.stderr.strip()
        == "gpuplan: error: unknown --mode 'loud'; valid modes: site-factor, priority, nice"
    )


def test_reset_without_or_with_a_broken_state_file(tmp_path: Path) -> None:
    r = _cli("reset", "--state", str(tmp_path / "none.json"))
    assert r.exit_code == 2 and "nothing to reset: no state file" in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = _cli("reset", "--state", str(bad))
    assert r.exit_code == 2 and f"{bad}: not a gpuplan Slurm state file" in r.stderr
    bad.write_text("[1, 2]")
    r = _cli("reset", "--state", str(bad))
    assert r.exit_code == 2 and "no 'jobs' object" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_slurm_missing_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no Slurm command anywhere
    r = _cli("status")
    assert r.exit_code == 2
    assert r.stderr.strip() == (
        "gpuplan: error: `sinfo` is not on PATH: install Slurm's client tools (Debian: apt-get install "
        "slurm-client) or add their directory to PATH"
    )


def test_a_preemptive_policy_is_refused_with_the_valid_names() -> None:
    with pytest.raises(GpuplanError, match=r"policy 'las' preempts running jobs.*fifo.*or best"):
        plan_queue(_live_state(), policy="las")


def test_history_writes_the_trace_with_its_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`slurm history --out` keeps the cluster sinfo describes beside the trace, so `audit` and
    `simulate` use it (not the 8-GPU default); fake sacct/sinfo print real captured Slurm output."""
    import json

    fix = Path(__file__).parent / "fixtures" / "slurm"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir, "sacct", f"cat {fix / 'sacct_P.txt'}\n")
    sinfo = "NODELIST|STATE|GRES|GRES_USED|PARTITION|\n" + "".join(
        f"node{i}|idle|gpu:h200:8(S:0-1)|gpu:0|gpu*|\n" for i in range(1, 5)
    )
    _script(bin_dir, "sinfo", f"cat <<'END'\n{sinfo}END\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    out = tmp_path / "hist.jsonl"
    r = _cli("history", "--since", "2026-11-30", "--out", str(out), "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["cluster"]["gpus"] == 32 and data["cluster_file"] == str(tmp_path / "hist.cluster.toml")
    from typer.testing import CliRunner

    from gpuplan.cli import app

    audit = CliRunner().invoke(app, ["audit", str(out), "--json"])
    assert audit.exit_code == 0, audit.stderr
    report = json.loads(audit.stdout)
    assert report["cluster"]["gpus"] == 32 and report["cluster"]["origin"] == "trace"
    assert "H200" in report["cluster"]["describe"] or "h200" in report["cluster"]["describe"]


@pytest.mark.parametrize(("placer", "wide_start_s"), [("best-fit", 0.0), ("fgd", 0.0), ("spread", 60.0)])
def test_the_planner_simulates_with_the_placer_asked_for(placer: str, wide_start_s: float) -> None:
    """node1 has 4 of 8 GPUs busy for 100 s more; a 4-GPU job, then an 8-GPU one (fifo, strict). Packing
    the 4 beside the running job (best-fit; fgd, which strands no GPU so) lets the 8 start now on node2;
    spreading them onto node2 makes the 8 wait until that job's limit, 60 s."""
    now = 1_000_000.0

    def job(jid: str, state: str, gpus: int, limit_s: float, elapsed_s: float, nodes: str) -> QueueJob:
        return QueueJob(jid, f"j{jid}", "u", "gpu", state, limit_s, elapsed_s, 1, gpus, 100, 0, "None",
                        now - 200 + int(jid), None, nodes)  # fmt: skip

    nodes = [NodeInfo("node1", "mixed", 8, 4, ("gpu",)), NodeInfo("node2", "idle", 8, 0, ("gpu",))]
    jobs = [job("1", "RUNNING", 4, 200.0, 100.0, "node1"), job("2", "PENDING", 4, 60.0, 0.0, ""),
            job("3", "PENDING", 8, 60.0, 0.0, "")]  # fmt: skip
    state = LiveState(nodes, jobs, now, {"SchedulerType": "sched/builtin"})
    plan = plan_queue(state, policy="fifo", placer=placer)
    assert plan.order == ["2", "3"] and plan.planned.starts == {"2": 0.0, "3": wide_start_s}
    with pytest.raises(GpuplanError, match="fgd"):  # an unknown placer: the valid names
        plan_queue(state, policy="fifo", placer="nope")


def test_the_dashboard_plans_with_its_placer() -> None:
    """`serve --slurm --placer`: SlurmSource's plan (every pending job, or a policy chosen on a sample)."""
    from gpuplan.web.slurmview import plan_every_pending

    state = _live_state()
    assert plan_every_pending(state, "fifo", None)[0].placer == "best-fit"
    assert plan_every_pending(state, "fifo", None, placer="fgd")[0].placer == "fgd"
    sampled, choice = plan_every_pending(state, "best", None, choose_on=1, placer="spread")
    assert choice is not None and sampled.placer == "spread"


def test_serve_takes_placer_only_with_slurm() -> None:
    from typer.testing import CliRunner

    from gpuplan.cli import app

    r = CliRunner().invoke(app, ["serve", "--placer", "fgd"])
    assert (
        r.exit_code == 2
        and "--placer shapes the forecast of a Slurm cluster's queue: add --slurm" in r.stderr
    )
    r = CliRunner().invoke(app, ["serve", "--slurm", "--placer", "nope"])
    assert (
        r.exit_code == 2 and "unknown placer 'nope'" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    )

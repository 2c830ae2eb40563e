"""Preemptive policies on Slurm (gpuplan/slurm/preempt.py) on hand-built live states: no Slurm needed."""

from __future__ import annotations

import json

import pytest

from gpuplan.commands.slurm import run_preempt_watch
from gpuplan.errors import GpuplanError
from gpuplan.slurm.client import SlurmClient
from gpuplan.slurm.parse import NodeInfo, QueueJob, parse_squeue
from gpuplan.slurm.planner import LiveState
from gpuplan.slurm.preempt import (
    Prior,
    carry_out,
    is_preemptive,
    load_priors,
    preempt_plan,
    preemptive_policy,
)
from gpuplan.slurm.runner import SlurmPermissionError, SlurmRunner

NOW = 1_000_000.0


def _nodes(n: int = 2, used: tuple[int, ...] = ()) -> list[NodeInfo]:
    return [NodeInfo(f"node{i + 1}", "mixed", 8, used[i] if i < len(used) else 0, ("gpu",)) for i in range(n)]


def _running(jid: str, gpus: int, ran_s: float, nodes: str, requeue: bool | None = True,
             state: str = "RUNNING", partition: str = "gpu") -> QueueJob:  # fmt: skip
    return QueueJob(jid, f"job{jid}", "u", partition, state, 7200.0, ran_s, 1, gpus, 1, 0, "None",
                    NOW - ran_s - 10, NOW - ran_s, nodes, requeue=requeue)  # fmt: skip


def _pending(jid: str, gpus: int, waited_s: float = 5.0, reason: str = "Resources") -> QueueJob:
    return QueueJob(jid, f"job{jid}", "u", "gpu", "PENDING", 600.0, 0.0, 1, gpus, 1, 0, reason,
                    NOW - waited_s, None, "", requeue=True)  # fmt: skip


def _state(jobs: list[QueueJob], nodes: list[NodeInfo], config: dict[str, str] | None = None) -> LiveState:
    return LiveState(nodes, jobs, NOW, config or {"SchedulerType": "sched/builtin"}, ("gpu",))


def test_las_requeues_the_long_job_for_a_newcomer() -> None:
    # one node, full: a 8-GPU job that ran 1000 s (8000 GPU-s: level 2 with 1-GPU-hour quanta) and a
    # 1-GPU newcomer (level 0): LAS requeues the long one and starts the newcomer
    st = _state([_running("10", 8, 1000.0, "node1"), _pending("11", 1)], _nodes(1, (8,)))
    p = preempt_plan(st, "las")
    assert p.requeue == ["10"] and p.starts == ["11"] and p.deferred == []
    assert p.order == ["11", "10"]  # the victim waits behind the newcomer
    assert p.attained_gpu_s == {"10": pytest.approx(8000.0), "11": 0.0}
    assert p.levels["10"] == 2.0 and p.levels["11"] == 0.0
    assert any("from scratch" in w for w in p.warnings) and p.as_dict()["preemptive"] is True


def test_equal_levels_never_preempt() -> None:
    # the running job attained less than one quantum: same level as the newcomer, no requeue
    st = _state([_running("10", 8, 100.0, "node1"), _pending("11", 1)], _nodes(1, (8,)))
    p = preempt_plan(st, "las")
    assert p.requeue == [] and p.starts == [] and p.order == ["11"]


def test_idle_gpus_start_without_requeue() -> None:
    st = _state([_running("10", 4, 5000.0, "node1"), _pending("11", 2)], _nodes(1, (4,)))
    p = preempt_plan(st, "las")
    assert p.requeue == [] and p.starts == ["11"]


@pytest.mark.parametrize(
    ("requeue", "config", "why"),
    [
        (False, {}, "Requeue=0"),
        (None, {"JobRequeue": "0"}, "JobRequeue=0"),
    ],
)
def test_jobs_slurm_cannot_requeue_are_never_preempted(
    requeue: bool | None, config: dict[str, str], why: str
) -> None:
    st = _state([_running("10", 8, 5000.0, "node1", requeue=requeue), _pending("11", 1)], _nodes(1, (8,)),
                {"SchedulerType": "sched/builtin", **config})  # fmt: skip
    p = preempt_plan(st, "las")
    assert p.requeue == [] and p.starts == [] and why in p.protected["10"]


def test_unknown_requeue_flag_follows_job_requeue_default() -> None:
    st = _state([_running("10", 8, 5000.0, "node1", requeue=None), _pending("11", 1)], _nodes(1, (8,)),
                {"SchedulerType": "sched/builtin", "JobRequeue": "1"})  # fmt: skip
    assert preempt_plan(st, "las").requeue == ["10"]


def test_suspended_and_foreign_partition_jobs_are_protected() -> None:
    jobs = [_running("10", 8, 5000.0, "node1", state="SUSPENDED"),
            _running("12", 8, 5000.0, "node2", partition="other"), _pending("11", 1)]  # fmt: skip
    p = preempt_plan(_state(jobs, _nodes(2, (8, 8))), "las")
    assert p.requeue == [] and "suspended" in p.protected["10"] and "other" in p.protected["12"]


def test_cap_defers_whole_groups_never_half_of_one() -> None:
    # a 16-GPU newcomer needs both 8-GPU runners requeued: with a cap of 1 it requeues neither
    jobs = [_running("10", 8, 5000.0, "node1"), _running("12", 8, 6000.0, "node2"), _pending("11", 16)]
    jobs[2].num_nodes = 2
    st = _state(jobs, _nodes(2, (8, 8)))
    one = preempt_plan(st, "las", max_requeues=1)
    assert one.requeue == [] and sorted(one.deferred) == ["10", "12"] and one.starts == []
    assert any("--max-requeues 1" in w for w in one.warnings)
    two = preempt_plan(st, "las", max_requeues=2)
    assert sorted(two.requeue) == ["10", "12"] and two.starts == ["11"] and two.deferred == []


def test_cap_zero_only_plans() -> None:
    st = _state([_running("10", 8, 5000.0, "node1"), _pending("11", 1)], _nodes(1, (8,)))
    p = preempt_plan(st, "las", max_requeues=0)
    assert p.requeue == [] and p.deferred == ["10"] and "10" not in p.order


def test_prior_service_keeps_a_requeued_job_from_requeuing_its_preemptor() -> None:
    # job 10 was requeued by gpuplan after 8000 GPU-s; job 11 now runs (1000 s x 8 = level 2):
    # without the record 10 would rank as new (level 0) and requeue 11, throwing its work away
    jobs = [_running("11", 8, 1000.0, "node1"), _pending("10", 8)]
    st = _state(jobs, _nodes(1, (8,)))
    assert preempt_plan(st, "las").requeue == ["11"]
    prior = {"10": Prior(attained_gpu_s=8000.0, run_s=1000.0, requeued_at_s=NOW - 1000.0)}
    p = preempt_plan(st, "las", priors=prior)
    assert p.requeue == [] and p.attained_gpu_s["10"] == 8000.0


def test_tiresias_and_gittins_and_quantum() -> None:
    st = _state([_running("10", 8, 30.0, "node1"), _pending("11", 1)], _nodes(1, (8,)))
    assert preempt_plan(st, "tiresias").requeue == []  # 240 GPU-s < 1 GPU-hour
    assert preempt_plan(st, preemptive_policy("tiresias", 100.0)).requeue == ["10"]
    assert preempt_plan(st, preemptive_policy("las", 100.0)).requeue == ["10"]
    g = preempt_plan(st, preemptive_policy("gittins", 100.0))
    assert g.requeue == ["10"] and any("gittins" in w for w in g.warnings)


def test_bad_policy_and_cap() -> None:
    st = _state([_pending("11", 1)], _nodes(1))
    with pytest.raises(GpuplanError, match="does not preempt"):
        preempt_plan(st, "fifo")
    with pytest.raises(GpuplanError, match="--max-requeues"):
        preempt_plan(st, "las", max_requeues=-1)
    with pytest.raises(GpuplanError, match="--quantum-gpu-s"):
        preemptive_policy("las", 0.0)
    assert is_preemptive("las") and not is_preemptive("fifo") and not is_preemptive("best")


def test_squeue_requeue_column() -> None:
    text = "JOBID|STATE|NODES|PRIORITY|REQUEUE|\n1|RUNNING|1|1|1|\n2|PENDING|1|1|0|\n3|PENDING|1|1|N/A|\n"
    assert [j.requeue for j in parse_squeue(text)] == [True, False, None]
    with pytest.raises(Exception, match="requeue"):
        parse_squeue("JOBID|STATE|NODES|PRIORITY|REQUEUE|\n1|RUNNING|1|1|yes|\n", "squeue.txt")


class _Runner(SlurmRunner):
    """Answers squeue/sinfo/scontrol from canned text and records every command (no Slurm)."""

    def __init__(self, squeue: str, refuse: dict[str, str] | None = None) -> None:
        super().__init__(sleep=lambda s: None)
        self.squeue, self.refuse = squeue, refuse or {}

    def run(self, args, *, input_text=None, retry=True):  # type: ignore[no-untyped-def]
        self.calls.append([*args, *([input_text] if input_text else [])])
        if args[0] == "squeue":
            return self.squeue
        if args[0] == "sinfo":
            return "NODELIST|STATE|GRES|GRES_USED|PARTITION|\nnode1|mixed|gpu:8|gpu:8|gpu|\n"
        if args[:3] == ["scontrol", "show", "config"]:
            return "SchedulerType = sched/builtin\nPriorityType = priority/multifactor\nJobRequeue = 1\n"
        if args[:2] == ["scontrol", "requeue"] and args[2] in self.refuse:
            raise self._error(args, 1, self.refuse[args[2]])
        return ""


_SQUEUE = (
    "JOBID|PARTITION|STATE|TIME_LIMIT|TIME|NODES|TRES_PER_NODE|PRIORITY|REASON|SUBMIT_TIME|START_TIME|NODELIST|REQUEUE|\n"
    "10|gpu|RUNNING|2:00:00|16:40|1|gres:gpu:8|7|None|{sub}|{start}|node1|1|\n"
    "11|gpu|PENDING|10:00|0:00|1|gres:gpu:1|1|Resources|{now}|N/A|(null)|1|\n"
)


def _client(tmp_path, refuse: dict[str, str] | None = None) -> SlurmClient:  # type: ignore[no-untyped-def]
    import time as _t

    fmt = "%Y-%m-%dT%H:%M:%S"
    text = _SQUEUE.format(sub=_t.strftime(fmt, _t.localtime(NOW - 1100)),
                          start=_t.strftime(fmt, _t.localtime(NOW - 1000)), now=_t.strftime(fmt, _t.localtime(NOW)))  # fmt: skip
    return SlurmClient(_Runner(text, refuse), clock=lambda: NOW)


def test_carry_out_records_then_requeues_then_orders_above_the_victim(tmp_path) -> None:  # type: ignore[no-untyped-def]
    client = _client(tmp_path)
    state = tmp_path / "applied.json"
    res = carry_out(client, "las", state_path=state)
    assert res.requeued == ["10"] and res.failed == {}
    calls = client.runner.calls
    requeue_at = calls.index(["scontrol", "requeue", "10"])
    update = next(i for i, c in enumerate(calls) if c[0] == "scontrol" and len(c) == 2)
    assert requeue_at < update and "update JobId=11 Priority=8" in calls[update][1]  # above the victim's 7
    rec = json.loads(state.read_text())["requeued"]["10"]
    assert rec["attained_gpu_s"] == pytest.approx(8000.0) and rec["requeues"] == 1
    assert load_priors(state)["10"].attained_gpu_s == pytest.approx(8000.0)


def test_dry_run_and_refusals(tmp_path) -> None:  # type: ignore[no-untyped-def]
    client = _client(tmp_path)
    dry = carry_out(client, "las", state_path=tmp_path / "s.json", dry_run=True)
    assert dry.plan.requeue == ["10"] and dry.requeued == [] and not (tmp_path / "s.json").exists()
    assert not any(c[:2] == ["scontrol", "requeue"] for c in client.runner.calls)
    # Slurm refuses one job (an interactive one): reported, its record dropped, the rest goes on
    refused = _client(tmp_path, {"10": "Only batch jobs are accepted or processed"})
    res = carry_out(refused, "las", state_path=tmp_path / "r.json")
    assert res.requeued == [] and "batch" in res.failed["10"]
    assert json.loads((tmp_path / "r.json").read_text())["requeued"] == {}
    # no permission: an error, nothing recorded
    denied = _client(tmp_path, {"10": "Access/permission denied"})
    with pytest.raises(SlurmPermissionError):
        carry_out(denied, "las", state_path=tmp_path / "d.json")
    assert json.loads((tmp_path / "d.json").read_text())["requeued"] == {}


def test_watch_passes_every_look(tmp_path) -> None:  # type: ignore[no-untyped-def]
    client = _client(tmp_path)
    slept: list[float] = []
    n = run_preempt_watch(client, (), preemptive_policy("las"), 1, "priority", tmp_path / "w.json", 5.0, 3,
                          True, slept.append)  # fmt: skip
    assert n == 3 and slept == [5.0, 5.0]
    assert (
        sum(c[:2] == ["scontrol", "requeue"] for c in client.runner.calls) == 3
    )  # canned queue: same each look


def test_cli_plan_and_bad_cap(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from gpuplan.cli import app

    r = CliRunner().invoke(app, ["slurm", "plan", "--policy", "las", "--max-requeues", "-1"])
    assert r.exit_code == 2
    r = CliRunner().invoke(app, ["slurm", "apply", "--policy", "las", "--quantum-gpu-s", "0", "--dry-run"])
    assert r.exit_code != 0 and "--quantum-gpu-s" in r.stderr and "Traceback" not in r.stderr

"""`gpuplan slurm apply --policy las` on the real test cluster: preemption by `scontrol requeue`."""

from __future__ import annotations

import json
import time

from harness import SlurmCluster
from typer.testing import CliRunner, Result

from gpuplan.cli import app

runner = CliRunner()
# 10 GPU-seconds: a 32-GPU job passes its first LAS quantum within a second of running
QUANTUM = ("--policy", "las", "--quantum-gpu-s", "10")


def _ok(result: Result) -> dict:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return json.loads(result.stdout)


def _states(c: SlurmCluster) -> dict[str, tuple[str, str]]:
    p = c.run("squeue", "-h", "-t", "PD,R,CG,CF,S", "-o", "%A %T %r")
    return {a: (b, r) for a, b, r in (line.split(maxsplit=2) for line in p.stdout.splitlines())}


def _long_and_short(c: SlurmCluster, *long_args: str) -> tuple[str, str]:
    """A job holding all 32 GPUs, running for a second or more, and a 1-GPU newcomer waiting behind it."""
    long = c.sbatch("-N", "4", "--gres=gpu:8", "--time=10", "--job-name=long", *long_args, script="sleep 300")
    c.set_partition(up=True)
    c.wait_running([long])
    short = c.sbatch("--gres=gpu:1", "--time=1", "--job-name=short", script="sleep 2")
    time.sleep(1.2)  # the long job attains more than one quantum (32 GPUs x 1 s > 10 GPU-s)
    return long, short


def test_las_requeues_the_long_job_and_the_newcomer_starts(slurm: SlurmCluster) -> None:
    long, short = _long_and_short(slurm)
    dry = _ok(runner.invoke(app, ["slurm", "apply", *QUANTUM, "--dry-run", "--json"]))
    assert dry["plan"]["requeue"] == [long] and dry["requeued"] == [] and dry["plan"]["starts"] == [short]
    assert _states(slurm)[long][0] == "RUNNING"  # the dry run changed nothing
    out = _ok(runner.invoke(app, ["slurm", "apply", *QUANTUM, "--json"]))
    assert out["requeued"] == [long] and out["requeue_failed"] == {}
    assert out["plan"]["attained_gpu_s"][long] >= 32.0 and "from scratch" in out["plan"]["note"]
    slurm.wait_running([short], 20)
    state, reason = _states(slurm)[long]
    assert state == "PENDING" and "BeginTime" in reason  # Slurm holds a requeued job back ~2 minutes
    sacct = slurm.run("sacct", "-a", "-X", "-D", "-n", "-P", "-j", long, "-o", "State").stdout.split()
    assert "REQUEUED" in sacct
    recorded = json.loads((slurm.root / "out" / "applied.json").read_text())["requeued"]
    assert recorded[long]["requeues"] == 1 and recorded[long]["attained_gpu_s"] >= 32.0
    # a second pass: nothing left to preempt (the long job is pending, the newcomer below one quantum)
    again = _ok(runner.invoke(app, ["slurm", "apply", *QUANTUM, "--json"]))
    assert again["requeued"] == [] and long in again["plan"]["unmanaged"]


def test_a_job_slurm_may_not_requeue_is_never_preempted(slurm: SlurmCluster) -> None:
    long, short = _long_and_short(slurm, "--no-requeue")
    out = _ok(runner.invoke(app, ["slurm", "apply", *QUANTUM, "--json"]))
    assert out["requeued"] == [] and "Requeue=0" in out["plan"]["protected"][long]
    text = runner.invoke(app, ["slurm", "plan", *QUANTUM])
    assert text.exit_code == 0 and f"never requeued {long}" in text.stdout
    assert _states(slurm)[long][0] == "RUNNING" and _states(slurm)[short][0] == "PENDING"

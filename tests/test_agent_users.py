"""The agent's per-user quotas and fair-share usage, in-process with an injected clock."""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_helpers import Clock, in_process_agents, wait_until
from gpuplan.agent.daemon import Agent
from gpuplan.agent.protocol import call
from gpuplan.agent.requests import handle
from gpuplan.errors import GpuplanError
from systemd_units import service_section

ME = pwd.getpwuid(os.getuid()).pw_name


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_agent(tmp_path: Path, clock: Clock) -> Iterator[object]:
    with in_process_agents(tmp_path / "home", clock, grace_s=1.0) as make:
        yield make


def _ask(agent: Agent, op: str, **kw: object) -> dict[str, object]:
    return handle(agent, {"op": op, **kw}, os.getuid())


def _submit(agent: Agent, command: str = "sleep 300", **kw: object) -> int:
    reply = _ask(
        agent, "submit", command=command, cwd=str(agent.paths.home), env={"PATH": os.environ["PATH"]}, **kw
    )
    assert reply["ok"], reply
    return int(reply["id"])  # type: ignore[call-overload]


def _jobs(agent: Agent) -> dict[int, dict[str, object]]:
    return {int(j["id"]): j for j in _ask(agent, "queue")["jobs"]}  # type: ignore[attr-defined]


def test_a_third_two_gpu_job_waits_on_the_quota_and_starts_when_the_first_ends(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(max_gpus_per_user=4)
    ids = [_submit(agent, gpus=2) for _ in range(3)]
    agent.step()
    jobs = _jobs(agent)
    assert [jobs[i]["state"] for i in ids] == ["running", "running", "queued"]
    assert jobs[ids[2]]["reason"] == "QOSMaxGRESPerUser"  # Slurm's word, from the forecast
    assert jobs[ids[2]]["reason_detail"] == f"quota: {ME} uses 4 of 4 GPUs"
    assert jobs[ids[2]]["user"] == ME
    assert agent.engine.sched.state.idle_total == 4  # other GPUs are free
    refused = _ask(agent, "submit", command="true", gpus=6, cwd="/", env={})
    assert not refused["ok"] and f"{ME}'s quota is 4 GPUs" in str(refused["error"])
    assert _ask(agent, "cancel", ids=[ids[0]])["ok"]
    wait_until(
        lambda: (agent.step(), _jobs(agent)[ids[2]]["state"] == "running")[1], "the third job to start"
    )


def test_max_jobs_per_user_holds_the_third_job_and_every_queued_job_has_user_and_reason(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(max_jobs_per_user=2)
    ids = [_submit(agent) for _ in range(3)]
    agent.step()
    jobs = _jobs(agent)
    assert [jobs[i]["state"] for i in ids] == ["running", "running", "queued"]
    assert jobs[ids[2]]["reason"] == "QOSMaxJobsPerUserLimit"  # Slurm's word, as squeue
    assert jobs[ids[2]]["reason_detail"] == f"quota: {ME} runs 2 of 2 jobs"
    assert agent.engine.sched.state.idle_total == 6  # GPUs are free, and still it waits
    for job in jobs.values():  # `queue --json` carries user and reason for every job
        assert job["user"] == ME and "reason" in job, job
    assert _ask(agent, "cancel", ids=[ids[1]])["ok"]
    wait_until(
        lambda: (agent.step(), _jobs(agent)[ids[2]]["state"] == "running")[1], "the third job to start"
    )


def test_quota_file_errors_name_the_file_and_field(tmp_path: Path) -> None:
    from gpuplan.agent.quotafile import load_quotas

    f = tmp_path / "q.toml"
    f.write_text("[default]\nmax_gpus = 4\n[users.alice]\nmax_gpus = 8\nmax_jobs = 2\n")
    q = load_quotas(f, max_gpus=2, max_jobs=5)
    assert (q.limits("bob").max_gpus, q.limits("bob").max_jobs) == (4, 5)
    assert (q.limits("alice").max_gpus, q.limits("alice").max_jobs) == (8, 2)
    f.write_text("[users.alice]\nmax_gpus = 0\n")
    with pytest.raises(GpuplanError, match=r"q.toml: \[users.alice\] max_gpus = 0: give a whole number"):
        load_quotas(f)
    f.write_text("[users.alice]\nmax_gpu = 3\n")
    with pytest.raises(GpuplanError, match=r"unknown field\(s\) \['max_gpu'\]; valid: max_gpus, max_jobs"):
        load_quotas(f)


def test_fairshare_usage_survives_a_restart(make_agent, clock: Clock) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(policy="fairshare")
    jid = _submit(agent, "true", gpus=2)
    agent.step()
    clock.now += 100.0
    wait_until(lambda: (agent.step(), agent.store.job(jid).state == "done")[1], "the job to end")  # type: ignore[union-attr]
    used = agent.engine.sched.user_usage(clock.now)[ME]
    assert used == pytest.approx(200.0, rel=1e-3)  # 2 GPUs x 100 s, a hair of decay in a week's half-life
    agent.close()
    again = make_agent(policy="fairshare")
    assert again.engine.sched.user_usage(clock.now)[ME] == pytest.approx(used)


def test_agent_reload_reads_the_quota_file_again_and_a_bad_one_keeps_the_old(
    make_agent, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    quotas = tmp_path / "quotas.toml"
    quotas.write_text(f"[users.{ME}]\nmax_gpus = 2\n")
    agent = make_agent(quotas_file=str(quotas))
    a, b = _submit(agent, gpus=2), _submit(agent, gpus=2)
    agent.step()
    assert _jobs(agent)[b]["reason_detail"] == f"quota: {ME} uses 2 of 2 GPUs"
    quotas.write_text(f"[users.{ME}]\nmax_gpus = zero\n")
    bad = _ask(agent, "reload")
    assert not bad["ok"] and "quotas.toml: not valid TOML" in str(bad["error"])
    agent.step()
    assert _jobs(agent)[b]["state"] == "queued"  # the old quota holds
    quotas.write_text(f"[users.{ME}]\nmax_gpus = 4\n")
    good = _ask(agent, "reload")
    assert good["ok"] and good["quotas"]["users"] == [ME]  # type: ignore[index]
    agent.step()
    assert {_jobs(agent)[i]["state"] for i in (a, b)} == {"running"}


def test_sighup_reloads_the_quotas_of_a_running_agent(tmp_path: Path) -> None:
    import signal

    from agent_helpers import Daemon

    quotas = tmp_path / "quotas.toml"
    quotas.write_text("[default]\nmax_jobs = 1\n")
    d = Daemon(tmp_path / "home", quotas_file=str(quotas))
    try:
        d.start()
        a, b = d.submit("sleep 60"), d.submit("sleep 60")
        d.wait_state(a, "running")
        assert d.job(b)["state"] == "queued"
        quotas.write_text("[default]\nmax_jobs = 2\n")
        assert d.proc is not None
        os.kill(d.proc.pid, signal.SIGHUP)
        d.wait_state(b, "running")
    finally:
        d.stop()


def test_a_job_whose_submitter_has_no_account_never_starts_as_anyone(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(multi_user=True)
    jid = _submit(agent, "touch ran", hold=True)
    agent.store.update_job(jid, uid=2_000_000_000)  # its user was deleted since the submit
    assert _ask(agent, "release", ids=[jid])["ok"]
    wait_until(lambda: (agent.step(), _jobs_or_final(agent, jid) == "failed")[1], "the job to fail at start")
    row = agent.store.job(jid)
    assert row is not None and "uid 2000000000" in row.reason and "no account" in row.reason
    assert not (agent.paths.home / "ran").exists()


def _jobs_or_final(agent: Agent, jid: int) -> str:
    row = agent.store.job(jid)
    assert row is not None
    return row.state


def test_the_systemd_unit_starts_a_shared_agent_with_options_it_has(tmp_path: Path) -> None:
    """contrib/systemd/gpuplan-agent.service: well-formed, its directories are the system agent's, and
    its ExecStart parses (as root it starts a real shared agent, on fake GPUs in a temporary home)."""
    import stat
    import subprocess
    import sys

    from gpuplan.agent.paths import SYSTEM_HOME, SYSTEM_RUN_DIR

    svc = service_section("gpuplan-agent.service")
    assert svc["Type"] == "simple" and svc["KillMode"] == "process"  # jobs outlive a service stop
    assert svc["ExecReload"] == "/bin/kill -HUP $MAINPID"  # SIGHUP re-reads the quota file
    assert Path("/run", svc["RuntimeDirectory"]) == SYSTEM_RUN_DIR and svc["RuntimeDirectoryMode"] == "1777"
    assert Path("/var/lib", svc["StateDirectory"]) == SYSTEM_HOME and svc["StateDirectoryMode"] == "0711"
    argv = svc["ExecStart"].split()
    assert argv[1:5] == ["agent", "start", "--foreground", "--multi-user"]
    args = [a if a != "nvml" else "fake:8xA100-80GB" for a in argv[1:] if a != "--foreground"]
    env = {**os.environ, "GPUPLAN_HOME": str(tmp_path / "sys")}
    res = subprocess.run([sys.executable, "-m", "gpuplan.cli", *args], env=env, capture_output=True, text=True,
                         timeout=60, check=False)  # fmt: skip
    if os.geteuid() != 0:
        assert res.returncode == 2 and "--multi-user runs as root" in res.stderr, (
            res.stderr
        )  # every option parsed
        return
    try:
        assert res.returncode == 0, res.stderr
        status = call(tmp_path / "sys" / "agent.sock", {"op": "status"})
        assert (status["policy"], status["backfill"], status["backend"]) == (
            "fairshare",
            "easy",
            "fake:8xA100-80GB",
        )
        assert stat.S_IMODE((tmp_path / "sys" / "agent.sock").stat().st_mode) == 0o666  # every local user
    finally:
        subprocess.run([sys.executable, "-m", "gpuplan.cli", "agent", "stop"], env=env, capture_output=True,
                       timeout=60, check=False)  # fmt: skip

"""Preemption carried out by the agent (in-process, injected clock, real processes on the fake device
set): the same workload through the simulator and through the agent gives the same sequence of starts,
suspensions (SIGSTOP in place), requeues and resumes; a suspended job survives the agent's crash.

A job's work is emulated outside the clock: its command waits for a file, which the test writes once
the agent's own accounting says the job has run its duration (suspended time excluded; from scratch
after a requeue). Wrong accounting in the agent would end jobs at the wrong instants and change every
later decision. Time never passes by sleeping; real processes are polled with a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_helpers import Clock, Daemon, wait_until
from gpuplan.agent.daemon import Agent, AgentConfig
from gpuplan.agent.launcher import is_zombie, live_jobs
from gpuplan.agent.protocol import AgentError
from gpuplan.agent.requests import handle
from gpuplan.agent.store import events_since
from gpuplan.core.preemption import PreemptionCost
from gpuplan.core.preemptive import Las
from gpuplan.core.scheduler import Scheduler
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.preempt import PreemptiveRun

T0 = 1000.0
QUANTUM_GPU_S = 10.0
SPEC = ClusterSpec("two", (NodeSpec("n", 2, GpuSpec("A100-80GB", 80.0)),))
# name, submit s, GPUs, GB per GPU (None: whole GPUs), duration s, preempt mode
WORKLOAD = [
    ("A", 0, 1, 30.0, 25, "suspend"),
    ("B", 0, 1, None, 40, "requeue"),
    ("C", 5, 1, 40.0, 8, "suspend"),
    ("D", 12, 2, 30.0, 6, "checkpoint"),
    ("E", 15, 1, 20.0, 5, "never"),
]


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def make_agent(tmp_path: Path, clock: Clock) -> Iterator[object]:
    agents: list[Agent] = []
    toml = tmp_path / "two.toml"
    toml.write_text(
        '[[nodes]]\nname = "n"\ngpus = 2\ngpu_model = "A100-80GB"\ngpu_mem_gb = 80\n', encoding="utf-8"
    )

    one = tmp_path / "one.toml"
    one.write_text(
        '[[nodes]]\nname = "n"\ngpus = 1\ngpu_model = "A100-80GB"\ngpu_mem_gb = 80\n', encoding="utf-8"
    )

    def make(gpus: int = 2) -> Agent:
        node = toml if gpus == 2 else one
        config = AgentConfig(home=tmp_path / "home", gpus=f"fake:{node}", policy="las", grace_s=5.0)
        agent = Agent(config, clock=clock, policy=Las(QUANTUM_GPU_S))
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        with contextlib.suppress(Exception):
            agent.close()
    for pids in live_jobs((tmp_path / "home").resolve()).values():  # every job process, stopped or not
        for pid in pids:
            with contextlib.suppress(OSError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)
                os.killpg(os.getpgid(pid), signal.SIGCONT)


def _simulated() -> tuple[list[tuple[float, str, str]], dict[str, float]]:
    jobs = [Job(n, float(s), g, mem_gb=m, duration_s=float(d), meta={"preempt": mode})
            for n, s, g, m, d, mode in WORKLOAD]  # fmt: skip
    run = PreemptiveRun(
        jobs, Scheduler(SPEC, Las(QUANTUM_GPU_S), "none"), PreemptionCost(restart_overhead_s=0.0)
    )
    run.loop()
    ends = {r.job_id: r.end_s for r in run.records}
    return [e for e in run.events if e[1] != "finish"], ends


def _submit(agent: Agent, done: Path, name: str, gpus: int, mem: float | None, mode: str) -> int:
    cmd = f'while [ ! -e "{done}/$GPUPLAN_JOB_ID" ]; do sleep 0.01; done'
    reply = handle(agent, {"op": "submit", "command": cmd, "cwd": str(done), "env": {"PATH": os.environ["PATH"]},
                          "gpus": gpus, "mem_gb": mem, "name": name, "preempt": mode}, os.getuid())  # fmt: skip
    assert reply["ok"], reply
    return int(reply["id"])


def _settle(agent: Agent, now: float) -> None:
    """Step at `now` until every decision is carried out: no launch waiting, no preempted job dying."""

    def settled() -> bool:
        agent.step(now)
        return all(not r.pending and not r.stop_state and r.pid is not None for r in agent.runs.values())

    wait_until(settled, f"the agent to carry out its decisions at t={now - T0:g}")
    for run in agent.runs.values():  # the signals reached every process of the group (a process may
        # pass through D on its way to T)
        if run.suspended:
            wait_until(
                lambda run=run: _is_stopped(_states(agent, run.jid, run.attempt)), f"job {run.jid} stopped"
            )
        else:
            wait_until(
                lambda run=run: "T" not in _states(agent, run.jid, run.attempt), f"job {run.jid} running"
            )


def _is_stopped(states: set[str]) -> bool:
    """A stopped group: every process in T, but a shell that was in vfork when the stop came waits in
    D for its stopped child (it runs no more than the others)."""
    return "T" in states and states <= {"T", "D"}


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[-1][:1]
    except OSError:
        return "gone"


def _progress_s(agent: Agent, jid: int, now: float, mode: str) -> float:
    """Seconds of the job's work done: a checkpointed job keeps its progress across attempts (no
    restart overhead, as the simulated cost), a requeued one starts again, a suspended one kept it."""
    row = agent.store.job(jid)
    assert row is not None
    if mode == "checkpoint":
        return row.attained_gpu_s(now) / row.gpus
    return row.run_time_s(now)


def _finish_due(agent: Agent, ids: dict[str, int], done: Path, now: float) -> None:
    modes = {n: mode for n, *_, mode in WORKLOAD}
    durations = {n: d for n, _s, _g, _m, d, _mode in WORKLOAD}
    ending = []
    for name, jid in ids.items():
        run = agent.runs.get(jid)
        if run is None or run.suspended or run.pid is None:
            continue
        if _progress_s(agent, jid, now, modes[name]) >= durations[name] - 1e-9:
            (done / str(jid)).touch()
            ending.append(run.pid)
    for pid in ending:  # every job that ends now has exited before the agent's round at `now`
        wait_until(lambda pid=pid: is_zombie(pid), f"job leader {pid} to exit")


def _run_workload(agent: Agent, clock: Clock, done: Path, until_s: float) -> dict[str, int]:
    ids: dict[str, int] = {}
    t = 0
    while t <= until_s:
        clock.now = T0 + t
        _finish_due(agent, ids, done, clock.now)
        for name, submit, gpus, mem, _d, mode in WORKLOAD:
            if submit == t:
                ids[name] = _submit(agent, done, name, gpus, mem, mode)
        _settle(agent, clock.now)
        t += 1
    return ids


def _agent_events(agent: Agent, ids: dict[str, int]) -> list[tuple[float, str, str]]:
    names = {jid: n for n, jid in ids.items()}
    return [(e["t_s"] - T0, e["action"], names[e["job_id"]]) for e in events_since(agent.store.conn, 0.0)
            if e["uid"] == -1]  # fmt: skip


def test_the_agent_carries_out_the_simulators_preemptions(make_agent, clock: Clock, done: Path) -> None:  # type: ignore[no-untyped-def]
    expected, sim_ends = _simulated()
    assert {a for _, a, _ in expected} >= {"start", "resume", "preempt:suspend", "preempt:requeue"}
    agent = make_agent()
    ids = _run_workload(agent, clock, done, until_s=max(sim_ends.values()))
    assert _agent_events(agent, ids) == expected
    rows = {n: agent.store.job(jid) for n, jid in ids.items()}
    assert {n: r.state for n, r in rows.items() if r is not None} == dict.fromkeys(ids, "done")
    assert {n: r.end_s - T0 for n, r in rows.items() if r is not None} == sim_ends
    a, b = rows["A"], rows["B"]
    assert a is not None and b is not None
    assert (a.attempt, a.preemptions, a.suspended_s, a.run_s) == (1, 1, 11.0, 25.0), (
        "A: stopped 15-26, one attempt"
    )
    assert (b.attempt, b.preemptions, b.run_s) == (3, 2, 40.0), "B: killed twice, ran 40 s from scratch"
    history = [json.loads(x) for x in agent.paths.history.read_text().splitlines()]
    b_id = ids["B"]
    assert [
        (x["id"], x["meta"]["state"], x["duration_s"]) for x in history if x["meta"]["agent_job_id"] == b_id
    ] == [
        (str(b_id), "PREEMPTED", 10.0),  # ran 0-10
        (f"{b_id}.2", "PREEMPTED", 2.0),  # ran 18-20
        (f"{b_id}.3", "COMPLETED", 40.0),
    ]


@pytest.fixture
def done(tmp_path: Path) -> Path:
    """Where the test writes a job's file when the job has done its work."""
    path = tmp_path / "done"
    path.mkdir()
    return path


@pytest.fixture
def paired(make_agent, clock: Clock, done: Path) -> tuple[Agent, int, int]:  # type: ignore[no-untyped-def]
    agent = make_agent(gpus=1)
    return (agent, *_pair_suspended(agent, clock, done))


def _pair_suspended(agent: Agent, clock: Clock, done: Path) -> tuple[int, int]:
    """On one GPU: A (30 GB) runs from the clock's now; C (40 GB) arrives 10 s later, when A leaves
    level 0: A is stopped in place and C runs beside its memory."""
    t0 = clock.now
    a = _submit(agent, done, "A", 1, 30.0, "suspend")
    _settle(agent, clock.now)
    clock.now = t0 + 10
    c = _submit(agent, done, "C", 1, 40.0, "suspend")
    _settle(agent, clock.now)
    assert agent.runs[a].suspended and not agent.runs[c].suspended
    return a, c


def _states(agent: Agent, jid: int, attempt: int = 1) -> set[str]:
    return {_proc_state(pid) for pid in live_jobs(agent.paths.home).get((jid, attempt), set())}


def _row(agent: Agent, jid: int):  # type: ignore[no-untyped-def]
    row = agent.store.job(jid)
    assert row is not None
    return row


@pytest.mark.parametrize("window", ["none", "before SIGSTOP", "before SIGCONT"])
def test_a_suspended_job_survives_the_agents_crash(make_agent, clock: Clock, done: Path, window: str) -> None:  # type: ignore[no-untyped-def]
    first = make_agent(gpus=1)
    a, c = _pair_suspended(first, clock, done)
    if window == "before SIGSTOP":  # the store says suspended, the signal never left
        os.killpg(first.runs[a].pgid, signal.SIGCONT)
    if window == "none":  # the samples saw A use more than it declared: the new agent books that
        first.store.add_samples(clock.now, [], [(a, 1, 0, first.runs[a].pid, 33.0, 90.0)])
    # kill -9: the agent vanishes without a word; its store and its jobs' processes stay
    if window == "before SIGCONT":  # C ended and the store says A runs again, but A is still stopped
        (done / str(c)).touch()
        wait_until(lambda: is_zombie(first.runs[c].pid), "C to exit")  # type: ignore[arg-type]
        first.store.update_job(c, state="done", end_s=clock.now, exit_code=0)
        first.store.update_job(a, state="running", seg_start_s=clock.now, stopped_at_s=None, suspended_s=0.0)
    clock.now = T0 + 12
    again = make_agent(gpus=1)
    assert a in again.runs, "the suspended job is re-adopted"
    if window == "before SIGCONT":
        assert not again.runs[a].suspended and "T" not in _states(again, a), "the resumed job runs"
        return
    assert again.runs[a].suspended, "it stays suspended while C runs"
    wait_until(lambda: _is_stopped(_states(again, a)), "A's processes to be stopped again")
    assert _row(again, a).state == "suspended" and _row(again, a).preemptions == 1
    held = 33.0 if window == "none" else 30.0
    assert again.engine.sched.state.suspended_gb == {0: held}, "its memory is still booked"
    _settle(again, clock.now)
    clock.now = T0 + 13
    (done / str(c)).touch()
    wait_until(lambda: not _states(again, c), "C to exit")
    _settle(again, clock.now)
    assert not again.runs[a].suspended and "T" not in _states(again, a), "resumed in place by the new agent"
    row = _row(again, a)
    assert (row.state, row.gpu_ids, row.suspended_s) == ("running", "0", 3.0)
    clock.now = T0 + 28
    assert row.run_time_s(clock.now) == 25.0 and row.attained_gpu_s(clock.now) == 25.0
    (done / str(a)).touch()
    wait_until(lambda: not _states(again, a), "A to exit")
    _settle(again, clock.now)
    assert _row(again, a).state == "done"


def test_a_suspended_job_killed_while_the_agent_was_down_frees_its_gpu(
    make_agent, clock: Clock, done: Path
) -> None:  # type: ignore[no-untyped-def]
    first = make_agent(gpus=1)
    a, _c = _pair_suspended(first, clock, done)
    os.killpg(first.runs[a].pgid, signal.SIGKILL)  # type: ignore[arg-type]
    wait_until(lambda: is_zombie(first.runs[a].pid), "A to die")  # type: ignore[arg-type]
    os.waitpid(first.runs[a].pid, 0)  # type: ignore[arg-type]
    # the shell's `sleep` child dies with the group but is reaped by init, not by us: until it is a
    # zombie its environment still names the job, and a new agent would rightly re-adopt it
    wait_until(lambda: not _states(first, a), "every process of A to be gone")
    again = make_agent(gpus=1)
    row = _row(again, a)
    assert row.state == "failed" and "exit status unknown" in row.reason
    assert not again.engine.sched.state.suspended_n, "its memory hold is gone"


def test_cancel_of_a_suspended_job_kills_it_and_waits_before_reusing_its_gpu(
    paired: tuple[Agent, int, int], clock: Clock
) -> None:  # type: ignore[no-untyped-def]
    agent, a, c = paired
    assert handle(agent, {"op": "cancel", "ids": [a]}, os.getuid())["ok"]
    assert not agent.engine.sched.state.suspended_n and not agent.engine.is_waiting(a)
    wait_until(lambda: (agent.step(clock.now), _row(agent, a).state == "cancelled")[1], "A to be cancelled")
    assert not _states(agent, a), "SIGTERM reached the stopped group (SIGCONT after it)"
    assert handle(agent, {"op": "queue"}, 0)["jobs"][0]["id"] == c


def test_status_and_queue_show_suspended_jobs_and_attained_service(
    paired: tuple[Agent, int, int], clock: Clock, done: Path
) -> None:  # type: ignore[no-untyped-def]
    agent, a, c = paired
    clock.now = T0 + 14
    later = _submit(agent, done, "D", 1, 20.0, "suspend")  # level 0: ranks before A (level 1)
    _settle(agent, clock.now)
    status = handle(agent, {"op": "status"}, 0)
    counts = (status["running"], status["suspended"], status["preemptions"], status["preemptive"])
    assert counts == (1, 1, 1, True)
    queue = handle(agent, {"op": "queue"}, 0)["jobs"]
    assert [(j["id"], j["state"]) for j in queue] == [(c, "running"), (later, "queued"), (a, "suspended")]
    # the forecast runs the levels forward: A resumes when C reaches A's level; D fits beside the memory
    # of neither suspended job, so it has no expected start
    starts = {j["id"]: (j["expected_start_s"], j["reason"]) for j in queue}
    assert starts == {c: (None, ""), later: (None, "Resources"), a: (T0 + 30, "Priority")}
    jobs = {j["id"]: j for j in queue}
    assert (
        jobs[a]["state"] == "suspended" and jobs[a]["attained_gpu_s"] == 10.0 and jobs[a]["preemptions"] == 1
    )
    assert jobs[c]["state"] == "running" and jobs[c]["attained_gpu_s"] == 4.0 and jobs[c]["run_time_s"] == 4.0
    assert jobs[a]["run_time_s"] == 10.0 and jobs[a]["preempt"] == "suspend"


def test_the_daemon_runs_a_preemptive_policy(tmp_path: Path) -> None:
    d = Daemon(tmp_path / "real", policy="tiresias")
    try:
        d.start()
        jid = d.submit("true", preempt="checkpoint")
        job = d.wait_state(jid, "done")
        assert job["preempt"] == "checkpoint" and job["preemptions"] == 0
        status = d.call("status")
        assert status["preemptive"] is True and status["policy"] == "tiresias"
        with pytest.raises(AgentError, match="valid: suspend, checkpoint, requeue, never"):
            d.call("submit", command="true", cwd=str(tmp_path), preempt="sometimes")
    finally:
        d.stop()


def test_the_fake_gpu_shows_a_suspended_jobs_memory_but_no_work(
    paired: tuple[Agent, int, int], clock: Clock
) -> None:  # type: ignore[no-untyped-def]
    agent, a, c = paired
    wait_until(lambda: _is_stopped(_states(agent, a)), "A stopped")
    snap = agent.backend.snapshot()
    by_pgid = {p.pgid: p for p in snap.procs}
    stopped, running = by_pgid[agent.runs[a].pgid], by_pgid[agent.runs[c].pgid]
    assert (stopped.mem_gb, stopped.util_pct) == (30.0, 0.0)
    assert (running.mem_gb, running.util_pct) == (40.0, 90.0)
    assert snap.gpus[0].mem_used_gb == 70.0, "both jobs' memory is on the GPU: the booking was honest"


def test_kill9_of_the_real_agent_while_a_job_is_stopped(
    make_agent, clock: Clock, done: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """An agent suspends A (on the wall clock's time), then real daemons take over its home: one is
    killed with -9 while A is stopped; the next resumes A in place once C ends, and A's history line
    counts its run time, not the time it spent stopped."""
    clock.now = time.time() - 10.0
    first = make_agent(gpus=1)
    a, c = _pair_suspended(first, clock, done)
    first.close()  # this agent is gone: its jobs stay, as after a crash
    d = Daemon(tmp_path / "home", gpus=f"fake:{tmp_path / 'one.toml'}", policy="las", grace_s=2.0)
    try:
        d.start()
        assert d.job(a)["state"] == "suspended" and d.job(c)["state"] == "running"
        d.kill9()
        wait_until(lambda: _is_stopped(_states(first, a)), "A still stopped after the agent's kill -9")
        d.start()
        status = d.call("status")
        assert (status["suspended"], status["running"], status["preemptions"]) == (1, 1, 1)
        (done / str(c)).touch()
        d.wait_state(c, "done")
        job = d.wait_state(a, "running")
        assert job["gpu_ids"] == [0] and job["suspended_s"] > 0, "resumed in place by the restarted agent"
        wait_until(lambda: "T" not in _states(first, a), "A's processes to run again")
        (done / str(a)).touch()
        job = d.wait_state(a, "done")
    finally:
        d.stop()
    lines = [json.loads(x) for x in d.paths.history.read_text().splitlines()]
    line = next(x for x in lines if x["id"] == str(a))
    meta = line["meta"]
    assert meta["preemptions"] == 1 and meta["suspended_s"] == pytest.approx(job["suspended_s"])
    assert line["duration_s"] == pytest.approx(meta["wall_s"] - meta["suspended_s"], abs=1e-6)
    assert line["duration_s"] == pytest.approx(job["run_s"]) and line["duration_s"] >= 10.0
    audit = subprocess.run(
        [sys.executable, "-m", "gpuplan.cli", "audit", str(d.paths.history), "--cluster", str(d.paths.node_toml),
         "--json"], capture_output=True, text=True,
    )  # fmt: skip
    assert audit.returncode == 0, audit.stderr


def test_a_crash_during_a_preemptions_grace_requeues_the_victim_once(
    make_agent, clock: Clock, done: Path
) -> None:  # type: ignore[no-untyped-def]
    """A (requeue mode) ignores SIGTERM; C takes its GPU at 10 and waits for A's processes; the agent
    dies during the grace period. The next one kills A, requeues it once, and only then starts C."""
    first = make_agent(gpus=1)
    t0 = clock.now
    cmd = (f'trap "" TERM; : > "{done}/trapped-$GPUPLAN_JOB_ID"; '
           f'while [ ! -e "{done}/$GPUPLAN_JOB_ID" ]; do sleep 0.01; done')  # fmt: skip
    reply = handle(first, {"op": "submit", "command": cmd, "cwd": str(done), "env": {"PATH": os.environ["PATH"]},
                          "preempt": "requeue", "name": "A"}, os.getuid())  # fmt: skip
    a = int(reply["id"])
    _settle(first, clock.now)
    # a SIGTERM that came before the shell set its trap would end A at once (seen under load)
    wait_until(lambda: (done / f"trapped-{a}").exists(), "A to ignore SIGTERM")
    clock.now = t0 + 10
    c = _submit(first, done, "C", 1, 40.0, "suspend")
    first.step(clock.now)
    assert first.runs[a].stop_state == "preempt" and first.runs[c].pending, "C waits for A's processes"
    assert _row(first, a).reason == "stopping:preempt" and _row(first, c).pid is None
    clock.now = t0 + 11  # the agent dies here, inside the 5 s grace
    again = make_agent(gpus=1)
    assert again.runs[a].stop_state == "preempt" and not again.engine.is_running(a)
    wait_until(lambda: (again.step(clock.now), _row(again, a).state == "queued")[1], "A to be requeued")
    _settle(again, clock.now)
    row_a, row_c = _row(again, a), _row(again, c)
    assert (row_a.attempt, row_a.preemptions, row_a.service_gpu_s) == (2, 1, 10.0)
    assert row_c.state == "running" and row_c.pid is not None and not _states(again, a)
    kinds = [(e["action"], e["job_id"]) for e in events_since(again.store.conn, 0.0) if e["uid"] == -1]
    assert kinds == [("start", a), ("preempt:requeue", a), ("start", c)], "A preempted once, C started once"


def test_the_daemon_takes_its_quantum_from_the_config(tmp_path: Path) -> None:
    """`gpuplan agent start --policy las --quantum-gpu-s 1`: a real daemon suspends a job that attained
    more than one GPU-second for a newcomer, which runs beside it (its declared memory fits)."""
    one = tmp_path / "one.toml"
    one.write_text(
        '[[nodes]]\nname = "n"\ngpus = 1\ngpu_model = "A100-80GB"\ngpu_mem_gb = 80\n', encoding="utf-8"
    )
    d = Daemon(tmp_path / "home", gpus=f"fake:{one}", policy="las", quantum_gpu_s=1.0)
    try:
        d.start()
        a = d.submit("sleep 60", gpus=1, mem_gb=30.0, preempt="suspend")
        started = d.wait_state(a, "running")
        wait_until(lambda: d.job(a)["attained_gpu_s"] > 1.0, "A to attain its first quantum")
        c = d.submit("sleep 60", gpus=1, mem_gb=40.0, preempt="suspend")
        assert d.wait_state(a, "suspended")["preemptions"] == 1
        assert d.wait_state(c, "running")["gpu_ids"] == started["gpu_ids"] == [0]
    finally:
        d.stop()
    # the same daemon without the option keeps las's own quantum (an hour): nobody is preempted
    assert AgentConfig(home=tmp_path).quantum_gpu_s is None


def test_the_quantum_needs_a_preemptive_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from gpuplan.cli import app

    monkeypatch.setenv("GPUPLAN_HOME", str(tmp_path / "home"))
    for args, needle in (
        (["--policy", "sjf", "--quantum-gpu-s", "60"], "policy 'sjf' does not preempt"),
        (["--policy", "las", "--quantum-gpu-s", "0"], "must be > 0 GPU-seconds"),
        (["--policy", "las:quanta=60"], "unknown parameter 'quanta'"),
        (["--policy", "las:quantum=60", "--quantum-gpu-s", "60"], "both in the spec and by an option"),
        (["--backfill", "conservative:depth=0"], "depth=0 is not valid"),
    ):
        r = CliRunner().invoke(app, ["agent", "start", "--gpus", "fake:1xH200-141GB", *args])
        assert r.exit_code == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr

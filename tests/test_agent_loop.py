"""The agent's loop in-process with an injected clock: time limits, dependencies, hold/release, requeue,
apply, expected starts, recovery. Jobs are real processes; time never passes by sleeping."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_helpers import Clock, in_process_agents, wait_until
from gpuplan.agent.daemon import Agent
from gpuplan.agent.launcher import live_jobs
from gpuplan.agent.requests import handle


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_agent(tmp_path: Path, clock: Clock) -> Iterator[object]:
    with in_process_agents(tmp_path / "home", clock) as make:
        yield make


def _submit(agent: Agent, command: str = "sleep 300", **kw: object) -> int:
    reply = handle(agent, {"op": "submit", "command": command, "cwd": str(agent.paths.home),
                          "env": {"PATH": os.environ["PATH"]}, **kw}, os.getuid())  # fmt: skip
    assert reply["ok"], reply
    return int(reply["id"])


def _state(agent: Agent, jid: int) -> str:
    row = agent.store.job(jid)
    assert row is not None
    return row.state


def _until_state(agent: Agent, jid: int, state: str) -> None:
    wait_until(lambda: (agent.step(), _state(agent, jid) == state)[1], f"job {jid} to be {state}")


def test_time_limit_stops_the_job_on_the_injected_clock(make_agent, clock: Clock) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent()
    jid = _submit(agent, time_limit_s=10.0)
    agent.step()
    assert _state(agent, jid) == "running"
    clock.now += 9.0
    agent.step()
    assert _state(agent, jid) == "running", "not before its limit"
    clock.now += 2.0
    _until_state(agent, jid, "timeout")
    row = agent.store.job(jid)
    assert row is not None and row.end_s == clock.now and row.exit_code == 128 + 15


def test_dependency_waits_for_success_and_fails_after_a_failure(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent()
    first = _submit(agent, "true")
    bad = _submit(agent, "exit 2")
    after_ok = _submit(agent, "true", after_id=first)
    after_bad = _submit(agent, "true", after_id=bad)
    agent.step()
    assert _state(agent, after_ok) == "queued"
    _until_state(agent, after_ok, "done")
    _until_state(agent, after_bad, "failed")
    row = agent.store.job(after_bad)
    assert row is not None and row.reason == f"dependency {bad} ended failed"


def test_hold_release_cancel_requeue(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent()
    held = _submit(agent, hold=True)
    agent.step()
    assert _state(agent, held) == "held"
    assert handle(agent, {"op": "release", "ids": [held]}, 0)["ok"]
    agent.step()
    assert _state(agent, held) == "running"
    assert not handle(agent, {"op": "hold", "ids": [held]}, 0)["ok"], "a running job cannot be held"
    assert handle(agent, {"op": "requeue", "ids": [held]}, 0)["ok"]
    wait_until(lambda: (agent.step(), agent.store.job(held))[1].attempt == 2, "attempt 2")  # type: ignore[union-attr]
    _until_state(agent, held, "running")
    assert handle(agent, {"op": "cancel", "ids": [held]}, 0)["ok"]
    _until_state(agent, held, "cancelled")
    reply = handle(agent, {"op": "cancel", "ids": [held]}, 0)
    assert not reply["ok"] and "already ended" in reply["error"]


def test_apply_gives_waiting_jobs_the_plans_order(make_agent, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(gpus=f"fake:{_one_gpu(tmp_path)}")
    blocker = _submit(agent, time_limit_s=100.0)
    a, b, c = (_submit(agent, time_limit_s=50.0, name=n) for n in "abc")
    agent.step()
    reply = handle(agent, {"op": "apply", "order": [str(c), "a", "nope"]}, 0)
    assert reply["matched"] == [c, a] and reply["unmatched"] == ["nope"]
    queue = handle(agent, {"op": "queue"}, 0)["jobs"]
    assert [j["id"] for j in queue] == [blocker, c, a, b]
    starts = {j["id"]: j["expected_start_s"] for j in queue}
    assert (starts[c], starts[a], starts[b]) == (1100.0, 1150.0, 1200.0)


def _one_gpu(tmp_path: Path) -> Path:
    path = tmp_path / "one.toml"
    path.write_text('[[nodes]]\ngpus = 1\ngpu_model = "X"\ngpu_mem_gb = 24\n', encoding="utf-8")
    return path


def test_restart_adopts_running_and_requeues_never_launched(make_agent, clock: Clock) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent()
    running = _submit(agent)
    agent.step()
    assert _state(agent, running) == "running"
    # its process shows the job's environment once it has exec'd (before that a restart cannot see it)
    wait_until(lambda: any(jid == running for jid, _ in live_jobs(agent.paths.home)), "the job's process")
    ghost = _submit(agent, hold=True)  # a row marked running whose process never started (crash window)
    agent.store.update_job(ghost, state="running", start_s=clock.now, gpu_ids="7")
    again = make_agent()
    assert running in again.runs and ghost not in again.runs
    assert _state(again, ghost) == "queued", "the never-launched job is queued again"
    assert again.engine.is_running(running)
    again.step()
    assert len(live_jobs(again.paths.home)) == 2, "the adopted job was not started twice"


def test_bad_requests_get_errors_not_crashes(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent()
    assert "unknown op" in handle(agent, {"op": "explode"}, 0)["error"]
    assert "no job 42" in handle(agent, {"op": "show", "id": 42}, 0)["error"]
    assert "empty command" in handle(agent, {"op": "submit", "command": " "}, 0)["error"]
    assert "give at least one job id" in handle(agent, {"op": "cancel"}, 0)["error"]


def test_node_toml_and_private_files(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent()
    from gpuplan.cluster import load_cluster

    spec = load_cluster(str(agent.paths.node_toml))
    assert spec.total_gpus == 8 and spec.nodes[0].gpu.mem_gb == 80.0
    assert stat.S_IMODE(agent.paths.home.stat().st_mode) == 0o700
    assert json.loads(json.dumps(agent.config.to_json()))["gpus"] == "fake:8xA100-80GB"


def test_unknown_dependency_is_refused(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent()
    reply = handle(agent, {"op": "submit", "command": "true", "after_id": 77}, 0)
    assert not reply["ok"] and "--after 77: no such job" in reply["error"]


def test_predict_model_sets_the_estimate_and_history_median_otherwise(make_agent, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    from gpuplan.model import Job
    from gpuplan.traces import write_trace

    history = tmp_path / "hist.jsonl"
    write_trace([Job(f"j{i}", float(i), 1, duration_s=100.0 * (i + 1), name="t") for i in range(5)], history)
    model = tmp_path / "dur.model"
    fit = subprocess.run([sys.executable, "-m", "gpuplan.cli", "predict", "fit", str(history), "--out", str(model),
                          "--model", "global-median"], capture_output=True, text=True)  # fmt: skip
    assert fit.returncode == 0, fit.stderr
    agent = make_agent(predict=[str(model)])
    jid = _submit(agent, "true", name="t", hold=True)
    row = agent.store.job(jid)
    assert row is not None and row.est_duration_s == 300.0, "the model's global median"
    plain = make_agent()  # no model: the node's own completed runs of that name
    for _ in range(3):
        done = _submit(plain, "true", name="quick")
        _until_state(plain, done, "done")
    row = plain.store.job(_submit(plain, "true", name="quick", hold=True))
    assert row is not None and row.est_duration_s is not None and 0.0 <= row.est_duration_s < 5.0

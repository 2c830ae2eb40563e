"""One live state: a job's store row owns it, and every path back into the Scheduler's queue
(`Agent.queue_job`) keeps its progress. Under las, a job requeued by a preemption with 15 GPU-seconds
of attained service keeps them through `apply`, `release`, a dependency release and an agent restart
(in-process agent, injected clock, real processes on the fake device set; nothing sleeps)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_helpers import Clock, wait_until
from gpuplan.agent.daemon import Agent, AgentConfig
from gpuplan.agent.launcher import live_jobs
from gpuplan.agent.requests import handle
from gpuplan.core.preemptive import Las

T0 = 1000.0


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Path, Clock]]:
    node = tmp_path / "two.toml"
    node.write_text(
        '[[nodes]]\nname = "n"\ngpus = 2\ngpu_model = "A100-80GB"\ngpu_mem_gb = 80\n', encoding="utf-8"
    )
    yield node, Clock(T0)
    for pids in live_jobs((tmp_path / "home").resolve()).values():
        for pid in pids:
            with contextlib.suppress(OSError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)


def _agent(tmp_path: Path, node: Path, clock: Clock) -> Agent:
    config = AgentConfig(home=tmp_path / "home", gpus=f"fake:{node}", policy="las", grace_s=5.0)
    return Agent(config, clock=clock, policy=Las(10.0))


def _submit(agent: Agent, tmp_path: Path, name: str, preempt: str) -> int:
    gate = tmp_path / f"{name}.done"
    cmd = f"while [ ! -e {gate} ]; do sleep 0.02; done"
    reply = handle(agent, {"op": "submit", "command": cmd, "gpus": 1, "name": name, "preempt": preempt,
                           "cwd": str(tmp_path)}, os.getuid())  # fmt: skip
    assert reply["ok"], reply
    return int(reply["id"])


def _settle(agent: Agent, clock: Clock, pred) -> None:  # type: ignore[no-untyped-def]
    wait_until(lambda: (agent.step(clock.now), pred())[1], "the agent to settle")


def _attained(agent: Agent, jid: int) -> tuple[float, float]:
    row = agent.store.job(jid)
    assert row is not None
    return agent.engine.sched.slot(jid).service_gpu_s, row.service_gpu_s


def test_attained_service_survives_every_path_back_into_the_queue(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    node, clock = setup
    agent = _agent(tmp_path, node, clock)
    x = _submit(agent, tmp_path, "X", "requeue")
    b1 = _submit(agent, tmp_path, "B1", "never")
    _settle(agent, clock, lambda: agent.engine.is_running(x) and agent.engine.is_running(b1))
    clock.now = T0 + 15.0  # X has 15 GPU-s (level 1); B2 (level 0) takes its GPU by a requeue
    b2 = _submit(agent, tmp_path, "B2", "never")
    _settle(agent, clock, lambda: agent.engine.is_waiting(x) and agent.engine.is_running(b2))
    assert _attained(agent, x) == (15.0, 15.0)

    assert handle(agent, {"op": "apply", "order": [str(x)]}, 0)["ok"]
    assert _attained(agent, x) == (15.0, 15.0), "apply"
    assert handle(agent, {"op": "hold", "ids": [x]}, 0)["ok"]
    agent.store.update_job(x, after_id=b1)  # released while B1 still runs: it waits on its dependency
    assert handle(agent, {"op": "release", "ids": [x]}, 0)["ok"]
    assert not agent.engine.is_waiting(x)
    (tmp_path / "B1.done").write_text("")
    _settle(agent, clock, lambda: x in agent.engine.sched)  # B1 ended: the dependency release (X may start)
    assert _attained(agent, x) == (15.0, 15.0), "dependency release"
    jobs = {j["id"]: j for j in handle(agent, {"op": "queue"}, 0)["jobs"]}
    assert jobs[x]["attained_gpu_s"] == 15.0  # it starts on B1's GPU at once: none since

    agent.close()  # a crash: the next agent recovers from the store
    agent = _agent(tmp_path, node, clock)
    assert _attained(agent, x) == (15.0, 15.0), "restart"
    agent.close()


def test_a_requeue_by_request_keeps_the_service_of_its_run(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    node, clock = setup
    agent = _agent(tmp_path, node, clock)
    x = _submit(agent, tmp_path, "X", "requeue")
    _settle(agent, clock, lambda: agent.engine.is_running(x))
    clock.now = T0 + 7.0
    assert handle(agent, {"op": "requeue", "ids": [x]}, 0)["ok"]
    _settle(agent, clock, lambda: (agent.store.job(x) or agent.store.job(-1)).attempt == 2)  # type: ignore[union-attr]
    row = agent.store.job(x)
    assert row is not None and row.service_gpu_s == 7.0
    agent.close()

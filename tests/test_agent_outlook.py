"""The agent keeps its last forecast (agent/outlook.py's ForecastCache): a `queue` after no change
computes none, and what it answers is what a fresh forecast at that instant says; a change, the clock
reaching the forecast's first event, or a policy that moves with time makes it forecast again."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from agent_helpers import Clock, in_process_agents
from gpuplan.agent.daemon import Agent
from gpuplan.agent.outlook import ForecastCache, agent_forecast, forecast_fields
from gpuplan.agent.requests import handle

_ACTIVE = ["running", "suspended", "queued", "held"]


def _submit(agent: Agent, gpus: int, limit_s: float, **extra: Any) -> int:
    reply = handle(agent, {"op": "submit", "command": "sleep 600", "gpus": gpus, "time_limit_s": limit_s,
                           "cwd": "/", "env": {"PATH": "/usr/bin:/bin"}, **extra}, 0)  # fmt: skip
    assert reply["ok"], reply
    return int(reply["id"])


def _fresh(agent: Agent, now: float) -> dict[int, dict[str, Any]]:
    """Every active job's forecast fields from a forecast made now, bypassing the kept one."""
    rows = agent.store.jobs(_ACTIVE)
    kept, agent.forecasts = agent.forecasts, ForecastCache()
    try:
        fc = agent_forecast(agent, rows, now)
    finally:
        agent.forecasts = kept
    return {r.id: forecast_fields(fc, r) for r in rows}


def _answered(agent: Agent) -> dict[int, dict[str, Any]]:
    rows = agent.store.jobs(_ACTIVE)
    fc = agent_forecast(agent, rows, agent.clock())
    return {r.id: forecast_fields(fc, r) for r in rows}


def _busy_node(agent: Agent, clock: Clock, rng: random.Random, waiting: int) -> list[int]:
    for _ in range(8):
        _submit(agent, 1, float(rng.randint(60, 600)))
    agent.step()
    ids = [_submit(agent, rng.choice([1, 1, 2, 4, 8]), float(rng.randint(10, 900))) for _ in range(waiting)]
    _submit(agent, 2, 30.0, hold=True)
    return ids


@pytest.mark.parametrize(
    ("seed", "policy", "backfill", "sharing"),
    [(0, "fifo", "easy", False), (1, "fifo", "easy", False), (2, "sjf", "easy", False),
     (3, "fifo", "conservative", False), (4, "fifo", "none", False), (5, "fifo", "easy", True)],
)  # fmt: skip
def test_a_kept_forecast_is_what_a_fresh_one_says(
    tmp_path: Path, seed: int, policy: str, backfill: str, sharing: bool
) -> None:
    clock = Clock(1_000_000.0)
    rng = random.Random(seed)
    config = {"policy": policy, "backfill": backfill, "sharing": sharing}
    with in_process_agents(tmp_path / "home", clock, **config) as make:
        agent = make()
        _busy_node(agent, clock, rng, 30)
        t0 = clock.now
        first = _answered(agent)
        made = agent.forecasts.made
        first_end = min(f["expected_end_s"] for f in first.values() if f["expected_end_s"] is not None)
        assert first == _fresh(agent, t0)
        for dt in sorted(rng.uniform(0.0, first_end - t0) for _ in range(5)):
            clock.now = t0 + dt
            assert _answered(agent) == _fresh(agent, clock.now)
        assert agent.forecasts.made == made, "nothing changed: no forecast was made again"
        clock.now = first_end + 1.0  # a running job overran its expected end: the forecast moves
        assert _answered(agent) == _fresh(agent, clock.now)
        assert agent.forecasts.made == made + 1
        _submit(agent, 1, 20.0)
        assert _answered(agent) == _fresh(agent, clock.now)
        assert agent.forecasts.made == made + 2, "a submit bumps the Scheduler's version"
        handle(agent, {"op": "release", "ids": [max(r.id for r in agent.store.jobs(["held"]))]}, 0)
        assert _answered(agent) == _fresh(agent, clock.now)
        assert agent.forecasts.made == made + 3, "a held job released"


@pytest.mark.parametrize("policy", ["las", "fairshare"])
def test_a_policy_that_moves_with_time_forecasts_each_instant(tmp_path: Path, policy: str) -> None:
    clock = Clock(1_000_000.0)
    with in_process_agents(tmp_path / "home", clock, policy=policy, backfill="easy") as make:
        agent = make()
        _busy_node(agent, clock, random.Random(7), 10)
        _answered(agent)
        _answered(agent)
        made = agent.forecasts.made
        assert made == 1, "the same instant: kept"
        clock.now += 0.5
        assert _answered(agent) == _fresh(agent, clock.now)
        assert agent.forecasts.made == made + 1, "las levels and fair-share usage move with time"


def test_queue_after_no_change_makes_no_forecast(tmp_path: Path) -> None:
    clock = Clock(1_000_000.0)
    with in_process_agents(tmp_path / "home", clock) as make:
        agent = make()
        _busy_node(agent, clock, random.Random(3), 20)
        one = handle(agent, {"op": "queue"}, 0)
        clock.now += 1.0
        two = handle(agent, {"op": "queue"}, 0)
        show = handle(agent, {"op": "show", "id": two["jobs"][-1]["id"]}, 0)
        assert agent.forecasts.made == 1
        assert [j["expected_start_s"] for j in one["jobs"]] == [j["expected_start_s"] for j in two["jobs"]]
        assert show["forecast"]["expected_start_s"] == two["jobs"][-1]["expected_start_s"]

"""Fixtures of the dashboard tests (helpers in dashboard_support.py): an agent home per test, and
three servers per session (a busy node, an empty agent, 10,000 queued jobs). The browser
(tests/browser_support.py, shared with tests/slurm) and the servers start once per session and stop
at the end, also when a test fails; job processes are killed by their pid."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dashboard_support import BUSY_JOBS, FakeAgentHome, LiveServer, start_server, stop_server

from browser_support import require_chromium


@pytest.fixture
def agent_home(tmp_path: Path) -> Iterator[FakeAgentHome]:
    home = FakeAgentHome(tmp_path / "home")
    try:
        yield home
    finally:
        home.close()


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LiveServer]]:
    """Three servers: a busy node (3 running jobs, 12 queued), an empty agent, and 10,000 queued jobs."""
    require_chromium()
    root = tmp_path_factory.mktemp("traces")
    homes = {  # the busy node has a token: the what-if test uploads with it
        name: FakeAgentHome(tmp_path_factory.mktemp(name) / "home", token=name == "busy")
        for name in ("busy", "empty", "big")
    }
    for gpus, mem, util, name in BUSY_JOBS:
        homes["busy"].run(gpus, mem, util, name=name, user="demo")
    homes["busy"].enqueue(12)
    homes["big"].enqueue(10_000)
    servers: dict[str, LiveServer] = {}
    try:
        for name, home in homes.items():
            servers[name] = start_server(home, root)
        yield servers
    finally:
        for live in servers.values():
            stop_server(live)
        for home in homes.values():
            home.close()

"""One real Slurm cluster for the Slurm tests (tests/slurm/harness.py), started once per session when
the first of them needs it and stopped by PID as soon as the last of them is done (so the other tests
run without its daemons), or at the session's end whatever happened.

Without Slurm's Debian packages (or without root, which slurmd needs) these tests skip and say why;
under CI=true that is a failure instead (CI installs the packages in .ci/run).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from harness import SlurmCluster, install_hint, missing_binaries


def _unavailable() -> str | None:
    missing = missing_binaries()
    if missing:
        return f"Slurm test cluster: {', '.join(missing)} not installed; {install_hint()}"
    if os.geteuid() != 0:
        return "Slurm test cluster: slurmd and munged need root; run the Slurm tests as root (CI does)"
    return None


_HERE = Path(__file__).parent
_started: list[SlurmCluster] = []


@pytest.fixture
def slurm_cluster() -> SlurmCluster:
    why = _unavailable()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why} (CI=true: a missing Slurm is a failure, not a skip)")
        pytest.skip(why)
    if not _started:
        _started.append(SlurmCluster.start("builtin"))
    return _started[0]


def _stop_cluster() -> None:
    while _started:
        _started.pop().stop()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last Slurm test in a row (its fixtures already torn down), stop the daemons."""
    if nextitem is None or _HERE not in Path(str(nextitem.fspath)).parents:
        _stop_cluster()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _stop_cluster()


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """The cluster on sched/builtin with an empty queue and the partition DOWN (jobs wait until a test
    sets it UP), SLURM_CONF set for in-process CLI calls."""
    if slurm_cluster.scheduler != "builtin":
        slurm_cluster.restart_ctld("builtin")
    yield from _ready(slurm_cluster, monkeypatch)


@pytest.fixture
def slurm_backfill(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """The same cluster restarted on sched/backfill (priority/multifactor, the harness's weights)."""
    if slurm_cluster.scheduler != "backfill":
        slurm_cluster.restart_ctld("backfill")
    yield from _ready(slurm_cluster, monkeypatch)


def _ready(c: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    c.cancel_all()
    c.set_partition(up=False)
    monkeypatch.setenv("SLURM_CONF", str(c.conf))
    monkeypatch.setenv("GPUPLAN_SLURM_STATE", str(c.root / "out" / "applied.json"))
    try:
        yield c
    finally:
        c.cancel_all()
        c.set_partition(up=True)
        (c.root / "out" / "applied.json").unlink(missing_ok=True)

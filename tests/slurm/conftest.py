"""One real Slurm cluster for the whole test session (tests/slurm/harness.py), stopped by PID at the end.

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


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    why = _unavailable()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why} (CI=true: a missing Slurm is a failure, not a skip)")
        pytest.skip(why)
    cluster = SlurmCluster.start("builtin")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """The cluster on sched/builtin with an empty queue and the partition DOWN (jobs wait until a test
    sets it UP), SLURM_CONF set for in-process CLI calls."""
    if slurm_cluster.scheduler != "builtin":
        slurm_cluster.restart_ctld("builtin")
    yield from _ready(slurm_cluster, monkeypatch)


@pytest.fixture
def slurm_backfill(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """The same cluster restarted on sched/backfill (priority/multifactor, weights 0)."""
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

"""GPU processes the agent did not start: injected by the fake device set, shown with pid and user,
their memory counted as used, and no job packed onto it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_helpers import Daemon, wait_until
from gpuplan.agent.gpus import FakeScenario, GpuBackendError, open_backend


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Daemon]:
    toml = tmp_path / "two.toml"
    toml.write_text(
        'name = "two"\nsharing = true\n[[nodes]]\nname = "n"\ngpus = 2\ngpu_model = "A100-80GB"\ngpu_mem_gb = 80\n',
        encoding="utf-8",
    )
    d = Daemon(tmp_path / "home", gpus=f"fake:{toml},external=0:60:alice", sharing=True, placer="first-fit")
    d.start()
    yield d
    d.stop()


def test_an_external_60_gb_process_keeps_a_30_gb_job_off_its_gpu(agent: Daemon) -> None:
    wait_until(lambda: agent.call("status")["external"], "the agent to sample the external process")
    (ext,) = agent.call("status")["external"]
    assert ext == {"pid": FakeScenario.EXTERNAL_PID_BASE, "user": "alice", "gpu": 0, "mem_gb": 60.0}
    jid = agent.submit("sleep 30", mem_gb=30.0)
    job = agent.wait_state(jid, "running")
    assert job["gpu_ids"] == [1]  # first-fit would take GPU 0, where only 20 GB are free
    second = agent.submit("sleep 30", mem_gb=30.0)
    assert agent.wait_state(second, "running")["gpu_ids"] == [1]  # 30 + 30 fit beside each other
    third = agent.submit("sleep 30", mem_gb=15.0)
    assert agent.wait_state(third, "running")["gpu_ids"] == [0]  # 15 GB fit in GPU 0's 20 GB


def test_external_readings_and_bad_specs() -> None:
    snap = open_backend("fake:8xA100-80GB,external=0:60:alice+3:10", set_id="ext-test").snapshot()
    assert (snap.procs[0].gpu, snap.procs[0].mem_gb, snap.procs[0].user) == (0, 60.0, "alice")
    assert snap.procs[1].user  # the agent's own user by default
    assert snap.gpus[0].mem_used_gb == 60.0 and snap.gpus[3].mem_used_gb == 10.0
    with pytest.raises(GpuBackendError, match=r"external='0-60' must be GPU:MEM_GB\[:USER\]"):
        open_backend("fake:8xA100-80GB,external=0-60", set_id="x")
    with pytest.raises(GpuBackendError, match=r"GPU must be in 0..7"):
        open_backend("fake:8xA100-80GB,external=9:10", set_id="x")


@pytest.mark.parametrize("placer", ["fgd", "fgd-pack"])
def test_agent_places_inside_a_sharing_node_with_fgd(tmp_path: Path, placer: str) -> None:
    """The fgd placers run the agent's GPU choice (issue #24 item 3): jobs share GPUs as memory allows."""
    toml = tmp_path / "two.toml"
    toml.write_text(
        'name = "two"\nsharing = true\n[[nodes]]\nname = "n"\ngpus = 2\ngpu_model = "A100-80GB"\ngpu_mem_gb = 80\n',
        encoding="utf-8",
    )
    d = Daemon(tmp_path / "home", gpus=f"fake:{toml}", sharing=True, placer=placer)
    d.start()
    try:
        assert d.call("status")["placer"] == placer
        first = d.wait_state(d.submit("sleep 30", mem_gb=50.0), "running")["gpu_ids"]
        # 60 GB fit only on the other GPU, then 30 GB only beside the 50 GB job (20 GB left beside the 60)
        assert d.wait_state(d.submit("sleep 30", mem_gb=60.0), "running")["gpu_ids"] == [1 - first[0]]
        assert d.wait_state(d.submit("sleep 30", mem_gb=30.0), "running")["gpu_ids"] == first
    finally:
        d.stop()

"""GPU backends: the fake device set with real processes, its failure scenarios, NVML through a stand-in
module (unsupported fields, a lost GPU, NVML absent)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuplan.agent.gpus import GpuBackendError, NvmlBackend, open_backend
from gpuplan.errors import UnknownNameError


@pytest.fixture
def spawn() -> Iterator[Any]:
    """Start real `sh -c 'sleep'` process groups; killed by pgid afterwards even when a test fails."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(env: dict[str, str], script: str = "sleep 60") -> subprocess.Popen[bytes]:
        full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
        p = subprocess.Popen(["/bin/sh", "-c", script], env=full, start_new_session=True)
        procs.append(p)
        if "GPUPLAN_FAKE_SET" in env:
            _wait_env_visible(p.pid, env["GPUPLAN_FAKE_SET"])
        return p

    yield start
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def _wait_env_visible(pid: int, set_id: str) -> None:
    """Wait (deadline) until the kernel shows the new process's environment in /proc.

    exec closes Popen's error pipe before the new environment is laid out, so a snapshot taken at
    once can miss the process (seen in a full CI run: GPU 0 read 0 GB instead of 8)."""
    marker = f"GPUPLAN_FAKE_SET={set_id}".encode()
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        try:
            if marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return
        except OSError:
            return  # gone or unreadable: let the test's own assertion speak
        time.sleep(0.002)


def _env(set_id: str, gpus: str, mem: float, util: float | None = None) -> dict[str, str]:
    env = {"GPUPLAN_FAKE_SET": set_id, "CUDA_VISIBLE_DEVICES": gpus, "GPUPLAN_FAKE_MEM_GB": str(mem)}
    if util is not None:
        env["GPUPLAN_FAKE_UTIL_PCT"] = str(util)
    return env


def test_fake_preset_lists_its_gpus() -> None:
    backend = open_backend("fake:8xA100-80GB", set_id="t-list")
    devs = backend.devices()
    assert [d.index for d in devs] == list(range(8))
    assert {d.name for d in devs} == {"A100-80GB"} and {d.mem_total_gb for d in devs} == {80.0}


def test_fake_gpus_report_the_declared_memory_of_live_processes(spawn: Any) -> None:
    backend = open_backend("fake:8xA100-80GB", set_id="t-live")
    a = spawn(_env("t-live", "0,1", 20.0, util=40))
    b = spawn(
        _env("t-live", "1", 30.0, util=70), script="sleep 60 & sleep 60; wait"
    )  # 3 processes, one group
    spawn(_env("t-other-set", "2", 50.0))
    snap = backend.snapshot()
    by = snap.by_index()
    assert by[0].mem_used_gb == 20.0 and by[0].util_pct == 40.0
    assert by[1].mem_used_gb == 50.0 and by[1].util_pct == 100.0  # 40 + 70, capped
    assert by[2].mem_used_gb == 0.0, "another fake set's process is invisible"
    assert by[1].mem_free_gb == 30.0
    assert {(p.gpu, p.pgid, p.mem_gb) for p in snap.procs} == {
        (0, a.pid, 20.0),
        (1, a.pid, 20.0),
        (1, b.pid, 30.0),
    }
    os.killpg(a.pid, signal.SIGKILL)
    a.wait()
    # the group's other members die asynchronously after SIGKILL: poll with a deadline
    deadline = time.monotonic() + 10.0
    while backend.snapshot().by_index()[0].mem_used_gb != 0.0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert backend.snapshot().by_index()[0].mem_used_gb == 0.0


def test_job_env_is_what_the_fake_reads(spawn: Any) -> None:
    backend = open_backend("fake:1xH200-141GB", set_id="t-env")
    spawn({**backend.job_env(12.5, 33.0), "CUDA_VISIBLE_DEVICES": "0"})
    (gpu,) = backend.snapshot().gpus
    assert (gpu.mem_used_gb, gpu.util_pct, gpu.name) == (12.5, 33.0, "H200-141GB")


def test_lost_gpu_scenario_other_gpus_still_report(spawn: Any) -> None:
    backend = open_backend("fake:8xA100-80GB,lost=3", set_id="t-lost")
    spawn(_env("t-lost", "3", 10.0))
    spawn(_env("t-lost", "4", 10.0))
    snap = backend.snapshot()
    lost = snap.by_index()[3]
    assert lost.lost and lost.mem_used_gb is None and lost.util_pct is None and "lost" in lost.error
    assert snap.by_index()[4].mem_used_gb == 10.0 and not snap.by_index()[4].lost
    assert [p.gpu for p in snap.procs] == [4]


def test_unsupported_field_is_none_for_that_field_only(spawn: Any) -> None:
    backend = open_backend("fake:8xA100-80GB,unsupported=power+proc_util", set_id="t-unsup")
    spawn(_env("t-unsup", "0", 8.0))
    snap = backend.snapshot()
    g0 = snap.by_index()[0]
    assert g0.power_w is None and g0.mem_used_gb == 8.0 and g0.temp_c is not None and g0.util_pct == 90.0
    (proc,) = snap.procs
    assert proc.util_pct is None and proc.mem_gb == 8.0
    assert snap.to_json()["gpus"][0]["power_w"] is None


def test_fake_from_cluster_toml(tmp_path: Path) -> None:
    toml = tmp_path / "two.toml"
    toml.write_text('[[nodes]]\ngpus = 2\ngpu_model = "L4"\ngpu_mem_gb = 24\n', encoding="utf-8")
    backend = open_backend(f"fake:{toml}", set_id="t-toml")
    assert [(d.index, d.name, d.mem_total_gb) for d in backend.devices()] == [
        (0, "L4", 24.0),
        (1, "L4", 24.0),
    ]


def test_garbled_fake_variables_are_skipped(spawn: Any) -> None:
    backend = open_backend("fake:8xA100-80GB", set_id="t-garbled")
    spawn({"GPUPLAN_FAKE_SET": "t-garbled", "CUDA_VISIBLE_DEVICES": "0", "GPUPLAN_FAKE_MEM_GB": "lots"})
    assert backend.snapshot().by_index()[0].mem_used_gb == 0.0


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("cuda", "expected nvml or fake:PRESET_OR_TOML"),
        ("fake:8xA100-80GB,lost=9", "lost GPU(s) [9] not in 0..7"),
        ("fake:8xA100-80GB,lost=x", "must list GPU indices"),
        ("fake:8xA100-80GB,unsupported=fan", "unknown field(s) ['fan']; valid: util_pct"),
        ("fake:8xA100-80GB,color=red", "unknown option 'color=red'"),
    ],
)
def test_bad_backend_specs(spec: str, needle: str) -> None:
    with pytest.raises(GpuBackendError) as err:
        open_backend(spec)
    assert needle in str(err.value)


def test_unknown_fake_preset_lists_presets() -> None:
    with pytest.raises(UnknownNameError, match="8xA100-80GB"):
        open_backend("fake:9xNothing")


# -- NVML through a stand-in module ------------------------------------------------------------------


class _NVMLError(Exception):
    pass


class _NotSupported(_NVMLError):
    pass


class _GpuIsLost(_NVMLError):
    pass


def _stand_in_pynvml(lost: set[int], no_power: bool, init_error: bool = False) -> types.SimpleNamespace:
    gib = 1024**3

    def mem(h: int) -> Any:
        if h in lost:
            raise _GpuIsLost("GPU is lost")
        return types.SimpleNamespace(total=80 * gib, used=(h + 1) * gib, free=(79 - h) * gib)

    def power(h: int) -> int:
        if no_power:
            raise _NotSupported("Not Supported")
        return 250_000

    def init() -> None:
        if init_error:
            raise _NVMLError("NVML Shared Library Not Found")

    procs = {0: [types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=3 * gib)], 1: [], 2: []}
    return types.SimpleNamespace(
        NVMLError=_NVMLError,
        NVMLError_GpuIsLost=_GpuIsLost,
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 3,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA A100-SXM4-80GB",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetMemoryInfo=mem,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=50 + h, memory=10),
        nvmlDeviceGetPowerUsage=power,
        nvmlDeviceGetTemperature=lambda h, kind: 40 + h,
        nvmlDeviceGetComputeRunningProcesses=lambda h: procs.get(h, []),
        nvmlDeviceGetProcessUtilization=lambda h, since: (_ for _ in ()).throw(_NotSupported("no")),
    )


def test_nvml_backend_reads_fields_and_processes() -> None:
    nv = _stand_in_pynvml(lost=set(), no_power=False)
    backend = NvmlBackend(nv)
    assert [d.name for d in backend.devices()] == ["NVIDIA A100-SXM4-80GB"] * 3
    snap = backend.snapshot()
    g1 = snap.by_index()[1]
    assert (g1.mem_total_gb, g1.mem_used_gb, g1.util_pct, g1.power_w, g1.temp_c) == (
        80.0,
        2.0,
        51.0,
        250.0,
        41.0,
    )
    (proc,) = snap.procs
    assert (proc.pid, proc.gpu, proc.mem_gb, proc.util_pct, proc.pgid) == (
        os.getpid(),
        0,
        3.0,
        None,
        os.getpgid(0),
    )


def test_nvml_unsupported_field_and_lost_gpu() -> None:
    nv = _stand_in_pynvml(lost={2}, no_power=True)
    snap = NvmlBackend(nv).snapshot()
    g0, g2 = snap.by_index()[0], snap.by_index()[2]
    assert g0.power_w is None and g0.mem_used_gb == 1.0 and g0.temp_c == 40.0
    assert g2.lost and g2.mem_used_gb is None and "lost" in g2.error


def test_nvml_absent_gives_one_clear_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    import pynvml

    def fail() -> None:
        raise pynvml.NVMLError_LibraryNotFound(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", fail)
    with pytest.raises(GpuBackendError) as err:
        open_backend("nvml")
    assert "nvidia-smi" in str(err.value) and "fake:8xA100-80GB" in str(err.value)


def test_nvml_package_missing_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(GpuBackendError, match="pip install nvidia-ml-py"):
        open_backend("nvml")

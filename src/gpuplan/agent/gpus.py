"""GPU backends: what the node's GPUs and their processes use right now (docs/agent.md).

The only module of gpuplan that imports `pynvml` (package `nvidia-ml-py`), and only when an NVML
backend is opened. Everything else (the agent, the dashboard, /metrics) calls `open_backend(spec)` and
`backend.snapshot()`.

Two backends behind `GpuBackend`:

- `nvml`: the real GPUs through NVML. A field the device does not support is None ("not available")
  for that field only; a GPU that fell off the bus is reported `lost` while the others still report.
- `fake:PRESET_OR_TOML[,lost=I+J][,unsupported=FIELD+FIELD]`: GPUs described by a cluster preset or
  TOML file. A fake GPU reports the memory that the processes launched on it *declared*: any live
  process of the current user whose environment holds `GPUPLAN_FAKE_SET=<set id>`,
  `CUDA_VISIBLE_DEVICES` and `GPUPLAN_FAKE_MEM_GB` (the agent sets them through `job_env`), counted
  once per process group. So real processes (`sleep`) exercise the whole path with no GPU. Named failure
  scenarios: `lost=3` (GPU 3 is lost), `unsupported=power+temp_c+proc_util` (those fields read None),
  `external=0:60:alice+3:10` (processes the agent did not start: 60 GB on GPU 0 owned by alice, 10 GB
  on GPU 3 owned by the agent's user; each a reading with a pid of its own, as another program's).
  `set=NAME` names the set: agents that name the same set drive the same fake GPUs (and so refuse to
  run side by side, agent/gpulock.py); without it a set is its agent home's own.

Every process reading names its owner (`ProcReading.user`, from /proc/PID's owner).
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError

__all__ = [
    "FAKE_FIELDS",
    "FakeBackend",
    "GpuBackend",
    "GpuBackendError",
    "GpuDevice",
    "GpuReading",
    "NvmlBackend",
    "ProcReading",
    "Snapshot",
    "open_backend",
]

_MIB = 1024.0 * 1024.0
_GIB = 1024.0 * _MIB
FAKE_FIELDS = ("util_pct", "mem", "power_w", "temp_c", "proc_mem", "proc_util")
"""Fields a fake scenario may mark unsupported (`unsupported=power_w+proc_util`)."""
_FAKE_ALIASES = {"power": "power_w", "temp": "temp_c", "util": "util_pct", "memory": "mem"}


class GpuBackendError(GpuplanError):
    """A GPU backend cannot be opened (NVML absent, a bad `--gpus` spec)."""


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """A GPU as the backend lists it at open time: its index (what CUDA_VISIBLE_DEVICES names)."""

    index: int
    name: str
    mem_total_gb: float
    uuid: str = ""


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU at one instant. Every metric is None when the device does not report it.

    Attributes:
        index: the GPU's index (as in CUDA_VISIBLE_DEVICES).
        name: model name.
        mem_total_gb, mem_used_gb, mem_free_gb: memory in GiB.
        util_pct: percent of time a kernel ran over the driver's last sample period.
        power_w: board power draw in watts.
        temp_c: core temperature in degrees Celsius.
        lost: the GPU did not answer (fell off the bus, reset); every metric is None.
        error: why a field or the GPU could not be read, for humans (empty when all is well).
    """

    index: int
    name: str
    mem_total_gb: float | None = None
    mem_used_gb: float | None = None
    mem_free_gb: float | None = None
    util_pct: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    lost: bool = False
    error: str = ""


@dataclass(frozen=True, slots=True)
class ProcReading:
    """A process holding memory on one GPU. `pgid` is None when the process is gone or out of sight."""

    pid: int
    gpu: int
    mem_gb: float | None
    util_pct: float | None = None
    pgid: int | None = None
    user: str = ""  # the owner's name (its uid when it has none; "" when out of sight)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every GPU and GPU process at one instant (`t_s`: Unix time)."""

    t_s: float
    gpus: tuple[GpuReading, ...]
    procs: tuple[ProcReading, ...] = ()

    def by_index(self) -> dict[int, GpuReading]:
        return {g.index: g for g in self.gpus}

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (None for what is not available)."""
        return {
            "t_s": self.t_s,
            "gpus": [_asdict(g) for g in self.gpus],
            "procs": [_asdict(p) for p in self.procs],
        }


def _asdict(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__slots__}


class GpuBackend(ABC):
    """The node's GPUs. `devices()` is fixed at open time; `snapshot()` never raises for one bad GPU."""

    name: str = ""

    @abstractmethod
    def devices(self) -> list[GpuDevice]:
        """The GPUs, in index order."""

    @abstractmethod
    def snapshot(self) -> Snapshot:
        """One batched reading of every GPU and every GPU process (one NVML pass)."""

    def job_env(self, mem_gb: float | None, util_pct: float | None = None) -> dict[str, str]:
        """Environment the agent adds to a job it launches (the fake backend's declared memory)."""
        return {}

    def close(self) -> None:  # noqa: B027 (optional hook: most backends hold nothing)
        """Release the library (NVML shutdown)."""


# -- NVML ----------------------------------------------------------------------------------------


def _load_pynvml() -> Any:
    """Import pynvml and initialise NVML, or raise one clear GpuBackendError."""
    try:
        import pynvml
    except ImportError as e:
        raise GpuBackendError(
            "NVML backend: the Python package nvidia-ml-py is not installed; "
            "run `pip install nvidia-ml-py` (or use --gpus fake:8xA100-80GB to try the agent without GPUs)"
        ) from e
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        raise GpuBackendError(
            f"NVML backend: cannot initialise NVML ({e}); is the NVIDIA driver installed and "
            "`nvidia-smi` working? Without GPUs use --gpus fake:8xA100-80GB"
        ) from e
    return pynvml


class NvmlBackend(GpuBackend):
    """The real GPUs, read through NVML (what `nvidia-smi --query-gpu=...` and
    `nvidia-smi --query-compute-apps=pid,used_memory` show)."""

    name = "nvml"

    def __init__(self, nvml: Any | None = None) -> None:
        """`nvml`: the pynvml module (tests may pass a stand-in); default: import and initialise it."""
        self._nv = nvml if nvml is not None else _load_pynvml()
        self._handles: list[Any] = []
        self._devices: list[GpuDevice] = []
        self._last_seen_us: dict[int, int] = {}
        count = self._nv.nvmlDeviceGetCount()
        for i in range(count):
            h = self._nv.nvmlDeviceGetHandleByIndex(i)
            self._handles.append(h)
            name = _text(self._try(self._nv.nvmlDeviceGetName, h) or f"GPU{i}")
            mem = self._try(self._nv.nvmlDeviceGetMemoryInfo, h)
            uuid = _text(self._try(self._nv.nvmlDeviceGetUUID, h) or "")
            total = mem.total / _GIB if mem is not None else 0.0
            self._devices.append(GpuDevice(i, name, total, uuid))

    def _try(self, read: Callable[..., Any], *args: Any) -> Any:
        """One field: None when the device does not support it or the read fails."""
        try:
            return read(*args)
        except self._nv.NVMLError:
            return None

    def devices(self) -> list[GpuDevice]:
        return list(self._devices)

    def snapshot(self) -> Snapshot:
        now = time.time()
        gpus: list[GpuReading] = []
        procs: list[ProcReading] = []
        for dev, h in zip(self._devices, self._handles):
            reading = self._read_gpu(dev, h)
            gpus.append(reading)
            if not reading.lost:
                procs.extend(self._read_procs(dev.index, h))
        return Snapshot(now, tuple(gpus), tuple(procs))

    def _read_gpu(self, dev: GpuDevice, h: Any) -> GpuReading:
        nv = self._nv
        try:
            mem = nv.nvmlDeviceGetMemoryInfo(h)
        except nv.NVMLError_GpuIsLost as e:
            return GpuReading(dev.index, dev.name, lost=True, error=str(e))
        except nv.NVMLError as e:
            mem, error = None, f"memory: {e}"
        else:
            error = ""
        util: Any = self._try(nv.nvmlDeviceGetUtilizationRates, h)
        power_mw: Any = self._try(nv.nvmlDeviceGetPowerUsage, h)
        temp: Any = self._try(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        return GpuReading(
            dev.index,
            dev.name,
            mem_total_gb=mem.total / _GIB if mem is not None else None,
            mem_used_gb=mem.used / _GIB if mem is not None else None,
            mem_free_gb=mem.free / _GIB if mem is not None else None,
            util_pct=float(util.gpu) if util is not None else None,
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            temp_c=float(temp) if temp is not None else None,
            error=error,
        )

    def _read_procs(self, index: int, h: Any) -> list[ProcReading]:
        nv = self._nv
        running = self._try(nv.nvmlDeviceGetComputeRunningProcesses, h) or []
        util = self._proc_util(index, h)
        out = []
        for p in running:
            used = getattr(p, "usedGpuMemory", None)
            mem = used / _GIB if isinstance(used, int) and used >= 0 else None
            out.append(ProcReading(p.pid, index, mem, util.get(p.pid), _pgid(p.pid), proc_user(p.pid)))
        return out

    def _proc_util(self, index: int, h: Any) -> dict[int, float]:
        """Per-process SM utilization since the last call (many drivers or GPUs do not give it)."""
        since = self._last_seen_us.get(index, 0)
        samples = self._try(self._nv.nvmlDeviceGetProcessUtilization, h, since) or []
        util: dict[int, float] = {}
        for s in samples:
            util[s.pid] = max(util.get(s.pid, 0.0), float(s.smUtil))
            self._last_seen_us[index] = max(self._last_seen_us.get(index, 0), int(s.timeStamp))
        return util

    def close(self) -> None:
        self._try(self._nv.nvmlShutdown)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def proc_user(pid: int, proc_root: Path = Path("/proc")) -> str:
    """The owner of a process by name (its uid when the name is unknown; "" when it is gone)."""
    import pwd

    try:
        uid = os.stat(proc_root / str(pid)).st_uid
    except OSError:
        return ""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:  # gone, or a pid from another pid namespace
        return None


# -- the fake device set ---------------------------------------------------------------------------


@dataclass(slots=True)
class FakeScenario:
    """Named failures of a fake device set: GPUs lost, fields unsupported on every GPU."""

    lost: set[int] = field(default_factory=set)
    unsupported: set[str] = field(default_factory=set)
    external: list[tuple[int, float, str]] = field(default_factory=list)  # (gpu, mem_gb, user)

    EXTERNAL_PID_BASE = 4_000_000  # above Linux's pid_max: never a real process of this host


class FakeBackend(GpuBackend):
    """GPUs from a cluster preset or TOML file that report what their processes declared.

    A process counts when its environment has `GPUPLAN_FAKE_SET` equal to this set's id, a
    `CUDA_VISIBLE_DEVICES` list and `GPUPLAN_FAKE_MEM_GB` (per GPU); `GPUPLAN_FAKE_UTIL_PCT` gives its
    utilization (default 90). Each process group counts once (a shell and its `sleep` are one job).
    """

    name = "fake"
    DEFAULT_UTIL_PCT = 90.0

    def __init__(
        self,
        devices: list[GpuDevice],
        set_id: str,
        scenario: FakeScenario | None = None,
        proc_root: Path = Path("/proc"),
    ) -> None:
        self._devices = devices
        self.set_id = set_id
        self.scenario = scenario or FakeScenario()
        self._proc_root = proc_root

    @classmethod
    def from_spec(cls, text: str, set_id: str) -> FakeBackend:
        """`PRESET_OR_TOML[,lost=I+J][,unsupported=FIELD+FIELD]` (the part after `fake:`)."""
        from gpuplan.cluster import load_cluster

        source, *options = text.split(",")
        named = [o.partition("=")[2].strip() for o in options if o.strip().startswith("set=")]
        options = [o for o in options if not o.strip().startswith("set=")]
        if named:  # a named set: every agent that names it drives the same fake GPUs (agent/gpulock.py)
            set_id = f"named:{named[-1]}"
        spec = load_cluster(source)
        devices: list[GpuDevice] = []
        for node in spec.nodes:
            for _ in range(node.gpus):
                devices.append(
                    GpuDevice(len(devices), node.gpu.model, node.gpu.mem_gb, f"FAKE-{len(devices)}")
                )
        return cls(devices, set_id, _parse_scenario(options, text, len(devices)))

    def devices(self) -> list[GpuDevice]:
        return list(self._devices)

    def job_env(self, mem_gb: float | None, util_pct: float | None = None) -> dict[str, str]:
        env = {"GPUPLAN_FAKE_SET": self.set_id}
        if mem_gb is not None:
            env["GPUPLAN_FAKE_MEM_GB"] = f"{mem_gb:g}"
        if util_pct is not None:
            env["GPUPLAN_FAKE_UTIL_PCT"] = f"{util_pct:g}"
        return env

    def _external(self) -> list[ProcReading]:
        """The scenario's injected processes (`external=GPU:MEM_GB[:USER]`), 0 % utilization."""
        me = proc_user(os.getpid())
        base = FakeScenario.EXTERNAL_PID_BASE
        return [
            ProcReading(base + k, gpu, mem, 0.0, base + k, user or me)
            for k, (gpu, mem, user) in enumerate(self.scenario.external)
        ]

    def snapshot(self) -> Snapshot:
        now = time.time()
        procs = [p for p in [*self._scan(), *self._external()] if p.gpu < len(self._devices)]
        off = self.scenario.unsupported
        gpus = []
        for dev in self._devices:
            if dev.index in self.scenario.lost:
                gpus.append(GpuReading(dev.index, dev.name, lost=True, error="fake scenario: GPU lost"))
                continue
            mine = [p for p in procs if p.gpu == dev.index]
            used = min(dev.mem_total_gb, sum(p.mem_gb or 0.0 for p in mine))
            util = min(100.0, sum(p.util_pct or 0.0 for p in mine))
            gpus.append(
                GpuReading(
                    dev.index,
                    dev.name,
                    mem_total_gb=None if "mem" in off else dev.mem_total_gb,
                    mem_used_gb=None if "mem" in off else used,
                    mem_free_gb=None if "mem" in off else dev.mem_total_gb - used,
                    util_pct=None if "util_pct" in off else util,
                    power_w=None if "power_w" in off else 60.0 + 3.4 * util,
                    temp_c=None if "temp_c" in off else 32.0 + 0.4 * util,
                    error=f"not supported: {', '.join(sorted(off))}" if off else "",
                )
            )
        lost = self.scenario.lost
        shown = [
            replace(
                p,
                mem_gb=None if "proc_mem" in off else p.mem_gb,
                util_pct=None if "proc_util" in off else p.util_pct,
            )
            for p in procs
            if p.gpu not in lost
        ]
        return Snapshot(now, tuple(gpus), tuple(shown))

    def _scan(self) -> list[ProcReading]:
        """Live processes of this fake set, one reading per (process group, GPU)."""
        seen: dict[tuple[int, int], ProcReading] = {}
        stopped: set[int] = set()  # groups SIGSTOPped (a suspended job): memory held, no work
        for pid, env in _environs(self._proc_root):
            if env.get("GPUPLAN_FAKE_SET") != self.set_id or "GPUPLAN_FAKE_MEM_GB" not in env:
                continue
            try:
                mem = float(env["GPUPLAN_FAKE_MEM_GB"])
                util = float(env.get("GPUPLAN_FAKE_UTIL_PCT", self.DEFAULT_UTIL_PCT))
                gpus = [int(x) for x in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
            except ValueError:
                continue  # a garbled variable is a process we cannot read, not a crash
            pgid = _pgid(pid)
            if pgid is None:
                continue
            if _is_stopped(self._proc_root, pid):
                stopped.add(pgid)
            for g in gpus:
                old = seen.get((pgid, g))
                if old is None or pid < old.pid:
                    seen[(pgid, g)] = ProcReading(
                        pid, g, max(mem, old.mem_gb or 0.0) if old else mem, util, pgid,
                        proc_user(pid, self._proc_root),
                    )  # fmt: skip
        readings = [replace(p, util_pct=0.0) if p.pgid in stopped else p for p in seen.values()]
        return sorted(readings, key=lambda p: (p.gpu, p.pid))


def _is_stopped(proc_root: Path, pid: int) -> bool:
    """Whether the process is stopped by a signal (state T in /proc/PID/stat)."""
    try:
        stat = (proc_root / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return stat.rsplit(") ", 1)[-1][:1] == "T"


def _environs(proc_root: Path) -> Iterable[tuple[int, dict[str, str]]]:
    """(pid, environment) of every readable process; zombies and other users' processes are skipped."""
    for entry in os.scandir(proc_root):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "environ").read_bytes()
        except OSError:
            continue
        if b"GPUPLAN_FAKE_SET=" not in raw:
            continue
        env = {}
        for item in raw.split(b"\0"):
            key, sep, value = item.partition(b"=")
            if sep:
                env[key.decode(errors="replace")] = value.decode(errors="replace")
        yield int(entry.name), env


def _parse_scenario(options: list[str], text: str, n_gpus: int) -> FakeScenario:
    scenario = FakeScenario()
    for opt in options:
        key, _, value = opt.partition("=")
        items = [v.strip() for v in value.split("+") if v.strip()]
        if key.strip() == "lost":
            try:
                scenario.lost = {int(v) for v in items}
            except ValueError:
                raise GpuBackendError(
                    f"--gpus fake:{text}: lost={value!r} must list GPU indices, e.g. lost=3+5"
                ) from None
            bad = sorted(i for i in scenario.lost if not 0 <= i < n_gpus)
            if bad:
                raise GpuBackendError(f"--gpus fake:{text}: lost GPU(s) {bad} not in 0..{n_gpus - 1}")
        elif key.strip() == "unsupported":
            names = {_FAKE_ALIASES.get(v, v) for v in items}
            unknown = sorted(names - set(FAKE_FIELDS))
            if unknown:
                raise GpuBackendError(
                    f"--gpus fake:{text}: unknown field(s) {unknown}; valid: {', '.join(FAKE_FIELDS)}"
                )
            scenario.unsupported = names
        elif key.strip() == "external":
            scenario.external = [_external_proc(v, text, n_gpus) for v in items]
        else:
            raise GpuBackendError(
                f"--gpus fake:{text}: unknown option {opt!r}; valid: lost=I+J, unsupported=FIELD+FIELD, "
                "external=GPU:MEM_GB[:USER]+..., set=NAME"
            )
    return scenario


def _external_proc(item: str, text: str, n_gpus: int) -> tuple[int, float, str]:
    """One `GPU:MEM_GB[:USER]` of `external=`."""
    gpu_s, _, rest = item.partition(":")
    mem_s, _, user = rest.partition(":")
    try:
        gpu, mem = int(gpu_s), float(mem_s)
    except ValueError:
        raise GpuBackendError(
            f"--gpus fake:{text}: external={item!r} must be GPU:MEM_GB[:USER], e.g. external=0:60:alice"
        ) from None
    if not 0 <= gpu < n_gpus or not mem > 0:
        raise GpuBackendError(
            f"--gpus fake:{text}: external={item!r}: GPU must be in 0..{n_gpus - 1} and MEM_GB > 0"
        )
    return gpu, mem, user.strip()


def open_backend(spec: str, set_id: str = "") -> GpuBackend:
    """Open `nvml` or `fake:PRESET_OR_TOML[,lost=..][,unsupported=..]`.

    Args:
        spec: the `--gpus` value.
        set_id: the fake set's id (the agent uses its GPUPLAN_HOME, so two agents never see each
            other's fake processes); ignored by NVML.

    Raises:
        GpuBackendError: NVML absent or not initialisable (with the fix), or a bad fake spec.
        UnknownNameError, ClusterError: the fake spec names no preset or a bad TOML file.
    """
    if spec == "nvml":
        return NvmlBackend()
    if spec.startswith("fake:"):
        return FakeBackend.from_spec(spec.removeprefix("fake:"), set_id or "default")
    raise GpuBackendError(f"--gpus {spec!r}: expected nvml or fake:PRESET_OR_TOML (e.g. fake:8xA100-80GB)")

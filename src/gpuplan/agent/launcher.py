"""Job processes: launch in their own session, find them again after a restart, kill them as a group.

The only module of the agent that starts job processes. A job runs as

    /bin/sh -c WRAPPER gpuplan-job CMD STATUS_FILE

in a new session (so its process group id is the wrapper's pid), with stdout and stderr appended to
`jobs/ID/stdout` and `jobs/ID/stderr`. The wrapper runs CMD with `/bin/sh -c` and writes its exit
status to STATUS_FILE, so the status survives an agent that was down when the job ended. Every job
process carries `GPUPLAN_AGENT_HOME`, `GPUPLAN_JOB_ID` and `GPUPLAN_ATTEMPT` in its environment: that
is how a restarted agent recognises its jobs (a reused pid never carries them).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "OOM_PATTERNS",
    "Launched",
    "exit_code_from_status",
    "is_oom",
    "is_zombie",
    "launch",
    "live_jobs",
    "read_status_file",
    "signal_group",
]

_WRAPPER = '/bin/sh -c "$1"; rc=$?; printf "%s\\n" "$rc" > "$2.tmp" && mv "$2.tmp" "$2"; exit "$rc"'
_MARKERS = ("GPUPLAN_AGENT_HOME", "GPUPLAN_JOB_ID", "GPUPLAN_ATTEMPT")
_DROP = (
    "CUDA_VISIBLE_DEVICES",
    "GPUPLAN_FAKE_SET",
    "GPUPLAN_FAKE_MEM_GB",
    "GPUPLAN_FAKE_UTIL_PCT",
    *_MARKERS,
)

OOM_PATTERNS = (
    b"CUDA out of memory",
    b"OutOfMemoryError",
    b"CUDA_ERROR_OUT_OF_MEMORY",
    b"cudaErrorMemoryAllocation",
    b"RESOURCE_EXHAUSTED: Out of memory",
)
"""What a CUDA out-of-memory exit prints (PyTorch, the CUDA driver and runtime APIs, JAX/XLA)."""


@dataclass(frozen=True, slots=True)
class Launched:
    """A started job: the wrapper's pid, which is also the job's process group id."""

    pid: int
    pgid: int


def job_environment(
    base: Mapping[str, str], home: Path, jid: int, attempt: int, gpus: Iterable[int], extra: Mapping[str, str]
) -> dict[str, str]:
    """The job's environment: the submitter's, with CUDA_VISIBLE_DEVICES set to exactly `gpus`
    (never inherited) and the agent's markers."""
    env = {k: v for k, v in base.items() if k not in _DROP}
    env.update(extra)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    env["GPUPLAN_AGENT_HOME"] = str(home)
    env["GPUPLAN_JOB_ID"] = str(jid)
    env["GPUPLAN_ATTEMPT"] = str(attempt)
    return env


def launch(command: str, cwd: str, env: Mapping[str, str], job_dir: Path) -> Launched:
    """Start `command` in its own session; stdout/stderr appended to job_dir/stdout, job_dir/stderr.

    Raises:
        OSError: the working directory or /bin/sh is missing (the job fails at start; never retried).
    """
    job_dir.mkdir(parents=True, exist_ok=True)
    status = job_dir / "status"
    with contextlib.suppress(FileNotFoundError):
        status.unlink()
    with open(job_dir / "stdout", "ab") as out, open(job_dir / "stderr", "ab") as err:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", _WRAPPER, "gpuplan-job", command, str(status)],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            close_fds=True,
        )
    # The agent reaps its children itself (os.waitpid in the loop): forget the Popen object so
    # its destructor does not warn about a child still running.
    proc.returncode = 0
    return Launched(proc.pid, proc.pid)


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the job's process group; False when the group is gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # the pgid was reused by someone else's process: not ours to signal
        return False
    return True


def live_jobs(home: Path, proc_root: Path = Path("/proc")) -> dict[tuple[int, int], set[int]]:
    """Live processes of this agent's jobs: (job id, attempt) -> pids (zombies excluded).

    One pass over /proc reading the environment of this user's processes (as `ps e` shows it).
    """
    want = f"GPUPLAN_AGENT_HOME={home}".encode()
    found: dict[tuple[int, int], set[int]] = {}
    uid = os.getuid()
    for entry in os.scandir(proc_root):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            raw = Path(entry.path, "environ").read_bytes()
        except OSError:
            continue
        if want not in raw:
            continue
        env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
        if env.get(b"GPUPLAN_AGENT_HOME") != str(home).encode():
            continue
        try:
            key = (int(env[b"GPUPLAN_JOB_ID"]), int(env[b"GPUPLAN_ATTEMPT"]))
        except (KeyError, ValueError):
            continue
        found.setdefault(key, set()).add(int(entry.name))
    return found


def is_zombie(pid: int) -> bool:
    """Whether `pid` has exited (a zombie, or gone): /proc/PID/stat's state field."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return True
    return stat.rsplit(") ", 1)[-1][:1] in ("Z", "X")


def read_status_file(job_dir: Path) -> int | None:
    """The exit code the wrapper wrote, or None when it did not (killed, or still running)."""
    try:
        return int((job_dir / "status").read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


def exit_code_from_status(status: int) -> int:
    """A shell-style exit code from an os.waitpid status: the code, or 128 + signal."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def is_oom(job_dir: Path, tail_bytes: int = 65536) -> bool:
    """Whether the job's stderr or stdout ends with a CUDA out-of-memory message."""
    for name in ("stderr", "stdout"):
        path = job_dir / name
        try:
            with open(path, "rb") as f:
                f.seek(max(0, path.stat().st_size - tail_bytes))
                tail = f.read()
        except OSError:
            continue
        if any(p in tail for p in OOM_PATTERNS):
            return True
    return False


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)

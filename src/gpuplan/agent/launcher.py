"""Job processes: launch in their own session, find them again after a restart, kill them as a group.

The only module of the agent that starts job processes. A job runs as

    /bin/sh -c WRAPPER gpuplan-job CMD STATUS_FILE LIMIT_TICKS LIMIT_FRACTION GRACE_S

in a new session (so its process group id is the wrapper's pid), with stdout and stderr appended to
`jobs/ID/stdout` and `jobs/ID/stderr` (mode 0600). The wrapper runs CMD with `/bin/sh -c` and writes
its exit status to STATUS_FILE, so the status survives an agent that was down when the job ended.

The wrapper also enforces the job's time limit itself, so the limit holds while the agent is down: a
watchdog in the job's group counts the limit in ticks of one second (a tick in which the group was
SIGSTOPped by a suspend counts once, so suspended time barely counts, as in the agent), then writes
`jobs/ID/timeout`, sends SIGTERM (and SIGCONT) to the group, waits GRACE_S and sends SIGKILL. The
wrapper itself dies with a SIGTERM to the group, as the job does (then no status file is written:
the `timeout` marker and its time tell what happened). The
agent reads `timeout` when it closes the job (`hit_time_limit`): the job ends `timeout` even when the
agent was down at the time. The agent's own limit (exact, on its clock) stays the first to act while
it runs.

Every job process carries `GPUPLAN_AGENT_HOME`, `GPUPLAN_JOB_ID` and `GPUPLAN_ATTEMPT` in its
environment: that is how a restarted agent recognises its jobs (a reused pid never carries them).

A multi-user agent (root) runs each job as its submitter (`RunAs`): uid, gid and supplementary
groups (as `initgroups` gives them) are set in the child before exec, its job folder and log files
are the submitter's (0700 / 0600), and HOME, USER and LOGNAME are the submitter's.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "OOM_PATTERNS",
    "Launched",
    "RunAs",
    "ended_s",
    "exit_code_from_status",
    "hit_time_limit",
    "is_oom",
    "is_zombie",
    "launch",
    "live_jobs",
    "read_status_file",
    "signal_group",
]

_WATCHDOG = """(
  trap 'kill -KILL "$s" 2>/dev/null; wait "$s"; exit 0' TERM USR1
  tick() { sleep "$1" & s=$!; wait "$s"; }
  tick "$4"
  n=0
  while [ "$n" -lt "$3" ]; do tick 1; n=$((n + 1)); done
  printf 'timeout\\n' > "${2%/*}/timeout"
  trap '' TERM
  kill -TERM 0; kill -CONT 0
  tick "$5"
  kill -KILL 0
) &
w=$!"""
_WRAPPER = (
    f'w=""\nif [ -n "$3" ]; then\n{_WATCHDOG}\nfi\n'
    '/bin/sh -c "$1"; rc=$?\n'
    '[ -n "$w" ] && kill -USR1 "$w" 2>/dev/null && wait "$w"\n'  # reaped: no zombie keeps the group
    'printf "%s\\n" "$rc" > "$2.tmp" && mv "$2.tmp" "$2"; exit "$rc"'
)
"""The job's wrapper. A SIGTERM to the group (cancel, the agent's limit) ends the watchdog too; the
watchdog's own SIGTERM at the limit spares it (`trap '' TERM` first) so that it can send SIGKILL
after the grace period."""
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


@dataclass(frozen=True, slots=True)
class RunAs:
    """Who a job runs as: the submitter's uid, primary gid, supplementary groups, name and home."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    name: str
    home: str

    @classmethod
    def of_uid(cls, uid: int) -> RunAs:
        """The account of `uid` (its groups as `initgroups` would set them).

        Raises:
            KeyError: no account has this uid (the user was deleted since the submit).
        """
        pw = pwd.getpwuid(uid)
        groups = tuple(os.getgrouplist(pw.pw_name, pw.pw_gid))
        return cls(uid, pw.pw_gid, groups, pw.pw_name, pw.pw_dir)

    def environment(self) -> dict[str, str]:
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name}


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


def _limit_args(time_limit_s: float | None, grace_s: float) -> list[str]:
    """LIMIT_TICKS LIMIT_FRACTION GRACE_S for the wrapper ("" ticks: no limit)."""
    if time_limit_s is None:
        return ["", "0", "0"]
    ticks = int(time_limit_s)
    return [str(ticks), f"{time_limit_s - ticks:.3f}", f"{max(grace_s, 0.0):.3f}"]


def _private_append(path: Path, run_as: RunAs | None = None) -> int:
    """An fd appending to `path`, created 0600 (an older file is made 0600 too: it is the agent's,
    or with `run_as` the submitter's, readable by nobody else)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)
    if run_as is not None:
        os.fchown(fd, run_as.uid, run_as.gid)
    return fd


def launch(
    command: str,
    cwd: str,
    env: Mapping[str, str],
    job_dir: Path,
    time_limit_s: float | None = None,
    grace_s: float = 10.0,
    run_as: RunAs | None = None,
) -> Launched:
    """Start `command` in its own session; stdout/stderr appended to job_dir/stdout, job_dir/stderr.
    With `time_limit_s`, the wrapper stops the job at its limit on its own (module docstring).

    `run_as`: the submitter (a multi-user agent): the job's uid, gid and groups are set before exec,
    its folder and logs are made the submitter's, readable by nobody else.

    Raises:
        OSError: the working directory or /bin/sh is missing, or the submitter cannot enter the working
            directory (the job fails at start; never retried).
    """
    job_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    status = job_dir / "status"
    for stale in (status, job_dir / "timeout"):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    if run_as is not None:
        _may_enter(cwd, run_as)
        _own(job_dir, run_as, 0o700)
        env = {**env, **run_as.environment()}
    out, err = _private_append(job_dir / "stdout", run_as), _private_append(job_dir / "stderr", run_as)
    try:
        proc = subprocess.Popen(
            [
                "/bin/sh",
                "-c",
                _WRAPPER,
                "gpuplan-job",
                command,
                str(status),
                *_limit_args(time_limit_s, grace_s),
            ],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            close_fds=True,
            # a multi-user agent: the submitter's uid, gid and groups (initgroups'), set before exec
            user=None if run_as is None else run_as.uid,
            group=None if run_as is None else run_as.gid,
            extra_groups=None if run_as is None else list(run_as.groups),
        )
    finally:
        os.close(out)
        os.close(err)
    # The agent reaps its children itself (os.waitpid in the loop): forget the Popen object so
    # its destructor does not warn about a child still running.
    proc.returncode = 0
    return Launched(proc.pid, proc.pid)


def _may_enter(cwd: str, run_as: RunAs) -> None:
    """Refuse a working directory the submitter may not enter (Popen changes into it as root).

    Raises:
        PermissionError: the submitter cannot `cd` there (the job fails at start, saying so).
    """
    probe = subprocess.run(
        ["/bin/sh", "-c", 'cd -- "$1"', "gpuplan-cwd", cwd], env={"PATH": "/usr/bin:/bin"}, cwd="/",
        stdin=subprocess.DEVNULL, capture_output=True, check=False, close_fds=True,
        user=run_as.uid, group=run_as.gid, extra_groups=list(run_as.groups),
    )  # fmt: skip
    if probe.returncode != 0:
        raise PermissionError(f"{run_as.name} may not enter the working directory {cwd}")


def _own(path: Path, run_as: RunAs, mode: int) -> None:
    os.chown(path, run_as.uid, run_as.gid)
    os.chmod(path, mode)


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the job's process group; False when the group is gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # the pgid was reused by someone else's process: not ours to signal
        return False
    return True


def live_jobs(
    home: Path, proc_root: Path = Path("/proc"), owners: dict[int, int] | None = None
) -> dict[tuple[int, int], set[int]]:
    """Live processes of this agent's jobs: (job id, attempt) -> pids (zombies excluded).

    One pass over /proc reading the environment of this user's processes (as `ps e` shows it).
    `owners` (a multi-user agent: job id -> its submitter's uid): processes of every user count, each
    only for a job of its own uid, so nobody passes a process of theirs off as another user's job.
    """
    want = f"GPUPLAN_AGENT_HOME={home}".encode()
    found: dict[tuple[int, int], set[int]] = {}
    uid = os.getuid()
    for entry in os.scandir(proc_root):
        if not entry.name.isdigit():
            continue
        try:
            owner = entry.stat().st_uid
            if owners is None and owner != uid:
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
        if owners is not None and owners.get(key[0]) != owner:
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


def hit_time_limit(job_dir: Path) -> bool:
    """Whether the job's wrapper stopped it at its time limit (it wrote `timeout` before signalling)."""
    return (job_dir / "timeout").exists()


def ended_s(job_dir: Path) -> float | None:
    """When the job ended, as far as its files tell (its status file's time, else its `timeout`
    marker's): what a restarted agent records for a job that ended while it was down."""
    for name in ("status", "timeout"):
        with contextlib.suppress(OSError):
            return (job_dir / name).stat().st_mtime
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

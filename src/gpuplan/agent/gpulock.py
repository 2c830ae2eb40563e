"""One agent per node's GPUs: a lock in a well-known place that every agent, of any user, takes.

The lock file is `$GPUPLAN_LOCK_DIR/gpus.lock` (default `/run/gpuplan`, tests point the variable at a
temporary folder); a named fake device set (`fake:...,set=NAME`, GPUs that several agents could drive)
locks `gpus-fake-NAME.lock`. A fake set without a name is private to its home: nobody else can drive
it, so it takes no lock. The holder writes its pid, uid, user and home into the file (mode 0666, so
an agent of any user can), so the agent that is refused names the live holder. The folder is made
world-writable and sticky (as /tmp) when gpuplan creates it, so every user's agent can take the lock
while no agent of root runs; `flock` releases it when the holder dies, even on kill -9.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import pwd
import re
from dataclasses import dataclass
from pathlib import Path

from gpuplan.errors import GpuplanError

__all__ = ["DEFAULT_LOCK_DIR", "GpuLock", "GpuLockError", "lock_path"]

DEFAULT_LOCK_DIR = Path("/run/gpuplan")
log = logging.getLogger("gpuplan.agent")


class GpuLockError(GpuplanError):
    """Another agent already drives these GPUs (the message names it)."""


def lock_dir(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    return Path(env["GPUPLAN_LOCK_DIR"]) if env.get("GPUPLAN_LOCK_DIR") else DEFAULT_LOCK_DIR


def lock_path(gpus_spec: str, env: dict[str, str] | None = None) -> Path | None:
    """The lock file of the GPUs `gpus_spec` drives, or None (a private fake set: no lock needed)."""
    if gpus_spec == "nvml":
        return lock_dir(env) / "gpus.lock"
    m = re.search(r"(?:^|,)set=([^,]+)", gpus_spec)
    if gpus_spec.startswith("fake:") and m:
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", m.group(1))
        return lock_dir(env) / f"gpus-fake-{name}.lock"
    return None


@dataclass
class GpuLock:
    """A held lock (release it with `close`; the kernel releases it when the process dies)."""

    path: Path
    fd: int

    @classmethod
    def acquire(cls, path: Path, home: Path) -> GpuLock | None:
        """Take the lock at `path` for the agent of `home`.

        Returns None when the lock's folder cannot be made (a user's agent with no /run/gpuplan):
        the agent then runs unlocked, with a warning.

        Raises:
            GpuLockError: another live agent holds it (the message names its pid, user and home).
        """
        try:
            _ensure_dir(path.parent)
            fd = _open(path)
        except OSError as e:
            log.warning("cannot take the GPU lock %s (%s): another agent may drive these GPUs", path, e)
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise GpuLockError(
                f"another gpuplan agent already drives these GPUs: {holder} (lock {path}); stop it first "
                "(`gpuplan agent stop` as its user), or use its queue: one agent per node's GPUs"
            ) from None
        _write_holder(fd, home)
        return cls(path, fd)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _ensure_dir(path: Path) -> None:
    if path.is_dir():
        return
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o1777)  # every user's agent may create the lock; the sticky bit keeps files their owner's


def _open(path: Path) -> int:
    """The lock file, readable and writable by every user: whichever agent holds it writes its own
    details there, so the one refused names the live holder (not the last one that could write it)."""
    try:
        fd = os.open(path, os.O_RDWR)  # no O_CREAT: fs.protected_regular refuses it on another user's file
    except FileNotFoundError:
        old = os.umask(0)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except PermissionError:
            return os.open(path, os.O_RDONLY)
        finally:
            os.umask(old)
    except PermissionError:  # a 0644 file of another user (an older gpuplan's): lock it all the same
        return os.open(path, os.O_RDONLY)
    with contextlib.suppress(OSError):
        if os.fstat(fd).st_uid == os.getuid():
            os.fchmod(fd, 0o666)  # heals a file an older gpuplan made 0644
    return fd


def _read_holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 4096) or b"{}")
        return f"pid {info['pid']} of user {info['user']} (uid {info['uid']}), home {info['home']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "an agent whose details are unreadable"


def _write_holder(fd: int, home: Path) -> None:
    uid = os.getuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    text = json.dumps({"pid": os.getpid(), "uid": uid, "user": user, "home": str(home)}).encode()
    try:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, text + b"\n")
    except OSError:  # opened read-only (another user's file): the lock holds, the details are stale
        log.warning("GPU lock taken, but its file is another user's: its holder details are stale")

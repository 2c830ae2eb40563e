"""One agent per node's GPUs: locks in well-known places that every agent, of any user, takes.

Two lock files name the same GPUs, and an agent takes both:

- `$GPUPLAN_LOCK_DIR/gpus.lock` (default `/run/gpuplan`, made 1777 by systemd's RuntimeDirectory or
  by the first agent of root), which a user's agent can only use when the folder exists;
- `$GPUPLAN_LOCK_FALLBACK_DIR/gpuplan-gpus.lock` (default `/tmp`), which every agent can always
  create: so a user's agent started before /run/gpuplan exists still holds a lock that root's agent,
  started later, checks and is refused by.

A named fake device set (`fake:...,set=NAME`, GPUs that several agents could drive) locks
`gpus-fake-NAME.lock` (and `gpuplan-gpus-fake-NAME.lock`). A fake set without a name is private to its
home: nobody else can drive it, so it takes no lock. The holder writes its pid, uid, user and home into
each file (mode 0666, so an agent of any user can), so the agent that is refused names the live
holder; `flock` releases a lock when its holder dies, even on kill -9. The fallback file lies in a
folder every user may write, so it is opened without following a symlink and used only when it is a
regular file with one link, mode 0666 (or the caller's own, then made so): anything else stops the
agent with a message naming the file and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import pwd
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuplan.errors import GpuplanError

__all__ = [
    "DEFAULT_FALLBACK_LOCK_DIR",
    "DEFAULT_LOCK_DIR",
    "GpuLock",
    "GpuLockError",
    "fallback_lock_path",
    "lock_path",
]

DEFAULT_LOCK_DIR = Path("/run/gpuplan")
DEFAULT_FALLBACK_LOCK_DIR = Path("/tmp")
log = logging.getLogger("gpuplan.agent")

_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC


class GpuLockError(GpuplanError):
    """Another agent already drives these GPUs (the message names it), or a lock file is unusable."""


def lock_dir(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    return Path(env["GPUPLAN_LOCK_DIR"]) if env.get("GPUPLAN_LOCK_DIR") else DEFAULT_LOCK_DIR


def _lock_name(gpus_spec: str) -> str | None:
    if gpus_spec == "nvml":
        return "gpus.lock"
    m = re.search(r"(?:^|,)set=([^,]+)", gpus_spec)
    if gpus_spec.startswith("fake:") and m:
        return "gpus-fake-" + re.sub(r"[^A-Za-z0-9_.-]", "_", m.group(1)) + ".lock"
    return None


def lock_path(gpus_spec: str, env: dict[str, str] | None = None) -> Path | None:
    """The lock file of the GPUs `gpus_spec` drives, or None (a private fake set: no lock needed)."""
    name = _lock_name(gpus_spec)
    return None if name is None else lock_dir(env) / name


def fallback_lock_path(gpus_spec: str, env: dict[str, str] | None = None) -> Path | None:
    """The lock file every agent can create (`$GPUPLAN_LOCK_FALLBACK_DIR`, default /tmp), or None."""
    env = dict(os.environ) if env is None else env
    where = env.get("GPUPLAN_LOCK_FALLBACK_DIR")
    name = _lock_name(gpus_spec)
    return None if name is None else (Path(where) if where else DEFAULT_FALLBACK_LOCK_DIR) / f"gpuplan-{name}"


@dataclass
class GpuLock:
    """Held locks (release them with `close`; the kernel releases them when the process dies)."""

    path: Path
    fd: int
    more: list[tuple[Path, int]] = field(default_factory=list)

    @classmethod
    def acquire(cls, path: Path, home: Path, fallback: Path | None = None) -> GpuLock | None:
        """Take the lock at `path` (and at `fallback`, when given) for the agent of `home`.

        When the folder of `path` cannot be made (a user's agent with no /run/gpuplan), the agent
        holds `fallback` alone; with no fallback it returns None: the agent runs unlocked, with a warning.

        Raises:
            GpuLockError: another live agent holds one of them (the message names its pid, user and
                home), or the fallback file is not one every agent can use (the message says how to fix it).
        """
        held: list[tuple[Path, int]] = []
        try:
            if fallback is not None:
                held.append((fallback, _take(fallback, _open_fallback)))
            try:
                _ensure_dir(path.parent)
                held.append((path, _take(path, _open)))
            except OSError as e:
                if not held:
                    log.warning(
                        "cannot take the GPU lock %s (%s): another agent may drive these GPUs", path, e
                    )
                    return None
                log.info("no GPU lock in %s (%s): the lock %s stands for it", path.parent, e, fallback)
        except BaseException:
            for _, fd in held:
                os.close(fd)
            raise
        for _, fd in held:
            _write_holder(fd, home)
        (first, fd), *more = held
        return cls(first, fd, more)

    def close(self) -> None:
        for fd in (self.fd, *(fd for _, fd in self.more)):
            with contextlib.suppress(OSError):
                os.close(fd)


def _take(path: Path, opener: Callable[[Path], int]) -> int:
    """flock the file `opener(path)` opens, checking that it is still the file at `path` (one that
    was removed and made again while we opened it would be a lock nobody else checks)."""
    for _ in range(3):
        fd = opener(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise GpuLockError(
                f"another gpuplan agent already drives these GPUs: {holder} (lock {path}); stop it first "
                "(`gpuplan agent stop` as its user), or use its queue: one agent per node's GPUs"
            ) from None
        try:
            now = os.stat(path, follow_symlinks=False)
        except OSError:
            now = None
        st = os.fstat(fd)
        if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
            return fd
        os.close(fd)
    raise GpuLockError(
        f"the GPU lock file {path} keeps being replaced while it is taken; remove it and retry"
    )


def _ensure_dir(path: Path) -> None:
    if path.is_dir():
        return
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o1777)  # every user's agent may create the lock; the sticky bit keeps files their owner's


def _create(path: Path) -> int:
    """Open `path`, making it 0666 when missing. An existing file is opened without O_CREAT:
    fs.protected_regular refuses O_CREAT on another user's file in a sticky folder."""
    try:
        return os.open(path, _FLAGS)
    except FileNotFoundError:
        old = os.umask(0)
        try:
            return os.open(path, _FLAGS | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:  # another agent made it meanwhile
            return os.open(path, _FLAGS)
        finally:
            os.umask(old)


def _check_regular(path: Path, fd: int) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"a file with {st.st_nlink} links"
        raise _unusable(path, what)
    return st


def _open(path: Path) -> int:
    """The lock file, readable and writable by every user: whichever agent holds it writes its own
    details there, so the one refused names the live holder (not the last one that could write it)."""
    try:
        fd = _create(path)
    except PermissionError:  # a 0644 file of another user (an older gpuplan's): lock it all the same
        fd = os.open(path, (_FLAGS & ~os.O_RDWR) | os.O_RDONLY)
    except OSError as e:
        if e.errno == errno.ELOOP:  # ELOOP: a symlink
            raise _unusable(path, "a symbolic link") from None
        raise
    st = _check_regular(path, fd)
    with contextlib.suppress(OSError):
        if st.st_uid == os.getuid():
            os.fchmod(fd, 0o666)  # heals a file an older gpuplan made 0644
    return fd


def _open_fallback(path: Path) -> int:
    """The fallback lock file in a folder every user may write: a regular file, one link, 0666."""
    try:
        fd = _create(path)
    except FileNotFoundError:
        raise GpuLockError(
            f"the GPU lock folder {path.parent} does not exist: make it (mode 1777, as /tmp) or unset "
            "GPUPLAN_LOCK_FALLBACK_DIR (every agent of these GPUs must use the same folder)"
        ) from None
    except OSError as e:
        why = "a symbolic link" if e.errno == errno.ELOOP else (e.strerror or type(e).__name__)
        raise _unusable(path, why) from None
    st = _check_regular(path, fd)
    if st.st_uid == os.getuid():
        os.fchmod(fd, 0o666)  # ours: whatever the umask made of it, every agent must write its details
    elif stat.S_IMODE(st.st_mode) != 0o666:
        os.close(fd)
        raise _unusable(path, f"uid {st.st_uid}'s, mode {stat.S_IMODE(st.st_mode):04o}, not 0666")
    return fd


def _unusable(path: Path, why: str) -> GpuLockError:
    return GpuLockError(
        f"the GPU lock file {path} cannot be used ({why}): every gpuplan agent of these GPUs takes it; "
        f"when no gpuplan agent runs, remove it (`sudo rm {path}`) and start again (gpuplan makes it, mode 0666)"
    )


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

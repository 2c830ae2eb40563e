"""Throw-away Unix users and a client they can run, for the multi-user agent's tests (run as root).

The default python3 of these machines lives inside /root, which other users cannot enter, so the
users run Debian's own /usr/bin/python3 (the same 3.11) with PYTHONPATH pointing at a world-readable
copy of src/ and of the client's pure-Python dependencies (typer, click, rich, ...). Every user and
group made here is removed (`userdel -r`, `groupdel`) by the fixture's finalizer, even on failure;
a run killed before its finalizer (SIGKILL) leaves them, so each new world first removes the users
whose creating test process is gone (`sweep_stale_users`: the creator's pid and start time are in the
user's comment field), and never another live run's.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuplan.compiled import LIBRARY

SRC = Path(__file__).resolve().parents[1] / "src"
SYSTEM_PYTHON = Path("/usr/bin/python3")


def skip_reason() -> str | None:
    """Why the multi-user tests cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "the multi-user agent's tests create Unix users: they run as root only"
    for tool in ("useradd", "userdel", "groupadd", "groupdel"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not SYSTEM_PYTHON.exists():
        return (
            f"{SYSTEM_PYTHON} is missing (apt-get install -y python3): other users need a python they can run"
        )
    if sys.version_info[:2] != (3, 11):
        return f"the client copy needs the test python to be 3.11 like {SYSTEM_PYTHON}"
    return None


def require_users() -> None:
    """Skip with the reason (CI=true: fail) when throw-away users cannot be made."""
    why = skip_reason()
    if why is None:
        return
    if os.environ.get("CI") == "true" and os.geteuid() == 0:
        pytest.fail(why)
    pytest.skip(why)


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: Path  # their own folder (0700), the jobs' working directory


@dataclass
class World:
    """The test's users, a world-readable folder and the client environment."""

    root: Path  # world-traversable temp folder (0755)
    pythonpath: str
    users: list[User]
    group: str  # a supplementary group of users[0]
    group_gid: int

    def run(
        self,
        user: User | None,
        *args: str,
        home: Path,
        timeout_s: float = 60.0,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """`gpuplan ARGS` as `user` (None: root) against the agent of `home`, with `env` added."""
        env = {"PATH": "/usr/bin:/bin", "GPUPLAN_HOME": str(home), "PYTHONPATH": self.pythonpath,
               "HOME": str(user.home if user else self.root), "LANG": "C.UTF-8", "COLUMNS": "200", **(env or {})}  # fmt: skip
        ids: dict[str, object] = {}
        if user is not None:
            ids = {"user": user.uid, "group": user.gid, "extra_groups": os.getgrouplist(user.name, user.gid)}
        return subprocess.run(
            [str(SYSTEM_PYTHON), "-m", "gpuplan.cli", *args], env=env, cwd=str(user.home if user else self.root),
            capture_output=True, text=True, timeout=timeout_s, check=False, **ids,  # type: ignore[arg-type]
        )  # fmt: skip

    def raw(self, user: User, home: Path, request: dict[str, object]) -> dict[str, object]:
        """One protocol request as `user` (what a client could send by hand), the reply or the error."""
        code = (
            "import json, sys\nfrom pathlib import Path\nfrom gpuplan.agent.protocol import call, AgentError\n"
            f"try:\n    print(json.dumps(call(Path({str(home / 'agent.sock')!r}), {request!r})))\n"
            "except AgentError as e:\n    print(json.dumps({'ok': False, 'error': str(e)}))\n"
        )
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": self.pythonpath}
        out = subprocess.run([str(SYSTEM_PYTHON), "-c", code], env=env, cwd=str(user.home), capture_output=True,
                             text=True, timeout=60, check=True, user=user.uid, group=user.gid)  # fmt: skip
        return dict(json.loads(out.stdout))


_CLIENT_RUNS = (
    ["submit", "--", "true"],
    ["queue", "--json"],
    ["queue"],
    ["cancel", "1"],
    ["hold", "1"],
    ["logs", "1"],
    ["show", "1"],
    ["agent", "status"],
    ["agent", "start", "--multi-user"],
)


def _client_modules() -> list[str]:
    """Top-level modules the client's commands import (each run with no agent to talk to)."""
    code = (
        "import atexit, json, os, runpy, sys\n"
        "atexit.register(lambda: open(os.environ['MODS_OUT'], 'a').write(json.dumps(sorted({m.split('.')[0] for m in sys.modules})) + '\\n'))\n"
        "sys.argv = ['gpuplan', *json.loads(os.environ['ARGS'])]\n"
        "runpy.run_module('gpuplan.cli', run_name='__main__')\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "mods"
        for args in _CLIENT_RUNS:
            env = {**os.environ, "PYTHONPATH": str(SRC), "MODS_OUT": str(out), "ARGS": json.dumps(args),
                   "GPUPLAN_HOME": str(Path(tmp) / "none")}  # fmt: skip
            subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
        return sorted({m for line in out.read_text().splitlines() for m in json.loads(line)})


def _copy_client(dest: Path) -> str:
    """A world-readable copy of gpuplan's source and the client's third-party packages."""
    shutil.copytree(SRC / "gpuplan", dest / "gpuplan", ignore=shutil.ignore_patterns("__pycache__"))
    for library in SRC.glob(f"{LIBRARY}*"):  # the compiled core's shared library (gpuplan/compiled.py)
        shutil.copy2(library, dest / library.name)
    import importlib.util

    stdlib = set(sys.stdlib_module_names)
    for name in _client_modules():
        if name in stdlib or name in ("gpuplan", "__main__"):
            continue
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin in (None, "built-in", "frozen"):
            continue
        origin = Path(spec.origin)
        if "site-packages" not in origin.parts or name.startswith("_"):
            continue  # the interpreter's own modules: /usr/bin/python3 has its own
        if origin.name == "__init__.py":
            shutil.copytree(origin.parent, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
            libs = origin.parent.parent / f"{name}.libs"  # a wheel's bundled shared libraries (numpy.libs)
            if libs.is_dir():
                shutil.copytree(libs, dest / libs.name)
        elif origin.suffix == ".py":
            shutil.copy2(origin, dest / origin.name)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return str(dest)


def _kill_processes_of(name: str) -> None:
    """SIGKILL, pid by pid, the leftovers of a throw-away user made by this test (nobody else's)."""
    import signal

    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    os.kill(int(entry.name), signal.SIGKILL)


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


_TAG = re.compile(r"^(gpt[0-9a-f]{6})-[0-9]+$")
_OWNER = re.compile(r"^gpuplan-test pid=([0-9]+) start=([0-9]+)$")


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def owner_comment() -> str:
    """The comment field a throw-away user gets: who made it (this test process, pid and start)."""
    pid = os.getpid()
    return f"gpuplan-test pid={pid} start={_start_ticks(pid)}"


def stale_users(entries: list[pwd.struct_passwd] | None = None) -> list[str]:
    """Throw-away users whose creating test process no longer runs (the same pid with another start
    time is another process). Users without the comment this module writes are not ours: left alone."""
    out = []
    for pw in pwd.getpwall() if entries is None else entries:
        owner = _OWNER.match(pw.pw_gecos)
        if _TAG.match(pw.pw_name) is None or owner is None:
            continue
        if _start_ticks(int(owner.group(1))) != int(owner.group(2)):
            out.append(pw.pw_name)
    return out


def sweep_stale_users() -> list[str]:
    """Remove what a killed run left: its users (processes, home), their group and folder. Returns
    the users removed."""
    gone = stale_users()
    for name in gone:
        home = Path(pwd.getpwnam(name).pw_dir)
        _kill_processes_of(name)
        subprocess.run(["userdel", "-r", name], capture_output=True, check=False)
        if home.parent.name.startswith(f"{name.rsplit('-', 1)[0]}-") and home.parent.parent == Path("/tmp"):
            shutil.rmtree(home.parent, ignore_errors=True)
    for tag in {name.rsplit("-", 1)[0] for name in gone}:
        if not any(pw.pw_name.startswith(f"{tag}-") for pw in pwd.getpwall()):
            subprocess.run(["groupdel", f"{tag}g"], capture_output=True, check=False)  # absent: no-op
    return gone


@contextlib.contextmanager
def throwaway_world(n_users: int = 2) -> Iterator[World]:
    """`n_users` fresh users (gpt-XXXX-N) with a home each, one supplementary group, a client copy
    (after removing the users that killed runs left: `sweep_stale_users`)."""
    sweep_stale_users()
    tag = f"gpt{secrets.token_hex(3)}"
    root = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir="/tmp"))
    root.chmod(0o755)
    made_users: list[str] = []
    group = f"{tag}g"
    made_group = False
    try:
        _sh("groupadd", group)
        made_group = True
        users = []
        for i in range(1, n_users + 1):
            name = f"{tag}-{i}"
            home = root / name
            extra = ["-G", group] if i == 1 else []
            _sh("useradd", "-m", "-d", str(home), "-s", "/bin/sh", "-c", owner_comment(), *extra, name)
            made_users.append(name)
            pw = pwd.getpwnam(name)
            home.chmod(0o700)
            users.append(User(name, pw.pw_uid, pw.pw_gid, home))
        import grp

        pythonpath = _copy_client(root / "client")
        yield World(root, pythonpath, users, group, grp.getgrnam(group).gr_gid)
    finally:
        for name in made_users:
            _kill_processes_of(name)
            subprocess.run(["userdel", "-r", name], capture_output=True, check=False)
        if made_group:
            subprocess.run(["groupdel", group], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)

"""Where an agent keeps its state: one directory, `$GPUPLAN_HOME` (default `~/.local/state/gpuplan`).

Two agents with different homes share nothing: database, socket, token, logs and history all live
under their own home.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from gpuplan.errors import GpuplanError

__all__ = [
    "SYSTEM_HOME",
    "SYSTEM_RUN_DIR",
    "AgentPaths",
    "HomeError",
    "agent_home",
    "client_paths",
    "ensure_token",
    "read_token",
]

SYSTEM_HOME = Path("/var/lib/gpuplan")
"""The state of the multi-user (root) agent, `gpuplan agent start --multi-user` without GPUPLAN_HOME."""
SYSTEM_RUN_DIR = Path("/run/gpuplan")
"""Where the multi-user agent's socket lives (without GPUPLAN_HOME), reachable by every local user."""


def agent_home(env: dict[str, str] | None = None) -> Path:
    """`$GPUPLAN_HOME`, else `$XDG_STATE_HOME/gpuplan`, else `~/.local/state/gpuplan` (absolute)."""
    env = dict(os.environ) if env is None else env
    if env.get("GPUPLAN_HOME"):
        return Path(env["GPUPLAN_HOME"]).expanduser().resolve()
    state = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return (Path(state).expanduser() / "gpuplan").resolve()


@dataclass(frozen=True, slots=True)
class AgentPaths:
    """The files of one agent home.

    Attributes:
        home: the directory (created mode 0700; an existing one must be private already).
        db: the SQLite store (WAL): jobs, GPU samples, per-job samples, the audit log.
        socket: the Unix socket the client talks to (mode 0600).
        token: a random secret (mode 0600) that the web dashboard's mutating endpoints require.
        pidfile: the running agent's pid.
        log: the agent's own log.
        history: finished jobs as a gpuplan JSONL trace (`gpuplan audit`, `gpuplan predict fit`).
        node_toml: this node as a cluster TOML file (`gpuplan audit history.jsonl --cluster node.toml`).
        jobs_dir: per-job stdout, stderr and exit-status files, `jobs/ID/`.
    """

    home: Path
    run_dir: Path | None = None  # the socket's folder when not the home (the system agent's /run/gpuplan)

    @classmethod
    def from_env(cls, home: Path | str | None = None) -> AgentPaths:
        return cls(Path(home).resolve() if home is not None else agent_home())

    @classmethod
    def system(cls, env: dict[str, str] | None = None) -> AgentPaths:
        """The multi-user agent's paths: with GPUPLAN_HOME set, state and socket there; else
        /var/lib/gpuplan and /run/gpuplan/agent.sock."""
        env = dict(os.environ) if env is None else env
        if env.get("GPUPLAN_HOME"):
            return cls(agent_home(env))
        return cls(SYSTEM_HOME, SYSTEM_RUN_DIR)

    @property
    def db(self) -> Path:
        return self.home / "agent.db"

    @property
    def socket(self) -> Path:
        return (self.run_dir or self.home) / "agent.sock"

    @property
    def token(self) -> Path:
        return self.home / "token"

    @property
    def pidfile(self) -> Path:
        return self.home / "agent.pid"

    @property
    def log(self) -> Path:
        return self.home / "agent.log"

    @property
    def history(self) -> Path:
        return self.home / "history.jsonl"

    @property
    def node_toml(self) -> Path:
        return self.home / "node.toml"

    @property
    def jobs_dir(self) -> Path:
        return self.home / "jobs"

    def job_dir(self, jid: int) -> Path:
        return self.jobs_dir / str(jid)

    def create(self, shared: bool = False) -> None:
        """Make the home (0700) and its jobs directory (0700); write the token if absent.

        `shared` (a multi-user agent): a home gpuplan creates is 0711 and so is jobs/, so every user
        reaches the socket and their own job folders (0700, theirs) but lists nothing; an existing
        home must let others pass (o+x). The socket's folder (run_dir) is made 1777, as /tmp.

        A home that exists already keeps its mode: gpuplan never changes the mode of a directory it
        did not create. It must be the caller's own and writable by no one else.

        Raises:
            HomeError: the home (or jobs/) is another user's, or group/world-writable (a shared
                scratch directory such as /tmp, mode 1777): the message says how to fix it.
        """
        mode = 0o711 if shared else 0o700
        _private_dir(self.home, "GPUPLAN_HOME", parents=True, mode=mode)
        _private_dir(self.jobs_dir, "GPUPLAN_HOME/jobs", mode=mode)
        if shared:
            for path in (self.home, self.jobs_dir):
                if not path.stat().st_mode & 0o001:
                    raise HomeError(
                        f"{path} keeps other users out (mode {stat.S_IMODE(path.stat().st_mode):04o}): a shared "
                        f"agent's users must reach its socket and their job folders; chmod o+x {path}"
                    )
            if self.run_dir is not None and not self.run_dir.is_dir():
                self.run_dir.mkdir(parents=True)
                os.chmod(
                    self.run_dir, 0o1777
                )  # the socket (root's, 0666) and the GPU lock (agent/gpulock.py)
        ensure_token(self)


class HomeError(GpuplanError):
    """An agent home that is not private to its user."""


def _private_dir(path: Path, what: str, parents: bool = False, mode: int = 0o700) -> None:
    """Create `path` (0700, or `mode`), or check an existing one (its mode is never changed)."""
    try:
        path.mkdir(mode=mode, parents=parents)
        os.chmod(path, mode)  # mkdir's mode passes through the umask
        return
    except FileExistsError:
        pass
    st = path.stat()
    if not stat.S_ISDIR(st.st_mode):
        raise HomeError(f"{what}={path} is not a directory; point GPUPLAN_HOME at a directory of your own")
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != os.getuid():
        raise HomeError(
            f"{what}={path} belongs to uid {st.st_uid}, not you (uid {os.getuid()}); use a directory of "
            f"your own, e.g. GPUPLAN_HOME={path}/gpuplan-{_user()} created by gpuplan, or unset GPUPLAN_HOME"
        )
    if mode & 0o022:
        raise HomeError(
            f"{what}={path} is writable by others (mode {mode:04o}): anyone could replace the agent's "
            f"socket or store there. Use a private subdirectory, e.g. GPUPLAN_HOME={path}/gpuplan-{_user()} "
            "(gpuplan creates it 0700)"
            + ("" if mode & stat.S_ISVTX else f", or make it private: chmod go-w {path}")
        )


def _user() -> str:
    return os.environ.get("USER") or str(os.getuid())


def client_paths(env: dict[str, str] | None = None, system: AgentPaths | None = None) -> AgentPaths:
    """The agent a client talks to: GPUPLAN_HOME's; else the user's own agent when it answers, else
    the system agent when its socket exists (`system`, default /run/gpuplan/agent.sock), else the
    user's own home (whose "not running" error says how to start one)."""
    env = dict(os.environ) if env is None else env
    own = AgentPaths(agent_home(env))
    if env.get("GPUPLAN_HOME"):
        return own
    system = system or AgentPaths(SYSTEM_HOME, SYSTEM_RUN_DIR)
    if _exists(system.socket) and not _listens(own.socket):
        return system
    return own


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:
        return False


def _listens(path: Path) -> bool:
    """Whether something accepts connections on the Unix socket `path` (a stale file does not)."""
    import socket

    if not _exists(path):
        return False
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(str(path))
    except OSError:
        return False
    finally:
        s.close()
    return True


def ensure_token(paths: AgentPaths) -> str:
    """The home's token, created (32 random bytes, hex, mode 0600) when absent."""
    try:
        return read_token(paths)
    except FileNotFoundError:
        pass
    token = secrets.token_hex(32)
    try:
        fd = os.open(paths.token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process wrote it between our read and our create
        return read_token(paths)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def read_token(paths: AgentPaths) -> str:
    """The token text. Raises FileNotFoundError when the agent never ran with this home."""
    return paths.token.read_text(encoding="ascii").strip()

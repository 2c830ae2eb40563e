"""Where an agent keeps its state: one directory, `$GPUPLAN_HOME` (default `~/.local/state/gpuplan`).

Two agents with different homes share nothing: database, socket, token, logs and history all live
under their own home.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AgentPaths", "agent_home", "ensure_token", "read_token"]


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
        home: the directory (mode 0700).
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

    @classmethod
    def from_env(cls, home: Path | str | None = None) -> AgentPaths:
        return cls(Path(home).resolve() if home is not None else agent_home())

    @property
    def db(self) -> Path:
        return self.home / "agent.db"

    @property
    def socket(self) -> Path:
        return self.home / "agent.sock"

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

    def create(self) -> None:
        """Make the home (0700) and its jobs directory; write the token if absent."""
        self.home.mkdir(parents=True, exist_ok=True)
        os.chmod(self.home, 0o700)
        self.jobs_dir.mkdir(exist_ok=True)
        ensure_token(self)


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

"""The client/agent protocol: one JSON request and one JSON reply per connection on a Unix socket.

Request: `{"op": "submit", ...}` + newline. Reply: `{"ok": true, ...}` or `{"ok": false, "error": "..."}`
+ newline. The socket file has mode 0600 in `$GPUPLAN_HOME`; the agent reads the caller's uid with
SO_PEERCRED and logs it with every mutating call. There is no network listener.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError

__all__ = [
    "AgentError",
    "AgentNotRunningError",
    "bind_socket",
    "call",
    "peer_uid",
    "read_request",
    "send_reply",
]

_MAX_REQUEST = 16 * 1024 * 1024


class AgentError(GpuplanError):
    """The agent refused a request (its message says why) or answered garbage."""


class AgentNotRunningError(AgentError):
    """No agent listens on this home's socket."""


def bind_socket(path: Path) -> socket.socket:
    """A listening Unix socket at `path`, mode 0600 from the start (umask), replacing a stale file."""
    if path.exists() or path.is_symlink():
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(64)
    sock.setblocking(False)
    return sock


def peer_uid(conn: socket.socket) -> int:
    """The connecting process's uid (SO_PEERCRED: pid, uid, gid)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def _read_line(conn: socket.socket) -> bytes:
    chunks = []
    size = 0
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if chunk.endswith(b"\n") or size > _MAX_REQUEST:
            break
    return b"".join(chunks)


def read_request(conn: socket.socket) -> dict[str, Any]:
    """One request object. Raises AgentError for anything but a JSON object."""
    raw = _read_line(conn)
    try:
        obj = json.loads(raw)
    except ValueError as e:
        raise AgentError(f"bad request: not JSON ({e})") from e
    if not isinstance(obj, dict) or not isinstance(obj.get("op"), str):
        raise AgentError('bad request: expected a JSON object with "op"')
    return obj


def send_reply(conn: socket.socket, reply: dict[str, Any]) -> None:
    conn.sendall(json.dumps(reply, allow_nan=False, default=str).encode() + b"\n")


def call(sock_path: Path, request: dict[str, Any], timeout_s: float = 30.0) -> dict[str, Any]:
    """Send one request to the agent and return its reply (`ok` true).

    Raises:
        AgentNotRunningError: nothing listens on `sock_path` (start it with `gpuplan agent start`).
        AgentError: the agent refused the request; the message is the agent's.
    """
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout_s)
    try:
        try:
            conn.connect(str(sock_path))
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise AgentNotRunningError(
                f"no agent is running for GPUPLAN_HOME={sock_path.parent} (no one listens on {sock_path}); "
                "start one with `gpuplan agent start`"
            ) from e
        conn.sendall(json.dumps(request).encode() + b"\n")
        conn.shutdown(socket.SHUT_WR)
        raw = _read_line(conn)
    except TimeoutError as e:
        raise AgentError(f"the agent did not answer within {timeout_s:g} s ({sock_path})") from e
    finally:
        conn.close()
    try:
        reply = json.loads(raw)
    except ValueError as e:
        raise AgentError(f"the agent answered garbage: {raw[:200]!r}") from e
    if not reply.get("ok"):
        raise AgentError(str(reply.get("error", "the agent refused the request")))
    return dict(reply)

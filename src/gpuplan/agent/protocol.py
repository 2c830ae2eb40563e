"""The client/agent protocol: newline-delimited JSON on a Unix socket, one reply line per request line.

Request: `{"op": "submit", ...}` + newline. Reply: `{"ok": true, ...}` or `{"ok": false, "error": "..."}`
+ newline. A client may send several requests on one connection; the agent answers them in order and
closes after the client's end of file. Every field is checked by `gpuplan.agent.schema` before a
handler sees it. The socket file has mode 0600 in `$GPUPLAN_HOME`; the agent reads the caller's
uid, gid and pid with SO_PEERCRED (`Caller`) and logs it with every mutating call and every refused
request. There is no network listener. A client talks to a socket in a folder every user may write
(the shared agent's /run/gpuplan) only when root or the caller runs the agent behind it.

Client errors are `AgentError`s with one line each: `AgentNotRunningError` (no socket, nobody
listens, a stale socket file), `AgentConnectionLost` (reset, closed or timed out before the reply:
the request may or may not have been carried out), and `AgentError` itself for a refusal, a
permission problem or garbage. Every object of a reply is a `Reply`: a dict whose missing key (a
broken agent's, or another program's on the socket) is an `AgentError` naming the key, not a KeyError.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError

__all__ = [
    "MAX_REQUEST_BYTES",
    "AgentConnection",
    "AgentConnectionLost",
    "AgentError",
    "AgentNotRunningError",
    "Caller",
    "Reply",
    "bind_socket",
    "call",
    "check_agent_peer",
    "decode_request",
    "encode",
    "peer_caller",
]

MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""The longest request line the agent reads (a longer one is refused and the connection closed)."""


class AgentError(GpuplanError):
    """The agent refused a request (its message says why) or answered garbage."""


class AgentNotRunningError(AgentError):
    """No agent listens on this home's socket."""


class AgentConnectionLost(AgentError):
    """The connection ended before the agent's reply: the request may have been carried out."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: the peer's uid, gid and pid from SO_PEERCRED (-1 where unknown)."""

    uid: int
    gid: int = -1
    pid: int = -1

    def __str__(self) -> str:
        return f"uid {self.uid} pid {self.pid}"


class Reply(dict[str, Any]):
    """One JSON object of an agent's reply: `reply[key]` for a key it lacks raises AgentError (one
    line naming the key and the socket), so a client never shows a traceback for a broken reply."""

    source: Path | None = None

    def __missing__(self, key: str) -> Any:
        where = f"the agent at {self.source}" if self.source is not None else "the agent"
        raise AgentError(
            f"{where} sent a reply without {key!r}: it is not a gpuplan agent of this version (a broken "
            "agent, or another program on its socket); restart it (`gpuplan agent stop`, then "
            "`gpuplan agent start`) or set GPUPLAN_HOME to your agent's directory"
        )


@functools.lru_cache(maxsize=16)
def _reply_type(source: Path) -> type[Reply]:
    """A Reply class that names `source`: json's object_hook calls it directly, as fast as plain
    decoding (a Python hook setting the source on each object made a 10,000-job queue 2.4x slower)."""
    return type("Reply", (Reply,), {"source": source, "__slots__": ()})


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


def peer_caller(conn: socket.socket) -> Caller:
    """The connecting process (SO_PEERCRED: pid, uid, gid); uid -1 where the socket cannot tell."""
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return Caller(-1)
    pid, uid, gid = struct.unpack("3i", creds)
    return Caller(int(uid), int(gid), int(pid))


def check_agent_peer(conn: socket.socket, sock_path: Path) -> None:
    """Refuse an agent that another user may have put there. In a folder every user may write (the
    system agent's /run/gpuplan is 1777), anyone could bind the socket while the system agent is
    down and read what clients send (commands, environments): there, talk only to an agent of root
    or of the caller, by the uid the kernel reports for the listening process (SO_PEERCRED).

    Raises:
        AgentError: the socket's agent runs as another user (the message names its uid and the fix).
    """
    try:
        world_writable = bool(os.stat(sock_path.parent).st_mode & stat.S_IWOTH)
    except OSError:
        return
    peer = peer_caller(conn).uid
    if world_writable and peer not in (0, os.getuid()):
        who = f"uid {peer}" if peer >= 0 else "a process whose uid the socket does not tell"
        raise AgentError(
            f"refusing the agent at {sock_path}: it runs as {who}, not root, in a folder every user may "
            "write (someone else's process may pose as the shared agent); nothing was sent. Ask root to "
            "start the shared agent (systemctl start gpuplan-agent), or set GPUPLAN_HOME to your own agent"
        )


def encode(obj: dict[str, Any]) -> bytes:
    """One protocol line."""
    return json.dumps(obj, allow_nan=False, default=str).encode() + b"\n"


def decode_request(line: bytes) -> Any:
    """The JSON value of one request line. Raises AgentError for anything that is not JSON."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError) as e:  # RecursionError: nesting deeper than the parser's stack
        raise AgentError(f"bad request: not JSON ({str(e)[:120]})") from None


def _not_running(sock_path: Path, why: str) -> AgentNotRunningError:
    return AgentNotRunningError(
        f"no agent is running for GPUPLAN_HOME={sock_path.parent} ({why}); start one with `gpuplan agent start`"
    )


class AgentConnection:
    """One connection to the agent for one or more requests (`call` is the one-request form).

    Raises (from the constructor and `request`): the AgentError subclasses of the module docstring.
    """

    def __init__(self, sock_path: Path, timeout_s: float = 30.0) -> None:
        self.sock_path = sock_path
        self.timeout_s = timeout_s
        self._buf = b""
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout_s)
        try:
            self.sock.connect(str(sock_path))
        except FileNotFoundError:
            self.sock.close()
            raise _not_running(sock_path, f"no socket {sock_path}") from None
        except ConnectionRefusedError:
            self.sock.close()
            raise _not_running(sock_path, f"nobody listens on {sock_path}: a stale socket file") from None
        except PermissionError:
            self.sock.close()
            raise AgentError(
                f"permission denied on {sock_path}: the agent of GPUPLAN_HOME={sock_path.parent} belongs to "
                "another user; set GPUPLAN_HOME to your own agent's directory"
            ) from None
        except OSError as e:
            self.sock.close()
            raise AgentError(f"cannot connect to the agent at {sock_path}: {_why(e)}") from None
        try:
            check_agent_peer(self.sock, sock_path)
        except AgentError:
            self.sock.close()
            raise

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are (tests send broken requests with it)."""
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise self._lost(e) from None

    def finish_sending(self) -> None:
        """Tell the agent no more requests follow (it closes after its last reply)."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError as e:
            raise self._lost(e) from None

    def read_reply(self) -> dict[str, Any]:
        """The next reply object, `ok` true or false (no exception for a refusal)."""
        while b"\n" not in self._buf:
            try:
                chunk = self.sock.recv(65536)
            except OSError as e:
                raise self._lost(e) from None
            if not chunk:
                raise AgentConnectionLost(
                    f"the agent closed the connection before it answered ({self.sock_path})"
                )
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            reply = json.loads(line, object_hook=_reply_type(self.sock_path))
        except ValueError:
            raise AgentError(f"the agent answered garbage: {line[:200]!r}") from None
        if not isinstance(reply, dict):
            raise AgentError(f"the agent answered garbage: {line[:200]!r}")
        return reply

    def request(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return its reply (`ok` true or false)."""
        self.send_raw(encode(obj))
        return self.read_reply()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> AgentConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _lost(self, e: OSError) -> AgentError:
        if isinstance(e, TimeoutError):
            return AgentConnectionLost(
                f"the agent did not answer within {self.timeout_s:g} s ({self.sock_path})"
            )
        if isinstance(e, (ConnectionResetError, BrokenPipeError)):
            return AgentConnectionLost(f"the connection to the agent was lost before it answered ({_why(e)})")
        return AgentError(f"talking to the agent at {self.sock_path} failed: {_why(e)}")


def _why(e: OSError) -> str:
    return e.strerror or errno.errorcode.get(e.errno or 0, "") or type(e).__name__


def call(sock_path: Path, request: dict[str, Any], timeout_s: float = 30.0) -> dict[str, Any]:
    """Send one request to the agent and return its reply (`ok` true).

    Raises:
        AgentNotRunningError: nothing listens on `sock_path` (start it with `gpuplan agent start`).
        AgentConnectionLost: the connection ended before the reply (the request may have been done).
        AgentError: the agent refused the request (the message is the agent's), or a socket problem.
    """
    with AgentConnection(sock_path, timeout_s) as conn:
        conn.send_raw(encode(request))
        conn.finish_sending()
        reply = conn.read_reply()
    if not reply.get("ok"):
        raise AgentError(str(reply.get("error", "the agent refused the request")))
    return reply

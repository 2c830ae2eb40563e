"""The agent's wall-clock loop: the Unix socket, signals and timers around `Agent.step`.

`python -m gpuplan.agent.server CONFIG_JSON` is what `gpuplan agent start` runs in the background;
`run_agent` is the same in the foreground. The agent's own errors are logged and never kill a job.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import selectors
import signal
import socket
import struct
import sys
import time
from pathlib import Path

from gpuplan.agent.daemon import LIVENESS_S, Agent, AgentConfig
from gpuplan.agent.paths import AgentPaths
from gpuplan.agent.protocol import MAX_REQUEST_BYTES, AgentError, Caller, bind_socket, encode, peer_caller
from gpuplan.agent.requests import MUTATING_OPS, answer_line
from gpuplan.errors import GpuplanError

__all__ = ["TEST_FAULT_ENV", "main", "run_agent", "serve"]

log = logging.getLogger("gpuplan.agent")

MAX_CLIENTS = 256
IDLE_S = 300.0
SEND_TIMEOUT_S = 5.0
TEST_FAULT_ENV = "GPUPLAN_TEST_FAULT"
"""TEST ONLY: `reset-after-commit:OP[:COUNT]` makes the agent reset the connection (RST, no reply)
after it carried out the first COUNT (default 1) requests of OP: what a client sees when the agent
dies or the connection breaks between the commit and the reply. Never set it in production."""


class _Client:
    """One open connection: its caller and the bytes received that do not yet end a line."""

    __slots__ = ("buf", "caller", "seen_s", "sock")

    def __init__(self, sock: socket.socket, caller: Caller) -> None:
        self.sock, self.caller, self.buf, self.seen_s = sock, caller, bytearray(), time.monotonic()


class _Fault:
    """The test-only fault hook of TEST_FAULT_ENV (inactive when unset)."""

    def __init__(self, spec: str) -> None:
        parts = spec.split(":") if spec else []
        self.op = parts[1] if len(parts) > 1 and parts[0] == "reset-after-commit" else ""
        self.left = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else 1
        if spec and not self.op:
            log.warning("%s=%r is not reset-after-commit:OP[:COUNT]; ignored", TEST_FAULT_ENV, spec)

    def fires(self, op: str, ok: bool) -> bool:
        if not ok or op != self.op or self.left <= 0:
            return False
        self.left -= 1
        return True


class _Server:
    """The socket side of the loop: non-blocking accepts and reads, so a slow or silent client never
    stalls scheduling; each complete line is answered in order (agent/requests.py `answer_line`)."""

    def __init__(self, agent: Agent, sock: socket.socket, sel: selectors.BaseSelector) -> None:
        self.agent, self.sock, self.sel = agent, sock, sel
        self.clients: dict[int, _Client] = {}
        self.fault = _Fault(os.environ.get(TEST_FAULT_ENV, ""))

    def accept(self, most: int = 16) -> None:
        """Accept up to `most` waiting connections (a tight client loop must not starve the round)."""
        for _ in range(most):
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return
            except OSError as e:  # out of file descriptors, ...: the loop goes on
                log.warning("accept failed: %s", e)
                return
            caller = peer_caller(conn)
            if len(self.clients) >= MAX_CLIENTS:
                log.warning("%s: refused: %d connections already open", caller, MAX_CLIENTS)
                self._send(
                    conn, {"ok": False, "error": f"the agent has {MAX_CLIENTS} connections open; retry"}
                )
                conn.close()
                continue
            conn.setblocking(False)
            self.clients[conn.fileno()] = _Client(conn, caller)
            self.sel.register(conn, selectors.EVENT_READ, "client")

    def readable(self, conn: socket.socket) -> None:
        client = self.clients.get(conn.fileno())
        if client is None:
            return
        try:
            chunk = conn.recv(65536)
        except BlockingIOError:
            return
        except OSError as e:
            log.info("%s: connection failed: %s", client.caller, e)
            self.close(client)
            return
        client.seen_s = time.monotonic()
        client.buf += chunk
        lines = []
        while b"\n" in chunk and (end := client.buf.find(b"\n")) >= 0:  # scan only when a line ended
            lines.append(bytes(client.buf[:end]))
            del client.buf[: end + 1]
        too_long = len(client.buf) > MAX_REQUEST_BYTES
        if not chunk and client.buf.strip() and not too_long:
            lines.append(bytes(client.buf))  # end of file: a last line without its newline is a request too
        if lines and not self._answer(client, lines):
            return
        if too_long:
            log.warning("%s: refused: a request line over %d bytes", client.caller, MAX_REQUEST_BYTES)
            self._answer_error(client, f"bad request: a request line over {MAX_REQUEST_BYTES} bytes")
            self.close(client)
        elif not chunk:
            self.close(client)

    def _answer(self, client: _Client, lines: list[bytes]) -> bool:
        """Answer the lines that arrived together, in order (an empty line too: every line gets a
        reply); False when the connection is closed (by the client or the fault hook)."""
        answers = [answer_line(self.agent, line, client.caller) for line in lines]
        if any(reply.get("ok") and op in MUTATING_OPS for op, reply in answers):
            _guarded_step(self.agent)  # start what can start before answering: low submit latency
        for op, reply in answers:
            if self.fault.fires(op, bool(reply.get("ok"))):
                log.warning("TEST FAULT: resetting the connection after %s without a reply", op)
                client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close(client)
                return False
            if not self._send(client.sock, reply):
                self.close(client)
                return False
        return True

    def _answer_error(self, client: _Client, error: str) -> None:
        self._send(client.sock, {"ok": False, "error": error})

    @staticmethod
    def _send(conn: socket.socket, reply: dict[str, object]) -> bool:
        try:
            data = encode(reply)
        except ValueError as e:  # a NaN in a reply: the client still gets an answer
            data = encode({"ok": False, "error": f"the agent could not encode its reply: {e}"})
        try:
            conn.settimeout(SEND_TIMEOUT_S)
            conn.sendall(data)
            conn.setblocking(False)
        except OSError as e:
            log.info("reply not sent: %s", e)
            return False
        return True

    def close(self, client: _Client) -> None:
        fd = client.sock.fileno()
        if fd >= 0:
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(client.sock)
            self.clients.pop(fd, None)
        client.sock.close()

    def close_idle(self) -> None:
        old = time.monotonic() - IDLE_S
        for client in [c for c in self.clients.values() if c.seen_s < old]:
            self.close(client)

    def close_all(self) -> None:
        for client in list(self.clients.values()):
            self.close(client)


def serve(agent: Agent) -> None:
    """Serve the socket and run `step` until a stop request; woken by requests, SIGCHLD and timers."""
    paths = agent.paths
    sock = bind_socket(paths.socket)
    if agent.config.multi_user:
        os.chmod(paths.socket, 0o666)  # every local user connects; SO_PEERCRED says who they are
    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    os.set_blocking(wfd, False)
    signal.set_wakeup_fd(wfd)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: setattr(agent, "stopping", True))
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, lambda *_: setattr(agent, "reload_requested", True))
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, "sock")
    sel.register(rfd, selectors.EVENT_READ, "wake")
    server = _Server(agent, sock, sel)
    last_step = 0.0
    try:
        while not agent.done_stopping():
            timeout = LIVENESS_S if agent.runs else agent.config.sample_interval_s
            timeout = max(0.0, min(timeout, agent.next_wake_s - time.time()))
            events = sel.select(timeout)
            only_reads = bool(events)
            for key, _ in events:
                if key.data == "wake":
                    only_reads = False
                    with contextlib.suppress(BlockingIOError):
                        os.read(rfd, 4096)
                elif key.data == "sock":
                    server.accept()
                else:
                    server.readable(key.fileobj)  # type: ignore[arg-type]
            # a round after a signal, a timer or a quiet moment; requests alone (a mutating one has
            # had its round already) trigger one only every LIVENESS_S, so a busy client never
            # starves time limits and samples, nor pays a round per read-only request
            if not only_reads or time.monotonic() - last_step >= LIVENESS_S:
                server.close_idle()
                _guarded_step(agent)
                last_step = time.monotonic()
    finally:
        server.close_all()
        sel.close()
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            paths.socket.unlink()
        signal.set_wakeup_fd(-1)
        os.close(rfd)
        os.close(wfd)


def _guarded_step(agent: Agent) -> None:
    if agent.reload_requested:
        agent.reload_requested = False
        try:
            agent.reload_quotas()
        except GpuplanError as e:  # a bad file keeps the quotas in force
            log.error("SIGHUP: quotas not reloaded: %s", e)
    try:
        agent.step()
    except Exception:  # the agent's own error never kills a job: log it and go on
        log.exception("agent step failed; going on")


def _lock_pidfile(paths: AgentPaths) -> int:
    """Hold an exclusive lock on agent.pid for the agent's life; a second agent on this home stops."""
    fd = os.open(paths.pidfile, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.read(fd, 32).decode().strip() or "?"
        os.close(fd)
        raise AgentError(f"an agent already runs for GPUPLAN_HOME={paths.home} (pid {other})") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def check_multi_user(config: AgentConfig) -> None:
    """A multi-user agent runs as root: it starts each job as its submitter.

    Raises:
        AgentError: not root (the message says how to run it).
    """
    if config.multi_user and os.geteuid() != 0:
        raise AgentError(
            "--multi-user runs as root (it starts each job as its submitter's uid, gid and groups): "
            "start it with sudo, or install contrib/systemd/gpuplan-agent.service (docs/multi-user.md)"
        )


def run_agent(config: AgentConfig) -> None:
    """Run an agent in this process until it is stopped (`gpuplan agent start --foreground`)."""
    from gpuplan.agent.gpulock import GpuLock, fallback_lock_path, lock_path

    check_multi_user(config)
    os.umask(0o077)  # the store, logs and job outputs are the owner's only
    paths = AgentPaths(config.home, None if config.run_dir is None else Path(config.run_dir))
    paths.create(shared=config.multi_user)
    fd = _lock_pidfile(paths)
    gpu_lock = None
    try:
        where = lock_path(config.gpus)
        spare = fallback_lock_path(config.gpus)  # one every agent can make, /run/gpuplan or not
        gpu_lock = None if where is None else GpuLock.acquire(where, paths.home, fallback=spare)
        agent = Agent(config)
        try:
            serve(agent)
        finally:
            agent.close()
    finally:
        if gpu_lock is not None:
            gpu_lock.close()
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    """`python -m gpuplan.agent.server CONFIG_JSON`: what `gpuplan agent start` runs in the background."""
    args = sys.argv[1:] if argv is None else argv
    raw = json.loads(args[0])
    raw["home"] = Path(raw["home"])
    config = AgentConfig(**raw)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    try:
        run_agent(config)
    except GpuplanError as e:
        print(f"gpuplan: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

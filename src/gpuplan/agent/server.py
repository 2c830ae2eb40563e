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
import sys
import time
from pathlib import Path

from gpuplan.agent.daemon import LIVENESS_S, Agent, AgentConfig
from gpuplan.agent.paths import AgentPaths
from gpuplan.agent.protocol import AgentError, bind_socket, peer_uid, read_request, send_reply
from gpuplan.agent.requests import MUTATING_OPS
from gpuplan.errors import GpuplanError

__all__ = ["main", "run_agent", "serve"]

log = logging.getLogger("gpuplan.agent")


def serve(agent: Agent) -> None:
    """Serve the socket and run `step` until a stop request; woken by requests, SIGCHLD and timers."""
    paths = agent.paths
    sock = bind_socket(paths.socket)
    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    os.set_blocking(wfd, False)
    signal.set_wakeup_fd(wfd)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: setattr(agent, "stopping", True))
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, "sock")
    sel.register(rfd, selectors.EVENT_READ, "wake")
    try:
        while not agent.done_stopping():
            timeout = LIVENESS_S if agent.runs else agent.config.sample_interval_s
            timeout = max(0.0, min(timeout, agent.next_wake_s - time.time()))
            for key, _ in sel.select(timeout):
                if key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(rfd, 4096)
                else:
                    _accept(agent, sock)
            _guarded_step(agent)
    finally:
        sel.close()
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            paths.socket.unlink()
        signal.set_wakeup_fd(-1)
        os.close(rfd)
        os.close(wfd)


def _guarded_step(agent: Agent) -> None:
    try:
        agent.step()
    except Exception:  # the agent's own error never kills a job: log it and go on
        log.exception("agent step failed; going on")


def _accept(agent: Agent, sock: socket.socket, most: int = 16) -> None:
    """Serve up to `most` waiting connections, then let the loop run a step: a client polling in a
    tight loop must not starve the agent's own round."""
    for _ in range(most):
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return
        with conn:
            conn.setblocking(True)
            conn.settimeout(5.0)
            try:
                uid = peer_uid(conn)
                try:
                    request = read_request(conn)
                except AgentError as e:
                    send_reply(conn, {"ok": False, "error": str(e)})
                    continue
                reply = agent.handle(request, uid)
                if reply.get("ok") and request.get("op") in MUTATING_OPS:
                    _guarded_step(agent)  # start what can start before answering: low submit latency
                send_reply(conn, reply)
            except OSError as e:
                log.warning("client connection failed: %s", e)


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


def run_agent(config: AgentConfig) -> None:
    """Run an agent in this process until it is stopped (`gpuplan agent start --foreground`)."""
    os.umask(0o077)  # the store, logs and job outputs are the owner's only
    paths = AgentPaths(config.home)
    paths.create()
    fd = _lock_pidfile(paths)
    try:
        agent = Agent(config)
        try:
            serve(agent)
        finally:
            agent.close()
    finally:
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

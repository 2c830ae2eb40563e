"""`gpuplan slurm watch --health-port P`: `/healthz` and Prometheus `/metrics` for the watcher.

`/healthz` answers 200 with a JSON body while the last completed look is recent (3 intervals, at least
the longest backoff), 503 otherwise ("starting" before the first look, "stale" after); `/metrics` is
the watcher's registry in Prometheus' text format. One thread, stdlib `wsgiref`; it stops with the
process.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuplan.slurm.watch import Metrics

__all__ = ["HealthServer"]


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class HealthServer:
    """Serves `metrics` on `host:port` (port 0: any free port; `port` then says which)."""

    def __init__(
        self, metrics: Metrics, stale_after_s: float, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.metrics = metrics
        self.stale_after_s = stale_after_s
        self._server: WSGIServer = make_server(host, port, self._app, handler_class=_Quiet)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="gpuplan-health", daemon=True)

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _app(self, environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            ok, body = self.metrics.health(self.stale_after_s)
            start("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "application/json")])
            return [json.dumps(body).encode()]
        if path == "/metrics":
            start("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
            return [generate_latest(self.metrics.registry)]
        start("404 Not Found", [("Content-Type", "text/plain")])
        return [b"gpuplan slurm watch: /healthz or /metrics\n"]

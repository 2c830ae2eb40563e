"""`POST /api/whatif` as the server answers it: names checked, the token for uploads, the upload
streamed to disk under its limit, a bounded line of what-ifs, messages fit to send.

Order of the checks, each refusing before the next costs anything: the request's names (400, nothing
opened), the token when there is a body (403, nothing read), a declared length over the limit (413,
nothing read), a place in line (429), then the upload as it arrives (413 once past the limit), then
the simulation, one at a time (web/whatif.py).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request

from gpuplan.errors import GpuplanError, UnknownNameError
from gpuplan.web.access import NotAllowedError, token_refusal
from gpuplan.web.names import BadNameError, public_message, relative_name, under_root, upload_name
from gpuplan.web.savings import GpuCost, parse_costs
from gpuplan.web.uploads import BusyError, TooLargeError, WhatIfGate, check_declared, has_body, save_upload
from gpuplan.web.whatif import AUTO_CLUSTER, MAX_UPLOAD_BYTES, WhatIfRequest, WhatIfStore, run_whatif

__all__ = ["WhatIfLimits", "WhatIfParams", "WhatIfService"]

Answer = tuple[int, dict[str, Any], dict[str, str]]  # status, JSON body, extra headers
_DEFAULT_UPLOAD_NAME = "upload.csv"


@dataclass(frozen=True, slots=True)
class WhatIfLimits:
    """What what-ifs may take from the server (`gpuplan serve` options in brackets).

    Attributes:
        max_upload_bytes: the largest upload [--max-upload-mb].
        max_waiting: what-ifs that may wait while one simulates; more get 429 [--whatif-queue].
        cache_entries: what-if results kept for their Gantt charts, least recently used out [--whatif-cache].
        cache_records: job records kept in all by that cache.
    """

    max_upload_bytes: int = MAX_UPLOAD_BYTES
    max_waiting: int = 4
    cache_entries: int = 8
    cache_records: int = 200_000


@dataclass(slots=True)
class WhatIfParams:
    """The query of one `POST /api/whatif`, as given (nothing checked yet)."""

    path: str = ""
    name: str = ""
    cluster: str = AUTO_CLUSTER
    policies: list[str] = field(default_factory=lambda: ["fifo"])
    backfills: list[str] = field(default_factory=lambda: ["easy"])
    placer: str = "first-fit"
    oracle: bool = False
    skip_bad: bool = False
    prices: list[str] = field(default_factory=list)
    watts: list[str] = field(default_factory=list)


class WhatIfService:
    """Answers what-ifs for one server: its trace folder, token, prices, limits, cache and line."""

    def __init__(
        self, trace_root: Path, token: str | None, costs: dict[str, GpuCost], limits: WhatIfLimits
    ) -> None:
        self.trace_root = trace_root.resolve()
        self.token = token
        self.costs = costs
        self.limits = limits
        self.store = WhatIfStore(limits.cache_entries, limits.cache_records)
        self.gate = WhatIfGate(limits.max_waiting)

    def stats(self) -> dict[str, int]:
        """The cache's entries and records (and their bounds), and the what-ifs now in line."""
        return {**self.store.stats(), "in_line": self.gate.admitted, "max_waiting": self.gate.max_waiting}

    async def answer(self, request: Request, params: WhatIfParams) -> Answer:
        """The status, JSON body and headers of the answer (see the module docstring)."""
        renames: dict[str, str] = {}
        # a refused upload's body is left unread: the connection cannot carry another request
        close = {"Connection": "close"} if has_body(request) else {}
        try:
            return 200, await self._run(request, params, renames), {}
        except TooLargeError as e:
            return 413, _error(e, self.trace_root, renames), close
        except BusyError as e:
            return 429, _error(e, self.trace_root, renames), {"Retry-After": str(e.retry_after_s), **close}
        except NotAllowedError as e:
            return 403, _error(e, self.trace_root, renames), close
        except GpuplanError as e:
            return 400, _error(e, self.trace_root, renames), close

    async def _run(self, request: Request, params: WhatIfParams, renames: dict[str, str]) -> dict[str, Any]:
        req = self._request(params)  # names checked; nothing opened yet
        costs = parse_costs(params.prices, params.watts, self.costs)
        upload = has_body(request)
        if upload and req.trace_path is not None:
            raise BadNameError("give either a path on the server or an upload as the body, not both")
        if upload:
            why = token_refusal(self.token, request.headers.get("authorization", ""), "what-if uploads")
            if why:
                raise NotAllowedError(
                    f"{why}; or put the trace under the server's trace folder and give its path"
                )
            check_declared(request, self.limits.max_upload_bytes)
        elif req.trace_path is None:
            raise GpuplanError("no trace given: choose a file to upload or give a path")
        async with self.gate.admit():
            with tempfile.TemporaryDirectory(prefix="gpuplan-upload-") as tmp:
                if upload:
                    name = upload_name(params.name or _DEFAULT_UPLOAD_NAME)
                    dest = Path(tmp) / name
                    renames.update({str(dest): name, tmp + os.sep: "", tmp: "the upload"})
                    await save_upload(request, dest, self.limits.max_upload_bytes)
                    req.trace_path, req.trace_name = dest, name
                async with self.gate.turn():
                    if await request.is_disconnected():
                        raise GpuplanError("the client went away before its turn; nothing was simulated")
                    result = await asyncio.to_thread(run_whatif, req, costs, self.store)
        result["notes"] = [public_message(GpuplanError(n), self.trace_root, renames) for n in result["notes"]]
        return result

    def _request(self, params: WhatIfParams) -> WhatIfRequest:
        if params.path and params.name:
            raise BadNameError("give either a path on the server or an upload's name, not both")
        if params.name:
            upload_name(params.name)
        req = WhatIfRequest(
            policies=params.policies or ["fifo"],
            backfills=params.backfills or ["easy"],
            placer=params.placer,
            oracle=params.oracle,
            skip_bad=params.skip_bad,
        )
        req.cluster, req.cluster_file = self._cluster(params.cluster or AUTO_CLUSTER)
        if params.path:
            req.trace_path = self._trace(params.path)
            req.trace_name = relative_name(self.trace_root, req.trace_path)
        return req

    def _trace(self, text: str) -> Path:
        """A trace under the trace folder; its cluster file beside it (read with it) must be too."""
        from gpuplan.traces import cluster_file_for

        path = under_root(self.trace_root, text, "path")
        beside = cluster_file_for(path)
        if os.path.lexists(beside) and not beside.resolve().is_relative_to(self.trace_root):
            raise BadNameError(
                f"path {text!r}: its cluster file {beside.name!r} leads outside the server's trace "
                "folder (--traces): remove that link or copy the file in"
            )
        return path

    def _cluster(self, text: str) -> tuple[str, Path | None]:
        from gpuplan.cluster import preset_names

        if text in (AUTO_CLUSTER, "trace") or text in preset_names():
            return text, None
        if text.endswith(".toml") or "/" in text or "\\" in text:
            return text, under_root(self.trace_root, text, "cluster")
        raise UnknownNameError(
            "cluster (a preset, 'auto', 'trace', or a .toml file under the trace folder)",
            text,
            [AUTO_CLUSTER, "trace", *preset_names()],
        )


def _error(e: GpuplanError, root: Path, renames: dict[str, str]) -> dict[str, Any]:
    return {"error": public_message(e, root, renames), "kind": type(e).__name__}

"""The FastAPI app of `gpuplan serve`: node, queue and what-if views, SSE, `/metrics`, `/healthz`.

Read-only by default: the endpoints that change anything (submit, cancel, reorder) and what-if
uploads need the agent's token as `Authorization: Bearer TOKEN`; without a token file they are
refused. Every request's `Host` must name this server (web/access.py, against DNS rebinding).
What-ifs are bounded: uploads streamed to disk under a limit, one simulation at a time with a short
line, results in a bounded cache (web/whatif_serve.py). Every page loads Plotly from `/static/`,
served from the installed plotly package; nothing comes from the internet.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plotly
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field

from gpuplan.agent import schema
from gpuplan.core.params import split_specs
from gpuplan.errors import GpuplanError
from gpuplan.web.access import HostCheck, HostRule, token_refusal
from gpuplan.web.history import History, snapshot_json
from gpuplan.web.live import AgentUnavailable, LiveSource
from gpuplan.web.metrics import LiveCollector
from gpuplan.web.pages import (
    docs_page,
    job_page,
    node_page,
    queue_page,
    slurm_node_page,
    slurm_queue_page,
    whatif_page,
)
from gpuplan.web.queueplan import QueuePlan, plan_queue
from gpuplan.web.savings import DEFAULT_COSTS, GpuCost
from gpuplan.web.whatif_serve import WhatIfLimits, WhatIfParams, WhatIfService

__all__ = ["QUEUE_GANTT_JOBS", "ServeConfig", "create_app"]

QUEUE_GANTT_JOBS = 300
"""The queue view's Gantt draws the first this-many planned jobs (the table pages through all)."""

_STATIC = Path(__file__).parent / "static"
_PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
_PLOTLY_URL = f"/static/plotly-{plotly.__version__}.min.js"  # versioned: cached for good


@dataclass(slots=True)
class ServeConfig:
    """How the app runs.

    Attributes:
        source: where live readings and the queue come from.
        token: the agent's token; None makes every mutating endpoint and what-if uploads refuse.
        trace_root: what-if paths and cluster files must lie under this folder.
        costs: price and watts per GPU model.
        sample_s: seconds between two samples of the node (and two SSE events).
        window_s: how much history the node view shows.
        hosts: the `Host` names requests may give (default: loopback names only).
        whatif: the upload limit, the line and the cache of what-ifs.
    """

    source: LiveSource
    token: str | None = None
    trace_root: Path = field(default_factory=Path.cwd)
    costs: dict[str, GpuCost] = field(default_factory=lambda: dict(DEFAULT_COSTS))
    sample_s: float = 1.0
    window_s: float = 600.0
    hosts: HostRule = field(default_factory=HostRule)
    whatif: WhatIfLimits = field(default_factory=WhatIfLimits)


class _State:
    """What the routes share: the config, the node history, cached plans and what-if runs."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.history = History(config.window_s)
        self.whatifs = WhatIfService(config.trace_root, config.token, config.costs, config.whatif)
        self.version = 0
        self.changed = asyncio.Event()
        self._plan: tuple[tuple[Any, ...], QueuePlan] | None = None
        self._plan_lock = threading.Lock()  # the table and the Gantt ask at once: plan once
        self._plan_read_s = -math.inf

    def sample(self) -> None:
        self.history.add(self.config.source.snapshot())
        self.version += 1

    def plan(self) -> QueuePlan:
        """The queue's plan; the queue is read at most once per sample period (pages ask in bursts)."""
        src = self.config.source
        with self._plan_lock:
            now = time.time()
            if self._plan is not None and now - self._plan_read_s < self.config.sample_s:
                return self._plan[1]
            try:
                rows = src.queue()
            except GpuplanError as e:  # shown on the queue view; the other views still work
                self._plan, self._plan_read_s = None, now
                return QueuePlan([], {}, {}, set(), None, error=str(e))
            # replan when the queue changes, and at least once a minute (remaining times shift)
            key = (tuple((r.job_id, r.state) for r in rows), int(now // 60))
            if self._plan is None or self._plan[0] != key:
                self._plan = (key, plan_queue(rows, src.cluster, src.policy, src.backfill, now))
            self._plan_read_s = time.time()  # the period counts from when the plan is ready
            return self._plan[1]


def _state(request: Request) -> _State:
    state: _State = request.app.state.gpuplan
    return state


def create_app(config: ServeConfig) -> FastAPI:
    """The dashboard app for `config` (see the module docstring)."""
    shared = _State(config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(_sampler(shared))
        try:
            yield
        finally:
            task.cancel()

    app = FastAPI(
        title="gpuplan",
        description="Live GPU node, queue and what-if dashboard of gpuplan.",
        lifespan=lifespan,
        docs_url=None,  # FastAPI's Swagger page loads its JS from a CDN; /docs below is offline
        redoc_url=None,
    )
    app.state.gpuplan = shared
    app.add_middleware(HostCheck, rule=config.hosts)
    try:
        recorded = config.source.history(time.time() - config.window_s)  # what the agent recorded
    except GpuplanError:
        recorded = []  # an unreadable store: the queue view names it; live readings still come
    for status in recorded:
        shared.history.add(status)
    shared.sample()
    slurm = _is_slurm(config.source)
    _pages(app, slurm)
    _static(app)
    if slurm:
        _slurm_api(app)  # read-only: nothing here changes Slurm (`gpuplan slurm apply` does)
    else:
        _node_api(app)
        _queue_api(app)
        _mutating_api(app)
    _job_api(app)
    _whatif_api(app)
    _metrics_api(app, config)
    return app


def _is_slurm(source: LiveSource) -> bool:
    from gpuplan.web.slurmview import SlurmSource

    return isinstance(source, SlurmSource)


async def _sampler(shared: _State) -> None:
    while True:
        await asyncio.sleep(shared.config.sample_s)
        try:
            shared.sample()
        except Exception as e:  # a monitor loop never dies on one bad reading
            print(f"gpuplan serve: sampling failed: {e}")
        shared.changed.set()
        shared.changed = asyncio.Event()


# --------------------------------------------------------------------------- pages


def _page_context(request: Request) -> dict[str, Any]:
    src = _state(request).config.source
    return {"label": src.label, "is_fake": src.is_fake, "plotly_url": _PLOTLY_URL}


def _pages(app: FastAPI, slurm: bool) -> None:
    @app.get("/", include_in_schema=False)
    def index() -> RedirectResponse:
        return RedirectResponse("/queue" if slurm else "/node")

    @app.get(
        "/node",
        response_class=HTMLResponse,
        summary="Node view: per-GPU and per-process (Slurm: per node), live",
    )
    def node(request: Request) -> str:
        if slurm:
            return slurm_node_page(**_page_context(request))
        return node_page(**_page_context(request))

    @app.get(
        "/queue", response_class=HTMLResponse, summary="Queue view: running and waiting jobs, planned order"
    )
    def queue(request: Request) -> str:
        src = _state(request).config.source
        if slurm:
            return slurm_queue_page(**_page_context(request), policy=src.policy)
        return queue_page(**_page_context(request), policy=src.policy, backfill=src.backfill)

    @app.get(
        "/jobs/{job_id}",
        response_class=HTMLResponse,
        summary="Job detail: state, times, GPUs; a waiting job's forecast and why it waits",
    )
    def job(request: Request, job_id: str) -> str:
        return job_page(job_id, slurm=slurm, **_page_context(request))

    @app.get("/whatif", response_class=HTMLResponse, summary="What-if view: compare policies on a trace")
    def whatif(request: Request) -> str:
        from gpuplan.cluster import preset_names
        from gpuplan.core.backfill import backfill_names
        from gpuplan.core.placement import placer_names
        from gpuplan.core.policies import policy_names

        costs = _state(request).config.costs
        return whatif_page(
            **_page_context(request),
            clusters=preset_names(),
            policies=policy_names(),
            backfills=backfill_names(),
            placers=placer_names(),
            prices=",".join(f"{m}={c.usd_per_h}" for m, c in costs.items() if c.usd_per_h is not None),
            watts=",".join(f"{m}={c.busy_w:g}/{c.idle_w:g}" for m, c in costs.items()),
        )

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    def docs(request: Request) -> str:
        return docs_page(request.app.openapi(), **_page_context(request))

    @app.get(
        "/healthz",
        summary="Liveness: ok (the source can be read), where the readings come from, the what-if cache and line",
    )
    def healthz(request: Request) -> dict[str, Any]:
        shared = _state(request)
        src = shared.config.source
        return {"source": src.label, "fake": src.is_fake, **src.health(), "whatif": shared.whatifs.stats()}


def _static(app: FastAPI) -> None:
    from gpuplan.report.html import PAGE_CSS  # imported now, not on the first page's stylesheet request

    forever = {"Cache-Control": "public, max-age=31536000, immutable"}
    css = PAGE_CSS + (_STATIC / "dashboard.css").read_text(encoding="utf-8")

    @app.get(_PLOTLY_URL, include_in_schema=False)
    def plotly_js() -> FileResponse:
        return FileResponse(_PLOTLY_JS, media_type="application/javascript", headers=forever)

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        if name == "dashboard.css":
            return Response(css, media_type="text/css")
        if name != "dashboard.js":
            raise HTTPException(404, f"no static file {name!r}")
        return FileResponse(_STATIC / name, media_type="application/javascript")

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(status_code=204)  # browsers ask for one; a 404 would be a console error


# --------------------------------------------------------------------------- node


def _node_api(app: FastAPI) -> None:
    @app.get("/api/node", summary="Per-GPU history of the last minutes and the latest readings")
    def node(request: Request) -> dict[str, Any]:
        shared = _state(request)
        latest = shared.history.latest()
        return {
            "label": shared.config.source.label,
            "fake": shared.config.source.is_fake,
            "window_s": shared.config.window_s,
            "series": shared.history.series(),
            "latest": None if latest is None else snapshot_json(latest),
        }

    @app.get("/api/node/stream", summary="Server-sent events: one snapshot per sample")
    async def stream(request: Request) -> StreamingResponse:
        shared = _state(request)

        async def latest() -> dict[str, Any] | None:
            snap = shared.history.latest()
            return None if snap is None else snapshot_json(snap)

        return _event_stream(request, latest)


def _event_stream(
    request: Request, next_event: Callable[[], Awaitable[dict[str, Any] | None]]
) -> StreamingResponse:
    """Server-sent events: once per sample period, `next_event()`'s data (None: nothing to send)."""
    shared = _state(request)

    async def events() -> AsyncIterator[str]:
        while not await request.is_disconnected():
            data = await next_event()
            if data is not None:
                yield f"data: {json.dumps(data)}\n\n"
            try:
                await asyncio.wait_for(shared.changed.wait(), timeout=15.0)
            except TimeoutError:
                yield ": keep-alive\n\n"

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


# --------------------------------------------------------------------------- queue


def _queue_api(app: FastAPI) -> None:
    @app.get("/api/queue", summary="One page of the queue in planned order, with expected starts")
    def queue(
        request: Request,
        offset: int = Query(0, ge=0),
        limit: int = Query(100, ge=1, le=1000),
    ) -> dict[str, Any]:
        shared = _state(request)
        page = shared.plan().page(offset, limit)
        src = shared.config.source
        page.update(policy=src.policy, backfill=src.backfill, fake=src.is_fake)
        return page

    @app.get("/api/queue/gantt", summary="Gantt of the first planned jobs (hours from now)")
    def gantt(request: Request) -> dict[str, Any]:
        plan = _state(request).plan()
        figure = plan.gantt(QUEUE_GANTT_JOBS)
        if figure is None or plan.result is None:
            return {"figure": None, "jobs": 0, "error": plan.error}
        return {"figure": figure, "jobs": min(len(plan.result.records), QUEUE_GANTT_JOBS), "error": None}


# --------------------------------------------------------------------------- slurm


def _slurm(request: Request) -> Any:
    """The SlurmSource's current view (a read of Slurm at most every --slurm-cache-seconds)."""
    return _state(request).config.source.view()  # type: ignore[attr-defined]


def _slurm_api(app: FastAPI) -> None:
    @app.get(
        "/api/slurm/queue", summary="One page of the Slurm queue: running jobs, then pending in planned order"
    )
    def queue(
        request: Request, offset: int = Query(0, ge=0), limit: int = Query(100, ge=1, le=1000)
    ) -> JSONResponse:
        return JSONResponse(_finite(_slurm(request).queue_page(offset, limit)))

    @app.get("/api/slurm/nodes", summary="Per node: state, GPUs in all, allocated and free (sinfo)")
    def nodes(request: Request) -> JSONResponse:
        return JSONResponse(_finite(_slurm(request).nodes()))

    @app.get("/api/slurm/plan", summary="The plan as `gpuplan slurm plan --json` prints it")
    def plan(request: Request) -> JSONResponse:
        view = _slurm(request)
        if view.plan is None:
            return JSONResponse({"error": view.error or view.plan_error}, status_code=503)
        fairness = (view.summary or {}).get("fairness")
        return JSONResponse(
            _finite({**view.plan.as_dict(), "fairness": fairness, "setup_warnings": view.setup})
        )

    @app.get("/api/slurm/stream", summary="Server-sent events: one event each time the queue or nodes change")
    async def stream(request: Request) -> StreamingResponse:
        source = _state(request).config.source
        last: list[int] = []

        async def changed() -> dict[str, Any] | None:
            view = await asyncio.to_thread(source.view)  # type: ignore[attr-defined]
            if last and last[0] == view.version:
                return None
            last[:] = [view.version]
            return {"version": view.version, "read_s": view.read_s, "error": view.error, **view.counts()}

        return _event_stream(request, changed)


# --------------------------------------------------------------------------- job detail


def _job_api(app: FastAPI) -> None:
    @app.get(
        "/api/jobs/{job_id}",
        summary="One job as `gpuplan show ID --json` gives it: fields, forecast and explanation "
        "(its command only with the token, and only the owner's or an admin's)",
    )
    def job(request: Request, job_id: str) -> JSONResponse:
        from gpuplan.web.jobdetail import job_detail, with_command_rule
        from gpuplan.web.live import BadJobIdError, JobNotFoundError

        shared = _state(request)
        try:
            detail = job_detail(shared.config.source, job_id)
        except BadJobIdError as e:
            raise HTTPException(400, str(e)) from None
        except JobNotFoundError as e:
            raise HTTPException(404, str(e)) from None
        except GpuplanError as e:
            raise HTTPException(503, str(e)) from None
        why = token_refusal(shared.config.token, request.headers.get("authorization", ""), "commands")
        return JSONResponse(_finite(with_command_rule(detail, why is None, why)))


# --------------------------------------------------------------------------- what-if


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _whatif_api(app: FastAPI) -> None:
    @app.post(
        "/api/whatif",
        summary="Simulate policies on a trace: a path under --traces, or the body as an upload (needs the token)",
    )
    async def whatif(
        request: Request,
        path: str = "",
        name: str = "",
        cluster: str = "auto",
        policies: str = "fifo",
        backfills: str = "easy",
        placer: str = "first-fit",
        oracle: bool = False,
        skip_bad: bool = False,
        prices: str = "",
        watts: str = "",
    ) -> JSONResponse:
        params = WhatIfParams(
            path, name, cluster, split_specs(policies), split_specs(backfills), placer, oracle, skip_bad,
            _names(prices), _names(watts),
        )  # fmt: skip
        status, body, headers = await _state(request).whatifs.answer(request, params)
        return JSONResponse(_finite(body), status_code=status, headers=headers)

    @app.get("/api/whatif/{key}/gantt/{run}", summary="The Gantt of one run of a what-if")
    def gantt(request: Request, key: str, run: int) -> dict[str, Any]:
        from gpuplan.report.html import gantt_figure

        runs = _state(request).whatifs.store.get(key)
        if runs is None:
            raise HTTPException(404, f"no what-if {key[:40]!r} (only the last few are kept): run it again")
        if not 0 <= run < len(runs):
            raise HTTPException(404, f"what-if {key} has runs 0..{len(runs) - 1}, not {run}")
        r, jobs = runs[run]
        return {"label": r.label, "records": jobs, "figure": gantt_figure(r)}


def _finite(obj: Any) -> Any:
    """JSON cannot carry NaN or infinity: they become null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


# --------------------------------------------------------------------------- metrics


def _metrics_api(app: FastAPI, config: ServeConfig) -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LiveCollector(config.source))

    @app.get(
        "/metrics", summary="Prometheus text format: DCGM-named GPU gauges, per-process and queue metrics"
    )
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


# --------------------------------------------------------------------------- mutating


def _require_token(request: Request) -> None:
    why = token_refusal(_state(request).config.token, request.headers.get("authorization", ""), "changes")
    if why:
        raise HTTPException(403, why)


class SubmitRequest(BaseModel):
    """A job to submit to the agent (the fields of `gpuplan submit`)."""

    command: str = Field(
        min_length=1, max_length=schema.MAX_COMMAND, description="shell command, run in its own process group"
    )
    gpus: int = Field(1, ge=1, le=schema.MAX_GPUS)
    mem_gb: float | None = Field(
        None, gt=0, le=schema.MAX_MEM_GB, allow_inf_nan=False, description="GPU memory per GPU, GiB"
    )
    time_limit_s: float | None = Field(None, gt=0, le=schema.MAX_TIME_S, allow_inf_nan=False)
    name: str = Field("", max_length=schema.MAX_NAME)
    priority: int = Field(0, ge=schema.INT_MIN, le=schema.INT_MAX)
    cwd: str = Field("/", min_length=1, max_length=schema.MAX_PATH)


class OrderRequest(BaseModel):
    """The order the waiting jobs should start in (job ids, or job names), first first."""

    order: list[str] = Field(min_length=1, max_length=schema.MAX_ORDER)


def _ask(request: Request, message: dict[str, Any]) -> dict[str, Any]:
    """Forward one mutating request to the agent after checking the token."""
    _require_token(request)
    try:
        return _state(request).config.source.ask_agent(message)
    except AgentUnavailable as e:
        raise HTTPException(503, str(e)) from None
    except GpuplanError as e:  # the agent refused; its message says why
        raise HTTPException(400, str(e)) from None


def _mutating_api(app: FastAPI) -> None:
    @app.post("/api/jobs/{job_id}/cancel", summary="Cancel a job through the agent (needs the agent's token)")
    def cancel(request: Request, job_id: str) -> dict[str, Any]:
        from gpuplan.web.jobdetail import agent_job_number
        from gpuplan.web.live import BadJobIdError

        try:
            number = agent_job_number(job_id)
        except BadJobIdError as e:  # as the detail page answers it
            raise HTTPException(400, str(e)) from None
        return _ask(request, {"op": "cancel", "id": number})

    @app.post("/api/jobs", summary="Submit a job to the agent (needs the agent's token)")
    def submit(request: Request, job: SubmitRequest) -> dict[str, Any]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        return _ask(request, {"op": "submit", **job.model_dump(), "env": env})

    @app.post("/api/queue/order", summary="Reorder the waiting jobs (the agent's apply; needs its token)")
    def reorder(request: Request, body: OrderRequest) -> dict[str, Any]:
        return _ask(request, {"op": "apply", "order": body.order})

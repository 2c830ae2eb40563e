"""The HTML shells of the dashboard's views; /static/dashboard.js fills them from the JSON API."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

__all__ = [
    "docs_page",
    "job_page",
    "node_page",
    "queue_page",
    "slurm_node_page",
    "slurm_queue_page",
    "whatif_page",
]

_VIEWS = (("node", "/node", "Node"), ("queue", "/queue", "Queue"), ("whatif", "/whatif", "What-if"))


def _shell(
    view: str,
    title: str,
    body: str,
    *,
    label: str,
    is_fake: bool,
    plotly_url: str,
    script: str = "",
    plotly_later: bool = False,
) -> str:
    """The page around `body`; `script` names what dashboard.js fills in (default: the view);
    `plotly_later`: Plotly is fetched only when the page asks for it (after its table is drawn)."""
    plotly = ""
    if plotly_url and plotly_later:
        plotly = f'<script id="plotly-js" data-src="{plotly_url}"></script>\n'
    elif plotly_url:
        plotly = f'<script id="plotly-js" src="{plotly_url}" async></script>\n'
    links = "".join(
        f'<a href="{href}"{" class=active" if key == view else ""}>{name}</a>' for key, href, name in _VIEWS
    )
    links += '<a href="/metrics">/metrics</a><a href="/docs">API</a>'
    banner_cls = "source fake" if is_fake else "source"
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>gpuplan · {html.escape(title)}</title>\n"
        '<link rel="stylesheet" href="/static/dashboard.css">\n'
        + plotly
        + '<script src="/static/dashboard.js" defer></script>\n</head>\n'
        f'<body data-view="{script or view}">\n<nav><strong>gpuplan</strong>{links}</nav>\n'
        f'<p id="source" class="{banner_cls}">{html.escape(label)}</p>\n'
        f"<h1>{html.escape(title)}</h1>\n{body}\n</body>\n</html>\n"
    )


def node_page(*, label: str, is_fake: bool, plotly_url: str) -> str:
    """Per-GPU readings, utilization and memory over the last minutes, per-process table; live."""
    body = """
<p class="muted">Live: <span id="live-status">connecting…</span> · last update <span id="last-update">—</span>
· readings from <span id="origin">—</span></p>
<section><h2>GPUs</h2>
<table class="summary" id="gpu-table"><thead><tr><th>GPU</th><th>Model</th><th>Node</th>
<th class="num">Util %</th><th class="num">Memory GB</th><th class="num">Power W</th><th class="num">Temp °C</th>
</tr></thead><tbody></tbody></table></section>
<section><h2>Utilization over time (%)</h2><div id="node-util" class="plot"></div></section>
<section><h2>Memory used over time (GB)</h2><div id="node-mem" class="plot"></div></section>
<section><h2>Processes</h2>
<table class="summary" id="proc-table"><thead><tr><th>GPU</th><th>PID</th><th>Job</th><th>User</th><th>Name</th>
<th class="num">Memory GB</th><th class="num">Util %</th></tr></thead><tbody></tbody></table>
<p class="muted" id="proc-empty" hidden>No process on any GPU.</p></section>"""
    return _shell("node", "Node", body, label=label, is_fake=is_fake, plotly_url=plotly_url)


def queue_page(*, label: str, is_fake: bool, plotly_url: str, policy: str, backfill: str) -> str:
    """Running and waiting jobs in planned order, expected starts, a Gantt of the first planned jobs."""
    body = f"""
<p class="muted">Planned order: policy <b>{html.escape(policy)}</b>, backfill <b>{html.escape(backfill)}</b>.
Expected times assume each job runs as long as its estimate (1 h where it has none, marked *).</p>
<p id="queue-counts" class="muted"></p>
<p id="queue-error" class="warning" hidden></p>
<section><h2>Planned start (first jobs; hours from now)</h2><p class="muted" id="queue-gantt-note"></p>
<div id="queue-gantt" class="plot gantt"></div></section>
<section><h2>Jobs</h2>
<div class="pager"><button id="page-prev">◀ Prev</button> <span id="page-info"></span>
<button id="page-next">Next ▶</button></div>
<table class="summary" id="queue-table"><thead><tr><th class="num">#</th><th>Job</th><th>State</th><th>Name</th>
<th>User</th><th class="num">GPUs</th><th class="num">Mem GB</th><th>Submitted</th><th>Expected start</th>
<th>Expected end</th><th title="Why it waits now, in Slurm's words (Resources, Priority, JobHeldUser, QOS...)">Reason</th></tr></thead><tbody></tbody></table>
<p class="muted" id="queue-empty" hidden>The queue is empty: no job is running or waiting.</p></section>"""
    return _shell(
        "queue", "Queue", body, label=label, is_fake=is_fake, plotly_url=plotly_url, plotly_later=True
    )


def job_page(job_id: str, *, slurm: bool, label: str, is_fake: bool, plotly_url: str) -> str:
    """One job (filled from /api/jobs/ID): its fields, and for a waiting job the forecast: expected
    start and end, GPUs, Slurm's reason, what it waits for, backfill ahead of it, in words."""
    jid = html.escape(job_id[:40])
    command = (
        ""
        if slurm
        else """
<section id="job-command-section"><h2>Command</h2><pre id="job-command" hidden></pre>
<p id="job-command-note" class="muted"></p>
<form id="job-token-form"><label>Show it with the token <input type="password" id="job-token"
autocomplete="off" size="20" placeholder="$GPUPLAN_HOME/token"></label> <button type="submit">Show</button>
</form></section>"""
    )
    body = f"""
<p class="muted"><a href="/queue">◀ Queue</a> · <span id="job-source"></span> · read at <span id="last-update">—</span></p>
<p id="job-error" class="warning" hidden></p>
<section><h2>Job</h2>
<table class="summary" id="job-fields"><tbody></tbody></table></section>
<section id="job-forecast" hidden><h2>Forecast</h2>
<table class="summary" id="job-forecast-table"><tbody>
<tr><th>Reason</th><td id="job-reason"></td></tr>
<tr><th>Expected start</th><td id="job-expected-start"></td></tr>
<tr><th>Expected end</th><td id="job-expected-end"></td></tr>
<tr><th>GPUs</th><td id="job-gpus"></td></tr>
<tr><th>Waits for</th><td id="job-waiting-for"></td></tr>
<tr><th>Backfill ahead of it</th><td id="job-ahead"></td></tr>
</tbody></table>
<p><b>Why:</b> <span id="job-explanation"></span></p></section>{command}"""
    return _shell("queue", f"Job {jid}", body, label=label, is_fake=is_fake, plotly_url="",
                  script="job").replace("<body ", f'<body data-job="{jid}" data-slurm="{int(slurm)}" ', 1)  # fmt: skip


def _code_spans(text: str) -> str:
    """`text` escaped, with its `backquoted` parts as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def slurm_node_page(*, label: str, is_fake: bool, plotly_url: str) -> str:
    """Per Slurm node: state, GPUs in all, allocated and free (sinfo), its running jobs; live."""
    from gpuplan.web.slurmview import NO_GPU_READINGS

    body = f"""
<p class="muted">Live: <span id="live-status">connecting…</span> · Slurm read at <span id="last-update">—</span></p>
<p id="slurm-error" class="warning" hidden></p>
<p class="muted" id="no-gpu-readings">{_code_spans(NO_GPU_READINGS)}</p>
<p id="node-counts" class="muted"></p>
<section><h2>GPUs allocated per node</h2><div id="slurm-alloc" class="plot"></div></section>
<section><h2>Nodes</h2>
<table class="summary" id="slurm-node-table"><thead><tr><th>Node</th><th>State</th><th>Partitions</th>
<th class="num">GPUs</th><th class="num">Allocated</th><th class="num">Free</th><th>Running jobs</th>
</tr></thead><tbody></tbody></table></section>"""
    return _shell("node", "Slurm nodes", body, label=label, is_fake=is_fake, plotly_url=plotly_url,
                  script="slurm-node")  # fmt: skip


def slurm_queue_page(*, label: str, is_fake: bool, plotly_url: str, policy: str) -> str:
    """Running jobs, pending jobs in gpuplan's planned order against Slurm's, expected starts; live."""
    body = f"""
<p class="muted">Live: <span id="live-status">connecting…</span> · Slurm read at <span id="last-update">—</span>
· the plan of <code>gpuplan slurm plan --policy {html.escape(policy)}</code>; read-only
(<code>gpuplan slurm apply</code> sets that order).</p>
<p id="slurm-error" class="warning" hidden></p>
<p id="queue-counts" class="muted"></p>
<section id="plan-summary" hidden><h2>Plan against Slurm's order</h2>
<table class="summary" id="plan-table"><thead><tr><th>Order</th><th class="num">Simulated makespan</th>
<th class="num">Mean wait</th></tr></thead><tbody></tbody></table>
<p id="plan-basis" class="muted"></p><ul id="plan-warnings" class="notes"></ul>
<h3>Who gains, who loses</h3>
<p class="muted">Mean expected wait of each user's and account's planned jobs under Slurm's order and
under the plan (as <code>gpuplan slurm plan</code> prints it); the biggest losers first.</p>
<table class="summary" id="fairness-table"><thead><tr><th>By</th><th>Name</th><th class="num">Jobs</th>
<th class="num">Wait, Slurm's order</th><th class="num">Wait, plan</th><th class="num">Change</th></tr></thead>
<tbody></tbody></table></section>
<section><h2>Jobs</h2>
<p class="muted">Running jobs first (by expected end), then pending jobs in gpuplan's planned order; Slurm's
own rank and the start it gives under Slurm's order beside it. Times assume each job runs for its
planning duration (time limit or prediction); † no limit: never ends in the plan.</p>
<div class="pager"><button id="page-prev">◀ Prev</button> <span id="page-info"></span>
<button id="page-next">Next ▶</button></div>
<table class="summary" id="slurm-queue-table"><thead><tr><th class="num">#</th><th>Job</th><th>State</th>
<th>Name</th><th>User</th><th>Partition</th><th class="num">GPUs</th><th class="num">Limit</th>
<th>Nodes / reason</th><th>Submitted</th><th>Started / expected start</th><th>Expected end</th>
<th class="num">Slurm rank</th><th>Start in Slurm's order</th></tr></thead><tbody></tbody></table>
<p class="muted" id="queue-empty" hidden>The queue is empty: no job is running or pending.</p></section>"""
    del plotly_url  # no chart here
    return _shell(
        "queue", "Slurm queue", body, label=label, is_fake=is_fake, plotly_url="", script="slurm-queue"
    )


def _options(names: Sequence[str], selected: str) -> str:
    return "".join(
        f'<option value="{html.escape(n)}"{" selected" if n == selected else ""}>{html.escape(n)}</option>'
        for n in names
    )


def _checks(group: str, names: Sequence[str], checked: Sequence[str]) -> str:
    return "".join(
        f'<label class="check"><input type="checkbox" name="{group}" value="{html.escape(n)}"'
        f"{' checked' if n in checked else ''}> {html.escape(n)}</label>"
        for n in names
    )


def whatif_page(
    *,
    label: str,
    is_fake: bool,
    plotly_url: str,
    clusters: Sequence[str],
    policies: Sequence[str],
    backfills: Sequence[str],
    placers: Sequence[str],
    prices: str,
    watts: str,
) -> str:
    """A form (trace upload or path, cluster, policies) and the comparison it produces."""
    body = f"""
<section><h2>Trace and cluster</h2>
<form id="whatif-form">
<p><label>Upload a trace <input type="file" id="wf-file"></label>
<label>with the token <input type="password" id="wf-token" autocomplete="off" size="20"
placeholder="$GPUPLAN_HOME/token"></label> or a path under the server's trace folder
<input type="text" id="wf-path" placeholder="jobs.csv" size="40"></p>
<p><label>Cluster <select id="wf-cluster">{_options(["auto", *clusters, "trace"], "auto")}</select></label>
<label>Placer <select id="wf-placer">{_options(placers, "first-fit")}</select></label>
<label class="check"><input type="checkbox" id="wf-oracle"> oracle (true durations)</label>
<label class="check"><input type="checkbox" id="wf-skip-bad"> skip bad rows</label></p>
<p>Policies {_checks("policy", policies, policies)}</p>
<p>Backfill {_checks("backfill", backfills, ["easy"])}</p>
<p><label>Price USD per GPU-hour <input type="text" id="wf-prices" value="{html.escape(prices)}" size="40"></label>
<label>Watts busy/idle <input type="text" id="wf-watts" value="{html.escape(watts)}" size="40"></label></p>
<p><button type="submit" id="wf-run">Run what-if</button> <span id="wf-status" class="muted"></span></p>
</form></section>
<p id="whatif-error" class="error" hidden></p>
<div id="whatif-result" hidden>
<section><h2>Comparison</h2><p id="whatif-caption" class="muted"></p><ul id="whatif-notes" class="notes"></ul>
<div id="whatif-table"></div></section>
<section><h2>Saved against FIFO</h2><p id="savings-caption" class="muted"></p>
<table class="summary" id="savings-table"><thead><tr><th>Run</th><th>Placer</th><th class="num">GPU-hours saved</th>
<th class="num">USD saved</th><th class="num">kWh saved</th></tr></thead><tbody></tbody></table>
<p id="savings-costs" class="muted"></p></section>
<section><h2>Makespan and utilization</h2><div id="whatif-compare" class="plot"></div></section>
<section><h2>Utilization over time</h2><div id="whatif-util" class="plot"></div></section>
<section><h2>Gantt</h2><label class="picker">Run <select id="whatif-gantt-select"></select></label>
<p class="muted" id="whatif-gantt-note"></p><div id="whatif-gantt" class="plot gantt"></div></section>
</div>"""
    return _shell("whatif", "What-if", body, label=label, is_fake=is_fake, plotly_url=plotly_url)


def docs_page(schema: dict[str, Any], *, label: str, is_fake: bool, plotly_url: str) -> str:
    """The API from the OpenAPI schema, as a plain table (FastAPI's Swagger page needs a CDN)."""
    rows = []
    for path, ops in sorted(schema.get("paths", {}).items()):
        for method, op in ops.items():
            params = ", ".join(p["name"] for p in op.get("parameters", []))
            rows.append(
                f"<tr><td>{method.upper()}</td><td><code>{html.escape(path)}</code></td>"
                f"<td>{html.escape(op.get('summary', ''))}</td><td>{html.escape(params)}</td></tr>"
            )
    body = (
        '<p class="muted">The machine-readable schema: <a href="/openapi.json">/openapi.json</a>. '
        "POST endpoints that change anything need <code>Authorization: Bearer TOKEN</code> "
        "(the agent's token file).</p>"
        '<table class="summary" id="api-table"><thead><tr><th>Method</th><th>Path</th><th>What</th>'
        f"<th>Parameters</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    del plotly_url  # no chart here
    return _shell("docs", "API", body, label=label, is_fake=is_fake, plotly_url="")

"""The audit of a job history as one self-contained HTML page (`gpuplan audit --out DIR`).

It renders the audit's JSON object (`Audit.as_dict()` plus the trace section), which the page also
embeds as `<script type="application/json" id="audit-data">`, so the page and DIR/audit.json carry
the same numbers. Plotly's JavaScript is inlined once; figures travel as JSON blocks drawn by a small
inline script; nothing is fetched from the network.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from plotly.offline import get_plotlyjs

from gpuplan.report.theme import (
    BEST_COLOUR,
    FIFO_COLOUR,
    MUTED,
    PAGE_CSS,
    PLOT_CONFIG,
    RUN_COLOUR,
    base_layout,
    json_text_script,
)

__all__ = ["duration_text", "render_audit", "write_audit"]

_FIGURES = ("fig-hist", "fig-matrix", "fig-util", "fig-delay", "fig-whatif")


def render_audit(data: dict[str, Any], *, title: str, subtitle: str = "") -> str:
    """The HTML text of the audit page for the audit object `data` (see docs/audit.md)."""
    figures = {
        "fig-hist": _hist_figure(data["histograms"]),
        "fig-matrix": _matrix_figure(data["matrix"]),
        "fig-util": _util_figure(data.get("achieved")),
        "fig-delay": _delay_figure(data["histograms"].get("queue_delay_s")),
        "fig-whatif": _whatif_figure(data.get("what_if")),
    }
    sections = [
        _header(title, subtitle, _all_notes(data)),
        _section("Jobs", _states_table(data["states"]) + _dist_table(data["distributions"])),
        _section("Distributions", figure_block("fig-hist", figures["fig-hist"])),
        _section(
            "Profile matrix (share of GPU-hours; hover for jobs)",
            _matrix_caption(data["matrix"]) + figure_block("fig-matrix", figures["fig-matrix"]),
        ),
        _section("The article's classes", _share_table(data["article_classes"], "class")),
        _section(
            "Top users and queues",
            _share_table(data["top_users"]["top"], "user") + _share_table(data["top_queues"]["top"], "queue"),
        ),
        _section("What the cluster achieved", _achieved_block(data.get("achieved"), figures)),
        _section("What-if: the same jobs under other policies", _whatif_block(data.get("what_if"), figures)),
        json_script("audit-data", data),
    ]
    return _page(title, "\n".join(sections), [k for k, f in figures.items() if f is not None])


def write_audit(data: dict[str, Any], path: str | Path, *, title: str, subtitle: str = "") -> Path:
    """Write the audit page to `path` (parent folders created) and return the path.

    Raises:
        OSError: the file cannot be written (a read-only folder, a full disk).
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_audit(data, title=title, subtitle=subtitle), encoding="utf-8")
    return out


# --------------------------------------------------------------------------- tables


def _esc(value: object) -> str:
    return html.escape(str(value))


def _num(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


def duration_text(seconds: float | None) -> str:
    """A duration in the unit that reads best: s, min or h."""
    if seconds is None:
        return "n/a"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:,.2f} h"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], numeric_from: int = 1) -> str:
    def cells(row: Sequence[str], tag: str) -> str:
        return "".join(
            f'<{tag} class="{"num" if i >= numeric_from else ""}">{c}</{tag}>' for i, c in enumerate(row)
        )

    body = "".join(f"<tr>{cells(r, 'td')}</tr>" for r in rows)
    return f'<table class="summary"><thead><tr>{cells([_esc(h) for h in head], "th")}</tr></thead><tbody>{body}</tbody></table>'


def _states_table(states: dict[str, int]) -> str:
    total = sum(states.values()) or 1
    rows = [[_esc(s), f"{n:,}", _pct(n / total)] for s, n in states.items()]
    return "<h3>Jobs by state</h3>" + _table(["state", "jobs", "share"], rows)


_DIST_UNITS = {"duration_s": "duration", "gpus": "GPUs", "mem_gb": "GPU memory GB", "gpu_hours": "GPU-hours"}


def _dist_table(dists: dict[str, dict[str, Any]]) -> str:
    rows = []
    for key, d in dists.items():
        fmt = duration_text if key == "duration_s" else (lambda v: _num(v, 2))
        stats = [fmt(d[k]) for k in ("min", "p50", "p90", "p99", "max", "mean")]
        rows.append([_esc(_DIST_UNITS.get(key, key)), f"{d['count']:,}", *stats])
    head = ["per job", "count", "min", "p50", "p90", "p99", "max", "mean"]
    return "<h3>Distributions</h3>" + _table(head, rows)


def _share_table(entries: Sequence[dict[str, Any]], what: str) -> str:
    if not entries:
        return f'<p class="muted">No {what} in the trace.</p>'
    rows = [
        [
            _esc(e["name"]),
            f"{e['jobs']:,}",
            _pct(e["job_share"]),
            _num(e["gpu_hours"]),
            _pct(e["gpu_hour_share"]),
        ]
        for e in entries
    ]
    return _table([what, "jobs", "jobs %", "GPU-h", "GPU-h %"], rows)


def _matrix_caption(matrix: dict[str, Any]) -> str:
    b = matrix["memory_basis"]
    kind = (
        f"relative to the cluster's largest GPU ({b['reference_gpu_mem_gb']:g} GB)"
        if b["kind"] == "relative"
        else "absolute"
    )
    return (
        f'<p class="muted">Memory per GPU, {kind}: low &lt; {b["low_below_gb"]:g} GB, moderate up to '
        f"{b['high_above_gb']:g} GB, high above. {matrix['total_jobs']:,} jobs, "
        f"{matrix['total_gpu_hours']:,.1f} GPU-hours.</p>"
    )


def _achieved_block(ach: dict[str, Any] | None, figures: dict[str, Any]) -> str:
    if ach is None:
        return '<p class="muted">The trace records no start times: nothing to show.</p>'
    d = ach["queue_delay_s"]
    rows = [
        ["jobs started / never started", f"{ach['jobs_started']:,} / {ach['jobs_never_started']:,}"],
        ["span of the trace", duration_text(ach["makespan_s"])],
        ["utilization (GPUs held / cluster GPUs)", _pct(ach["utilization"])],
        ["GPUs held at the peak", f"{ach['peak_allocated_gpus']:,}"],
        ["queueing delay p50 / p90 / mean", " / ".join(duration_text(d[k]) for k in ("p50", "p90", "mean"))],
    ]
    idle = ach.get("idle_while_waiting")
    if idle is not None:
        rows += [
            ["idle GPU-h while jobs waited", _num(idle["total_gpu_h"])],
            ["… a waiting job fitted (policy, reservations)", _num(idle["usable_gpu_h"])],
            ["… fragmentation (upper estimate)", _num(idle["fragmentation_gpu_h"])],
            ["… too few idle GPUs for any waiting job", _num(idle["too_few_gpu_h"])],
        ]
        if idle.get("never_started_fit_gpu_h"):
            rows.append(["… only a job that never started fitted", _num(idle["never_started_fit_gpu_h"])])
    out = _table(["", "value"], [[_esc(a), b] for a, b in rows])
    if figures.get("fig-util") is not None:
        out += "<h3>Utilization over time</h3>" + figure_block("fig-util", figures["fig-util"])
    if figures.get("fig-delay") is not None:
        out += "<h3>Queueing delay</h3>" + figure_block("fig-delay", figures["fig-delay"])
    return out


def _whatif_block(wi: dict[str, Any] | None, figures: dict[str, Any]) -> str:
    if wi is None:
        return '<p class="muted">No what-if (no cluster).</p>'
    if wi["error"]:
        return f'<p class="warning">{_esc(wi["error"])}</p>'
    rows = []
    for r in wi["runs"]:
        label = f"{r['policy']}+{r['backfill']}"
        badge = " (best)" if label == wi["best"] else (" (FIFO)" if label == wi["fifo"] else "")
        rows.append([
            _esc(label + badge), duration_text(r["makespan_s"]), _pct(r["utilization"]),
            duration_text(r["mean_wait_s"]), duration_text(r["mean_jct_s"]),
            _num(r.get("fragmentation_mean_gpus")), _num(r.get("fragmentation_at_peak_gpus")),
        ])  # fmt: skip
    saved = wi["time_saved_s"]
    if wi.get("no_winner"):
        summary = f"<p>No best policy: {_esc(wi['no_winner'])} ({wi['jobs']:,} jobs replayed).</p>"
    elif saved is not None and saved > 0:
        summary = (
            f"<p>Best {_esc(wi['best'])}: {duration_text(saved)} sooner than {_esc(wi['fifo'])}, "
            f"about {_num(wi['gpu_hours_freed'])} GPU-hours freed ({wi['jobs']:,} jobs replayed).</p>"
        )
    else:
        summary = f"<p>No simulated policy finishes sooner than {_esc(wi['fifo'])} ({wi['jobs']:,} jobs replayed).</p>"
    head = ["policy", "makespan", "utilization", "mean wait", "mean JCT"]
    head += ["fragmented GPUs (mean)", "fragmented GPUs (at peak)"]
    table = _table(head, rows)
    extra = [f"{p} same schedule as {twin} (same job order)" for p, twin in wi["same_schedule_as"].items()]
    extra += [f"{p} not simulated: {why}" for p, why in wi["policies_skipped"].items()]
    listed = "".join(f"<li>{_esc(x)}</li>" for x in extra)
    return (
        summary
        + table
        + (f'<ul class="muted">{listed}</ul>' if extra else "")
        + figure_block("fig-whatif", figures["fig-whatif"])
    )


def _all_notes(data: dict[str, Any]) -> list[str]:
    trace = data.get("trace", {})
    notes = [f"censored: {c}" for c in trace.get("censored", [])]
    notes += list(data.get("notes", []))
    for part in ("achieved", "what_if"):
        if data.get(part):
            notes += data[part].get("notes", [])
    return notes


# --------------------------------------------------------------------------- figures (plain dicts)


def _layout(height: int, **extra: Any) -> dict[str, Any]:
    return base_layout(height=height, template="none", **extra)


_LOG_TICKS = (
    (1.0, "1 s"), (10.0, "10 s"), (60.0, "1 min"), (600.0, "10 min"), (3600.0, "1 h"), (6 * 3600.0, "6 h"),
    (86400.0, "1 d"), (7 * 86400.0, "1 w"), (30 * 86400.0, "30 d"),
)  # fmt: skip


def _bars_from_hist(h: dict[str, Any], name: str, colour: str) -> dict[str, Any] | None:
    """Bars of a histogram; a log histogram is drawn on a linear axis of log10(seconds) (bars of
    varying width misdraw on a log axis), labelled in s / min / h / d by `_log_axis`."""
    edges, counts = list(h.get("edges", [])), h.get("counts", [])
    if not counts:
        return None
    if h.get("log"):
        edges = [math.log10(max(e, 1e-9)) for e in edges]
    mids = [(a + b) / 2 for a, b in pairwise(edges)]
    widths = [b - a for a, b in pairwise(edges)]
    lo = [10**a if h.get("log") else a for a in edges[:-1]]
    hi = [10**b if h.get("log") else b for b in edges[1:]]
    return {"type": "bar", "x": mids, "y": counts, "width": widths, "name": name, "customdata": list(zip(lo, hi)),
            "marker": {"color": colour, "line": {"width": 0}},
            "hovertemplate": "%{customdata[0]:.3g} to %{customdata[1]:.3g}: %{y} jobs<extra></extra>"}  # fmt: skip


def _log_axis(h: dict[str, Any]) -> dict[str, Any]:
    """Tick labels in time units for a log10(seconds) axis of the histogram `h`."""
    edges = h.get("edges", [])
    if not h.get("log") or not edges:
        return {}
    lo, hi = edges[0], edges[-1]
    ticks = [(math.log10(v), text) for v, text in _LOG_TICKS if lo / 10 <= v <= hi * 10]
    return {"tickvals": [v for v, _ in ticks], "ticktext": [t for _, t in ticks]}


def _hist_figure(hists: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    panels = [("duration_s", "duration (log scale)"), ("gpus", "GPUs"), ("mem_gb", "GPU memory (GB)")]
    data, layout = [], _layout(360, showlegend=False, bargap=0.05)
    base_x, base_y = dict(layout["xaxis"]), dict(layout["yaxis"])
    shown = 0
    for key, title in panels:
        bars = _bars_from_hist(hists.get(key, {}), title, RUN_COLOUR)
        if bars is None:
            continue
        shown += 1
        suffix = "" if shown == 1 else str(shown)
        bars.update(xaxis=f"x{suffix}", yaxis=f"y{suffix}")
        data.append(bars)
        layout[f"xaxis{suffix}"] = {**base_x, "title": {"text": title}, **_log_axis(hists.get(key, {}))}
        layout[f"yaxis{suffix}"] = {**base_y, "title": {"text": "jobs" if shown == 1 else ""}}
    if not data:
        return None
    for i in range(shown):
        suffix = "" if i == 0 else str(i + 1)
        gap = 0.06
        layout[f"xaxis{suffix}"]["domain"] = [i / shown + gap / 2, (i + 1) / shown - gap / 2]
        layout[f"yaxis{suffix}"]["anchor"] = f"x{suffix}"
        layout[f"xaxis{suffix}"]["anchor"] = f"y{suffix}"
    return {"data": data, "layout": layout}


def _matrix_figure(matrix: dict[str, Any]) -> dict[str, Any]:
    cols = matrix["gpu_classes"]
    cell = {(c["duration"], c["memory"], c["gpus"]): c for c in matrix["cells"]}
    rows = [
        (d, m)
        for d in matrix["duration_classes"]
        for m in matrix["memory_classes"]
        if any((d, m, g) in cell for g in cols)
    ]
    z, text = [], []
    for d, m in rows:
        found = [cell.get((d, m, g)) for g in cols]
        z.append([None if c is None else 100 * c["gpu_hour_share"] for c in found])
        text.append(
            ["" if c is None else f"{100 * c['gpu_hour_share']:.1f} %<br>{c['jobs']:,} jobs" for c in found]
        )
    heat = {
        "type": "heatmap", "z": z, "x": [f"{g} GPU" for g in cols], "y": [f"{d} · {m} mem" for d, m in rows],
        "text": text, "texttemplate": "%{text}", "colorscale": "Viridis", "hoverongaps": False,
        "colorbar": {"title": {"text": "GPU-h %"}},
        "hovertemplate": "%{y}, %{x}<br>%{z:.2f} % of GPU-hours<br>%{text}<extra></extra>",
    }  # fmt: skip
    layout = _layout(120 + 44 * len(rows))
    layout["yaxis"].update(autorange="reversed")
    return {"data": [heat], "layout": layout}


def _util_figure(ach: dict[str, Any] | None) -> dict[str, Any] | None:
    if ach is None or not ach["timeline"]["t_s"]:
        return None
    tl = ach["timeline"]
    hours = [t / 3600 for t in tl["t_s"]]
    use_util = tl["utilization"] is not None
    y = [100 * u for u in tl["utilization"]] if use_util else tl["allocated_gpus"]
    data = [
        {"type": "scatter", "mode": "lines", "x": hours, "y": y, "line": {"shape": "hv", "color": BEST_COLOUR},
         "name": "utilization %" if use_util else "GPUs held"},
        {"type": "scatter", "mode": "lines", "x": hours, "y": tl["waiting_jobs"], "yaxis": "y2",
         "line": {"shape": "hv", "color": FIFO_COLOUR, "width": 1}, "name": "jobs waiting"},
    ]  # fmt: skip
    layout = _layout(380)
    layout["xaxis"]["title"] = {"text": f"hours since the first event (bins of {tl['bin_s'] / 3600:.2f} h)"}
    layout["yaxis"]["title"] = {"text": "GPUs held (% of the cluster)" if use_util else "GPUs held"}
    layout["yaxis2"] = {**layout["yaxis"], "overlaying": "y", "side": "right", "title": {"text": "jobs waiting"},
                        "showgrid": False}  # fmt: skip
    return {"data": data, "layout": layout}


def _delay_figure(h: dict[str, Any] | None) -> dict[str, Any] | None:
    bars = _bars_from_hist(h or {}, "queueing delay", FIFO_COLOUR)
    if bars is None:
        return None
    layout = _layout(320, showlegend=False, bargap=0.05)
    layout["xaxis"].update(title={"text": "start - submit (log scale)"}, **_log_axis(h or {}))
    layout["yaxis"]["title"] = {"text": "jobs"}
    return {"data": [bars], "layout": layout}


def _whatif_figure(wi: dict[str, Any] | None) -> dict[str, Any] | None:
    if not wi or not wi["runs"]:
        return None
    labels = [f"{r['policy']}+{r['backfill']}" for r in wi["runs"]]
    colours = [
        BEST_COLOUR if lb == wi["best"] else FIFO_COLOUR if lb == wi["fifo"] else RUN_COLOUR for lb in labels
    ]
    data = [
        {"type": "bar", "x": labels, "y": [r["makespan_s"] / 3600 for r in wi["runs"]], "marker": {"color": colours},
         "name": "makespan h", "hovertemplate": "%{x}: %{y:.2f} h<extra></extra>"},
        {"type": "bar", "x": labels, "y": [r["mean_wait_s"] / 3600 for r in wi["runs"]], "marker": {"color": colours},
         "name": "mean wait h", "xaxis": "x2", "yaxis": "y2", "hovertemplate": "%{x}: %{y:.3f} h<extra></extra>"},
    ]  # fmt: skip
    layout = _layout(420, showlegend=False, bargap=0.25)
    axis = {k: v for k, v in layout["yaxis"].items() if k != "title"}
    layout["xaxis"].update(domain=[0, 0.48], anchor="y")
    layout["xaxis2"] = {**layout["xaxis"], "domain": [0.52, 1], "anchor": "y2"}
    layout["yaxis"] = {**axis, "title": {"text": "makespan (h)"}, "anchor": "x"}
    layout["yaxis2"] = {**axis, "title": {"text": "mean wait (h)"}, "anchor": "x2"}
    layout["title"] = {"text": "green: best · orange: FIFO", "font": {"size": 12, "color": MUTED}}
    return {"data": data, "layout": layout}


# --------------------------------------------------------------------------- page


def _header(title: str, subtitle: str, notes: Sequence[str]) -> str:
    parts = [f"<h1>{_esc(title)}</h1>"]
    if subtitle:
        parts.append(f'<p class="subtitle">{_esc(subtitle)}</p>')
    if notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{_esc(n)}</li>" for n in notes) + "</ul>")
    return f"<header>{''.join(parts)}</header>"


def _section(heading: str, content: str) -> str:
    return f"<section><h2>{_esc(heading)}</h2>\n{content}\n</section>"


def figure_block(div_id: str, fig: dict[str, Any] | None) -> str:
    if fig is None:
        return '<p class="muted">Nothing to plot.</p>'
    text = json.dumps(fig, allow_nan=False)
    return f'<div id="{div_id}" class="plot"></div>\n{json_text_script(f"{div_id}-data", text)}'


def json_script(element_id: str, obj: object) -> str:
    return json_text_script(element_id, json.dumps(obj, allow_nan=False))


_JS = """
(function () {
  var config = %s;
  %s.forEach(function (id) {
    var block = document.getElementById(id + "-data");
    if (!block || !document.getElementById(id)) { return; }
    var f = JSON.parse(block.textContent);
    Plotly.newPlot(id, f.data, f.layout, config);
  });
})();
"""

_EXTRA_CSS = """
.summary { margin-bottom: 10px; }
.summary td.num, .summary th.num { text-align: right; }
"""


def _page(title: str, body: str, figure_ids: Sequence[str]) -> str:
    script = _JS % (json.dumps(PLOT_CONFIG), json.dumps(list(figure_ids)))
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_esc(title)}</title>\n<style>{PAGE_CSS}{_EXTRA_CSS}</style>\n"
        f'<script type="text/javascript">{get_plotlyjs()}</script>\n</head>\n<body>\n{body}\n'
        f"<script>{script}</script>\n</body>\n</html>\n"
    )

"""A self-contained HTML report of several simulated runs: summary table, charts and one Gantt per run.

The page makes no external request: Plotly's JavaScript is inlined once, every figure travels as a
JSON block that a small inline script hands to `Plotly.newPlot`, and the CSS uses system fonts.
The summary numbers are also embedded as `<script type="application/json" id="report-data">` so
tests and tools can read them back without scraping the table.
"""

from __future__ import annotations

import heapq
import html
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from gpuplan.errors import GpuplanError
from gpuplan.sim.compare import best_run, contenders, fifo_baseline, no_winner_reason, same_runs
from gpuplan.sim.result import JobRecord, SimResult

__all__ = [
    "GANTT_MAX_RECORDS",
    "GANTT_MAX_RUNS",
    "PAGE_CSS",
    "PLOT_CONFIG",
    "UTIL_MAX_POINTS",
    "ReportParts",
    "gantt_figure",
    "render_report",
    "report_data",
    "report_parts",
    "write_report",
]

GANTT_MAX_RECORDS = 5000
"""A Gantt draws at most this many records of a run (the first by start time)."""

GANTT_MAX_RUNS = 3
"""The page draws the Gantt of at most this many runs (best, FIFO baseline, searched plan)."""

UTIL_MAX_POINTS = 2000
"""A utilization line longer than this is resampled to time-weighted means over equal bins."""

_MAX_COLOUR_GROUPS = 10
_BAR_SPAN = 0.8  # share of a GPU row that its bars fill; the rest separates rows
_PALETTE = (
    "#4e9af1", "#f1a54e", "#5fc98b", "#e0607e", "#a98bf0",
    "#46c8c8", "#d8c35a", "#f07fd0", "#9fb3c8", "#c97f5f",
)  # fmt: skip
_BEST_COLOUR, _FIFO_COLOUR, _RUN_COLOUR = "#5fc98b", "#f1a54e", "#4e9af1"
_BOUND_COLOUR = "#e0607e"
_FG, _MUTED, _GRID, _PANEL = "#d6dae0", "#8b93a1", "#2c323c", "#1b1f26"
_PLOT_CONFIG = {"displaylogo": False, "responsive": True}


# --------------------------------------------------------------------------- public API


def report_data(results: Sequence[SimResult]) -> dict[str, Any]:
    """The summary numbers of every run, sorted by makespan, as a JSON-serialisable dict.

    Non-finite floats (a ratio to a zero bound, a mean over no jobs) become ``None``.

    Args:
        results: the runs to summarise.

    Returns:
        ``{"runs": [...], "best": label | None, "lower_bounds_s": [...]}``. Each run has ``label``
        (unique within the report), ``policy``, ``backfill``, ``placer``, ``oracle``, ``is_fifo``,
        ``is_best``, ``records``, ``gantt_records`` (how many the Gantt draws), ``gantt_truncated``,
        ``warnings``, ``same_run_as`` (the label of an earlier run with the same schedule, or None),
        ``uses_true_durations``, ``estimates`` (`EstimateUse.as_dict()`) and ``metrics``
        (``Metrics.as_dict()``). The best run is the one with the
        smallest makespan among the non-oracle runs (among all runs when every run is an oracle).
    """
    runs = _sorted_runs(results)
    labels = _unique_labels(runs)
    best = _best_index(runs)
    same = same_runs(runs)
    drawn = _gantt_runs(runs)
    entries = [_run_entry(r, labels[i], i == best, same.get(i), i in drawn) for i, r in enumerate(runs)]
    bounds = sorted({r.metrics.lower_bound_s for r in runs if math.isfinite(r.metrics.lower_bound_s)})
    return {
        "runs": entries,
        "best": labels[best] if best is not None else None,
        "no_winner": no_winner_reason(runs),
        "lower_bounds_s": bounds,
    }


@dataclass(slots=True)
class ReportParts:
    """The pieces of the report for another page to embed (the live dashboard's what-if view).

    Attributes:
        data: `report_data` of the runs (sorted by makespan, best marked).
        summary_html: the summary table with its legend.
        compare: the makespan and utilization bars, a Plotly figure dict.
        util: utilization over time, one line per run, a Plotly figure dict.
        runs: the runs in the order of ``data["runs"]`` (for `gantt_figure`).
        best: index of the best run in ``runs``, or of the first policy run when no run may be called
            best (``data["no_winner"]`` says why; the Gantt opens on this run).
    """

    data: dict[str, Any]
    summary_html: str
    compare: dict[str, Any]
    util: dict[str, Any]
    runs: list[SimResult]
    best: int


def report_parts(results: Sequence[SimResult]) -> ReportParts:
    """The summary table and comparison figures of ``results``, as `render_report` draws them.

    Raises:
        GpuplanError: ``results`` is empty; there is nothing to report.
    """
    if not results:
        raise GpuplanError("no runs to report: results is empty; pass at least one SimResult")
    runs = _sorted_runs(results)
    data = report_data(runs)
    labels = [e["label"] for e in data["runs"]]
    lead = contenders(runs)[0]  # the best run, or the first policy run when none is best
    best = next(i for i, r in enumerate(runs) if r is lead)
    return ReportParts(
        data=data,
        summary_html=_summary_table(data),
        compare=_plain(_compare_figure(runs, data)),
        util=_plain(_util_figure(runs, labels, best)),
        runs=runs,
        best=best,
    )


def _plain(fig: go.Figure) -> dict[str, Any]:
    """A figure as plain JSON types (plotly's encoder turns numpy arrays into lists)."""
    plain: dict[str, Any] = json.loads(fig.to_json())
    return plain


def gantt_figure(result: SimResult) -> dict[str, Any]:
    """The Gantt of one run as a Plotly figure dict (its first GANTT_MAX_RECORDS jobs by start)."""
    return _gantt_figure(result, _gantt_records(result))


def render_report(
    results: Sequence[SimResult], *, title: str, subtitle: str = "", notes: Sequence[str] = ()
) -> str:
    """The HTML text of the report; see the module docstring for what the page holds.

    Args:
        results: the runs to show, in any order (the page sorts them by makespan).
        title: the page heading.
        subtitle: one line under the heading, e.g. the cluster's ``describe()`` and the trace name.
        notes: extra lines for the header, e.g. "oracle run: policies saw true durations".

    Raises:
        GpuplanError: ``results`` is empty; there is nothing to report.
    """
    parts = report_parts(results)
    body = "\n".join(
        [
            _header(title, subtitle, notes),
            _section("Summary", parts.summary_html),
            _section("Makespan and utilization", _figure_block("fig-compare", parts.compare)),
            _section("Utilization over time", _figure_block("fig-util", parts.util)),
            _section("Gantt per run", _gantt_section(parts.runs, parts.data, parts.best)),
            _json_script("report-data", parts.data),
        ]
    )
    return _page(title, body)


def write_report(
    results: Sequence[SimResult],
    path: str | Path,
    *,
    title: str,
    subtitle: str = "",
    notes: Sequence[str] = (),
) -> Path:
    """Write the report of ``results`` to ``path`` (parent folders are created) and return the path.

    Args:
        results: the runs to show.
        path: the HTML file to write.
        title: the page heading.
        subtitle: one line under the heading.
        notes: extra header lines.

    Raises:
        GpuplanError: ``results`` is empty.
        OSError: the file cannot be written (a read-only folder, a full disk).
    """
    out = Path(path)
    text = render_report(results, title=title, subtitle=subtitle, notes=notes)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out


# --------------------------------------------------------------------------- summary numbers


def _sorted_runs(results: Sequence[SimResult]) -> list[SimResult]:
    return sorted(results, key=_rank)


def _sort_key(value: float) -> float:
    return value if math.isfinite(value) else math.inf


def _rank(r: SimResult) -> tuple[float, float, str, str]:
    """Best first, as the CLI ranks: makespan, then mean JCT for equal makespans, then the label."""
    return (round(_sort_key(r.metrics.makespan_s), 6), _sort_key(r.metrics.mean_jct_s), r.label, r.placer)


def _unique_labels(runs: Sequence[SimResult]) -> list[str]:
    """Run labels, with the placer and then a number added where two runs would share one."""
    counts = Counter(r.label for r in runs)
    labels = [f"{r.label} [{r.placer}]" if counts[r.label] > 1 else r.label for r in runs]
    seen: Counter[str] = Counter()
    unique = []
    for label in labels:
        seen[label] += 1
        unique.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return unique


_PLAN = "plan"  # policy name of an order searched by `gpuplan plan`


def _best_index(runs: Sequence[SimResult]) -> int | None:
    """Index of the best run as `gpuplan.sim.compare` decides (None when no run may be called best)."""
    best = best_run(runs, ranked=True)
    return None if best is None else next(i for i, r in enumerate(runs) if r is best)


def _gantt_runs(runs: Sequence[SimResult]) -> set[int]:
    """Indices of the runs whose Gantt the page draws: the best run (or the first policy run when none
    is best), the FIFO baseline (`sim.compare.fifo_baseline`) and searched plans. Drawing every
    run of a 24-run comparison made pages of hundreds of MB that no browser opens."""
    lead = contenders(runs)[0]
    base = fifo_baseline(runs)
    keep = [lead, *([base] if base is not None else []), *(r for r in runs if r.policy == _PLAN)]
    return {i for i, r in enumerate(runs) if any(r is k for k in keep[:GANTT_MAX_RUNS])}


def _run_entry(
    r: SimResult, label: str, is_best: bool, same_as: str | None = None, gantt: bool = True
) -> dict[str, Any]:
    shown = min(len(r.records), GANTT_MAX_RECORDS) if gantt else 0
    return {
        "label": label,
        "policy": r.policy,
        "backfill": r.backfill,
        "placer": r.placer,
        "oracle": r.oracle,
        "is_fifo": r.policy == "fifo",
        "is_best": is_best,
        "records": len(r.records),
        "gantt_drawn": gantt,
        "gantt_records": shown,
        "gantt_truncated": gantt and shown < len(r.records),
        "warnings": list(r.warnings),
        "same_run_as": same_as,
        "uses_true_durations": r.uses_true_durations,
        "estimates": r.estimates.as_dict(),
        "metrics": {k: _finite(v) for k, v in r.metrics.as_dict().items()},
    }


def _finite(value: float | int) -> float | int | None:
    return value if isinstance(value, int) or math.isfinite(value) else None


# --------------------------------------------------------------------------- HTML pieces


def _header(title: str, subtitle: str, notes: Sequence[str]) -> str:
    parts = [f"<h1>{html.escape(title)}</h1>"]
    if subtitle:
        parts.append(f'<p class="subtitle">{html.escape(subtitle)}</p>')
    if notes:
        items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
        parts.append(f'<ul class="notes">{items}</ul>')
    return f"<header>{''.join(parts)}</header>"


def _section(heading: str, content: str) -> str:
    return f"<section><h2>{html.escape(heading)}</h2>\n{content}\n</section>"


_COLUMNS = (
    ("#", ""),
    ("Run", ""),
    ("Placer", ""),
    ("Makespan h", "num"),
    ("Util %", "num"),
    ("Mean JCT h", "num"),
    ("P95 JCT h", "num"),
    ("Mean wait h", "num"),
    ("Mean bounded slowdown", "num"),
    ("Idle GPU-h while jobs waited", "num"),
    ("Lower bound h", "num"),
    ("× bound", "num"),
)


def _summary_table(data: dict[str, Any]) -> str:
    head = "".join(f'<th class="{cls}">{html.escape(name)}</th>' for name, cls in _COLUMNS)
    # One shared bound (the usual case: every run replays one trace on one cluster) gets its own row;
    # several would interleave with the runs and say little, so then each run's column stands alone.
    n_bounds = len(data["lower_bounds_s"])
    bounds = list(data["lower_bounds_s"]) if n_bounds == 1 else []
    rows = []
    for rank, entry in enumerate(data["runs"], start=1):
        makespan = entry["metrics"]["makespan_s"]
        while bounds and (makespan is None or bounds[0] <= makespan):
            rows.append(_bound_row(bounds.pop(0)))
        rows.append(_run_row(rank, entry))
    rows.extend(_bound_row(b) for b in bounds)
    legend = (
        '<p class="legend"><span class="badge best">best</span> smallest makespan of the policies (oracle runs and searched orders aside) '
        '<span class="badge fifo">FIFO</span> first-in first-out baseline '
        '<span class="badge bound">bound</span> no schedule can finish sooner</p>'
    )
    if data["no_winner"]:
        legend += f'<p class="warning">No best run: {html.escape(data["no_winner"])}.</p>'
    if n_bounds > 1:
        legend += (
            f'<p class="warning">The runs have {n_bounds} different lower bounds (different workloads or '
            "clusters?); each run's bound is in its row.</p>"
        )
    table = f'<table class="summary"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    return table + legend


def _run_row(rank: int, entry: dict[str, Any]) -> str:
    m = entry["metrics"]
    badges = "".join(
        f' <span class="badge {cls}">{text}</span>'
        for cls, text, on in (
            ("best", "best", entry["is_best"]),
            ("fifo", "FIFO", entry["is_fifo"]),
            ("oracle", "oracle", entry["oracle"]),
            ("oracle", "searched order", entry["policy"] == _PLAN),
        )
        if on
    )
    classes = " ".join(c for c, on in (("best", entry["is_best"]), ("fifo", entry["is_fifo"])) if on)
    cells = [
        str(rank),
        html.escape(entry["label"]) + badges,
        html.escape(entry["placer"]),
        _hours(m["makespan_s"]),
        _num(None if m["utilization"] is None else 100 * m["utilization"], 1),
        _hours(m["mean_jct_s"]),
        _hours(m["p95_jct_s"]),
        _hours(m["mean_wait_s"]),
        _num(m["mean_bounded_slowdown"], 2),
        _num(m["idle_gpu_hours_while_waiting"], 1),
        _hours(m["lower_bound_s"]),
        _num(m["bound_ratio"], 3),
    ]
    return _row(cells, classes)


def _bound_row(bound_s: float) -> str:
    dash = "—"
    cells = ["", '<span class="badge bound">bound</span> lower bound', "", _hours(bound_s)]
    cells += [dash] * 6 + [_hours(bound_s), "1.000"]
    return _row(cells, "bound")


def _row(cells: Sequence[str], classes: str) -> str:
    tds = "".join(f'<td class="{cls}">{c}</td>' for c, (_, cls) in zip(cells, _COLUMNS, strict=True))
    return f'<tr class="{classes}">{tds}</tr>' if classes else f"<tr>{tds}</tr>"


def _hours(seconds: float | None) -> str:
    return _num(None if seconds is None else seconds / 3600, 2)


def _num(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _json_script(element_id: str, obj: object) -> str:
    return _json_text_script(element_id, json.dumps(obj, allow_nan=False))


def _json_text_script(element_id: str, text: str) -> str:
    # "<" and ">" never appear outside JSON strings, so escaping them keeps "</script>" out of the block.
    safe = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="{element_id}">{safe}</script>'


def _figure_block(div_id: str, fig: dict[str, Any]) -> str:
    text = json.dumps(fig)
    return f'<div id="{div_id}" class="plot"></div>\n{_json_text_script(f"{div_id}-data", text)}'


# --------------------------------------------------------------------------- figures


def _base_layout(**extra: Any) -> dict[str, Any]:
    axis = {"gridcolor": _GRID, "zerolinecolor": _GRID, "linecolor": _GRID}
    layout: dict[str, Any] = {
        "paper_bgcolor": _PANEL,
        "plot_bgcolor": _PANEL,
        "font": {"color": _FG, "family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif"},
        "margin": {"l": 70, "r": 20, "t": 30, "b": 50},
        "xaxis": {**axis, "automargin": True},
        "yaxis": {**axis, "automargin": True},
        "legend": {"bgcolor": "rgba(0,0,0,0)"},
        "hoverlabel": {"bgcolor": "#0f1216", "bordercolor": _GRID, "font": {"color": _FG}},
    }
    layout.update(extra)
    return layout


def _run_colour(entry: dict[str, Any]) -> str:
    if entry["is_best"]:
        return _BEST_COLOUR
    return _FIFO_COLOUR if entry["is_fifo"] else _RUN_COLOUR


def _compare_figure(runs: Sequence[SimResult], data: dict[str, Any]) -> go.Figure:
    entries = data["runs"]
    labels = [e["label"] for e in entries]
    marker = {
        "color": [_run_colour(e) for e in entries],
        "pattern": {"shape": ["/" if e["oracle"] else "" for e in entries]},
    }
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.06)
    makespan_h = [r.metrics.makespan_s / 3600 for r in runs]
    util_pct = [100 * r.metrics.utilization for r in runs]
    tpl = "<b>%{x}</b><br>%{y:.2f}"
    makespan = go.Bar(x=labels, y=makespan_h, marker=marker, name="makespan h", hovertemplate=tpl + " h")
    util = go.Bar(x=labels, y=util_pct, marker=marker, name="utilization %", hovertemplate=tpl + " %")
    fig.add_trace(makespan, row=1, col=1)
    fig.add_trace(util, row=2, col=1)
    _add_bounds(fig, runs, labels, data["lower_bounds_s"])
    axis = {"gridcolor": _GRID, "zerolinecolor": _GRID, "linecolor": _GRID, "automargin": True}
    fig.update_layout(
        _base_layout(height=560, showlegend=False, bargap=0.25, template="none"),
        yaxis={**axis, "title": {"text": "makespan (h)"}},
        yaxis2={**axis, "title": {"text": "utilization (%)"}, "range": [0, 100]},
        xaxis={**axis},
        xaxis2={**axis, "tickangle": -35 if len(labels) > 6 else 0},
    )
    return fig


def _add_bounds(fig: go.Figure, runs: Sequence[SimResult], labels: list[str], bounds: list[float]) -> None:
    """The lower bound on the makespan panel: one line when shared, else a tick on each run's bar."""
    if len(bounds) == 1:
        fig.add_hline(
            y=bounds[0] / 3600,
            line={"color": _BOUND_COLOUR, "dash": "dash", "width": 2},
            annotation={
                "text": f"lower bound {bounds[0] / 3600:.2f} h",
                "font": {"color": _BOUND_COLOUR},
                "bgcolor": _PANEL,
            },
            annotation_position="top left",
            row=1,
            col=1,
        )
    elif bounds:
        ticks = go.Scatter(
            x=labels,
            y=[r.metrics.lower_bound_s / 3600 for r in runs],
            mode="markers",
            name="lower bound",
            marker={"symbol": "line-ew-open", "size": 26, "line": {"width": 3, "color": _BOUND_COLOUR}},
            hovertemplate="<b>%{x}</b><br>lower bound %{y:.2f} h<extra></extra>",
        )
        fig.add_trace(ticks, row=1, col=1)


def _util_series(r: SimResult) -> tuple[list[float], list[float], bool]:
    """(hours, % of the cluster's GPUs, resampled?) of a run's utilization step function."""
    total = max(r.cluster.total_gpus, 1)
    points: dict[float, int] = {}
    for t, occupied in r.util_timeline:  # the last entry at one time wins
        points[t] = occupied
    times = sorted(points)
    if not times:
        return [], [], False
    end = max(times[-1], r.metrics.makespan_s if math.isfinite(r.metrics.makespan_s) else times[-1])
    xs, ys = [times[0]], [float(points[times[0]])]
    for t in times[1:]:
        if points[t] != ys[-1]:
            xs.append(t)
            ys.append(float(points[t]))
    xs.append(end)
    ys.append(ys[-1])  # carry the last level to the end so the final step is drawn
    resampled = len(xs) > UTIL_MAX_POINTS
    if resampled:
        xs, ys = _resample_steps(xs, ys, UTIL_MAX_POINTS)
    return [round(x / 3600, 5) for x in xs], [round(100 * y / total, 3) for y in ys], resampled


def _resample_steps(xs: list[float], ys: list[float], bins: int) -> tuple[list[float], list[float]]:
    """Time-weighted mean of a step function over ``bins`` equal bins, as a step function again."""
    x = np.asarray(xs, dtype=float)
    area = np.concatenate([[0.0], np.cumsum(np.diff(x) * np.asarray(ys[:-1], dtype=float))])
    edges = np.linspace(x[0], x[-1], bins + 1)
    means = np.diff(np.interp(edges, x, area)) / np.maximum(np.diff(edges), 1e-12)
    return [*edges[:-1].tolist(), float(edges[-1])], [*means.tolist(), float(means[-1])]


def _util_figure(runs: Sequence[SimResult], labels: Sequence[str], best: int) -> go.Figure:
    fig = go.Figure()
    resampled = []
    for i, (r, label) in enumerate(zip(runs, labels, strict=True)):
        xs, ys, was_resampled = _util_series(r)
        if was_resampled:
            resampled.append(label)
        fig.add_trace(
            go.Scattergl(  # WebGL: dozens of long step lines stay fluid
                x=xs,
                y=ys,
                name=label,
                mode="lines",
                line={"shape": "hv", "width": 3 if i == best else 1.5},
                # many runs drawn at once are unreadable: best, FIFO and a searched plan first,
                # the others one click away in the legend
                visible=True if len(runs) <= 6 or i == best or r.policy in ("fifo", _PLAN) else "legendonly",
                hovertemplate=f"{html.escape(label)}<br>%{{x:.2f}} h: %{{y:.1f}} %<extra></extra>",
            )
        )
    layout = _base_layout(height=440, colorway=list(_PALETTE), template="none")
    layout["xaxis"]["title"] = {"text": "time since first submit (h)"}
    layout["yaxis"].update(title={"text": "GPUs occupied (%)"}, range=[0, 105])
    if resampled:
        layout["title"] = {
            "text": f"resampled to {UTIL_MAX_POINTS:,} time-weighted bins: {', '.join(resampled)}",
            "font": {"size": 12, "color": _MUTED},
        }
    fig.update_layout(layout)
    return fig


# --------------------------------------------------------------------------- Gantt


def _gantt_records(r: SimResult) -> list[JobRecord]:
    """The first GANTT_MAX_RECORDS records of a run by start time."""
    return sorted(r.records, key=lambda rec: (rec.start_s, rec.job_id))[:GANTT_MAX_RECORDS]


def _lanes(records: Sequence[JobRecord]) -> tuple[dict[tuple[int, int], int], dict[int, int]]:
    """Lane of each (record index, GPU) so overlapping jobs on one GPU get separate lanes.

    Returns:
        ``lane[(record index, gpu)]`` and ``lanes_per_gpu[gpu]`` (the most jobs at once on it).
    """
    busy: dict[int, list[tuple[float, int]]] = {}  # gpu -> heap of (end_s, lane) of jobs on it
    free: dict[int, list[int]] = {}  # gpu -> heap of lanes released
    lane: dict[tuple[int, int], int] = {}
    count: dict[int, int] = {}
    for i, rec in enumerate(records):  # records are in start order
        for g in rec.gpus:
            heap, spare = busy.setdefault(g, []), free.setdefault(g, [])
            while heap and heap[0][0] <= rec.start_s:
                heapq.heappush(spare, heapq.heappop(heap)[1])
            chosen = heapq.heappop(spare) if spare else count.get(g, 0)
            count[g] = max(count.get(g, 0), chosen + 1)
            heapq.heappush(heap, (rec.end_s, chosen))
            lane[(i, g)] = chosen
    return lane, count


def _colour_groups(records: Sequence[JobRecord]) -> dict[str, str]:
    """Map job name to its legend group: the most common names keep theirs, the rest are "other"."""
    names = Counter(rec.name or "(unnamed)" for rec in records)
    top = [n for n, _ in names.most_common(_MAX_COLOUR_GROUPS - 1)]
    if len(names) == _MAX_COLOUR_GROUPS:
        top = list(names)
    return {n: (n if n in top else "other") for n in names}


def _gpu_text(gpus: Sequence[int], labels: Sequence[str]) -> str:
    names = [labels[g] if 0 <= g < len(labels) else f"gpu{g}" for g in gpus]
    shown = ", ".join(names[:4]) + (", …" if len(names) > 4 else "")
    return f"{len(names)} ({shown})"


_GANTT_HOVER = (
    "<b>%{customdata[0]}</b> %{customdata[1]}<br>GPUs: %{customdata[2]}<br>"
    "start %{customdata[3]:.3f} h, end %{customdata[4]:.3f} h<br>wait %{customdata[5]:.3f} h<extra></extra>"
)


def _blocks(
    i: int, gpus: Sequence[int], lanes: tuple[dict[tuple[int, int], int], dict[int, int]]
) -> list[tuple[float, float]]:
    """(row centre, bar width in rows) of the bars of record `i`: one per run of consecutive GPUs that the job
    holds alone (a 128-GPU job is one bar, not 128), one per GPU where GPUs are shared (lanes)."""
    lane, lanes_per_gpu = lanes
    out: list[tuple[float, float]] = []
    start = prev = -2
    for g in sorted(gpus):
        if lanes_per_gpu[g] > 1:
            height = _BAR_SPAN / lanes_per_gpu[g]
            out.append((g - _BAR_SPAN / 2 + height * (lane[(i, g)] + 0.5), height * 0.92))
            continue
        if g != prev + 1 or start < 0:
            if start >= 0:
                out.append(((start + prev) / 2, prev - start + _BAR_SPAN * 0.92))
            start = g
        prev = g
    if start >= 0:
        out.append(((start + prev) / 2, prev - start + _BAR_SPAN * 0.92))
    return out


def _gantt_traces(
    records: Sequence[JobRecord],
    labels: Sequence[str],
    lanes: tuple[dict[tuple[int, int], int], dict[int, int]],
    merge: bool = False,
) -> list[dict[str, Any]]:
    """One horizontal bar trace per colour group, as plain dicts; `merge`: one bar per block of
    consecutive GPUs a job holds alone (the report), else one bar per job and GPU (the dashboard).

    Plain dicts, not `go.Bar`: plotly's validation and deep copies of 10^4-10^5 bars cost seconds
    per run, and plotly.js reads the same JSON.
    """
    lane, lanes_per_gpu = lanes
    group_of = _colour_groups(records)
    bars: dict[str, dict[str, list[Any]]] = {}
    for i, rec in enumerate(records):
        group = group_of[rec.name or "(unnamed)"]
        cols = bars.setdefault(group, {"y": [], "base": [], "x": [], "width": [], "customdata": []})
        hover = [
            rec.job_id,
            rec.name,
            _gpu_text(rec.gpus, labels),
            round(rec.start_s / 3600, 4),
            round(rec.end_s / 3600, 4),
            round((rec.start_s - rec.submit_s) / 3600, 4),
        ]
        if merge:
            bars_of = _blocks(i, rec.gpus, lanes)
        else:
            bars_of = [
                (
                    g - _BAR_SPAN / 2 + _BAR_SPAN / lanes_per_gpu[g] * (lane[(i, g)] + 0.5),
                    _BAR_SPAN / lanes_per_gpu[g] * 0.92,
                )
                for g in rec.gpus
            ]
        for y, width in bars_of:
            cols["y"].append(round(y, 4))
            cols["base"].append(round(rec.start_s / 3600, 5))
            cols["x"].append(round(max(rec.end_s - rec.start_s, 0.0) / 3600, 5))
            cols["width"].append(round(width, 4))
            cols["customdata"].append(hover)
    order = sorted(bars, key=lambda n: (n == "other", n))
    return [
        {
            "type": "bar",
            "orientation": "h",
            "name": name,
            "marker": {"color": _PALETTE[k % len(_PALETTE)], "line": {"width": 1, "color": _PANEL}},
            "opacity": 0.9,
            "hovertemplate": _GANTT_HOVER,
            **bars[name],
        }
        for k, name in enumerate(order)
    ]


def _gantt_figure(r: SimResult, records: Sequence[JobRecord], merge: bool = False) -> dict[str, Any]:
    """The Gantt of ``records`` as a plotly figure dict: y = GPU rows (GPU 0 on top), x = hours."""
    top_gpu = max((g for rec in records for g in rec.gpus), default=-1)
    n_gpus = max(r.cluster.total_gpus, len(r.gpu_labels), top_gpu + 1, 1)
    labels = [r.gpu_labels[g] if g < len(r.gpu_labels) else f"gpu{g}" for g in range(n_gpus)]
    step = max(1, math.ceil(n_gpus / 120))  # keep tick labels legible on big clusters
    lanes = _lanes(records)
    row_px = 22 if max(lanes[1].values(), default=1) <= 1 else 40  # room for the lanes of shared GPUs
    layout = _base_layout(height=min(140 + row_px * n_gpus, 3000), barmode="overlay")
    layout["xaxis"].update(title={"text": "time since first submit (h)"})
    layout["yaxis"].update(
        tickvals=list(range(0, n_gpus, step)),
        ticktext=labels[::step],
        range=[n_gpus - 0.5, -0.5],  # GPU 0 on top
        zeroline=False,
        showgrid=False,
    )
    layout["legend"].update(title={"text": "job name"})
    return {"data": _gantt_traces(records, labels, lanes, merge), "layout": layout}


def _gantt_section(runs: Sequence[SimResult], data: dict[str, Any], best: int) -> str:
    options, panels, others = [], [], []
    for i, (r, entry) in enumerate(zip(runs, data["runs"], strict=True)):
        label = html.escape(entry["label"])
        if not entry["gantt_drawn"]:
            others.append(label)
            continue
        selected = " selected" if i == best else ""
        options.append(f'<option value="{i}"{selected}>{label}</option>')
        panels.append(_gantt_panel(i, r, entry, hidden=i != best))
    note = "One bar per job and block of GPUs it holds alone; jobs sharing a GPU are drawn in thinner lanes."
    if others:
        note += (
            f" Drawn for the runs that matter (best, FIFO baseline, searched plan); not for {len(others)} "
            f"other run(s): {', '.join(others)}. To see one: gpuplan simulate TRACE -p POLICY -b BACKFILL --out DIR."
        )
    select = (
        '<label class="picker">Run <select id="gantt-select">' + "".join(options) + "</select></label>"
        f'<p class="muted">{note}</p>'
    )
    return select + "\n" + "\n".join(panels)


def _gantt_panel(i: int, r: SimResult, entry: dict[str, Any], *, hidden: bool) -> str:
    notes = []
    if entry["gantt_truncated"]:
        notes.append(
            f'<p class="truncated">Gantt shows the first {entry["gantt_records"]:,} of '
            f"{entry['records']:,} jobs by start time.</p>"
        )
    notes.extend(f'<p class="warning">{html.escape(w)}</p>' for w in r.warnings)
    head = f"<h3>{html.escape(entry['label'])} <small>placer {html.escape(r.placer)}</small></h3>"
    fig_json = json.dumps(_gantt_figure(r, _gantt_records(r), merge=True), allow_nan=False)
    return (
        f'<div class="gantt-panel" data-run="{i}"{" hidden" if hidden else ""}>{head}{"".join(notes)}'
        f'<div id="gantt-{i}" class="plot gantt"></div>{_json_text_script(f"gantt-{i}-data", fig_json)}</div>'
    )


# --------------------------------------------------------------------------- page

_CSS = """
:root { color-scheme: dark; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 48px; background: #111418; color: #d6dae0;
  font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
header { border-bottom: 1px solid #2c323c; margin-bottom: 16px; padding-bottom: 8px; }
h1 { font-size: 22px; margin: 0 0 4px; font-weight: 600; }
h2 { font-size: 16px; margin: 28px 0 10px; font-weight: 600; color: #eef1f5; }
h3 { font-size: 14px; margin: 12px 0 6px; font-weight: 600; }
h3 small, .muted, .subtitle, .legend { color: #8b93a1; font-weight: 400; }
.subtitle { margin: 0 0 6px; }
.notes { margin: 4px 0 0; padding-left: 18px; color: #c6b98a; }
section { background: #1b1f26; border: 1px solid #2c323c; border-radius: 8px; padding: 4px 16px 16px;
  margin-bottom: 18px; }
table.summary { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
.summary th, .summary td { padding: 5px 8px; border-bottom: 1px solid #2c323c; text-align: left;
  white-space: nowrap; }
.summary th { color: #8b93a1; font-weight: 500; font-size: 12px; white-space: normal; }
.summary .num { text-align: right; }
.summary tr.best td { background: rgba(95, 201, 139, 0.10); }
.summary tr.fifo td { background: rgba(241, 165, 78, 0.07); }
.summary tr.bound td { background: rgba(224, 96, 126, 0.10); color: #e9a3b3; font-style: italic; }
.badge { display: inline-block; font-size: 11px; font-style: normal; border-radius: 4px;
  padding: 0 6px; margin-left: 2px; border: 1px solid; }
.badge.best { color: #5fc98b; } .badge.fifo { color: #f1a54e; }
.badge.oracle { color: #a98bf0; } .badge.bound { color: #e0607e; }
.picker select { background: #111418; color: #d6dae0; border: 1px solid #2c323c; border-radius: 4px;
  padding: 4px 8px; margin-left: 6px; font: inherit; }
.truncated, .warning { color: #f1a54e; margin: 4px 0; }
.plot { width: 100%; }
"""

PAGE_CSS = _CSS
"""The report's style sheet, shared with the live dashboard's pages."""
PLOT_CONFIG = _PLOT_CONFIG
"""Plotly config of every chart (no logo, responsive)."""

_JS = """
(function () {
  var config = %s;
  function figure(id) { return JSON.parse(document.getElementById(id).textContent); }
  function draw(divId) {
    var f = figure(divId + "-data");
    return Plotly.newPlot(divId, f.data, f.layout, config);
  }
  draw("fig-compare");
  draw("fig-util");
  var drawn = {};
  function show(run) {
    document.querySelectorAll(".gantt-panel").forEach(function (p) {
      p.hidden = p.getAttribute("data-run") !== run;
    });
    var divId = "gantt-" + run;
    var div = document.getElementById(divId);
    // A plot drawn inside a hidden div gets a zero size; draw on first show, then resize.
    if (!drawn[run]) {
      drawn[run] = true;
      draw(divId).then(function () { Plotly.Plots.resize(div); });
    } else {
      Plotly.Plots.resize(div);
    }
  }
  var select = document.getElementById("gantt-select");
  select.addEventListener("change", function () { show(select.value); });
  show(select.value);
})();
"""


def _page(title: str, body: str) -> str:
    script = _JS % json.dumps(_PLOT_CONFIG)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n"
        f'<script type="text/javascript">{get_plotlyjs()}</script>\n</head>\n<body>\n{body}\n'
        f"<script>{script}</script>\n</body>\n</html>\n"
    )

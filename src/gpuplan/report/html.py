"""A self-contained HTML report of several simulated runs: summary table, charts and one Gantt per run.

The page makes no external request: Plotly's JavaScript is inlined once, every figure travels as a
JSON block that a small inline script hands to `Plotly.newPlot`, and the CSS uses system fonts.
The summary numbers are also embedded as `<script type="application/json" id="report-data">` so
tests and tools can read them back without scraping the table.
"""

from __future__ import annotations

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
from gpuplan.report.gantt import GANTT_MAX_RECORDS, gantt_figure_of, gantt_records, gantt_section
from gpuplan.report.theme import (
    BEST_COLOUR,
    BOUND_COLOUR,
    FIFO_COLOUR,
    GRID,
    MUTED,
    PAGE_CSS,
    PALETTE,
    PANEL,
    PLOT_CONFIG,
    RUN_COLOUR,
    base_layout,
    figure_block,
    json_script,
)
from gpuplan.sim.compare import best_run, contenders, fifo_baseline, no_winner_reason, same_runs
from gpuplan.sim.fairness import jain_index
from gpuplan.sim.result import SimResult

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

GANTT_MAX_RUNS = 3
"""The page draws the Gantt of at most this many runs (best, FIFO baseline, searched plan)."""

UTIL_MAX_POINTS = 2000
"""A utilization line longer than this is resampled to time-weighted means over equal bins."""


# --------------------------------------------------------------------------- public API


def report_data(results: Sequence[SimResult]) -> dict[str, Any]:
    """The summary numbers of every run, sorted by makespan, as a JSON-serialisable dict.

    Non-finite floats (a ratio to a zero bound, a mean over no jobs) become ``None``.

    Args:
        results: the runs to summarise.

    Returns:
        ``{"runs": [...], "best": label | None, "lower_bounds_s": [...]}``. Each run has ``label``
        (unique within the report), ``policy``, ``backfill``, ``placer``, ``oracle``, ``is_fifo`` (the FIFO baseline only),
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
    base = fifo_baseline(runs)  # the one run the badge marks "FIFO", as the CLI's table does
    entries = [
        _run_entry(r, labels[i], i == best, same.get(i), i in drawn, r is base) for i, r in enumerate(runs)
    ]
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
    return gantt_figure_of(result, gantt_records(result))


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
            *([_section("Per user", users)] if (users := _users_table(parts.data)) else []),
            _section("Makespan and utilization", figure_block("fig-compare", parts.compare)),
            _section("Utilization over time", figure_block("fig-util", parts.util)),
            *(
                [_section("GPU fragmentation over time (FGD's measure, docs/fragmentation.md)", frag)]
                if (frag := _frag_block(parts.runs))
                else []
            ),
            _section("Gantt per run", gantt_section(parts.runs, parts.data, parts.best)),
            json_script("report-data", parts.data),
        ]
    )
    return _page(title, body)


def _frag_block(runs: Sequence[SimResult]) -> str:
    """A plot of each run's fragmentation over time (GPUs), when `simulate` computed it."""
    with_frag = [r for r in runs if r.fragmentation is not None]
    if not with_frag:
        return ""
    fig = go.Figure()
    labels = _unique_labels(runs)
    for i, r in enumerate(runs):
        series = r.fragmentation
        if series is None:
            continue
        xs, ys = [t / 3600 for t in series.times_s], series.frag_gpus
        if len(xs) > UTIL_MAX_POINTS:
            xs, ys = _resample_steps(xs, ys, UTIL_MAX_POINTS)
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                line={"shape": "hv", "color": PALETTE[i % len(PALETTE)]},
                name=f"{labels[i]} (mean {series.mean_gpus:.1f})",
            )
        )
    fig.update_layout(**base_layout(xaxis_title="hours", yaxis_title="fragmented GPUs", height=360))
    return figure_block("fig-frag", _plain(fig))


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
    r: SimResult,
    label: str,
    is_best: bool,
    same_as: str | None = None,
    gantt: bool = True,
    is_fifo: bool = False,
) -> dict[str, Any]:
    shown = min(len(r.records), GANTT_MAX_RECORDS) if gantt else 0
    return {
        "label": label,
        "policy": r.policy,
        "backfill": r.backfill,
        "placer": r.placer,
        "oracle": r.oracle,
        "is_fifo": is_fifo,
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
        "users": (users := r.user_figures()),
        "jain_index": jain_index([u["mean_bounded_slowdown"] for u in users]),
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


USERS_MAX_ROWS = 20
"""Per run, the users with the most GPU-hours the per-user table shows (the data holds them all)."""


def _users_table(data: dict[str, Any]) -> str:
    """Per-user figures of every run and Jain's index over users ("" when no job names a user)."""
    rows = []
    for entry in data["runs"]:
        users = sorted(entry["users"], key=lambda u: -u["gpu_hours"])
        for k, u in enumerate(users[:USERS_MAX_ROWS]):
            jain = _num(entry["jain_index"], 3) if k == 0 else ""
            run = html.escape(entry["label"]) if k == 0 else ""
            cells = [run, jain, html.escape(u["user"]), str(u["jobs"]), _num(u["gpu_hours"], 1),
                     _hours(u["mean_wait_s"]), _num(u["mean_bounded_slowdown"], 1)]  # fmt: skip
            rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        if len(users) > USERS_MAX_ROWS:
            rows.append(
                f'<tr><td></td><td></td><td colspan="5">… {len(users) - USERS_MAX_ROWS} more users</td></tr>'
            )
    if not rows:
        return ""
    head = "".join(
        f"<th>{h}</th>"
        for h in ("Run", "Jain's index", "User", "Jobs", "GPU-h", "Mean wait h", "Mean bounded slowdown")
    )
    legend = (
        "<p class=\"legend\">Jain's index over the users' mean bounded slowdowns: 1 when every user's "
        "jobs were slowed alike, 1/n when one user's were slowed and the others' not.</p>"
    )
    return f'<table class="summary users"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>{legend}'


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


# --------------------------------------------------------------------------- figures


def _run_colour(entry: dict[str, Any]) -> str:
    if entry["is_best"]:
        return BEST_COLOUR
    return FIFO_COLOUR if entry["is_fifo"] else RUN_COLOUR


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
    axis = {"gridcolor": GRID, "zerolinecolor": GRID, "linecolor": GRID, "automargin": True}
    fig.update_layout(
        base_layout(height=560, showlegend=False, bargap=0.25, template="none"),
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
            line={"color": BOUND_COLOUR, "dash": "dash", "width": 2},
            annotation={
                "text": f"lower bound {bounds[0] / 3600:.2f} h",
                "font": {"color": BOUND_COLOUR},
                "bgcolor": PANEL,
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
            marker={"symbol": "line-ew-open", "size": 26, "line": {"width": 3, "color": BOUND_COLOUR}},
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
    layout = base_layout(height=440, colorway=list(PALETTE), template="none")
    layout["xaxis"]["title"] = {"text": "time since first submit (h)"}
    layout["yaxis"].update(title={"text": "GPUs occupied (%)"}, range=[0, 105])
    if resampled:
        layout["title"] = {
            "text": f"resampled to {UTIL_MAX_POINTS:,} time-weighted bins: {', '.join(resampled)}",
            "font": {"size": 12, "color": MUTED},
        }
    fig.update_layout(layout)
    return fig


# --------------------------------------------------------------------------- page


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
  if (document.getElementById("fig-frag")) { draw("fig-frag"); }
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
    script = _JS % json.dumps(PLOT_CONFIG)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>{PAGE_CSS}</style>\n"
        f'<script type="text/javascript">{get_plotlyjs()}</script>\n</head>\n<body>\n{body}\n'
        f"<script>{script}</script>\n</body>\n</html>\n"
    )

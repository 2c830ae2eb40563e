"""Gantt charts of simulated runs: one row per GPU, one bar per job (and block of GPUs it holds alone),
lanes where jobs share a GPU. Used by the HTML report and the live dashboard's queue view."""

from __future__ import annotations

import heapq
import html
import json
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from gpuplan.report.theme import PALETTE, PANEL, base_layout, json_text_script
from gpuplan.sim.result import JobRecord, SimResult

__all__ = ["GANTT_MAX_RECORDS", "gantt_figure_of", "gantt_records", "gantt_section"]

GANTT_MAX_RECORDS = 5000
"""A Gantt draws at most this many records of a run (the first by start time)."""
_MAX_COLOUR_GROUPS = 10
_BAR_SPAN = 0.8  # share of a GPU row that its bars fill; the rest separates rows


def gantt_records(r: SimResult) -> list[JobRecord]:
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
            "marker": {"color": PALETTE[k % len(PALETTE)], "line": {"width": 1, "color": PANEL}},
            "opacity": 0.9,
            "hovertemplate": _GANTT_HOVER,
            **bars[name],
        }
        for k, name in enumerate(order)
    ]


def gantt_figure_of(r: SimResult, records: Sequence[JobRecord], merge: bool = False) -> dict[str, Any]:
    """The Gantt of ``records`` as a plotly figure dict: y = GPU rows (GPU 0 on top), x = hours."""
    top_gpu = max((g for rec in records for g in rec.gpus), default=-1)
    n_gpus = max(r.cluster.total_gpus, len(r.gpu_labels), top_gpu + 1, 1)
    labels = [r.gpu_labels[g] if g < len(r.gpu_labels) else f"gpu{g}" for g in range(n_gpus)]
    step = max(1, math.ceil(n_gpus / 120))  # keep tick labels legible on big clusters
    lanes = _lanes(records)
    row_px = 22 if max(lanes[1].values(), default=1) <= 1 else 40  # room for the lanes of shared GPUs
    layout = base_layout(height=min(140 + row_px * n_gpus, 3000), barmode="overlay")
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


def gantt_section(runs: Sequence[SimResult], data: dict[str, Any], best: int) -> str:
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
    fig_json = json.dumps(gantt_figure_of(r, gantt_records(r), merge=True), allow_nan=False)
    return (
        f'<div class="gantt-panel" data-run="{i}"{" hidden" if hidden else ""}>{head}{"".join(notes)}'
        f'<div id="gantt-{i}" class="plot gantt"></div>{json_text_script(f"gantt-{i}-data", fig_json)}</div>'
    )

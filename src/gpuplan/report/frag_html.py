"""The HTML page of `gpuplan frag --report DIR`: the allocated share of GPU capacity as arrivals grow,
one line per placer (seed means), and the summary table. Self-contained like the other reports:
Plotly's JavaScript inline, each figure a JSON block, the theme of report/theme.py."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from plotly.offline import get_plotlyjs

from gpuplan.report.theme import PAGE_CSS, PALETTE, PLOT_CONFIG, base_layout, figure_block, json_script

__all__ = ["write_frag_report"]

_JS = """
(function () {
  var config = %s;
  var block = document.getElementById("frag-curves-data");
  var f = JSON.parse(block.textContent);
  Plotly.newPlot("frag-curves", f.data, f.layout, config);
})();
"""


def _figure(placers: list[dict[str, Any]]) -> dict[str, Any]:
    data = []
    for i, p in enumerate(placers):
        pts = p["curve"]
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{p['placer']} ({100 * p['alloc_ratio_at_130']:.2f} %)",
                "x": [100 * c["arrived"] for c in pts],
                "y": [100 * c["allocated"] for c in pts],
                "line": {"color": PALETTE[i % len(PALETTE)], "width": 2},
            }
        )
    layout = base_layout(
        xaxis_title="GPU requests arrived (% of capacity)",
        yaxis_title="GPU capacity allocated (%)",
        height=480,
    )
    return {"data": data, "layout": layout}


def write_frag_report(out: Path, payload: dict[str, Any]) -> Path:
    """Write DIR/frag.html from the `--json` payload; returns its path."""
    out.mkdir(parents=True, exist_ok=True)
    placers = payload["placers"]
    rows = "".join(
        f"<tr><td>{html.escape(p['placer'])}</td><td class='num'>{100 * p['alloc_ratio_at_100']:.2f}</td>"
        f"<td class='num'>{100 * p['alloc_ratio_at_130']:.2f}</td>"
        f"<td class='num'>{p['unallocated_gpus_at_130']:.0f}</td><td class='num'>{p['failed_pods']:.1f}</td></tr>"
        for p in placers
    )
    table = (
        "<table class='summary'><tr><th>Placer</th><th class='num'>Allocated % at 100 % arrived</th>"
        "<th class='num'>Allocated % at end</th><th class='num'>GPUs left</th>"
        f"<th class='num'>Failed pods (mean)</th></tr>{rows}</table>"
    )
    title = "GPU fragmentation experiment"
    sub = (
        f"{payload['cluster']['describe']}; {payload['pods']} pods topped up to "
        f"{100 * payload['arrive_to']:.0f} % of GPU capacity; seeds {payload['seeds']}"
    )
    body = (
        f"<header><h1>{html.escape(title)}</h1><p class='subtitle'>{html.escape(sub)}</p></header>"
        f"<section><h2>Allocated GPU capacity as pods arrive</h2>{figure_block('frag-curves', _figure(placers))}"
        f"</section><section><h2>Per placer (seed means)</h2>{table}</section>"
        f"{json_script('report-data', payload)}"
    )
    page = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{PAGE_CSS}</style>\n"
        f'<script type="text/javascript">{get_plotlyjs()}</script>\n</head>\n<body>\n{body}\n'
        f"<script>{_JS % json.dumps(PLOT_CONFIG)}</script>\n</body>\n</html>\n"
    )
    path = out / "frag.html"
    path.write_text(page, encoding="utf-8")
    return path

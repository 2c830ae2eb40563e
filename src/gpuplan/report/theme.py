"""The look shared by every gpuplan page (simulation report, audit report, live dashboard): colours,
the style sheet, Plotly's layout and config, and how a figure travels in a page (a JSON block that a
small inline script hands to `Plotly.newPlot`)."""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "BEST_COLOUR",
    "BOUND_COLOUR",
    "FG",
    "FIFO_COLOUR",
    "GRID",
    "MUTED",
    "PAGE_CSS",
    "PALETTE",
    "PANEL",
    "PLOT_CONFIG",
    "RUN_COLOUR",
    "base_layout",
    "figure_block",
    "json_script",
    "json_text_script",
]

PALETTE = (
    "#4e9af1", "#f1a54e", "#5fc98b", "#e0607e", "#a98bf0",
    "#46c8c8", "#d8c35a", "#f07fd0", "#9fb3c8", "#c97f5f",
)  # fmt: skip
BEST_COLOUR, FIFO_COLOUR, RUN_COLOUR = "#5fc98b", "#f1a54e", "#4e9af1"
BOUND_COLOUR = "#e0607e"
FG, MUTED, GRID, PANEL = "#d6dae0", "#8b93a1", "#2c323c", "#1b1f26"
PLOT_CONFIG = {"displaylogo": False, "responsive": True}
"""Plotly config of every chart (no logo, responsive)."""


def json_script(element_id: str, obj: object) -> str:
    return json_text_script(element_id, json.dumps(obj, allow_nan=False))


def json_text_script(element_id: str, text: str) -> str:
    # "<" and ">" never appear outside JSON strings, so escaping them keeps "</script>" out of the block.
    safe = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="{element_id}">{safe}</script>'


def figure_block(div_id: str, fig: dict[str, Any]) -> str:
    text = json.dumps(fig)
    return f'<div id="{div_id}" class="plot"></div>\n{json_text_script(f"{div_id}-data", text)}'


def base_layout(**extra: Any) -> dict[str, Any]:
    axis = {"gridcolor": GRID, "zerolinecolor": GRID, "linecolor": GRID}
    layout: dict[str, Any] = {
        "paper_bgcolor": PANEL,
        "plot_bgcolor": PANEL,
        "font": {"color": FG, "family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif"},
        "margin": {"l": 70, "r": 20, "t": 30, "b": 50},
        "xaxis": {**axis, "automargin": True},
        "yaxis": {**axis, "automargin": True},
        "legend": {"bgcolor": "rgba(0,0,0,0)"},
        "hoverlabel": {"bgcolor": "#0f1216", "bordercolor": GRID, "font": {"color": FG}},
    }
    layout.update(extra)
    return layout


PAGE_CSS = """
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
"""The style sheet of every page (the dashboard adds its own rules after it)."""

"""`make bench` case frag-alibaba: `gpuplan frag` (FGD's experiment) on the Alibaba trace and cluster,
default options (10 seeds, every placer), and each placer's CPU cost per placement (issue #24: the
whole run <= 60 s on this 2-core machine; the best placer >= FGD's published 95.39 %)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["bench_frag", "frag_rows"]

PAPER_FGD = 0.9539


def frag_rows(payload: dict[str, object], wall_s: float) -> list[dict[str, object]]:
    """One row for the whole run, one per placer with its cost per placement."""
    placers = payload["placers"]
    assert isinstance(placers, list)
    best = max(placers, key=lambda p: p["alloc_ratio_at_130"])
    rows: list[dict[str, object]] = [
        {
            "case": "frag-alibaba",
            "wall_s": round(wall_s, 1),
            "placers": len(placers),
            "seeds": len(payload["seeds"]),  # type: ignore[arg-type]
            "best": best["placer"],
            "best_alloc_ratio_at_130": best["alloc_ratio_at_130"],
            "paper_fgd": PAPER_FGD,
            "floor_s": 60.0,
            "within_floor": wall_s <= 60.0 and best["alloc_ratio_at_130"] >= PAPER_FGD,
        }
    ]
    for p in placers:
        rows.append(
            {
                "case": f"frag-alibaba/{p['placer']}",
                "alloc_ratio_at_130": p["alloc_ratio_at_130"],
                "cpu_s": p["cpu_s"],
                "us_per_placement": round(1e6 * p["cpu_s"] / max(p["placements"], 1), 1),
            }
        )
    return rows


def bench_frag(trace: Path, args: tuple[str, ...] = ()) -> list[dict[str, object]]:
    if not trace.is_file():
        return [{"case": "frag-alibaba", "skipped": f"{trace} absent (real traces live in ../shared/data)"}]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "gpuplan.cli", "frag", str(trace), "--json", *args],
        capture_output=True,
        text=True,
    )
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        return [{"case": "frag-alibaba", "error": proc.stderr.strip().splitlines()[-1:]}]
    return frag_rows(json.loads(proc.stdout), took)

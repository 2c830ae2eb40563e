"""Schedules frozen before the speed work (#25) must come out of today's simulator unchanged, exactly.

tests/golden/schedules.json.gz holds 200 random small traces (exclusive, sharing and heterogeneous
clusters; estimates exact, off or missing) and, per trace, every policy (the 8 static ones, and on
exclusive clusters las, tiresias, gittins) x every backfill mode x two or three placers: per job its
start, end and GPU labels, and the run's preemptions (tests/golden/make_golden.py wrote it). The suite
re-simulates a third of each trace's runs (a different third per trace, so every policy x backfill x
placer is covered); GOLDEN_ALL=1 re-simulates all 13,116.
"""

from __future__ import annotations

import gzip
import json
import os
from functools import cache
from typing import Any

import pytest

from golden.make_golden import OUT, TRACES, schedule_of, trace_from_json


@cache
def _golden() -> dict[str, Any]:
    return json.loads(gzip.decompress(OUT.read_bytes()))


def _diff(want: list[Any], got: list[Any]) -> str:
    for w, g in zip(want[0], got[0], strict=False):
        if w != g:
            return f"first differing job: golden {w}, now {g}"
    if len(want[0]) != len(got[0]):
        return f"{len(want[0])} records golden, {len(got[0])} now"
    return f"preemptions: golden {want[1]}, now {got[1]}"


def test_golden_set_is_complete() -> None:
    data = _golden()
    assert len(data["traces"]) == TRACES
    runs = {k.split("|")[0] for t in data["traces"] for k in t["runs"]}
    assert {"fifo", "article", "las", "tiresias", "gittins"} <= runs
    assert any(t["trace"]["cluster"]["sharing"] for t in data["traces"])
    assert any(len({n[3] for n in t["trace"]["cluster"]["nodes"]}) > 1 for t in data["traces"])


@pytest.mark.parametrize("k", range(TRACES))
def test_schedules_match_golden(k: int) -> None:
    entry = _golden()["traces"][k]
    cluster, jobs = trace_from_json(entry["trace"])
    every = os.environ.get("GOLDEN_ALL") == "1"
    for n, (run, want) in enumerate(entry["runs"].items()):
        if not every and (n + k) % 3:
            continue
        policy, backfill, placer = run.split("|")
        got = json.loads(json.dumps(schedule_of(cluster, jobs, policy, backfill, placer, entry["oracle"])))
        assert got == want, f"trace {k} {run} (oracle={entry['oracle']}): {_diff(want, got)}"

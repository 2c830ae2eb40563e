"""Slurm accounting traces: `sacct --parsable2` text (format "sacct") and `sacct --json` ("sacct-json").

What to run (docs/formats.md, section "Slurm sacct", says more):

    sacct -a -P -S 2026-01-01 -E now -o JobID,JobIDRaw,JobName,User,Account,Partition,State,ExitCode,\
Submit,Start,End,Elapsed,Timelimit,AllocTRES,ReqTRES,AllocNodes,NodeList,MaxRSS,TRESUsageInMax

One job per allocation row: an array task (`123_4`) or a heterogeneous component (`14+0`) is a job of
its own. Step rows (`123.batch`, `123.extern`, `123.0`, `14+0.batch`) are folded into their job: their
peak MaxRSS and TRESUsageInMax become the job's usage. Jobs without GPUs are left out and counted under
`skipped`; jobs that never started are kept with `duration_s` None and `meta["never_started"]`.
Slurm prints times in the cluster's local time without a zone: they are read as UTC.

Parsing is pure: text in, jobs out. The exact text reader works on chunks of rows, column by column, and
parses each distinct cell text once (TRES strings, limits and states repeat); a chunk with a problem is
read again row by row, so every error names its line. Large plain files first go through pyarrow, which
splits the rows and folds the steps, and which hands the file to the exact reader at the first thing it
cannot vouch for. See docs/formats.md, "Speed", for both and for measured times.

This module is the `sacct -P` reader's front: detection and the choice of path. The exact text reader
is traces/sacct_text.py, the Arrow path traces/sacct_arrow.py, the cell parsers and the format's
constants traces/sacct_values.py, the job set every sacct reader fills traces/sacct_jobs.py, the
`--json` reader traces/sacct_json.py.
"""

from __future__ import annotations

from pathlib import Path

from gpuplan.traces import sacct_arrow
from gpuplan.traces.base import ReadOptions, TraceReader, TraceResult, register_reader
from gpuplan.traces.rows import gc_paused, head_text
from gpuplan.traces.sacct_text import read_exact
from gpuplan.traces.sacct_values import (  # re-exported: the format's public names live with the reader
    SACCT_COLUMNS,
    SACCT_COMMAND,
    SACCT_JSON_COMMAND,
    STATE_MEANINGS,
    parse_duration,
    parse_size,
    parse_tres,
)

__all__ = [
    "SACCT_COLUMNS",
    "SACCT_COMMAND",
    "SACCT_JSON_COMMAND",
    "STATE_MEANINGS",
    "SacctReader",
    "parse_duration",
    "parse_size",
    "parse_tres",
]


def _first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), "")


def _read_text(path: Path, options: ReadOptions, fmt: str) -> TraceResult:
    """Read a `sacct -P` file: through Arrow when it is large and clean, else (or then) exactly."""
    if sacct_arrow.worth_it(path):
        try:
            return sacct_arrow.read_arrow(path, options, fmt)
        except sacct_arrow.Fallback:
            pass  # the exact reader below reads it again and names any problem by its line
    return read_exact(path, options, fmt)


@register_reader
class SacctReader(TraceReader):
    """Reads `sacct --parsable2` (`-P`) output; see `SACCT_COMMAND` for the columns to ask for."""

    name = "sacct"
    description = "Slurm accounting: `sacct -a -P -o JobID,...,AllocTRES,...` text (steps folded)"
    priority = 20

    def detect(self, path: Path, head: str) -> bool:
        first = _first_line(head_text(path, head))
        if "|" not in first:
            return False
        names = {n.strip().lower() for n in first.split("|")}
        return "jobid" in names and bool(names & {"state", "elapsed", "submit", "alloctres", "reqtres"})

    def read(self, path: Path, options: ReadOptions) -> TraceResult:
        with gc_paused():
            return _read_text(path, options, self.name)

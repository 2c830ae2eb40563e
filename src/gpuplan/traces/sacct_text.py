"""The exact reader of `sacct -P` text (traces/sacct.py chooses it, or the Arrow path first).

It works on chunks of rows, column by column, and parses each distinct cell text once (TRES strings,
limits and states repeat); a chunk with a problem is read again row by row, so every error names its
line. `columns` reads the header, `TextParser` the rows, `read_exact` a whole file and `text_notes` says
what the file lacked; the Arrow path (traces/sacct_arrow.py) reuses the header and row parsers.
"""

from __future__ import annotations

import gzip
import re
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any

from gpuplan.errors import InputError
from gpuplan.model import Job
from gpuplan.traces.base import ReadOptions, TraceError, TraceResult, TruncatedTraceError
from gpuplan.traces.rows import clip, ignored_option_warnings, open_binary
from gpuplan.traces.sacct_jobs import CPU_ONLY, SHARES_ONLY, Collector
from gpuplan.traces.sacct_values import (
    ACTIVE_STATES,
    EXPECT_TIME,
    EXPECT_TRES,
    JOBID_RE,
    NO_LIMIT,
    NO_NODES,
    SACCT_COLUMNS,
    SACCT_COMMAND,
    TRES_RE,
    Alloc,
    BadValue,
    cell_alloc,
    cell_duration,
    cell_exit_code,
    cell_limit,
    cell_optional_count,
    cell_optional_size,
    cell_state,
    cell_time,
    cell_usage,
)

__all__ = ["Columns", "TextParser", "columns", "read_exact", "text_notes"]


# What each final state says about the run; kept as meta["state"] on every job.

_MEMO_LIMIT = 1 << 16


class _Memo(dict[str, Any]):
    """Parses each distinct cell text once; a bad text raises every time and is not stored."""

    def __init__(self, parse: Callable[[str], Any]) -> None:
        super().__init__()
        self.parse = parse

    def __missing__(self, text: str) -> Any:
        if len(self) >= _MEMO_LIMIT:
            self.clear()
        value = self[text] = self.parse(text)
        return value


# ---- the text reader ------------------------------------------------------------------------------

_ALIASES = {name.lower(): name for name in SACCT_COLUMNS}


@dataclass(slots=True)
class Columns:
    """Header positions by canonical column name, the labels as the file spells them, and extras."""

    header_text: str
    width: int
    index: dict[str, int]
    labels: dict[str, str]
    extras: list[tuple[int, str]]

    def label(self, name: str) -> str:
        return self.labels.get(name, name)


def columns(path: Path, line: int, text: str) -> Columns:
    names = [n.strip() for n in text.split("|")]
    width = len(names)
    if names[-1] == "" and width > 1:  # `sacct -p` ends every line with '|'
        names = names[:-1]
    where = f"{path}:{line}: header"
    if any(not n for n in names):
        raise TraceError(f"{where}: an empty column name in {clip(text)!r}; give the header sacct prints")
    index: dict[str, int] = {}
    labels: dict[str, str] = {}
    extras: list[tuple[int, str]] = []
    for i, name in enumerate(names):
        canonical = _ALIASES.get(name.lower())
        if canonical in index or name in (label for _, label in extras):
            raise TraceError(f"{where}: column {name!r} appears twice")
        if canonical is None:
            extras.append((i, name))
        else:
            index[canonical] = i
            labels[canonical] = name
    _check_required(where, index, names)
    return Columns(text, width, index, labels, extras)


def _check_required(where: str, index: dict[str, int], names: list[str]) -> None:
    missing = [c for c in ("JobID", "Submit") if c not in index]
    if "Elapsed" not in index and not {"Start", "End"} <= set(index):
        missing.append("Elapsed (or Start and End)")
    if "AllocTRES" not in index and "ReqTRES" not in index:
        missing.append("AllocTRES (or ReqTRES)")
    if missing:
        raise TraceError(
            f"{where}: required sacct column(s) {', '.join(missing)} missing; the header has: "
            f"{', '.join(names)}. Run: {SACCT_COMMAND}"
        )


_MISSING_COLUMN_NOTES = {
    "Timelimit": "requested_s unknown",
    "User": "user unknown",
    "JobName": "name unknown",
    "State": "no meta state",
    "TRESUsageInMax": "mem_gb and gpu_util_pct unknown",
    "AllocNodes": "node count taken from TRES node=",
}


_CHUNK_BYTES = 1 << 20
_ALLOC_VALUES = (
    "Submit",
    "Start",
    "End",
    "Elapsed",
    "Timelimit",
    "AllocTRES",
    "ReqTRES",
    "AllocNodes",
    "State",
    "ExitCode",
)
_EXPECT_ID = "a job id: 123, array task 123_4, pending array 123_[5-9%2], het 14+0, step 123.batch"
_TEXT_VALUES = ("User", "JobName", "Partition", "Account", "JobIDRaw", "NodeList")
_TRES_ITEMS = r"[^=,\s]+=[^=,\s]+(?:,[^=,\s]+=[^=,\s]+)*"
_TRES_COLUMN_RE = re.compile(rf"(?:{_TRES_ITEMS})?(?:\n(?:{_TRES_ITEMS})?)*", re.ASCII)
_JOBIDS_RE = re.compile(rf"{JOBID_RE.pattern}(?:\n{JOBID_RE.pattern})*", re.ASCII)


class TextParser:
    """Turns `sacct -P` rows into jobs (allocation rows) and usage (every row), a chunk of rows at a time.

    A chunk is parsed column by column: one C-level `map` per column over a memo of parsed values (or one
    regex over a whole column), then one loop assembles the jobs. A chunk with any problem (a bad value,
    a wrong field count, a blank or repeated header line) is parsed again one row at a time by the same
    code, so the error names the line and the column, and skip_bad skips just that row. Parsing has no
    effect on the collector; `commit` applies a parsed chunk.
    """

    def __init__(self, path: Path, cols: Columns, out: Collector) -> None:
        self.path = path
        self.cols = cols
        self.out = out
        self.column = "JobID"  # the column being parsed, for error messages
        self.repeated = 0
        index = cols.index
        self.i_id = index["JobID"]
        self.i_start, self.i_end = index.get("Start"), index.get("End")
        self.i_limit = index.get("Timelimit")
        self.i_rss, self.i_usage = index.get("MaxRSS"), index.get("TRESUsageInMax")
        self.memos: dict[str, _Memo] = {
            "Submit": _Memo(cell_time),
            "Start": _Memo(cell_time),
            "End": _Memo(cell_time),
            "Elapsed": _Memo(cell_duration),
            "Timelimit": _Memo(cell_limit),
            "AllocTRES": _Memo(cell_alloc),
            "ReqTRES": _Memo(cell_alloc),
            "AllocNodes": _Memo(cell_optional_count),
            "State": _Memo(cell_state),
            "ExitCode": _Memo(cell_exit_code),
            "MaxRSS": _Memo(cell_optional_size),
        }
        self.assemble = self._assembler()

    # -- chunks and rows

    def chunk(self, first: int, lines: list[str], terminated: bool) -> None:
        """Parse consecutive lines starting at line `first`; `terminated`: the last one ends with a newline."""
        rows = [line.split("|") for line in lines]
        if rows and set(map(len, rows)) == {self.cols.width} and self.cols.header_text not in lines:
            try:
                parsed = self._parse(rows, range(first, first + len(rows)))
            except BadValue:
                pass
            else:
                self.commit(*parsed)
                return
        last = len(lines) - 1
        for k, (body, cells) in enumerate(zip(lines, rows)):
            self._row(first + k, body, cells, terminated or k < last)

    def _row(self, number: int, body: str, cells: list[str], terminated: bool) -> None:
        if not body or body.isspace():
            return
        if body == self.cols.header_text:
            self.repeated += 1  # the outputs of several sacct runs in one file
            return
        try:
            if len(cells) != self.cols.width:
                raise _width_error(self.path, number, self.cols, body, len(cells), terminated)
            parsed = self._parse([cells], [number])
        except BadValue as bad:
            error = _located(self.path, number, terminated, self.cols.label(self.column), bad)
            self.out.reject(error)
            self.out.dropped.add(cells[self.i_id])
            return
        except InputError as e:
            self.out.reject(e)
            return
        self.commit(*parsed)

    def commit(
        self, numbers: Sequence[int], rows: Sequence[Sequence[str]], jobs: Iterable[Job], usage: Any
    ) -> None:
        """Keep the parsed jobs (or leave them out, or reject duplicates) and fold the usage."""
        out = self.out
        seen, kept, places = out.seen, out.jobs, out.places
        for number, cells, job in zip(numbers, rows, jobs):
            if job.gpus == 0:
                out.leave_out(SHARES_ONLY if self._shares(cells) else CPU_ONLY, job.id)
                continue
            if job.id not in seen and out.index is None:  # `out.keep` inlined: once per job
                seen.add(job.id)
                kept.append(job)
                places.append(number)
                if "never_started" in job.meta or "elapsed_s" in job.meta:
                    out.count_unfinished(job)
                continue
            first = out.keep(job, number)
            if first is not None:
                expected = (
                    f"a unique job id; line {first} already has it (was sacct run with -D/--duplicates?)"
                )
                label = self.cols.label("JobID")
                out.reject(InputError(str(self.path), number, label, job.id, expected, "JobID: duplicate"))
        if usage is not None:
            out.add_usage_columns(*usage)

    def _shares(self, cells: Sequence[str]) -> bool:
        return any(
            self.memos[c][cells[self.cols.index[c]]].shares
            for c in ("AllocTRES", "ReqTRES")
            if c in self.cols.index
        )

    # -- parsing (raises BadValue with self.column set; no effects) and assembling (never raises)

    def _parse(
        self, rows: list[list[str]], numbers: Sequence[int]
    ) -> tuple[Sequence[int], list[list[str]], Iterable[Job], Any]:
        ids = [cells[self.i_id] for cells in rows]
        at_steps = [k for k, x in enumerate(ids) if "." in x]
        keys = ids
        if at_steps:
            self._check_step_ids([ids[k] for k in at_steps])
            keys = [x.partition(".")[0] for x in ids]
        usage = self._usage(rows, keys)
        if at_steps:
            is_step = set(at_steps)
            at_jobs = [k for k in range(len(rows)) if k not in is_step]
            rows, ids, numbers = (
                [rows[k] for k in at_jobs],
                [ids[k] for k in at_jobs],
                [numbers[k] for k in at_jobs],
            )
        if not rows:
            return numbers, rows, [], usage
        return numbers, rows, self.jobs(rows, list(zip(*rows))), usage

    def jobs(
        self,
        rows: Sequence[Sequence[str]],
        columns: Sequence[Sequence[str]],
        parsed: dict[str, list[Any]] | None = None,
    ) -> Iterable[Job]:
        """The jobs of allocation rows, given also as columns; parses eagerly, assembles lazily.

        Args:
            parsed: values already parsed for some columns (the Arrow path's times), by column name.

        Raises:
            BadValue: a bad value, with `self.column` naming its column.
        """
        ids = columns[self.i_id]
        id_metas = self._ids(ids)
        parsed = parsed or {}
        values = [parsed[name] if name in parsed else self._values(name, columns) for name in _ALLOC_VALUES]
        self._check_times(columns, values)
        texts = [self._texts(name, columns) for name in _TEXT_VALUES]
        return map(self.assemble, rows, ids, id_metas, *values, *texts)

    def _check_step_ids(self, ids: list[str]) -> None:
        if _JOBIDS_RE.fullmatch("\n".join(ids)) is None:
            self.column = "JobID"
            bad = next((x for x in ids if JOBID_RE.fullmatch(x) is None), ids[0])
            raise BadValue(bad, _EXPECT_ID, "not a job id")

    def _ids(self, ids: Sequence[str]) -> Iterable[dict[str, Any] | None]:
        self.column = "JobID"
        joined = "".join(ids)
        if joined.isascii() and joined.isdigit() and "" not in ids:  # plain ids only: the common case
            return repeat(None)
        if joined.isascii():
            special = [k for k, x in enumerate(ids) if not x.isdigit()]
        else:
            special = [k for k, x in enumerate(ids) if not (x.isascii() and x.isdigit())]
        metas: list[dict[str, Any] | None] = [None] * len(ids)
        for k in special:
            metas[k] = _id_meta(ids[k])
        return metas

    def _values(self, name: str, columns: Sequence[Sequence[str]]) -> Iterable[Any]:
        i = self.cols.index.get(name)
        if i is None:
            return repeat(None)
        self.column = name
        return list(map(self.memos[name].__getitem__, columns[i]))

    def _texts(self, name: str, columns: Sequence[Sequence[str]]) -> Iterable[str]:
        i = self.cols.index.get(name)
        if i is None:
            return repeat("")
        if name == "JobIDRaw":
            return columns[i]
        return map(sys.intern, columns[i])  # one shared string per distinct user, name, node list

    def _check_times(self, columns: Sequence[Sequence[str]], values: list[Any]) -> None:
        submit, start, end = values[0], values[1], values[2]
        if None in submit:
            self.column = "Submit"
            raise BadValue(columns[self.cols.index["Submit"]][submit.index(None)], EXPECT_TIME, "missing")
        if "Elapsed" in self.cols.index:
            return
        elapsed = [None if s is None or e is None else e - s for s, e in zip(start, end)]
        if any(x is not None and x < 0 for x in elapsed):
            self.column = "End"
            k = next(k for k, x in enumerate(elapsed) if x is not None and x < 0)
            raise BadValue(columns[self.i_end][k], "an End time not before Start", "before Start")  # type: ignore[index]
        values[3] = elapsed

    def _usage(self, rows: list[list[str]], keys: list[str]) -> Any:
        """(job ids, MaxRSS bytes or None, (gpumem, gpuutil) or None) per row; None when nothing to fold."""
        rss = gpu = None
        if self.i_rss is not None:
            self.column = "MaxRSS"
            rss = list(map(self.memos["MaxRSS"].__getitem__, [cells[self.i_rss] for cells in rows]))
        if self.i_usage is not None:
            gpu = self._gpu_usage([cells[self.i_usage] for cells in rows])
        if rss is None and gpu is None:
            return None
        return keys, rss, gpu

    def _gpu_usage(self, cells: list[str]) -> list[tuple[int | None, float | None]] | None:
        self.column = "TRESUsageInMax"
        joined = "\n".join(cells)
        if _TRES_COLUMN_RE.fullmatch(joined) is None:
            bad = next((t for t in cells if t and TRES_RE.fullmatch(t) is None), cells[0])
            raise BadValue(bad, EXPECT_TRES, "bad TRES")
        if "gres/gpu" not in joined:
            return None
        return [cell_usage(t) if "gres/gpu" in t else (None, None) for t in cells]

    def _assembler(self) -> Callable[..., Job]:
        """The function that builds one Job from a row's parsed values; it never raises.

        A closure over this header's column positions: this runs once per job, so it avoids attribute
        lookups and calls (a third of the reading time).
        """
        i_limit = self.i_limit
        has_start, has_end = self.i_start is not None, self.i_end is not None
        extras = tuple(self.cols.extras)
        active, no_nodes, no_limit = ACTIVE_STATES, NO_NODES, NO_LIMIT

        def assemble(
            cells: list[str],
            job_id: str,
            id_meta: dict[str, Any] | None,
            submit: float,
            start: float | None,
            end: float | None,
            elapsed: float | None,
            limit: float | None,
            alloc_tres: Alloc | None,
            req_tres: Alloc | None,
            nodes: int | None,
            state: tuple[str, str] | None,
            exit_code: str | None,
            user: str,
            name: str,
            partition: str,
            account: str,
            raw_id: str,
            nodelist: str,
        ) -> Job:
            if alloc_tres is None or (alloc_tres.empty and req_tres is not None):
                alloc: Alloc = req_tres  # type: ignore[assignment]
            else:
                alloc = alloc_tres
            if not nodes and alloc.nodes:
                nodes = alloc.nodes
            st = None if state is None else state[0]
            if raw_id == job_id:
                raw_id = job_id  # one string object, not two
            # One dict display for the usual keys (no resizing as keys are added), then drop the empty ones.
            meta: dict[str, Any] = {
                "state": st,
                "exit_code": exit_code,
                "start_s": start,
                "end_s": end,
                "nodes": nodes,
                "partition": partition,
                "account": account,
                "job_id_raw": raw_id,
                "nodelist": nodelist,
            }
            if (
                st is None
                or not exit_code
                or start is None
                or end is None
                or nodes is None
                or not partition
                or not account
                or not raw_id
                or nodelist in no_nodes
            ):
                meta = {k: v for k, v in meta.items() if v is not None and v != "" and v not in no_nodes}
            if id_meta is not None:
                meta.update(id_meta)
            if state is not None and state[1] != st:
                meta["state_raw"] = state[1]
            if has_start:
                started = start is not None
            else:
                started = st != "PENDING" and not (alloc_tres and alloc_tres.empty)
            duration = None
            if not started or "array_pending_remainder" in meta:
                meta["never_started"] = True
            elif (end is None and has_end) or st in active:
                meta["elapsed_s"] = elapsed or 0.0  # still running: a lower bound
            else:
                duration = elapsed
            if limit is None and i_limit is not None and cells[i_limit].strip() in no_limit:
                meta["timelimit"] = no_limit[cells[i_limit].strip()]
            if alloc.gpu_types:
                meta["gpu_types"] = dict(alloc.gpu_types)
            for i, key in extras:
                if cells[i]:
                    meta[key] = cells[i]
            return Job(
                id=job_id,
                submit_s=submit,
                gpus=alloc.gpus,
                duration_s=duration,
                requested_s=limit,
                user=user,
                name=name,
                may_span_nodes=nodes is not None and nodes > 1,
                meta=meta,
                cpu_milli=alloc.cpu_milli or (req_tres.cpu_milli if req_tres else None),
                host_mem_gb=alloc.host_mem_gb or (req_tres.host_mem_gb if req_tres else None),
            )

        return assemble


def _id_meta(text: str) -> dict[str, Any]:
    m = JOBID_RE.fullmatch(text)
    if m is None:
        raise BadValue(text, _EXPECT_ID, "not a job id")
    base, task, het, step = m.groups()
    if step is not None:
        raise BadValue(text, "an allocation row id (steps follow their job's row)", "a step")
    meta: dict[str, Any] = {}
    if task is not None:
        meta["array_job_id"] = base
        if task.startswith("["):
            meta["array_task_spec"] = task[1:-1]
            meta["array_pending_remainder"] = True
        else:
            meta["array_task_id"] = int(task)
    if het is not None:
        meta["het_job_id"] = base
        meta["het_job_offset"] = int(het)
    return meta


_TRUNCATED = "a complete row; the file ends in the middle of it (no newline at the end), so it looks cut off"


def _located(path: Path, line: int, terminated: bool, column: str | None, bad: BadValue) -> InputError:
    reason = f"{column}: {bad.what}" if column else bad.what
    value = clip(bad.value) if isinstance(bad.value, str) else bad.value
    if not terminated:
        expected = f"{bad.expected}; {_TRUNCATED}"
        return TruncatedTraceError(str(path), line, column, value, expected, "truncated last line")
    return InputError(str(path), line, column, value, bad.expected, reason)


def _width_error(path: Path, line: int, cols: Columns, body: str, n: int, terminated: bool) -> InputError:
    if n < cols.width:
        by_position = {i: cols.labels[c] for c, i in cols.index.items()} | dict(cols.extras)
        column = by_position.get(n, f"#{n + 1}")
        if not terminated:
            return TruncatedTraceError(str(path), line, column, clip(body), _TRUNCATED, "truncated last line")
    else:
        column = f"#{cols.width + 1} (beyond the header)"
    expected = (
        f"{cols.width} '|'-separated fields as in the header, got {n} "
        "(a '|' inside a job name shifts the fields: rename the job or leave JobName out)"
    )
    return InputError(str(path), line, column, clip(body), expected, "wrong number of fields")


def _decoded(path: Path, first: int, block: list[bytes]) -> str:
    try:
        text = b"".join(block).decode("utf-8")
    except UnicodeDecodeError:
        for k, raw in enumerate(block):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                value = clip(raw.decode("utf-8", errors="replace"))
                raise InputError(str(path), first + k, None, value, "UTF-8 text", "not UTF-8") from e
        raise  # unreachable: some line failed to decode
    return text.removeprefix("\ufeff") if first == 1 else text


def _chunks(path: Path) -> Iterator[tuple[int, list[str], bool]]:
    """(first line number, lines without their line endings, whether the last one ended with a newline).

    Raises:
        TraceError: an unreadable file; TruncatedTraceError: gzip data cut off; InputError: not UTF-8.
    """
    with open_binary(path) as f:
        first = 1
        while True:
            try:
                block = f.readlines(_CHUNK_BYTES)
            except (EOFError, zlib.error, gzip.BadGzipFile) as e:
                expected = f"complete gzip data ({e})"
                raise TruncatedTraceError(str(path), None, None, "", expected, "truncated last line") from e
            except OSError as e:
                raise TraceError(f"{path}: cannot read the trace file: {e.strerror or e}") from e
            if not block:
                return
            text = _decoded(path, first, block)
            terminated = text.endswith("\n")
            lines = text.split("\n")
            if terminated:
                lines.pop()
            if "\r" in text:
                lines = [line.rstrip("\r") for line in lines]
            yield first, lines, terminated
            first += len(block)


def read_exact(path: Path, options: ReadOptions, fmt: str) -> TraceResult:
    out = Collector(path, options.skip_bad)
    parser: TextParser | None = None
    for first, lines, terminated in _chunks(path):
        rest = 0
        if parser is None:
            header_at = next((k for k, line in enumerate(lines) if line and not line.isspace()), None)
            if header_at is None:
                continue
            cols = columns(path, first + header_at, lines[header_at])
            parser = TextParser(path, cols, out)
            rest = header_at + 1
        parser.chunk(first + rest, lines[rest:] if rest else lines, terminated)
    if parser is None:
        raise TraceError(f"{path}: the file is empty (no header, no job rows). Run: {SACCT_COMMAND}")
    return out.result(fmt, text_notes(options, fmt, parser))


def text_notes(options: ReadOptions, fmt: str, parser: TextParser) -> list[str]:
    notes = ignored_option_warnings(options, fmt)
    if parser.repeated:
        notes.append(f"{parser.repeated} repeated header line(s) skipped (several sacct outputs in one file)")
    absent = [f"{c} ({what})" for c, what in _MISSING_COLUMN_NOTES.items() if c not in parser.cols.index]
    if absent:
        notes.append(f"sacct column(s) absent: {'; '.join(absent)}")
    return notes

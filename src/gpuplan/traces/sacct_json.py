"""Slurm accounting as `sacct --json` (openapi dbv0.0.38, Slurm 22.05; later versions' wrapped numbers
too), plain or gzipped: one record per array task or het component, steps folded into their job.

It shares the value parsers and the job model of the `sacct -P` reader (traces/sacct.py), so both give
the same jobs for the same history.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.errors import InputError
from gpuplan.model import Job
from gpuplan.traces.base import (
    ReadOptions,
    TraceError,
    TraceReader,
    TraceResult,
    TruncatedTraceError,
    register_reader,
)
from gpuplan.traces.fields import MAX_GPUS, MAX_TIME_S
from gpuplan.traces.rows import clip, gc_paused, head_text, ignored_option_warnings, open_binary
from gpuplan.traces.sacct_jobs import CPU_ONLY, SHARES_ONLY, Collector
from gpuplan.traces.sacct_values import (
    ACTIVE_STATES,
    EXPECT_AT_MOST_DURATION,
    EXPECT_AT_MOST_GPUS,
    EXPECT_AT_MOST_TIME,
    MAX_EPOCH_S,
    NO_NODES,
    SACCT_JSON_COMMAND,
    Alloc,
    BadValue,
    cell_state,
)

__all__ = ["SacctJsonReader"]

_NO_VAL = 0xFFFFFFFE  # Slurm's NO_VAL (Partition_Limit); INFINITE (UNLIMITED) is one more
_JSON_MAX = 2**53  # larger counts are not real, and would lose precision or overflow as floats


@dataclass(slots=True)
class _Usage:
    """The peaks over the steps of one JSON job record."""

    rss: int | None = None
    gpumem: int | None = None
    gpuutil: float | None = None

    def add(self, rss: int | None, gpumem: int | None, gpuutil: float | None) -> None:
        if rss is not None and (self.rss is None or rss > self.rss):
            self.rss = rss
        if gpumem is not None and (self.gpumem is None or gpumem > self.gpumem):
            self.gpumem = gpumem
        if gpuutil is not None and (self.gpuutil is None or gpuutil > self.gpuutil):
            self.gpuutil = gpuutil


class _JsonRecord:
    """One `jobs[i]` record of `sacct --json`: typed access by key path; a bad value raises BadValue."""

    def __init__(self, rec: Any, index: int) -> None:
        self.rec = rec
        self.prefix = f"jobs[{index}]"
        self.column = self.prefix

    def value(self, *keys: str | int) -> Any:
        """The value at `keys` (None when absent or null); versions 0.0.39+ wrap numbers, unwrapped here."""
        self.column = self.prefix + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys)
        node: Any = self.rec
        for key in keys:
            if isinstance(key, int):
                node = node[key] if isinstance(node, list) and key < len(node) else None
            elif isinstance(node, dict):
                node = node.get(key)
            else:
                node = None
            if node is None:
                return None
        if isinstance(node, dict) and "number" in node:
            if node.get("infinite"):
                return _NO_VAL + 1
            return node["number"] if node.get("set", True) else None
        return node

    def count(self, *keys: str | int, required: bool = False) -> int | None:
        value = self.value(*keys)
        if value is None and not required:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _JSON_MAX:
            number = isinstance(value, int | float) and not isinstance(value, bool)
            what = ("negative" if value < 0 else "too large") if number else "not a count"
            raise BadValue(_shown(value), "a whole number >= 0", "missing" if value is None else what)
        return value

    def bounded(self, value: int | None, limit: float, expected: str, what: str) -> int | None:
        """`value` (the last count read), refused beyond `limit` as a typing or unit mistake."""
        if value is not None and value > limit:
            raise BadValue(_shown(value), expected, what)
        return value

    def epoch(self, *keys: str, required: bool = False) -> int | None:
        """A time in epoch seconds, before 2100."""
        value = self.count(*keys, required=required)
        return self.bounded(value, MAX_EPOCH_S - 1, EXPECT_AT_MOST_TIME, "absurd time")

    def text(self, *keys: str | int) -> str:
        value = self.value(*keys)
        if value is None:
            return ""
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return ",".join(value)  # state.current is a list from 0.0.39 on
        if not isinstance(value, str):
            raise BadValue(_shown(value), "a string", "not a string")
        return value

    def items(self, *keys: str | int) -> list[Any]:
        value = self.value(*keys)
        if value is None:
            return []
        if not isinstance(value, list):
            raise BadValue(_shown(value), "a list", "not a list")
        return value


def _shown(value: Any) -> Any:
    """A JSON value as an error message shows it: containers as JSON text, anything long clipped."""
    if isinstance(value, dict | list):
        return clip(json.dumps(value, default=str))
    if isinstance(value, str) or len(repr(value)) > 80:
        return clip(str(value))
    return value


def _json_id(rec: _JsonRecord, meta: dict[str, Any]) -> str:
    raw = rec.count("job_id", required=True)
    meta["job_id_raw"] = str(raw)
    array_job = rec.count("array", "job_id")
    if array_job:
        task_id = rec.count("array", "task_id")
        meta["array_job_id"] = str(array_job)
        if task_id is not None:
            meta["array_task_id"] = task_id
            return f"{array_job}_{task_id}"
        spec = rec.text("array", "task").strip("[]")
        if spec:
            meta["array_task_spec"] = spec
            meta["array_pending_remainder"] = True
            return f"{array_job}_[{spec}]"
    het_job = rec.count("het", "job_id")
    if het_job:
        offset = rec.count("het", "job_offset")
        meta["het_job_id"] = str(het_job)
        if offset is not None:
            meta["het_job_offset"] = offset
            return f"{het_job}+{offset}"
    return str(raw)


def _json_alloc(rec: _JsonRecord, which: str) -> Alloc:
    untyped: int | None = None
    typed: list[tuple[str, int]] = []
    nodes: int | None = None
    cpus: int | None = None
    mem_mb: int | None = None
    shares = False
    items = rec.items("tres", which)
    for k in range(len(items)):
        kind, name = rec.text("tres", which, k, "type"), rec.text("tres", which, k, "name")
        if kind in ("cpu", "mem"):
            n = rec.count("tres", which, k, "count")
            if kind == "cpu":
                cpus = n
            else:
                mem_mb = n  # Slurm's JSON counts memory in MB
            continue
        if kind not in ("gres", "node"):
            continue
        n = rec.count("tres", which, k, "count") or 0
        if kind == "node":
            nodes = n
        elif name == "gpu":
            untyped = n
        elif name.startswith("gpu:"):
            typed.append((name[4:], n))
        elif name.split(":", 1)[0] in ("shard", "mps"):
            shares = shares or n > 0
    gpus = untyped if untyped is not None else sum(n for _, n in typed)
    if gpus > MAX_GPUS:
        rec.column = f"{rec.prefix}.tres.{which}"
        raise BadValue(gpus, EXPECT_AT_MOST_GPUS, "absurd GPU count")
    mem = None if mem_mb is None else mem_mb << 20
    return Alloc(not items, gpus, nodes, tuple(typed), shares, cpus, mem)


def _json_usage(rec: _JsonRecord) -> _Usage:
    usage = _Usage()
    for s in range(len(rec.items("steps"))):
        for k in range(len(rec.items("steps", s, "tres", "requested", "max"))):
            kind = rec.text("steps", s, "tres", "requested", "max", k, "type")
            name = rec.text("steps", s, "tres", "requested", "max", k, "name")
            if kind == "mem":
                usage.add(rec.count("steps", s, "tres", "requested", "max", k, "count"), None, None)
            elif kind == "gres" and name == "gpumem":
                usage.add(None, rec.count("steps", s, "tres", "requested", "max", k, "count"), None)
            elif kind == "gres" and name == "gpuutil":
                util = rec.count("steps", s, "tres", "requested", "max", k, "count")
                usage.add(None, None, None if util is None else float(util))
    return usage


def _json_exit(rec: _JsonRecord) -> str:
    status = rec.text("exit_code", "status")
    if not status:
        return ""
    code = rec.count("exit_code", "return_code") or 0
    signal = rec.count("exit_code", "signal", "signal_id") or 0
    return f"{code}:{signal}"


def _json_times(rec: _JsonRecord, meta: dict[str, Any], state: str) -> float | None:
    start = rec.epoch("time", "start") or None
    end = rec.epoch("time", "end") or None
    if start is not None:
        meta["start_s"] = float(start)
    if end is not None:
        meta["end_s"] = float(end)
    if start is None or "array_pending_remainder" in meta:
        meta["never_started"] = True
        return None
    elapsed = rec.bounded(
        rec.count("time", "elapsed"), MAX_TIME_S, EXPECT_AT_MOST_DURATION, "absurd duration"
    )
    if elapsed is None:
        elapsed = None if end is None else max(0, end - start)
    if state in ACTIVE_STATES or end is None:
        meta["elapsed_s"] = float(elapsed or 0)
        return None
    return None if elapsed is None else float(elapsed)


def _json_limit(rec: _JsonRecord, meta: dict[str, Any]) -> float | None:
    limit = rec.count("time", "limit")
    if limit is None or limit >= _NO_VAL:
        meta["timelimit"] = "Partition_Limit" if limit == _NO_VAL else "UNLIMITED"
        return None
    rec.bounded(
        limit, MAX_TIME_S / 60, EXPECT_AT_MOST_DURATION + " (time.limit is in minutes)", "absurd limit"
    )
    return limit * 60.0


def _json_job(rec: _JsonRecord) -> tuple[Job, Alloc, _Usage]:
    if not isinstance(rec.rec, dict):
        raise BadValue(_shown(rec.rec), "a JSON object per job", "not an object")
    meta: dict[str, Any] = {}
    job_id = _json_id(rec, meta)
    submit = rec.epoch("time", "submission", required=True)
    state_text = rec.text("state", "current")
    state = ""
    if state_text:
        state, _ = cell_state(state_text)
        meta["state"] = state
    code = _json_exit(rec)
    if code:
        meta["exit_code"] = code
    alloc = _json_alloc(rec, "allocated")
    req = _json_alloc(rec, "requested")
    if alloc.empty:
        alloc = req
    duration = _json_times(rec, meta, state)
    limit = _json_limit(rec, meta)
    nodes = rec.count("allocation_nodes") or alloc.nodes
    if nodes is not None:
        meta["nodes"] = nodes
    for key in ("partition", "account"):
        if rec.text(key):
            meta[key] = rec.text(key)
    if rec.text("nodes") not in NO_NODES:
        meta["nodelist"] = rec.text("nodes")
    if alloc.gpu_types:
        meta["gpu_types"] = dict(alloc.gpu_types)
    job = Job(
        id=job_id,
        submit_s=float(submit),  # type: ignore[arg-type]
        gpus=alloc.gpus,
        duration_s=duration,
        requested_s=limit,
        user=rec.text("user"),
        name=rec.text("name"),
        may_span_nodes=nodes is not None and nodes > 1,
        meta=meta,
        cpu_milli=alloc.cpu_milli or req.cpu_milli,
        host_mem_gb=alloc.host_mem_gb or req.host_mem_gb,
    )
    return job, alloc, _json_usage(rec)


def _json_document(path: Path) -> Any:
    with open_binary(path) as f:
        try:
            data = f.read()
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise TruncatedTraceError(
                str(path), None, None, "", f"complete gzip data ({e})", "truncated last line"
            ) from e
        except OSError as e:
            raise TraceError(f"{path}: cannot read the trace file: {e.strerror or e}") from e
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError(
            str(path), line, None, clip(repr(data[e.start : e.start + 8])), "UTF-8 text", "not UTF-8"
        ) from e
    if not text.strip():
        raise TraceError(f"{path}: the file is empty (no job records). Run: {SACCT_JSON_COMMAND}")
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError(str(path), None, None, "", "JSON nested less deeply", "bad JSON") from None
    except json.JSONDecodeError as e:
        value = clip(text.splitlines()[e.lineno - 1] if e.lineno - 1 < len(text.splitlines()) else "")
        expected = f"valid JSON ({e.msg} at line {e.lineno} char {e.colno})"
        if not text.rstrip().endswith("}"):  # sacct's JSON ends with '}': a file cut short does not
            raise TruncatedTraceError(
                str(path),
                e.lineno,
                None,
                value,
                f"{expected}; the file ends early, so it looks cut off",
                "truncated last line",
            ) from None
        raise InputError(str(path), e.lineno, None, value, expected, "bad JSON") from None


def _json_jobs(path: Path, doc: Any) -> list[Any]:
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise TraceError(
            f"{path}: not `sacct --json` output (no top-level 'jobs' list). Run: {SACCT_JSON_COMMAND}"
        )
    first = jobs[0] if jobs else None
    if isinstance(first, dict) and "time" not in first and "submit_time" in first:
        raise TraceError(
            f"{path}: this is `squeue --json` output (the live queue), not accounting; "
            f"run: {SACCT_JSON_COMMAND}"
        )
    return jobs


def _read_json(path: Path, options: ReadOptions, fmt: str) -> TraceResult:
    out = Collector(path, options.skip_bad, usage_column="steps[].tres.requested.max (gres/gpumem)")
    notes = ignored_option_warnings(options, fmt)
    for index, raw in enumerate(_json_jobs(path, _json_document(path))):
        rec = _JsonRecord(raw, index)
        try:
            job, alloc, usage = _json_job(rec)
        except BadValue as bad:
            field = rec.column.removeprefix(rec.prefix).lstrip(".") or "record"
            reason = f"{field}: {bad.what}"
            out.reject(InputError(str(path), None, rec.column, bad.value, bad.expected, reason))
            continue
        if job.gpus == 0:
            out.leave_out(SHARES_ONLY if alloc.shares else CPU_ONLY, job.id)
            continue
        first = out.keep(job, index)
        if first is not None:
            expected = f"a unique job id; jobs[{first}] already has it"
            out.reject(InputError(str(path), None, rec.prefix, job.id, expected, "id: duplicate"))
            continue
        out.add_usage(job.id, usage.rss, usage.gpumem, usage.gpuutil)
    notes.append(
        "exit codes come from `sacct --json`, which in Slurm 22.05 loses plain non-zero exits "
        "(exit 3 reads 0:0); signals survive. Use `sacct -P` ExitCode when exit codes matter"
    )
    return out.result(fmt, notes)


@register_reader
class SacctJsonReader(TraceReader):
    """Reads `sacct --json` output (openapi dbv0.0.38, Slurm 22.05; later versions' wrapped numbers too),
    plain or gzipped."""

    name = "sacct-json"
    description = "Slurm accounting: `sacct -a --json` (plain or .gz; steps folded)"
    priority = 20

    def detect(self, path: Path, head: str) -> bool:
        text = head_text(path, head).lstrip()
        return text.startswith("{") and '"jobs"' in text and ('"submission"' in text or "openapi/dbv" in text)

    def read(self, path: Path, options: ReadOptions) -> TraceResult:
        with gc_paused():
            return _read_json(path, options, self.name)

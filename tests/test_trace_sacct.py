"""Slurm sacct readers: real captured `sacct -P` / `sacct --json` output (when ../shared is present), hand-written
messy fixtures, every class of bad input, and fuzzing that only gpuplan errors escape."""

from __future__ import annotations

import copy
import gzip
import importlib.util
import json
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.errors import GpuplanError, InputError
from gpuplan.model import Job
from gpuplan.traces import (
    ReadOptions,
    TraceError,
    TruncatedTraceError,
    read_trace,
    reader_names,
    sacct_arrow,
    sacct_text,
)
from gpuplan.traces import base as traces_base
from gpuplan.traces import sacct as sacct_module
from gpuplan.traces.sacct import (
    SACCT_COLUMNS,
    SACCT_COMMAND,
    STATE_MEANINGS,
    parse_duration,
    parse_size,
    parse_tres,
)

CAPTURED = Path(__file__).resolve().parents[1].parent / "shared" / "slurm" / "captured"
FIXTURES = Path(__file__).parent / "fixtures" / "sacct"
needs_captured = pytest.mark.skipif(not CAPTURED.is_dir(), reason="../shared/slurm/captured absent")

HEADER = "|".join(SACCT_COLUMNS)
GOOD = (
    "601|601|train|bob|ml|a100|COMPLETED|0:0|2026-03-02T08:00:00|2026-03-02T08:05:00|2026-03-02T09:05:00|"
    "01:00:00|02:00:00|billing=1,cpu=1,gres/gpu=2,node=1|billing=1,cpu=1,gres/gpu=2,mem=16G,node=1|1|gpu01||"
)
STEP = (
    "601.batch|601.batch|batch||ml||COMPLETED|0:0|2026-03-02T08:05:00|2026-03-02T08:05:00|2026-03-02T09:05:00|"
    "01:00:00||cpu=1,gres/gpu=2,mem=16G,node=1||1|gpu01|1200K|cpu=00:00:01,energy=0,mem=1200K,vmem=2G"
)


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def _row(job_id: str = "602", base: str = GOOD, **cells: str) -> str:
    values = base.split("|")
    values[0] = job_id
    for column, value in cells.items():
        values[SACCT_COLUMNS.index(column)] = value
    return "|".join(values)


def _write(tmp_path: Path, text: str | bytes, name: str = "jobs.sacct") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", newline="")
    return path


def _by_id(jobs: list[Job]) -> dict[str, Job]:
    return {j.id: j for j in jobs}


# ---- the real captured output (Slurm 22.05, fake GPUs) -------------------------------------------


@needs_captured
def test_captured_allocation_rows_give_37_gpu_jobs_and_one_cpu_only() -> None:
    result = read_trace(CAPTURED / "sacct_P_X.txt")
    assert result.format == "sacct"
    assert len(result.jobs) == 37  # 38 allocation rows, job 8 (data-prep) has no GPU
    assert result.skipped == {"no GPUs (CPU-only job)": 1}
    assert "8" not in _by_id(result.jobs)
    assert any("CPU-only" in w and ": 8 " in w for w in result.warnings)
    assert result.missing_fields == ["mem_gb", "est_duration_s", "est_mem_gb", "gpu_util_pct"]
    assert result.censored == []


@needs_captured
def test_captured_jobs_keep_their_meaning() -> None:
    jobs = _by_id(read_trace(CAPTURED / "sacct_P_X.txt").jobs)
    first = jobs["5"]
    assert first.submit_s == _epoch("2026-11-30T00:38:01") == 1795999081.0
    assert (first.gpus, first.duration_s, first.requested_s, first.may_span_nodes) == (16, 23.0, 600.0, True)
    assert first.user == "root" and first.name == "llm-pretrain"
    assert first.meta["nodelist"] == "node[1-2]" and first.meta["nodes"] == 2
    timeout = jobs["10"]
    assert timeout.meta["state"] == "TIMEOUT" and timeout.duration_s == 69.0 and timeout.requested_s == 60.0
    failed = jobs["9"]
    assert failed.meta["state"] == "FAILED" and failed.meta["exit_code"] == "3:0"
    assert jobs["26"].meta["exit_code"] == "0:11"
    cancelled = jobs["11"]
    assert cancelled.meta["state"] == "CANCELLED" and cancelled.meta["state_raw"] == "CANCELLED by 0"
    assert cancelled.duration_s == 8.0
    sweep = [f"13_{k}" for k in range(6)]
    assert all(jobs[i].gpus == 1 and jobs[i].meta["array_job_id"] == "13" for i in sweep)
    assert [jobs[i].meta["array_task_id"] for i in sweep] == list(range(6))
    assert jobs["13_0"].meta["job_id_raw"] == "28" and jobs["13_5"].meta["job_id_raw"] == "13"
    het0, het1 = jobs["14+0"], jobs["14+1"]
    assert (het0.gpus, het1.gpus) == (1, 2)
    assert het1.meta["het_job_id"] == "14" and het1.meta["het_job_offset"] == 1
    assert het1.meta["job_id_raw"] == "15"
    assert jobs["20"].gpus == 8  # --gpus=8
    assert jobs["27"].gpus == 4 and jobs["27"].may_span_nodes and jobs["27"].meta["nodes"] == 2
    assert jobs["38"].requested_s is None and jobs["38"].meta["timelimit"] == "UNLIMITED"
    assert jobs["32"].requested_s == 2 * 86400.0
    assert jobs["12"].user == "alice" and jobs["12"].meta["account"] == "research"


@needs_captured
def test_captured_step_rows_fold_into_the_same_jobs() -> None:
    folded = read_trace(CAPTURED / "sacct_P.txt")
    plain = read_trace(CAPTURED / "sacct_P_X.txt")
    assert [j.id for j in folded.jobs] == [j.id for j in plain.jobs]
    assert folded.skipped == plain.skipped
    for with_steps, alone in zip(folded.jobs, plain.jobs):
        meta = dict(with_steps.meta)
        assert meta.pop("max_rss_gb") > 0  # every captured job had a step with MaxRSS
        assert meta == alone.meta
        assert (with_steps.gpus, with_steps.duration_s, with_steps.submit_s) == (
            alone.gpus,
            alone.duration_s,
            alone.submit_s,
        )
    jobs = _by_id(folded.jobs)
    assert jobs["5"].meta["max_rss_gb"] == 218280 * 1024 / 2**30  # step 5.1, the largest
    assert jobs["14+1"].meta["max_rss_gb"] == 64808 * 1024 / 2**30  # 14+1.0, no batch step
    assert jobs["21"].meta["max_rss_gb"] == 1540 * 1024 / 2**30  # the batch step's MaxRSS is empty
    assert not any("no allocation row" in w for w in folded.warnings)


@needs_captured
def test_captured_states_window_keeps_jobs_that_never_started() -> None:
    result = read_trace(CAPTURED / "sacct_P_X_states.txt")
    assert len(result.jobs) == 39
    jobs = _by_id(result.jobs)
    for job_id, gpus in (("23", 1), ("24", 4)):
        job = jobs[job_id]
        assert job.duration_s is None and job.meta["never_started"] is True
        assert job.gpus == gpus  # from ReqTRES: AllocTRES is empty
        assert job.meta["state"] == "CANCELLED" and "start_s" not in job.meta and "nodelist" not in job.meta
    assert any("2 job(s) never started" in w for w in result.warnings)


@needs_captured
@pytest.mark.parametrize(
    ("json_name", "text_name"), [("sacct_S.json.gz", "sacct_P.txt"), ("sacct_j.json", "sacct_P_X_states.txt")]
)
def test_captured_json_agrees_with_the_text(json_name: str, text_name: str) -> None:
    from_json = read_trace(CAPTURED / json_name)
    assert from_json.format == "sacct-json"
    text = _by_id(read_trace(CAPTURED / text_name).jobs)
    assert from_json.jobs and all(j.id in text for j in from_json.jobs)
    for job in from_json.jobs:
        other = text[job.id]
        assert (job.gpus, job.duration_s, job.submit_s, job.requested_s, job.may_span_nodes) == (
            other.gpus,
            other.duration_s,
            other.submit_s,
            other.requested_s,
            other.may_span_nodes,
        )
        assert job.meta["state"] == other.meta["state"] and job.meta["job_id_raw"] == other.meta["job_id_raw"]
        if "_X" not in text_name:  # `-X` output has no step rows, so no usage to compare
            assert job.meta.get("max_rss_gb") == other.meta.get("max_rss_gb")
        assert job.meta.get("never_started") == other.meta.get("never_started")
    jobs = _by_id(from_json.jobs)
    assert jobs["9"].meta["exit_code"] == "0:0" and text["9"].meta["exit_code"] == "3:0"  # Slurm's JSON bug
    assert jobs["26"].meta["exit_code"] == "0:11" == text["26"].meta["exit_code"]


@needs_captured
def test_captured_json_full_window_counts() -> None:
    result = read_trace(CAPTURED / "sacct_S.json.gz")
    assert len(result.jobs) == 37 and result.skipped == {"no GPUs (CPU-only job)": 1}
    assert any("exit codes" in w for w in result.warnings)
    assert len(read_trace(CAPTURED / "sacct_j.json").jobs) == 12


@needs_captured
@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("sacct_P.txt", "sacct"),
        ("sacct_P_X.txt", "sacct"),
        ("sacct_j.json", "sacct-json"),
        ("sacct_S.json.gz", "sacct-json"),
    ],
)
def test_captured_files_are_detected(name: str, fmt: str) -> None:
    assert read_trace(CAPTURED / name).format == fmt


@needs_captured
def test_captured_squeue_json_is_refused_with_a_hint() -> None:
    with pytest.raises(TraceError, match=r"squeue --json.*sacct -a --json"):
        read_trace(CAPTURED / "squeue.json", fmt="sacct-json")


# ---- hand-written fixtures --------------------------------------------------------------------------


def test_fixture_full_output_with_steps() -> None:
    result = read_trace(FIXTURES / "cluster_P.txt")
    assert result.format == "sacct"
    jobs = _by_id(result.jobs)
    assert list(jobs) == [
        "501", "503", "504", "505", "506", "507", "508", "700_0", "700_1", "700_[2-9%2]",
        "710+0", "710+1", "720", "730", "740", "750", "760",
    ]  # fmt: skip
    assert result.skipped == {"no GPUs (CPU-only job)": 1}
    assert result.missing_fields == ["est_duration_s", "est_mem_gb"]
    big = jobs["501"]
    assert big.gpus == 16 and big.meta["gpu_types"] == {"a100": 16}  # total and typed: not counted twice
    assert big.duration_s == 26 * 3600.0 and big.requested_s == 2 * 86400.0 and big.may_span_nodes
    assert big.mem_gb == 70.0 and big.meta["gpumem_max_gb"] == 1120.0  # peak over steps, over 16 GPUs
    assert big.gpu_util_pct == 92.5 and big.meta["gpuutil_max_pct"] == 1480.0
    assert big.meta["max_rss_gb"] == 40.0
    assert jobs["503"].mem_gb == 10.0 and jobs["503"].gpu_util_pct == 40.0
    assert jobs["504"].gpus == 4 and jobs["504"].meta["gpu_types"] == {"a100": 2, "h100": 2}
    assert jobs["505"].requested_s is None and jobs["505"].meta["timelimit"] == "Partition_Limit"
    assert jobs["505"].meta["state_raw"] == "CANCELLED by 1000"
    states = {j.meta["state"] for j in result.jobs}
    assert {"TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "PENDING", "RUNNING"} <= states
    assert states <= set(STATE_MEANINGS)
    assert jobs["710+1"].mem_gb == 6.0 and jobs["710+1"].gpu_util_pct == 75.0
    assert jobs["740"].name == "résumé eval" and jobs["740"].duration_s == 754.0  # MM:SS
    assert jobs["740"].requested_s == 1800.0
    assert jobs["750"].duration_s == 5.25  # MM:SS.mmm


def test_fixture_jobs_that_did_not_finish() -> None:
    result = read_trace(FIXTURES / "cluster_P.txt")
    jobs = _by_id(result.jobs)
    remainder = jobs["700_[2-9%2]"]
    assert remainder.meta["array_pending_remainder"] is True and remainder.meta["array_task_spec"] == "2-9%2"
    assert remainder.duration_s is None and remainder.gpus == 1 and remainder.meta["never_started"]
    assert jobs["720"].duration_s is None and jobs["720"].gpus == 4 and jobs["720"].meta["never_started"]
    assert jobs["760"].duration_s is None and jobs["760"].meta["state"] == "PENDING"
    running = jobs["730"]
    assert running.duration_s is None and running.meta["elapsed_s"] == 11564.0
    assert running.requested_s is None and "end_s" not in running.meta
    assert result.censored == [
        "1 job(s) still running or suspended: duration_s None, meta elapsed_s is a lower bound"
    ]
    assert any("3 job(s) never started" in w and "1 pending array remainder" in w for w in result.warnings)


def test_fixture_messy_columns_crlf_bom_blank_lines_and_repeated_header() -> None:
    result = read_trace(FIXTURES / "messy_X.txt")
    assert result.format == "sacct"
    jobs = _by_id(result.jobs)
    assert list(jobs) == ["900", "901", "902", "904"]
    assert jobs["900"].meta["QOS"] == "normal" and jobs["900"].meta["Comment"] == "exp=7"
    assert "Comment" not in jobs["901"].meta  # empty cells are left out
    assert jobs["901"].gpus == 1 and jobs["901"].meta["gpu_types"] == {"l40s": 1}
    assert jobs["902"].may_span_nodes and jobs["902"].meta["nodes"] == 2  # no AllocNodes: from TRES node=
    assert jobs["902"].duration_s == 2 * 86400 + 3 * 3600 + 4 * 60 + 5.0
    assert jobs["904"].meta["never_started"] and jobs["904"].meta["timelimit"] == "UNLIMITED"
    assert result.skipped == {"no GPUs (CPU-only job)": 1}
    assert "mem_gb" in result.missing_fields and "gpu_util_pct" in result.missing_fields
    assert any("1 repeated header line(s)" in w for w in result.warnings)
    assert any("TRESUsageInMax (mem_gb and gpu_util_pct unknown)" in w for w in result.warnings)


def test_fixture_sacct_p_with_trailing_bars() -> None:
    result = read_trace(FIXTURES / "parsable_p.txt")
    assert [j.id for j in result.jobs] == ["610", "611"]
    assert result.jobs[1].duration_s == 10800.0 and result.jobs[1].meta["nodelist"] == "gpu02"
    assert "user" in result.missing_fields


def test_gzipped_text_reads_the_same(tmp_path: Path) -> None:
    raw = (FIXTURES / "cluster_P.txt").read_bytes()
    path = _write(tmp_path, gzip.compress(raw), "jobs.sacct.gz")
    assert read_trace(path).jobs == read_trace(FIXTURES / "cluster_P.txt").jobs


def test_minimal_columns_and_missing_fields(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "JobID|Submit|Start|End|ReqTRES\n"
        "1|2026-01-01T00:00:00|2026-01-01T00:00:10|2026-01-01T01:00:10|gres/gpu=2,node=1\n",
    )
    result = read_trace(path)
    (job,) = result.jobs
    assert (job.gpus, job.duration_s, job.requested_s) == (2, 3600.0, None)
    assert result.missing_fields == [
        "mem_gb", "est_duration_s", "est_mem_gb", "requested_s", "user", "name", "gpu_util_pct",
    ]  # fmt: skip
    assert any("Timelimit (requested_s unknown)" in w for w in result.warnings)


def test_missing_required_columns_name_them_and_the_command(tmp_path: Path) -> None:
    path = _write(tmp_path, "JobID|State|Elapsed|User\n1|COMPLETED|00:01:00|bob\n")
    with pytest.raises(TraceError) as info:
        read_trace(path, fmt="sacct")
    assert "Submit" in str(info.value) and "AllocTRES (or ReqTRES)" in str(info.value)
    assert SACCT_COMMAND in str(info.value)


def test_repeated_column_is_a_header_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "JobID|Submit|Elapsed|AllocTRES|jobid\n")
    with pytest.raises(TraceError, match=r"jobs\.sacct:1: header: column 'jobid' appears twice"):
        read_trace(path, fmt="sacct")


def test_every_fixture_reads_the_same_in_chunks_row_by_row_and_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = [FIXTURES / n for n in ("cluster_P.txt", "messy_X.txt", "parsable_p.txt")]
    if CAPTURED.is_dir():
        sources += [CAPTURED / n for n in ("sacct_P.txt", "sacct_P_X_states.txt")]
    for source in sources:
        whole = read_trace(source)
        lines = source.read_bytes().splitlines(keepends=True)
        # A blank line in the chunk sends every row of it through the row-by-row path.
        slow = read_trace(_write(tmp_path, b"".join([lines[0], b"\n", *lines[1:]]), source.name))
        with monkeypatch.context() as m:
            m.setattr(sacct_text, "_CHUNK_BYTES", 1)  # one line per chunk
            tiny = read_trace(source)
        assert slow.jobs == whole.jobs == tiny.jobs, source.name
        assert slow.skipped == whole.skipped == tiny.skipped


def test_formats_are_registered_and_detected() -> None:
    assert {"sacct", "sacct-json"} <= set(reader_names())
    detect = traces_base.detect_reader
    assert detect(Path("a.txt"), HEADER + "\n").name == "sacct"  # type: ignore[union-attr]
    assert detect(Path("a.csv"), "JobID|State|Elapsed|Submit\n").name == "sacct"  # type: ignore[union-attr]
    head = (FIXTURES / "cluster.json").read_text(encoding="utf-8")[:4096]
    assert detect(Path("a.json"), head).name == "sacct-json"  # type: ignore[union-attr]
    assert detect(Path("a.csv"), "JobID,State,Elapsed\n").name != "sacct"  # type: ignore[union-attr]


# ---- the Arrow path for large files gives exactly what the exact path gives ----------------------


def _same(a: Any, b: Any) -> bool:
    return (a.jobs, a.skipped, a.warnings, a.missing_fields, a.censored) == (
        b.jobs,
        b.skipped,
        b.warnings,
        b.missing_fields,
        b.censored,
    )


def test_arrow_path_matches_the_exact_path() -> None:
    sources = [FIXTURES / n for n in ("cluster_P.txt", "parsable_p.txt")]
    if CAPTURED.is_dir():
        sources += [CAPTURED / n for n in ("sacct_P.txt", "sacct_P_X.txt", "sacct_P_X_states.txt")]
    for source in sources:
        fast = sacct_arrow.read_arrow(source, ReadOptions(), "sacct")  # no fallback for these
        assert _same(fast, sacct_text.read_exact(source, ReadOptions(), "sacct")), source.name


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("2026-03-02T08:00:00", "2026-02-30T08:00:00"),  # strptime would move it to March 2
        ("|40G|", "| 40G|"),  # a form only the exact path reads
        ("gres/gpuutil=95", "gres/gpuutil=9.5e1"),
        ("energy=0,fs/disk=1048576,", "energy=0,gres/gpumem=1G,fs/disk=1048576,"),  # gpumem twice
        ("2026-03-02T08:00:00", "2999-03-02T08:00:00"),  # absurd: the exact path names it
        ("1-02:00:00|2-00:00:00", "1-02:00:00\r|2-00:00:00"),  # a lone \r ends an Arrow row
        ("\n502|", "\n\n502|"),  # a blank line
        ("\n503|", "\n501|"),  # a duplicate id
    ],
)
def test_arrow_path_leaves_anything_unusual_to_the_exact_path(tmp_path: Path, old: str, new: str) -> None:
    text = (FIXTURES / "cluster_P.txt").read_text(encoding="utf-8")
    assert old in text
    path = _write(tmp_path, text.replace(old, new, 1))
    with pytest.raises(sacct_arrow.Fallback):
        sacct_arrow.read_arrow(path, ReadOptions(), "sacct")
    with mock.patch.object(sacct_arrow, "MIN_BYTES", 0):
        forced = _outcome(path, None, False)
    assert forced == _outcome(path, None, False)


def test_large_files_take_the_arrow_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sacct_arrow, "MIN_BYTES", 0)
    calls: list[Path] = []
    monkeypatch.setattr(sacct_module, "read_exact", lambda path, *a: calls.append(path))  # type: ignore[arg-type]
    assert len(read_trace(FIXTURES / "cluster_P.txt").jobs) == 17 and calls == []


def test_without_pyarrow_the_exact_path_reads_large_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sacct_arrow, "MIN_BYTES", 0)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    with pytest.raises(sacct_arrow.Fallback):
        sacct_arrow.read_arrow(FIXTURES / "cluster_P.txt", ReadOptions(), "sacct")
    assert len(read_trace(FIXTURES / "cluster_P.txt").jobs) == 17


# ---- every class of bad input in sacct text: file, line, column and value in the message ----------


@pytest.mark.parametrize(
    ("column", "cell", "value", "reason"),
    [
        ("Elapsed", "1-2:3", "1-2:3", "Elapsed: not a duration"),
        ("Elapsed", "-00:00:05", "-00:00:05", "Elapsed: negative"),
        ("Elapsed", "00:61:00", "00:61:00", "Elapsed: out of range"),
        ("Elapsed", "INVALID", "INVALID", "Elapsed: not a duration"),
        ("Submit", "2026-02-30T00:00:00", "2026-02-30T00:00:00", "Submit: not a time"),
        ("Submit", "Unknown", "Unknown", "Submit: missing"),
        ("Submit", "1969-12-31T23:59:59", "1969-12-31T23:59:59", "Submit: before 1970"),
        ("Start", "yesterday", "yesterday", "Start: not a time"),
        ("End", "2026-03-02T25:00:00", "2026-03-02T25:00:00", "End: not a time"),
        ("Timelimit", "forever", "forever", "Timelimit: not a duration"),
        ("AllocTRES", "billing=1,cpu", "billing=1,cpu", "AllocTRES: bad TRES"),
        ("AllocTRES", "billing=1,gres/gpu=two,node=1", "two", "AllocTRES: not a whole number"),
        ("AllocTRES", "billing=1,gres/gpu=-2,node=1", "-2", "AllocTRES: negative"),
        ("ReqTRES", "gres/gpu=1,,node=1", "gres/gpu=1,,node=1", "ReqTRES: bad TRES"),
        ("AllocNodes", "-1", "-1", "AllocNodes: negative"),
        ("AllocNodes", "two", "two", "AllocNodes: not a whole number"),
        ("State", "completed!", "completed!", "State: not a state"),
        ("ExitCode", "3", "3", "ExitCode: not an exit code"),
        ("JobID", "abc", "abc", "JobID: not a job id"),
        ("JobID", "602_[x]", "602_[x]", "JobID: not a job id"),
        ("MaxRSS", "12Q", "12Q", "MaxRSS: not a size"),
        ("MaxRSS", "-5K", "-5K", "MaxRSS: negative"),
        ("TRESUsageInMax", "cpu=00:00:01,gres/gpumem=lots", "lots", "TRESUsageInMax: not a size"),
        ("TRESUsageInMax", "gres/gpuutil=-5", "gres/gpuutil=-5", "TRESUsageInMax: bad gres/gpuutil"),
        # absurd values: a typing or unit mistake, not a job (the bounds every other reader has)
        ("Elapsed", "99999-00:00:00", "99999-00:00:00", "Elapsed: absurd duration"),  # 274 years
        ("Timelimit", "40000-00:00:00", "40000-00:00:00", "Timelimit: absurd duration"),
        ("Submit", "2999-01-01T00:00:00", "2999-01-01T00:00:00", "Submit: absurd time"),
        ("Submit", "99999999999", "99999999999", "Submit: absurd time"),  # SLURM_TIME_FORMAT=%s, year 5138
        (
            "AllocTRES",
            "billing=1,gres/gpu=5000000,node=1",
            "billing=1,gres/gpu=5000000,node=1",
            "AllocTRES: absurd GPU count",
        ),
        ("TRESUsageInMax", "cpu=00:00:01,energy", "cpu=00:00:01,energy", "TRESUsageInMax: bad TRES"),
    ],
)
def test_bad_cell_names_file_line_column_and_value(
    tmp_path: Path, column: str, cell: str, value: str, reason: str
) -> None:
    bad = _row("602", **{column: cell}) if column != "JobID" else _row(cell)
    path = _write(tmp_path, "\n".join([HEADER, GOOD, bad, _row("603"), ""]))
    with pytest.raises(InputError) as info:
        read_trace(path)
    error = info.value
    assert not isinstance(error, TruncatedTraceError)
    assert (error.path, error.line, error.column, error.value, error.reason) == (
        str(path),
        3,
        column,
        value,
        reason,
    )
    assert f"{path}:3: column {column}: value {value!r} is not valid (expected " in str(error)
    skipped = read_trace(path, options=ReadOptions(skip_bad=True))
    assert [j.id for j in skipped.jobs] == ["601", "603"] and skipped.skipped == {reason: 1}
    assert any(f"skipped {path}:3:" in w for w in skipped.warnings)


def test_bad_value_in_a_step_row_is_located(tmp_path: Path) -> None:
    bad_step = STEP.replace("1200K|", "1200X|")
    path = _write(tmp_path, "\n".join([HEADER, GOOD, bad_step, ""]))
    with pytest.raises(InputError, match=r":3: column MaxRSS: value '1200X' is not valid"):
        read_trace(path)
    result = read_trace(path, options=ReadOptions(skip_bad=True))
    assert result.skipped == {"MaxRSS: not a size": 1} and "max_rss_gb" not in result.jobs[0].meta


def test_too_few_fields(tmp_path: Path) -> None:
    short = _row("602").rsplit("|", 1)[0]  # TRESUsageInMax gone
    path = _write(tmp_path, "\n".join([HEADER, GOOD, short, ""]))
    with pytest.raises(InputError) as info:
        read_trace(path)
    error = info.value
    assert (error.line, error.column, error.reason) == (3, "TRESUsageInMax", "wrong number of fields")
    assert f"{path}:3: column TRESUsageInMax: value '602|" in str(error)
    assert "19 '|'-separated fields as in the header, got 18" in str(error)


def test_too_many_fields_a_bar_in_the_job_name(tmp_path: Path) -> None:
    path = _write(tmp_path, "\n".join([HEADER, GOOD, _row("602", JobName="a|b"), ""]))
    with pytest.raises(InputError) as info:
        read_trace(path)
    assert (info.value.line, info.value.column) == (3, "#20 (beyond the header)")
    assert "a '|' inside a job name" in str(info.value) and "value '602|601|a|b|bob|" in str(info.value)


def test_truncated_last_line(tmp_path: Path) -> None:
    cut = _row("602")[:60]
    path = _write(tmp_path, "\n".join([HEADER, GOOD, cut]))
    with pytest.raises(TruncatedTraceError) as info:
        read_trace(path)
    error = info.value
    assert (error.line, error.column, error.reason) == (3, "End", "truncated last line")  # first missing
    assert f"{path}:3: column End: value {cut!r}" in str(error) and "cut off" in str(error)


def test_truncated_last_line_inside_the_last_cell(tmp_path: Path) -> None:
    path = _write(tmp_path, "\n".join([HEADER, GOOD, STEP[: STEP.rindex("energy") + 3]]))
    with pytest.raises(TruncatedTraceError) as info:
        read_trace(path)
    assert (info.value.line, info.value.column, info.value.value) == (3, "TRESUsageInMax", "cpu=00:00:01,ene")


def test_complete_last_line_without_newline_is_fine(tmp_path: Path) -> None:
    path = _write(tmp_path, "\n".join([HEADER, GOOD, _row("602")]))
    assert [j.id for j in read_trace(path).jobs] == ["601", "602"]


def test_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, "\n".join([HEADER, GOOD, _row("602"), _row("601"), ""]))
    with pytest.raises(InputError) as info:
        read_trace(path)
    assert (info.value.line, info.value.column, info.value.value) == (4, "JobID", "601")
    assert "line 2 already has it" in str(info.value) and "--duplicates" in str(info.value)
    assert read_trace(path, options=ReadOptions(skip_bad=True)).skipped == {"JobID: duplicate": 1}


def test_not_utf8(tmp_path: Path) -> None:
    data = "\n".join([HEADER, GOOD, _row("602", JobName="caf\udce9")]).encode("utf-8", "surrogateescape")
    path = _write(tmp_path, data + b"\n")
    with pytest.raises(InputError, match=r"jobs\.sacct:3: value .* is not valid \(expected UTF-8 text\)"):
        read_trace(path, options=ReadOptions(skip_bad=True))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"the file is empty"),
        ("\n  \n", r"the file is empty \(no header, no job rows\)\. Run: sacct -a -P"),
        (HEADER + "\n", r"holds no valid job \(no job rows\)"),
        (HEADER + "\n" + _row("602", AllocTRES="cpu=4,node=1", ReqTRES="cpu=4,node=1") + "\n", r"no GPU job"),
        (HEADER + "\n" + _row("602", AllocTRES="gres/shard=2,node=1") + "\n", r"GPU shares only"),
    ],
)
def test_files_without_gpu_jobs(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(TraceError, match=message):
        read_trace(path, fmt="sacct")


def test_all_rows_bad_with_skip_bad(tmp_path: Path) -> None:
    path = _write(tmp_path, "\n".join([HEADER, _row("1", Elapsed="x"), _row("2", Submit="y"), ""]))
    with pytest.raises(TraceError, match=r"all 2 rows were skipped"):
        read_trace(path, options=ReadOptions(skip_bad=True))


def test_steps_without_their_job_are_counted(tmp_path: Path) -> None:
    orphan = STEP.replace("601.batch|601.batch", "999.batch|999.batch")
    result = read_trace(_write(tmp_path, "\n".join([HEADER, GOOD, STEP, orphan, ""])))
    assert result.jobs[0].meta["max_rss_gb"] == 1200 / 2**20
    assert any("1 job(s) with step rows but no allocation row" in w for w in result.warnings)


def test_options_that_do_not_apply_are_reported(tmp_path: Path) -> None:
    path = _write(tmp_path, "\n".join([HEADER, GOOD, ""]))
    result = read_trace(path, options=ReadOptions(time_unit="ms", column_map={"gpus": "x"}))
    assert any("time unit ignored" in w for w in result.warnings)
    assert any("column map ignored" in w for w in result.warnings)


def test_value_helpers() -> None:
    assert parse_duration("1-02:03:04.5") == 93784.5 and parse_duration("07:00") == 420.0
    assert parse_size("1.5G") == 3 << 29 and parse_size("0") == 0
    assert parse_tres("cpu=1,gres/gpu:a100=2") == {"cpu": "1", "gres/gpu:a100": "2"}
    for parse, text in ((parse_duration, "1-2:3"), (parse_size, "3X"), (parse_tres, "cpu")):
        with pytest.raises(ValueError, match=repr(text)):
            parse(text)


# ---- sacct --json -------------------------------------------------------------------------------


def test_json_fixture() -> None:
    result = read_trace(FIXTURES / "cluster.json")
    assert result.format == "sacct-json"
    jobs = _by_id(result.jobs)
    assert list(jobs) == ["801", "803", "810_1", "810_[2-5%2]", "820+0", "820+1", "830", "860", "850"]
    assert result.skipped == {"no GPUs (CPU-only job)": 1}
    big = jobs["801"]
    assert (big.gpus, big.mem_gb, big.gpu_util_pct, big.may_span_nodes) == (16, 70.0, 92.5, True)
    assert big.duration_s == 93600.0 and big.requested_s == 2880 * 60.0 and big.meta["max_rss_gb"] == 40.0
    assert jobs["803"].meta["exit_code"] == "0:9" and jobs["803"].meta["state"] == "FAILED"
    assert jobs["810_1"].meta["array_task_id"] == 1 and jobs["810_1"].meta["job_id_raw"] == "811"
    remainder = jobs["810_[2-5%2]"]
    assert remainder.meta["array_pending_remainder"] and remainder.duration_s is None and remainder.gpus == 1
    assert jobs["820+1"].gpus == 2 and jobs["820+1"].meta["het_job_offset"] == 1
    assert jobs["830"].meta["never_started"] and jobs["830"].gpus == 4
    assert jobs["860"].duration_s is None and jobs["860"].meta["elapsed_s"] == 11564.0
    assert jobs["860"].meta["timelimit"] == "UNLIMITED" and len(result.censored) == 1
    newer = jobs["850"]  # numbers wrapped as {"set", "infinite", "number"}, state as a list
    assert (
        newer.requested_s == 300.0
        and newer.meta["state"] == "COMPLETED"
        and newer.meta["gpu_types"] == {"l40s": 1}
    )


def test_json_matches_the_text_fixture_on_common_fields() -> None:
    text = _by_id(read_trace(FIXTURES / "cluster_P.txt").jobs)
    from_json = _by_id(read_trace(FIXTURES / "cluster.json").jobs)
    assert (from_json["801"].mem_gb, from_json["801"].gpu_util_pct) == (
        text["501"].mem_gb,
        text["501"].gpu_util_pct,
    )
    assert from_json["820+1"].gpus == text["710+1"].gpus


def test_gzipped_json(tmp_path: Path) -> None:
    path = _write(tmp_path, gzip.compress((FIXTURES / "cluster.json").read_bytes()), "jobs.json.gz")
    assert read_trace(path).jobs == read_trace(FIXTURES / "cluster.json").jobs


def _json_doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / "cluster.json").read_text(encoding="utf-8"))
    return doc


@pytest.mark.parametrize(
    ("path_keys", "value", "column", "reason"),
    [
        (("time", "submission"), "yesterday", "jobs[1].time.submission", "time.submission: not a count"),
        (("time", "submission"), None, "jobs[1].time.submission", "time.submission: missing"),
        (("time", "elapsed"), -5, "jobs[1].time.elapsed", "time.elapsed: negative"),
        (("job_id",), True, "jobs[1].job_id", "job_id: not a count"),
        (("name",), 42, "jobs[1].name", "name: not a string"),
        (("tres", "allocated"), {"gpu": 1}, "jobs[1].tres.allocated", "tres.allocated: not a list"),
        (("state", "current"), "done?", "jobs[1].state.current", "state.current: not a state"),
        # absurd values: a typing or unit mistake, not a job
        (("time", "submission"), 10**11, "jobs[1].time.submission", "time.submission: absurd time"),
        (("time", "start"), 10**11, "jobs[1].time.start", "time.start: absurd time"),
        (("time", "elapsed"), 4 * 10**9, "jobs[1].time.elapsed", "time.elapsed: absurd duration"),
        (("time", "limit"), 10**8, "jobs[1].time.limit", "time.limit: absurd limit"),  # minutes: 190 years
    ],
)
def test_json_bad_value_names_the_record_path(
    tmp_path: Path, path_keys: tuple[str, ...], value: Any, column: str, reason: str
) -> None:
    doc = _json_doc()
    node = doc["jobs"][1]
    for key in path_keys[:-1]:
        node = node[key]
    node[path_keys[-1]] = value
    path = _write(tmp_path, json.dumps(doc, indent=1), "jobs.json")
    with pytest.raises(InputError) as info:
        read_trace(path)
    assert (info.value.column, info.value.reason) == (column, reason)
    shown = json.dumps(value) if isinstance(value, dict) else value
    assert f"{path}: column {column}: value {shown!r} is not valid" in str(info.value)
    result = read_trace(path, options=ReadOptions(skip_bad=True))
    assert result.skipped[reason] == 1 and len(result.jobs) == 8


def test_json_record_that_is_not_an_object(tmp_path: Path) -> None:
    doc = _json_doc()
    doc["jobs"][2] = [1, 2]
    path = _write(tmp_path, json.dumps(doc), "jobs.json")
    with pytest.raises(
        InputError, match=r"column jobs\[2\]: value '\[1, 2\]' is not valid \(expected a JSON object"
    ):
        read_trace(path)


def test_json_duplicate_id(tmp_path: Path) -> None:
    doc = _json_doc()
    doc["jobs"].append(copy.deepcopy(doc["jobs"][0]))
    path = _write(tmp_path, json.dumps(doc), "jobs.json")
    with pytest.raises(InputError, match=r"column jobs\[10\]: value '801' .*jobs\[0\] already has it"):
        read_trace(path)


def test_json_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, '{"jobs": [\n {"job_id": 1,,\n "name": "x"}\n]}\n', "jobs.json")
    with pytest.raises(InputError) as info:
        read_trace(path, fmt="sacct-json")
    assert info.value.line == 2 and info.value.reason == "bad JSON"
    assert f"{path}:2: value ' {{\"job_id\": 1,,'" in str(info.value)


def test_json_truncated(tmp_path: Path) -> None:
    text = (FIXTURES / "cluster.json").read_text(encoding="utf-8")
    path = _write(tmp_path, text[: len(text) // 2], "jobs.json")
    with pytest.raises(TruncatedTraceError, match="cut off"):
        read_trace(path, fmt="sacct-json")


def test_json_truncated_gzip(tmp_path: Path) -> None:
    data = gzip.compress((FIXTURES / "cluster.json").read_bytes())
    path = _write(tmp_path, data[: len(data) // 2], "jobs.json.gz")
    with pytest.raises(TruncatedTraceError, match="complete gzip data"):
        read_trace(path, fmt="sacct-json")


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        ("", TraceError, r"the file is empty"),
        ('{"meta": {}}', TraceError, r"no top-level 'jobs' list\)\. Run: sacct -a --json"),
        ('{"jobs": [{"job_id": 1, "submit_time": 5}]}', TraceError, r"squeue --json"),
        ('{"jobs": []}', TraceError, r"no job rows"),
    ],
)
def test_json_whole_file_problems(tmp_path: Path, text: str, error: type[Exception], message: str) -> None:
    path = _write(tmp_path, text, "jobs.json")
    with pytest.raises(error, match=message):
        read_trace(path, fmt="sacct-json")


# ---- fuzzing: only gpuplan errors escape ---------------------------------------------------------

_REAL_LINES = [
    line for line in (FIXTURES / "cluster_P.txt").read_text(encoding="utf-8").splitlines()[1:] if line
]
_JUNK = ["|", ",", "=", ".", "_", "+", "[", "]", "%", "-", ":", "T", "\r", "\x00", "None", "-1", "9" * 20, "9" * 5000]  # fmt: skip


@st.composite
def _mutated_line(draw: st.DrawFn) -> str:
    line = draw(st.sampled_from(_REAL_LINES))
    for _ in range(draw(st.integers(1, 3))):
        start = draw(st.integers(0, len(line)))
        end = draw(st.integers(start, min(len(line), start + 12)))
        junk = draw(st.one_of(st.text(max_size=4), st.sampled_from(_JUNK)))
        line = line[:start] + junk + line[end:]
    return line


_LINE = st.one_of(st.sampled_from(_REAL_LINES), _mutated_line(), st.text(max_size=40))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(_LINE, min_size=0, max_size=8),
    header=st.sampled_from([HEADER, HEADER + "|", "JobID|Submit|Start|End|ReqTRES", HEADER.lower()]),
    tail=st.binary(max_size=6),
    fmt=st.sampled_from([None, "sacct"]),
    skip_bad=st.booleans(),
    newline_at_end=st.booleans(),
    gz=st.booleans(),
)
def test_text_reader_raises_only_gpuplan_errors(
    lines: list[str],
    header: str,
    tail: bytes,
    fmt: str | None,
    skip_bad: bool,
    newline_at_end: bool,
    gz: bool,
) -> None:
    data = "\n".join([header, *lines]).encode("utf-8", "surrogatepass") + (b"\n" if newline_at_end else tail)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("fuzz.sacct.gz" if gz else "fuzz.sacct")
        path.write_bytes(gzip.compress(data) if gz else data)
        exact = _outcome(path, fmt, skip_bad)
        with mock.patch.object(sacct_arrow, "MIN_BYTES", 0):
            assert _outcome(path, fmt, skip_bad) == exact  # the Arrow path agrees, or hands over
    if exact[0] == "ok":
        jobs = exact[1]
        assert jobs and len({j.id for j in jobs}) == len(jobs)
        assert all(j.gpus >= 1 and j.submit_s >= 0 for j in jobs)


def _outcome(path: Path, fmt: str | None, skip_bad: bool) -> tuple[Any, ...]:
    """What reading gives: the result's parts, or the gpuplan error (anything else fails the test)."""
    try:
        r = read_trace(path, fmt=fmt, options=ReadOptions(skip_bad=skip_bad))
    except GpuplanError as e:
        return ("error", type(e), str(e))
    return ("ok", r.jobs, r.skipped, r.warnings, r.missing_fields, r.censored)


_JSON_PATHS = [
    ("job_id",), ("name",), ("user",), ("array", "job_id"), ("array", "task_id"), ("array", "task"),
    ("het", "job_id"), ("het", "job_offset"), ("state", "current"), ("time", "submission"), ("time", "start"),
    ("time", "end"), ("time", "elapsed"), ("time", "limit"), ("tres", "allocated"), ("tres", "requested"),
    ("allocation_nodes",), ("nodes",), ("exit_code", "return_code"), ("exit_code", "signal"), ("steps",),
]  # fmt: skip
_JSON_VALUE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.just(10**400)
    | st.floats()
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    changes=st.lists(
        st.tuples(st.integers(0, 9), st.sampled_from(_JSON_PATHS), _JSON_VALUE), min_size=1, max_size=3
    ),
    skip_bad=st.booleans(),
)
def test_json_reader_raises_only_gpuplan_errors(
    changes: list[tuple[int, tuple[str, ...], Any]], skip_bad: bool
) -> None:
    doc = _json_doc()
    for index, keys, value in changes:
        node = doc["jobs"][index]
        for key in keys[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[keys[-1]] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        try:
            result = read_trace(path, options=ReadOptions(skip_bad=skip_bad))
        except GpuplanError:
            return
    assert result.format == "sacct-json" and all(j.gpus >= 1 for j in result.jobs)


# ---- the benchmark helper still runs ------------------------------------------------------------


def test_bench_sacct_runs_on_a_small_file(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "bench_traces", Path(__file__).parents[1] / "bench" / "bench_traces.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    report = bench.bench_sacct(300, tmp_path)
    assert report["rows"] >= 100 and report["jobs"] > 0 and report["seconds"] > 0
    assert set(report) >= {"rows", "seconds", "rows_per_s", "peak_rss_mb"}


def test_absurd_gpu_memory_from_the_steps_names_the_job(tmp_path: Path) -> None:
    """gres/gpumem is the job's total: 50 TB over its 2 GPUs is beyond any GPU (the allocation row's line)."""
    step = STEP.replace("cpu=00:00:01,energy=0", "cpu=00:00:01,energy=0,gres/gpumem=50T")
    path = _write(tmp_path, "\n".join([HEADER, _row("600"), GOOD, step, _row("603"), ""]))
    with pytest.raises(InputError) as info:
        read_trace(path)
    error = info.value
    assert (error.line, error.column, error.reason) == (3, "TRESUsageInMax", "absurd GPU memory")
    assert "job 601" in str(error) and "at most 10 TB" in str(error)
    kept = read_trace(path, options=ReadOptions(skip_bad=True))
    assert [j.id for j in kept.jobs] == ["600", "603"]
    assert kept.skipped == {"absurd GPU memory": 1}


def test_json_absurd_gpu_count(tmp_path: Path) -> None:
    doc = _json_doc()
    for item in doc["jobs"][1]["tres"]["allocated"]:
        if item.get("type") == "gres" and item.get("name") == "gpu":
            item["count"] = 5_000_000
    path = _write(tmp_path, json.dumps(doc), "jobs.json")
    with pytest.raises(InputError, match=r"jobs\[1\]\.tres\.allocated.*at most 1,000,000 GPUs"):
        read_trace(path)

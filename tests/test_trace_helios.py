"""The Helios CSV reader, on hand-written logs (no Helios data ships with the project)."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzing import Mutated, assert_located, break_cell, mutated_files
from gpuplan.errors import InputError
from gpuplan.traces import ReadOptions, TraceError, TruncatedTraceError, read_trace
from gpuplan.traces.helios import parse_helios_time

FIXTURES = Path(__file__).parent / "fixtures" / "helios"
DATES = FIXTURES / "cluster_log.csv"
EPOCH = FIXTURES / "epoch.csv"

HEADER = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration\n"
GOOD = "1,u1,vcA,2,12,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:01:00,2020-04-01 00:11:00,600\n"
T0 = datetime(2020, 4, 1, tzinfo=UTC).timestamp()


def _write(tmp_path: Path, body: str, header: str = HEADER) -> Path:
    path = tmp_path / "log.csv"
    path.write_text(header + body, encoding="utf-8")
    return path


def _row(**cells: str) -> str:
    names = HEADER.strip().split(",")
    values = dict(zip(names, GOOD.strip().split(",")))
    values.update(cells)
    return ",".join(values[n] for n in names) + "\n"


def test_dates_map_to_jobs() -> None:
    result = read_trace(DATES)
    assert result.format == "helios"
    jobs = {j.id: j for j in result.jobs}
    assert list(jobs) == ["j1", "j2", "j4", "j5"]
    j1 = jobs["j1"]
    assert (j1.submit_s, j1.gpus, j1.duration_s, j1.user, j1.name) == (T0 + 5, 8, 3600.0, "u01", "train-a")
    assert j1.meta == {
        "queue": "vc6YE",
        "state": "COMPLETED",
        "cpu_num": 48,
        "node_num": 1,
        "start_s": T0 + 10,
        "end_s": T0 + 3610,
    }
    assert not j1.may_span_nodes and jobs["j2"].may_span_nodes  # node_num 2
    assert jobs["j2"].duration_s == 600.0  # no duration cell: end - start
    assert jobs["j5"].submit_s == T0 + 300  # ISO 'T' separator
    assert result.cluster is None


def test_cpu_jobs_skipped_and_unstarted_jobs_censored() -> None:
    result = read_trace(DATES)
    assert result.skipped == {"CPU-only job (gpu_num 0)": 1}
    assert {j.id: j for j in result.jobs}["j4"].duration_s is None
    assert result.censored == ["1 jobs never started (no start_time, no duration): duration unknown (None)"]


def test_epoch_seconds_and_running_jobs() -> None:
    result = read_trace(EPOCH)
    first, running = result.jobs
    assert (first.id, first.submit_s, first.duration_s) == ("100", 1585699205.0, 3600.0)
    assert running.duration_s is None and running.meta["censored"] is True
    assert any("running at the trace end" in c for c in result.censored)


def test_parse_helios_time() -> None:
    assert parse_helios_time("2020-04-01 00:00:05") == T0 + 5
    assert parse_helios_time("2020-04-01 02:00:05+02:00") == T0 + 5
    assert parse_helios_time(" 12.5 ") == 12.5
    assert parse_helios_time("") is None
    for bad in ("yesterday", "-1", "inf", "1960-01-01 00:00:00"):
        with pytest.raises(ValueError):
            parse_helios_time(bad)


def test_extra_columns_go_to_meta(tmp_path: Path) -> None:
    path = _write(tmp_path, "a,2,2020-04-01 00:00:00,x\n", "job_id,gpu_num,submit_time,vc_group\n")
    result = read_trace(path, fmt="helios")
    assert result.jobs[0].meta == {"vc_group": "x"}
    assert any("unknown column(s) kept" in w for w in result.warnings)


@pytest.mark.parametrize(
    ("line", "column", "reason"),
    [
        (_row(submit_time="2020-13-01 00:00:00"), "submit_time", "submit_time: not a time"),
        (_row(submit_time=""), "submit_time", "submit_time: missing"),
        (_row(start_time="2020-03-31 23:00:00"), "start_time", "start_time: before submit_time"),
        (_row(end_time="2020-04-01 00:00:30"), "end_time", "end_time: before start_time"),
        (_row(gpu_num="-2"), "gpu_num", "gpu_num: not an integer >= 0"),
        (_row(gpu_num="1.5"), "gpu_num", "gpu_num: not an integer >= 0"),
        (_row(gpu_num=""), "gpu_num", "gpu_num: missing"),
        (_row(node_num="x"), "node_num", "node_num: not an integer >= 0"),
        (_row(duration="-1"), "duration", "duration: invalid"),
        (_row(job_id=""), "job_id", "job_id: missing"),
        ("1,u1,vcA\n", "gpu_num", "wrong number of fields"),
    ],
)
def test_bad_row_names_file_line_column_and_value(
    tmp_path: Path, line: str, column: str, reason: str
) -> None:
    path = _write(tmp_path, GOOD.replace("1,", "0,", 1) + line)
    with pytest.raises(InputError) as info:
        read_trace(path)
    err = info.value
    assert (err.path, err.line, err.column, err.reason) == (str(path), 3, column, reason)
    assert str(err).startswith(f"{path}:3: column {column}: value ")


def test_duplicate_job_id(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="line 2 already has it") as info:
        read_trace(_write(tmp_path, GOOD + GOOD))
    assert info.value.column == "job_id"


def test_truncated_empty_and_bad_header(tmp_path: Path) -> None:
    with pytest.raises(TruncatedTraceError):
        read_trace(_write(tmp_path, GOOD + "2,u1,vcA,2"))
    with pytest.raises(TraceError, match="no valid job"):
        read_trace(_write(tmp_path, ""))
    empty = tmp_path / "empty.csv"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(TraceError, match="empty"):
        read_trace(empty, fmt="helios")
    with pytest.raises(TraceError, match=r"header: column\(s\) \['submit_time'\] missing"):
        read_trace(_write(tmp_path, "1,2\n", "job_id,gpu_num\n"), fmt="helios")
    with pytest.raises(TraceError, match="no GPU job"):
        read_trace(_write(tmp_path, _row(gpu_num="0")))


def test_skip_bad_counts_each_reason(tmp_path: Path) -> None:
    body = (
        GOOD
        + _row(job_id="2", gpu_num="x")
        + _row(job_id="3", submit_time="soon")
        + _row(job_id="4", gpu_num="0")
    )
    result = read_trace(_write(tmp_path, body), options=ReadOptions(skip_bad=True))
    assert [j.id for j in result.jobs] == ["1"]
    assert result.skipped == {
        "gpu_num: not an integer >= 0": 1,
        "submit_time: not a time": 1,
        "CPU-only job (gpu_num 0)": 1,
    }


SEED = (
    DATES.read_text(encoding="utf-8").splitlines(keepends=True)
    + EPOCH.read_text(encoding="utf-8").splitlines(keepends=True)[1:]
)


BREAK_SUBMIT = break_cell(
    8, "yesterday", data=lambda line: len(line.split(",")) == 12 and not line.startswith("job_id")
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated=mutated_files(SEED, cell_max=20, breaker=BREAK_SUBMIT), skip_bad=st.booleans())
def test_mutated_lines_only_raise_located_errors(mutated: Mutated, skip_bad: bool) -> None:
    text = mutated.text
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.csv"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        read = lambda: read_trace(path, fmt="helios", options=ReadOptions(skip_bad=skip_bad))  # noqa: E731
        assert_located(path, read, mutated.broken and not skip_bad)

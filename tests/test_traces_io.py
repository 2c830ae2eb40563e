"""Trace reading and writing: own JSONL/CSV round trips, foreign CSV recognition, every class of bad input."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.errors import GpuplanError, InputError, UnknownNameError
from gpuplan.model import Job
from gpuplan.traces import (
    ReadOptions,
    TraceError,
    TraceReader,
    TraceResult,
    TruncatedTraceError,
    get_reader,
    parse_column_map,
    parse_time_unit,
    read_trace,
    reader_names,
    register_reader,
    write_trace,
)
from gpuplan.traces import base as traces_base
from gpuplan.traces.fields import MAX_MEM_GB, MAX_TIME_S

FIXTURES = Path(__file__).parent / "fixtures" / "traces"


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", newline="")
    return path


# ---- own formats: fixtures and round trips -------------------------------------------------------


def test_jsonl_fixture_reads_every_field_in_file_order() -> None:
    result = read_trace(FIXTURES / "own.jsonl")
    assert result.format == "jsonl"
    assert [j.id for j in result.jobs] == ["j1", "j2", "3", "j4"]  # equal submit times keep file order
    first = result.jobs[0]
    assert first == Job(
        id="j1",
        submit_s=0.0,
        gpus=8,
        mem_gb=70.5,
        duration_s=3600.0,
        est_duration_s=4000.0,
        est_mem_gb=72.0,
        requested_s=7200.0,
        user="alice",
        name="pretrain",
        gpu_util_pct=93.5,
        command="torchrun --nproc_per_node 8 train.py",
        may_span_nodes=True,
        meta={"queue": "long", "state": "COMPLETED"},
    )
    assert result.jobs[3].mem_gb is None
    assert result.skipped == {} and result.warnings == [] and result.missing_fields == []


def test_own_csv_fixture_reads_quoted_cells_and_meta() -> None:
    result = read_trace(FIXTURES / "own.csv")
    assert result.format == "csv"
    a1, a2, a3 = result.jobs
    assert a1.name == "eval, small" and a1.command == 'python eval.py --tag "v1"' and a1.meta == {}
    assert a2.command == "bash -c 'echo hi\necho there'" and a2.meta == {"queue": "short"}
    assert a2.mem_gb is None and a3.duration_s is None and a3.name == ""
    assert result.missing_fields == ["est_duration_s", "est_mem_gb", "requested_s", "gpu_util_pct"]


def _varied_jobs() -> list[Job]:
    return [
        Job("a", 0.0, 1),
        Job("b", 0.1, 8, mem_gb=1 / 3, duration_s=1e-7, est_duration_s=12345.678, requested_s=86400.0),
        Job("c", 3e9, 2, user='ünï, "q"', name="line\nbreak", gpu_util_pct=100.0, command="a,b;c"),
        Job("d", 0.1, 4, est_mem_gb=0.0, may_span_nodes=True, meta={"k": [1, 2.5, None], "n": {"x": "y"}}),
    ]


@pytest.mark.parametrize("name", ["out.jsonl", "out.csv", "out.ndjson"])
def test_write_then_read_round_trips_exactly(tmp_path: Path, name: str) -> None:
    jobs = _varied_jobs()
    write_trace(jobs, tmp_path / name)
    assert read_trace(tmp_path / name).jobs == jobs


def test_jsonl_writer_omits_fields_at_their_default(tmp_path: Path) -> None:
    write_trace([Job("a", 1.0, 2), Job("b", 2.0, 1, mem_gb=3.0, may_span_nodes=True)], tmp_path / "t.jsonl")
    lines = (tmp_path / "t.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0]) == {"id": "a", "submit_s": 1.0, "gpus": 2}
    assert json.loads(lines[1]) == {
        "id": "b",
        "submit_s": 2.0,
        "gpus": 1,
        "mem_gb": 3.0,
        "may_span_nodes": True,
    }


def test_csv_writer_writes_only_used_columns(tmp_path: Path) -> None:
    write_trace([Job("a", 1.0, 2), Job("b", 2.0, 1, user="u")], tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text(encoding="utf-8") == "id,submit_s,gpus,user\na,1.0,2,\nb,2.0,1,u\n"


@pytest.mark.parametrize(
    ("jobs", "fragment"),
    [
        ([Job("a", 0.0, 0)], "0 (CPU-only job)"),
        ([Job("a", float("nan"), 1)], "not finite"),
        ([Job("a", 0.0, 1), Job("a", 1.0, 1)], "appears twice"),
        ([Job("a", 0.0, 1, meta={"x": object()})], "meta is not plain JSON"),
        ([], "no jobs to write"),
    ],
    ids=["cpu-only", "nan", "duplicate-id", "meta", "empty"],
)
def test_writer_refuses_what_readers_reject(tmp_path: Path, jobs: list[Job], fragment: str) -> None:
    with pytest.raises(TraceError, match=re.escape(fragment)):
        write_trace(jobs, tmp_path / "t.jsonl")
    assert not (tmp_path / "t.jsonl").exists()


def test_write_trace_unknown_extension_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"\.jsonl, \.ndjson, \.csv") as err:
        write_trace([Job("a", 0.0, 1)], tmp_path / "t.xlsx")
    assert "t.xlsx" in str(err.value)


# ---- generic CSV ---------------------------------------------------------------------------------


def test_generic_csv_recognises_common_column_names() -> None:
    result = read_trace(FIXTURES / "foreign.csv")
    assert result.format == "generic-csv"
    assert [j.id for j in result.jobs] == ["job-001", "job-002", "job-003"]
    j1, j2, j3 = result.jobs
    assert (j1.user, j1.submit_s, j1.duration_s, j1.gpus, j1.gpu_util_pct) == ("u1", 1000.0, 3600.0, 8, 87.5)
    assert j2.gpu_util_pct is None
    assert j1.meta == {"Status": "Pass", "queue": "vc1"} and j3.meta == {"Status": "Killed"}
    assert any("meta: Status, queue" in w for w in result.warnings)
    assert "mem_gb" in result.missing_fields and "gpu_util_pct" not in result.missing_fields


def test_generic_csv_map_and_time_unit() -> None:
    options = ReadOptions(
        column_map=parse_column_map(
            "id=jid, submit=t_submit_ms,duration=t_run_ms,gpus=gpu_request,user=owner"
        ),
        time_unit="ms",
    )
    result = read_trace(FIXTURES / "foreign_ms.tsv", options=options)
    assert [(j.id, j.submit_s, j.duration_s, j.gpus, j.user) for j in result.jobs] == [
        ("x1", 0.0, 1.5, 1, "ann"),
        ("x2", 0.25, 60.0, 4, "ben"),
    ]


def test_map_overrides_recognition(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.csv", "id,gpus,n_gpu_real\n1,8,2\n")
    assert read_trace(path, options=ReadOptions(column_map={"gpus": "N_GPU_REAL"})).jobs[0].gpus == 2


@pytest.mark.parametrize(
    ("unit", "submit_s", "duration_s"),
    [("s", 2.0, 3.0), ("min", 120.0, 180.0), ("h", 7200.0, 10800.0), ({"duration": "min"}, 2.0, 180.0)],
)
def test_time_units_convert_to_seconds(
    tmp_path: Path, unit: str | dict[str, str], submit_s: float, duration_s: float
) -> None:
    path = _write(tmp_path, "t.csv", "id,submit,duration,gpus\n1,2,3,1\n")
    job = read_trace(path, options=ReadOptions(time_unit=unit)).jobs[0]
    assert (job.submit_s, job.duration_s) == (submit_s, duration_s)


def test_generic_csv_without_id_or_submit_column_says_so(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.csv", "runtime,ngpus\n10,1\n\n20,2\n")
    result = read_trace(path)
    assert [(j.id, j.submit_s) for j in result.jobs] == [("1", 0.0), ("2", 0.0)]
    assert any("row numbers" in w for w in result.warnings)
    assert any("submits at time 0" in w for w in result.warnings)
    assert result.missing_fields[:2] == ["id", "submit_s"]


def test_generic_csv_without_gpu_column_asks_for_map(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.csv", "id,submit,cores\n1,0,4\n")
    with pytest.raises(
        TraceError, match=r"t\.csv:1: no GPU-count column .*header has: id, submit, cores.*--map gpus="
    ):
        read_trace(path)


def test_map_to_missing_column_lists_the_header(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.csv", "id,submit,gpus\n1,0,4\n")
    with pytest.raises(
        TraceError, match=r"--map submit_s=t0: no such column; the header has: id, submit, gpus"
    ):
        read_trace(path, options=ReadOptions(column_map={"submit": "t0"}))


def test_generic_csv_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.csv", "job_id,submit,gpus\nA,0,1\nB,0,1\nA,5,1\n")
    with pytest.raises(InputError, match=r"t\.csv:4: column job_id: value 'A' .*line 2 already has it"):
        read_trace(path)


def test_generic_csv_skip_bad_counts_cpu_only_jobs(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.csv", "id,submit,gpus\n1,0,0\n2,0,1\n3,1,0\n4,2,two\n")
    result = read_trace(path, options=ReadOptions(skip_bad=True))
    assert [j.id for j in result.jobs] == ["2"]
    assert result.skipped == {"gpus: 0 (CPU-only job)": 2, "gpus: not an integer": 1}
    assert result.skipped_total == 3 and len(result.warnings) == 3


# ---- --map and --time-unit parsing ---------------------------------------------------------------


def test_parse_column_map_accepts_short_and_full_field_names() -> None:
    assert parse_column_map("submit=Submit Time, duration_s=rt,gpus=n,") == {
        "submit_s": "Submit Time",
        "duration_s": "rt",
        "gpus": "n",
    }


@pytest.mark.parametrize("text", ["submit", "=col", "submit=", "submit=a,submit_s=b", "gpus=a,gpus=b", ""])
def test_parse_column_map_rejects_bad_syntax(text: str) -> None:
    with pytest.raises(TraceError, match="--map"):
        parse_column_map(text)


def test_parse_column_map_unknown_field_lists_valid_names() -> None:
    with pytest.raises(UnknownNameError, match=r"unknown trace field 'gpu'; valid names: id, submit_s, gpus"):
        parse_column_map("gpu=num_gpu")


def test_parse_time_unit() -> None:
    assert parse_time_unit("ms") == "ms"
    assert parse_time_unit("submit=s,duration=min") == {"submit_s": "s", "duration_s": "min"}
    with pytest.raises(UnknownNameError, match="valid names: s, ms, min, h"):
        parse_time_unit("sec")
    with pytest.raises(UnknownNameError, match="trace field 'gpus'"):
        parse_time_unit("gpus=s")


def test_own_formats_warn_about_ignored_options() -> None:
    options = ReadOptions(column_map={"gpus": "x"}, time_unit="ms")
    warnings = read_trace(FIXTURES / "own.jsonl", options=options).warnings
    assert warnings == [
        "column map ignored: the jsonl format has fixed field names",
        "time unit ignored: the jsonl format stores seconds",
    ]


# ---- every class of bad input --------------------------------------------------------------------

_JROW = '{"id": "a", "submit_s": 0, "gpus": 1}\n'
_CHEAD = "id,submit_s,gpus,mem_gb,requested_s,may_span_nodes,meta\n"

BAD_INPUTS = [
    # (name, file content, line, column or None, value as it appears in the message)
    ("jsonl-gpus-string", _JROW + '{"id": "b", "submit_s": 0, "gpus": "two"}\n', 2, "gpus", "'two'"),
    ("jsonl-gpus-zero", _JROW + '{"id": "b", "submit_s": 0, "gpus": 0}\n', 2, "gpus", "value 0"),
    ("jsonl-gpus-fraction", _JROW + '{"id": "b", "submit_s": 0, "gpus": 1.5}\n', 2, "gpus", "1.5"),
    ("jsonl-negative-time", _JROW + '{"id": "b", "submit_s": -3, "gpus": 1}\n', 2, "submit_s", "-3"),
    (
        "jsonl-nan-time",
        _JROW + '{"id": "b", "submit_s": 0, "gpus": 1, "duration_s": NaN}\n',
        2,
        "duration_s",
        "nan",
    ),
    ("jsonl-inf-time", '\n{"id": "b", "submit_s": Infinity, "gpus": 1}\n', 2, "submit_s", "inf"),
    ("jsonl-bad-json", _JROW + '{"id": "b", "submit_s": 0,, "gpus": 1}\n', 2, None, '"submit_s": 0,,'),
    ("jsonl-not-object", _JROW + "[1, 2, 3]\n", 2, None, "'[1, 2, 3]'"),
    ("jsonl-unknown-key", _JROW + '{"id": "b", "submit_s": 0, "gpus": 1, "gpu": 2}\n', 2, "gpu", "value 2"),
    ("jsonl-missing-gpus", _JROW + '{"id": "b", "submit_s": 0}\n', 2, "gpus", "None"),
    (
        "jsonl-duplicate-key",
        _JROW + '{"id": "b", "submit_s": 0, "gpus": 1, "gpus": 2}\n',
        2,
        None,
        '"gpus": 2',
    ),
    ("jsonl-duplicate-id", _JROW + _JROW, 2, "id", "'a'"),
    ("jsonl-not-utf8", _JROW.encode() + b'{"id": "\xff"}\n', 2, None, '{"id": "'),
    ("csv-not-a-number", _CHEAD + "a,0,1,lots,,,\n", 2, "mem_gb", "'lots'"),
    ("csv-inf-time", _CHEAD + "a,0,1,,,,\n\nb,0,1,,inf,,\n", 4, "requested_s", "'inf'"),
    ("csv-too-few-fields", _CHEAD + "a,0,1\n", 2, "mem_gb", "'a,0,1'"),
    ("csv-too-many-fields", _CHEAD + "a,0,1,,,,,surplus\n", 2, "#8", "'surplus'"),
    ("csv-bad-meta", _CHEAD + 'a,0,1,,,,"{oops}"\n', 2, "meta", "'{oops}'"),
    ("csv-meta-not-object", _CHEAD + "a,0,1,,,,[1]\n", 2, "meta", "'[1]'"),
    ("csv-bad-bool", _CHEAD + "a,0,1,,,maybe,\n", 2, "may_span_nodes", "'maybe'"),
    ("csv-missing-id", _CHEAD + " ,0,1,,,,\n", 2, "id", "' '"),
    ("csv-bad-quoting", _CHEAD + 'a,0,1,,,,"{}"x\n', 2, None, "expected after"),
    ("generic-negative-gpus", "job,submit,num_gpus\nj1,0,-2\n", 2, "num_gpus", "'-2'"),
    ("generic-util-over-100", "job,submit,ngpus,util\nj1,0,1,150\n", 2, "util", "'150'"),
    ("generic-nan-submit", "job,submit,ngpus\nj1,nan,1\n", 2, "submit", "'nan'"),
]


@pytest.mark.parametrize(
    ("name", "content", "line", "column", "value"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS]
)
def test_bad_input_message_locates_the_value(
    tmp_path: Path, name: str, content: str | bytes, line: int, column: str | None, value: str
) -> None:
    suffix = ".jsonl" if name.startswith("jsonl") else ".csv"
    path = _write(tmp_path, f"bad-{name}{suffix}", content)
    with pytest.raises(InputError) as info:
        read_trace(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}:")
    assert path.name in message and value in message
    if column is not None:
        assert f"column {column}" in message


def test_line_numbers_are_physical_lines_after_a_multiline_cell(tmp_path: Path) -> None:
    text = (FIXTURES / "own.csv").read_text(encoding="utf-8") + "a4,x,1,,,,,,\n"
    path = _write(tmp_path, "t.csv", text)
    with pytest.raises(InputError, match=r"t\.csv:6: column submit_s: value 'x'"):
        read_trace(path)


def test_own_csv_header_errors_list_the_valid_columns(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.csv", "id,submit_s,gpus,colour\na,0,1,red\n")
    with pytest.raises(TraceError, match=r"unknown column\(s\) \['colour'\]; valid columns: id, submit_s"):
        read_trace(path, fmt="csv")
    path = _write(tmp_path, "u.csv", "id,gpus\na,1\n")
    with pytest.raises(TraceError, match=r"required column\(s\) \['submit_s'\] missing"):
        read_trace(path, fmt="csv")


def test_skip_bad_counts_each_reason(tmp_path: Path) -> None:
    lines = [
        _JROW,
        '{"id": "b", "submit_s": 0, "gpus": 0}\n',
        '{"id": "c", "submit_s": 0, "gpus": 0}\n',
        "not json\n",
        "[]\n",
        _JROW,
        '{"id": "d", "submit_s": -1, "gpus": 1}\n',
        '{"id": "e", "submit_s": 4, "gpus": 3}\n',
    ]
    path = _write(tmp_path, "t.jsonl", "".join(lines))
    result = read_trace(path, options=ReadOptions(skip_bad=True))
    assert [j.id for j in result.jobs] == ["a", "e"]
    assert result.skipped == {
        "gpus: 0 (CPU-only job)": 2,
        "bad JSON": 1,
        "not a JSON object": 1,
        "id: duplicate": 1,
        "submit_s: negative": 1,
    }
    assert len(result.warnings) == 6 and result.warnings[-1].startswith("... 1 more skipped rows")
    assert result.warnings[0].startswith(f"skipped {path}:2:")


# ---- empty, truncated, missing, unknown ----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "fmt"),
    [
        ("empty.jsonl", "", None),
        ("blank.dat", "\n  \n", None),
        ("blank.jsonl", "\n\n", "jsonl"),
        ("header-only.csv", "id,submit_s,gpus\n", None),
        ("header-only-generic.csv", "job,ngpus\n\n", None),
        ("empty.csv", "", "generic-csv"),
    ],
)
def test_empty_trace_is_an_error(tmp_path: Path, name: str, content: str, fmt: str | None) -> None:
    path = _write(tmp_path, name, content)
    with pytest.raises(TraceError, match=rf"{name}: the (file is empty|trace holds no valid job)"):
        read_trace(path, fmt=fmt)


def test_all_rows_skipped_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.jsonl", "x\ny\n")
    with pytest.raises(TraceError, match=r"all 2 rows were skipped: \{'bad JSON': 2\}"):
        read_trace(path, options=ReadOptions(skip_bad=True))


def test_truncated_jsonl_last_line(tmp_path: Path) -> None:
    text = (FIXTURES / "own.jsonl").read_text(encoding="utf-8")
    path = _write(tmp_path, "cut.jsonl", text[: text.rindex('"gpus"')])
    with pytest.raises(TruncatedTraceError, match=r"cut\.jsonl:5: value '\{\"id\": \"j4\".*looks cut off"):
        read_trace(path)
    result = read_trace(path, options=ReadOptions(skip_bad=True))
    assert len(result.jobs) == 3 and result.skipped == {"truncated last line": 1}


def test_truncated_csv_last_row(tmp_path: Path) -> None:
    text = (FIXTURES / "own.csv").read_text(encoding="utf-8")
    path = _write(tmp_path, "cut.csv", text[: text.rindex("5.5")])
    with pytest.raises(TruncatedTraceError, match=r"cut\.csv:5: column duration_s: value 'a3,30.0,1,'"):
        read_trace(path)
    result = read_trace(path, options=ReadOptions(skip_bad=True))
    assert [j.id for j in result.jobs] == ["a1", "a2"] and result.skipped == {"truncated last line": 1}


def test_truncated_csv_inside_a_quoted_cell(tmp_path: Path) -> None:
    text = (FIXTURES / "own.csv").read_text(encoding="utf-8")
    path = _write(tmp_path, "cut.csv", text[: text.index("echo there")])
    with pytest.raises(TruncatedTraceError, match=r"cut\.csv:3:"):
        read_trace(path)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nope\.jsonl: no such trace file"):
        read_trace(tmp_path / "nope.jsonl")
    with pytest.raises(TraceError, match="not a file"):
        read_trace(tmp_path)


def test_unknown_format_name_lists_formats() -> None:
    with pytest.raises(UnknownNameError, match=r"unknown trace format 'xml'; valid names: ") as err:
        read_trace(FIXTURES / "own.jsonl", fmt="xml")
    for name in reader_names():
        assert name in str(err.value)


def test_undetectable_format_lists_formats(tmp_path: Path) -> None:
    path = _write(tmp_path, "notes.dat", "hello world\nnothing tabular here\n")
    with pytest.raises(TraceError, match=r"notes\.dat: cannot tell the trace format") as err:
        read_trace(path)
    for name in reader_names():
        assert name in str(err.value)


@pytest.mark.parametrize(
    ("name", "content", "fmt"),
    [
        ("a.jsonl", "{}", "jsonl"),
        ("a.log", '{"id": 1}', "jsonl"),
        ("a.txt", "id,submit_s,gpus\n", "csv"),
        ("a.csv", "id,submit,gpus\n", "generic-csv"),
        ("a.txt", "Job ID;Num GPU\n", "generic-csv"),
    ],
)
def test_format_detection(name: str, content: str, fmt: str) -> None:
    reader = traces_base.detect_reader(Path(name), content)
    assert reader is not None and reader.name == fmt


def test_a_third_party_reader_plugs_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(traces_base, "_READERS", dict(traces_base._READERS))

    @register_reader
    class OneJobPerLine(TraceReader):
        name = "names"
        description = "one job name per line"

        def detect(self, path: Path, head: str) -> bool:
            return path.suffix == ".names"

        def read(self, path: Path, options: ReadOptions) -> TraceResult:
            names = path.read_text(encoding="utf-8").split()
            return TraceResult([Job(n, 0.0, 1) for n in names], source=str(path), format=self.name)

    assert "names" in reader_names() and isinstance(get_reader("names"), OneJobPerLine)
    path = _write(tmp_path, "t.names", "x y\n")
    assert [j.id for j in read_trace(path).jobs] == ["x", "y"]
    with pytest.raises(ValueError, match="already registered"):
        register_reader(type("Other", (OneJobPerLine,), {}))


# ---- properties ----------------------------------------------------------------------------------

_VALID_LINES = [
    "id,submit_s,gpus,mem_gb,duration_s,meta",
    "Job ID,Submit Time,Run Time,Num GPU,User",
    '{"id": "a", "submit_s": 1.5, "gpus": 2, "mem_gb": 3.0, "meta": {"q": [1]}}',
    "a,1.5,2,3.0,10,",
    'b,0,1,,,"{""k"": 1}"',
    "j-1,100,3600,8,alice",
    "",
]


@st.composite
def _mutated_line(draw: st.DrawFn) -> str:
    line = draw(st.sampled_from(_VALID_LINES))
    start = draw(st.integers(0, len(line)))
    end = draw(st.integers(start, len(line)))
    junk = draw(
        st.one_of(st.text(max_size=4), st.sampled_from(['"', ",", "{", "}", "\r", "\x00", "NaN", "-1"]))
    )
    return line[:start] + junk + line[end:]


_LINE = st.one_of(st.sampled_from(_VALID_LINES), _mutated_line(), st.text(max_size=30))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(_LINE, max_size=6),
    raw=st.binary(max_size=12),
    suffix=st.sampled_from([".jsonl", ".csv", ".tsv", ".txt"]),
    fmt=st.sampled_from([None, "jsonl", "csv", "generic-csv"]),
    skip_bad=st.booleans(),
    newline_at_end=st.booleans(),
)
def test_readers_raise_only_gpuplan_errors(
    lines: list[str], raw: bytes, suffix: str, fmt: str | None, skip_bad: bool, newline_at_end: bool
) -> None:
    data = "\n".join(lines).encode("utf-8") + (b"\n" if newline_at_end else raw)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"fuzz{suffix}"
        path.write_bytes(data)
        try:
            result = read_trace(path, fmt=fmt, options=ReadOptions(skip_bad=skip_bad))
        except GpuplanError:
            return
    assert result.jobs and len({j.id for j in result.jobs}) == len(result.jobs)


_FLOAT = st.floats(min_value=0.0, max_value=MAX_TIME_S, allow_nan=False)  # the plausible range
_OPT_FLOAT = st.none() | _FLOAT
_OPT_MEM = st.none() | st.floats(min_value=0.0, max_value=MAX_MEM_GB, allow_nan=False)
_JSON_SCALAR = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
_JOB = st.builds(
    Job,
    id=st.text(min_size=1).filter(str.strip),
    submit_s=_FLOAT,
    gpus=st.integers(1, 4096),
    mem_gb=_OPT_MEM,
    duration_s=_OPT_FLOAT,
    est_duration_s=_OPT_FLOAT,
    est_mem_gb=_OPT_MEM,
    requested_s=_OPT_FLOAT,
    user=st.text(),
    name=st.text(),
    gpu_util_pct=st.none() | st.floats(0.0, 100.0),
    command=st.text(),
    may_span_nodes=st.booleans(),
    meta=st.dictionaries(st.text(), _JSON_SCALAR | st.lists(_JSON_SCALAR, max_size=3), max_size=3),
)


@settings(max_examples=150, deadline=None)
@given(
    jobs=st.lists(_JOB, min_size=1, max_size=5, unique_by=lambda j: j.id),
    suffix=st.sampled_from([".jsonl", ".csv"]),
)
def test_any_valid_jobs_round_trip(jobs: list[Job], suffix: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"t{suffix}"
        write_trace(jobs, path)
        assert read_trace(path).jobs == jobs

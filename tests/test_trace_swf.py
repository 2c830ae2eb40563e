"""The SWF reader: a hand-written log, every class of bad input, random and mutated lines, and the NASA log."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzing import Mutated, assert_located, break_cell, mutated_files
from gpuplan.errors import InputError
from gpuplan.traces import ReadOptions, TraceError, TruncatedTraceError, read_trace
from gpuplan.traces.swf import SLOT_MODEL, SwfReader

FIXTURE = Path(__file__).parent / "fixtures" / "swf" / "small.swf"
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
NASA = DATA / "traces" / "pwa-nasa-ipsc-1993" / "NASA-iPSC-1993-3.1-cln.swf"
needs_nasa = pytest.mark.skipif(
    not NASA.is_file(), reason=f"shared data absent: {NASA} (see shared/data/README.md)"
)

HEADER = "; Version: 2.2\n; MaxNodes: 4\n; MaxProcs: 8\n"
GOOD = "1 0 -1 100 4 -1 -1 4 200 -1 1 1 1 1 -1 -1 -1 -1\n"


def _write(tmp_path: Path, body: str, name: str = "t.swf") -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


def _line(**fields: str) -> str:
    """GOOD with some of its 18 fields (1-based, as f4=...) replaced."""
    tokens = GOOD.split()
    for key, value in fields.items():
        tokens[int(key[1:]) - 1] = value
    return " ".join(tokens) + "\n"


# ---- the fixture ----------------------------------------------------------------------------------


def test_fixture_maps_fields_and_meta() -> None:
    result = read_trace(FIXTURE)
    assert result.format == "swf"
    assert [j.id for j in result.jobs] == ["1", "2", "5", "6"]
    first, second, from_request, cancelled = result.jobs
    assert (first.submit_s, first.gpus, first.duration_s, first.requested_s) == (0.0, 4, 100.0, 200.0)
    assert first.user == "1" and first.may_span_nodes
    assert first.meta == {"requested_procs": 4, "group": 1, "app": 1, "status": "completed"}
    assert second.meta["status"] == "failed" and second.meta["wait_s"] == 5 and second.meta["queue"] == 1
    assert from_request.gpus == 8 and from_request.meta["procs_from"] == "requested"
    assert cancelled.meta["status"] == "cancelled" and cancelled.duration_s == 0.0
    assert cancelled.meta["avg_cpu_s"] == 1.5 and cancelled.meta["think_time_s"] == 12
    assert not cancelled.may_span_nodes and cancelled.requested_s is None
    assert "mem_gb" in result.missing_fields


def test_fixture_skips_jobs_that_never_ran_with_counted_reasons() -> None:
    result = read_trace(FIXTURE)
    assert result.skipped == {
        "run time unknown (-1)": 1,
        "no processors (allocated and requested are 0 or -1)": 1,
    }
    assert "1 jobs skipped: run time unknown (-1)" in result.warnings
    assert any("requested count is used" in w for w in result.warnings)


def test_header_sizes_the_cluster() -> None:
    cluster = read_trace(FIXTURE).cluster
    assert cluster is not None
    assert (len(cluster.nodes), cluster.max_node_gpus, cluster.total_gpus) == (8, 2, 16)
    assert cluster.nodes[0].gpu.model == SLOT_MODEL and not cluster.sharing
    assert cluster.name.startswith("Test Cluster")


def test_header_notes_become_warnings_and_censoring() -> None:
    result = read_trace(FIXTURE)
    assert any("submit times are start times" in c for c in result.censored)
    assert any("cancelled" in c for c in result.censored)
    assert any(w.startswith("header note: jobs 3 and 4") for w in result.warnings)
    assert any("UnixStartTime 1000000000 (2001-09-09 01:46:40 UTC" in w for w in result.warnings)


@pytest.mark.parametrize(
    ("header", "nodes", "per_node", "note"),
    [
        ("; MaxNodes: 4\n", 4, 1, "assuming 1 processor per node"),
        ("; MaxProcs: 6\n", 6, 1, None),
        ("; MaxNodes: 4\n; MaxProcs: 6\n", 6, 1, "not a multiple"),
    ],
)
def test_cluster_from_partial_headers(
    tmp_path: Path, header: str, nodes: int, per_node: int, note: str | None
) -> None:
    result = read_trace(_write(tmp_path, header + GOOD))
    assert result.cluster is not None
    assert (len(result.cluster.nodes), result.cluster.max_node_gpus) == (nodes, per_node)
    if note:
        assert any(note in w for w in result.warnings)


def test_no_header_no_cluster(tmp_path: Path) -> None:
    result = read_trace(_write(tmp_path, GOOD), fmt="swf")
    assert result.cluster is None
    assert any("neither MaxProcs nor MaxNodes" in w for w in result.warnings)


def test_detected_without_the_extension(tmp_path: Path) -> None:
    assert read_trace(_write(tmp_path, HEADER + GOOD, "log.txt")).format == "swf"
    assert read_trace(_write(tmp_path, GOOD, "bare.txt")).format == "swf"
    assert SwfReader().detect(Path("x.swf"), "")


def test_float_fields_and_comments_between_jobs(tmp_path: Path) -> None:
    body = HEADER + _line(f2="12.5", f4="3.25") + "; a comment\n\n" + _line(f1="2")
    result = read_trace(_write(tmp_path, body))
    assert [(j.submit_s, j.duration_s) for j in result.jobs] == [(12.5, 3.25), (0.0, 100.0)]


# ---- bad input: one test per class ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "column", "reason"),
    [
        (_line(f4="ten"), "4 (run time)", "run time: not a number"),
        (_line(f5="2.5"), "5 (allocated processors)", "allocated processors: not an integer"),
        (_line(f9="-5"), "9 (requested time)", "requested time: negative"),
        (_line(f2="nan"), "2 (submit time)", "submit time: not a number"),
        (_line(f2="-1"), "2 (submit time)", "submit time: missing"),
        (_line(f1="-1"), "1 (job number)", "job number: missing"),
        (_line(f11="7"), "11 (status)", "status"),
        (_line(f5="64"), "5 (allocated processors)", "more processors than MaxProcs"),
        ("1 0 -1 100 4\n", None, "wrong number of fields"),
        (GOOD.rstrip("\n") + " 9\n", None, "wrong number of fields"),
    ],
)
def test_bad_line_names_file_line_column_and_value(
    tmp_path: Path, line: str, column: str | None, reason: str
) -> None:
    path = _write(tmp_path, HEADER + line)
    with pytest.raises(InputError) as info:
        read_trace(path)
    err = info.value
    assert (err.path, err.line, err.column, err.reason) == (str(path), 4, column, reason)
    assert str(err).startswith(f"{path}:4: ")
    assert "is not valid (expected" in str(err)


def test_duplicate_job_number(tmp_path: Path) -> None:
    path = _write(tmp_path, HEADER + GOOD + GOOD)
    with pytest.raises(InputError, match="line 4 already has it") as info:
        read_trace(path)
    assert (info.value.line, info.value.column) == (5, "1 (job number)")


def test_truncated_last_line(tmp_path: Path) -> None:
    path = _write(tmp_path, HEADER + GOOD + "2 10 -1 5")
    with pytest.raises(TruncatedTraceError) as info:
        read_trace(path)
    assert info.value.line == 5 and "cut off" in str(info.value)


def test_complete_last_line_without_newline_is_fine(tmp_path: Path) -> None:
    assert len(read_trace(_write(tmp_path, HEADER + GOOD.rstrip("\n"))).jobs) == 1


@pytest.mark.parametrize("body", ["", HEADER, "\n\n"])
def test_empty_or_header_only_file(tmp_path: Path, body: str) -> None:
    with pytest.raises(TraceError, match=r"t\.swf"):
        read_trace(_write(tmp_path, body), fmt="swf")


def test_only_skipped_jobs_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"no usable job.*run time unknown"):
        read_trace(_write(tmp_path, HEADER + _line(f4="-1")))


@pytest.mark.parametrize("value", ["many", "0", "-4", "99999999"])
def test_bad_header_value_stops_even_with_skip_bad(tmp_path: Path, value: str) -> None:
    path = _write(tmp_path, f"; MaxProcs: {value}\n" + GOOD)
    with pytest.raises(InputError, match=rf"t\.swf:1: column header MaxProcs: value '{value}'"):
        read_trace(path, options=ReadOptions(skip_bad=True))


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "t.swf"
    path.write_bytes(HEADER.encode() + b"1 0 -1 \xff 4\n")
    with pytest.raises(InputError) as info:
        read_trace(path)
    assert info.value.line == 4


def test_skip_bad_counts_each_reason(tmp_path: Path) -> None:
    body = HEADER + GOOD + _line(f1="2", f4="x") + _line(f1="3", f5="99") + "4 1 2\n" + _line(f1="5", f4="-1")
    result = read_trace(_write(tmp_path, body), options=ReadOptions(skip_bad=True))
    assert [j.id for j in result.jobs] == ["1"]
    assert result.skipped == {
        "run time: not a number": 1,
        "more processors than MaxProcs": 1,
        "wrong number of fields": 1,
        "run time unknown (-1)": 1,
    }
    assert sum(w.startswith("skipped ") for w in result.warnings) == 3


def test_options_that_do_not_apply_are_reported(tmp_path: Path) -> None:
    result = read_trace(_write(tmp_path, HEADER + GOOD), options=ReadOptions(time_unit="ms"))
    assert any("time unit ignored" in w for w in result.warnings)


# ---- random and mutated lines ---------------------------------------------------------------------


def _seed_lines() -> list[str]:
    """Real SWF lines when the shared data is here, else the fixture's (same format)."""
    source = NASA if NASA.is_file() else FIXTURE
    with source.open(encoding="utf-8") as f:
        return [line for _, line in zip(range(60), f)]


SEED = _seed_lines()
BREAK_SUBMIT = break_cell(
    1, "x1", sep=None, data=lambda line: not line.lstrip().startswith(";") and len(line.split()) == 18
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated=mutated_files(SEED, sep=None, breaker=BREAK_SUBMIT), skip_bad=st.booleans())
def test_mutated_lines_only_raise_located_errors(mutated: Mutated, skip_bad: bool) -> None:
    text = mutated.text
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.swf"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))  # a lone surrogate is not UTF-8
        read = lambda: read_trace(path, options=ReadOptions(skip_bad=skip_bad))  # noqa: E731
        assert_located(path, read, mutated.broken and not skip_bad)


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=300))
def test_random_bytes_only_raise_located_errors(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.swf"
        path.write_bytes(HEADER.encode() + data)
        assert_located(path, lambda: read_trace(path, fmt="swf"))


# ---- the real NASA iPSC/860 log -------------------------------------------------------------------


@needs_nasa
def test_nasa_ipsc_log() -> None:
    result = read_trace(NASA)
    assert result.format == "swf"
    assert len(result.jobs) == 18_239 and result.skipped == {}
    assert result.cluster is not None
    assert (len(result.cluster.nodes), result.cluster.total_gpus) == (128, 128)
    assert max(j.gpus for j in result.jobs) == 128
    assert any("submit times are start times" in c for c in result.censored)
    assert all(j.requested_s is None and j.duration_s is not None for j in result.jobs)
    assert {j.meta["group"] for j in result.jobs} == {1, 2}

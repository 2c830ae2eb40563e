"""gpuplan Parquet: round trips, bad files and values, and random damage to a valid file."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzing import assert_located
from gpuplan.errors import InputError
from gpuplan.model import Job
from gpuplan.traces import ReadOptions, TraceError, read_trace, write_trace
from gpuplan.traces.parquet import write_parquet

JOBS = [
    Job(
        id="ft-01",
        submit_s=0.0,
        gpus=8,
        mem_gb=71.5,
        duration_s=5400.0,
        est_duration_s=5000.5,
        est_mem_gb=70.0,
        requested_s=7200.0,
        user="alice",
        name="llama-ft",
        gpu_util_pct=93.25,
        command="torchrun --nproc_per_node 8 train.py",
        may_span_nodes=True,
        meta={"queue": "long", "tags": ["a", 1, None], "nested": {"x": 1.5}},
    ),
    Job(id="inf-07", submit_s=0.1 + 0.2, gpus=1, mem_gb=12.0, duration_s=600.0),
    Job(id="eval-3", submit_s=42.5, gpus=2, meta={"phase": "Pending"}),
]


def _frame(tmp_path: Path, data: dict, name: str = "t.parquet") -> Path:  # type: ignore[type-arg]
    path = tmp_path / name
    pq.write_table(pa.table(data), path)
    return path


def test_round_trip_gives_equal_jobs(tmp_path: Path) -> None:
    path = tmp_path / "jobs.parquet"
    write_parquet(JOBS, path)
    result = read_trace(path)
    assert result.format == "parquet"
    assert result.jobs == JOBS
    assert result.skipped == {} and result.warnings == []


def test_write_trace_chooses_parquet_by_extension(tmp_path: Path) -> None:
    path = tmp_path / "jobs.parquet"
    write_trace(JOBS, path)
    assert path.read_bytes()[:4] == b"PAR1"
    assert read_trace(path).jobs == JOBS


def test_schema_has_only_the_fields_jobs_set(tmp_path: Path) -> None:
    path = tmp_path / "jobs.parquet"
    write_parquet(JOBS[1:], path)
    schema = pq.read_schema(path)
    assert schema.names == ["id", "submit_s", "gpus", "mem_gb", "duration_s", "meta"]
    assert schema.field("gpus").type == pa.int64() and schema.field("meta").type == pa.string()
    assert read_trace(path).missing_fields == [
        "est_duration_s",
        "est_mem_gb",
        "requested_s",
        "user",
        "name",
        "gpu_util_pct",
    ]


def test_detected_by_magic_without_the_extension(tmp_path: Path) -> None:
    path = tmp_path / "jobs.bin"
    write_parquet(JOBS, path)
    assert read_trace(path).format == "parquet"


def test_other_column_types_are_accepted_when_values_fit(tmp_path: Path) -> None:
    path = _frame(tmp_path, {"id": [7, 8], "submit_s": [1, 2], "gpus": [1.0, 2.0], "meta": [None, ""]})
    jobs = read_trace(path).jobs
    assert [(j.id, j.submit_s, j.gpus, j.meta) for j in jobs] == [("7", 1.0, 1, {}), ("8", 2.0, 2, {})]


def test_writer_rejects_jobs_the_reader_would_reject(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot write job 'x'"):
        write_parquet([Job(id="x", submit_s=0.0, gpus=0)], tmp_path / "bad.parquet")
    with pytest.raises(TraceError, match="no jobs to write"):
        write_parquet([], tmp_path / "bad.parquet")
    assert not (tmp_path / "bad.parquet").exists()


# ---- bad input: one test per class ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "column", "reason"),
    [
        ({"id": ["a", "b"], "submit_s": [0.0, 1.0], "gpus": [1, 0]}, "gpus", "gpus: 0 (CPU-only job)"),
        ({"id": ["a", "b"], "submit_s": [0.0, -1.0], "gpus": [1, 1]}, "submit_s", "submit_s: negative"),
        (
            {"id": ["a", "b"], "submit_s": [0.0, float("nan")], "gpus": [1, 1]},
            "submit_s",
            "submit_s: not finite",
        ),
        ({"id": ["a", None], "submit_s": [0.0, 1.0], "gpus": [1, 1]}, "id", "id: missing"),
        ({"id": ["a", "b"], "submit_s": [0.0, 1.0], "gpus": [1.0, 2.5]}, "gpus", "gpus: not an integer"),
        (
            {"id": ["a", "b"], "submit_s": [0, 1], "gpus": [1, 1], "meta": ["{}", "{bad"]},
            "meta",
            "meta: bad JSON",
        ),
        (
            {"id": ["a", "b"], "submit_s": [0, 1], "gpus": [1, 1], "meta": ["{}", "[1]"]},
            "meta",
            "meta: not an object",
        ),
        ({"id": ["a", "a"], "submit_s": [0, 1], "gpus": [1, 1]}, "id", "id: duplicate"),
    ],
)
def test_bad_value_names_file_row_column_and_value(
    tmp_path: Path, data: dict, column: str, reason: str
) -> None:  # type: ignore[type-arg]
    path = _frame(tmp_path, data)
    with pytest.raises(InputError) as info:
        read_trace(path)
    err = info.value
    assert (err.path, err.line, err.column, err.reason) == (str(path), 2, column, reason)
    assert str(err).startswith(f"{path}:2: column {column}: value ")
    result = read_trace(path, options=ReadOptions(skip_bad=True))
    assert [j.id for j in result.jobs] == ["a"] and result.skipped == {reason: 1}


def test_unknown_missing_and_repeated_columns(tmp_path: Path) -> None:
    path = tmp_path / "twice.parquet"
    pq.write_table(
        pa.Table.from_arrays(
            [pa.array(["a"]), pa.array([0.0]), pa.array([1]), pa.array([2])],
            names=["id", "submit_s", "gpus", "gpus"],
        ),
        path,
    )
    with pytest.raises(TraceError, match=r"column\(s\) \['gpus'\] appear more than once"):
        read_trace(path)
    with pytest.raises(TraceError, match=r"unknown column\(s\) \['gpu'\]"):
        read_trace(_frame(tmp_path, {"id": ["a"], "submit_s": [0.0], "gpu": [1]}))
    with pytest.raises(TraceError, match=r"required column\(s\) \['gpus'\] missing"):
        read_trace(_frame(tmp_path, {"id": ["a"], "submit_s": [0.0]}))


def test_empty_truncated_and_foreign_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.parquet"
    empty.write_bytes(b"")
    with pytest.raises(TraceError, match="empty"):
        read_trace(empty, fmt="parquet")
    no_rows = _frame(tmp_path, {"id": pa.array([], pa.string()), "submit_s": [], "gpus": []}, "none.parquet")
    with pytest.raises(TraceError, match="no valid job"):
        read_trace(no_rows)
    whole = tmp_path / "jobs.parquet"
    write_parquet(JOBS, whole)
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(whole.read_bytes()[:-10])
    with pytest.raises(TraceError, match="footer is missing: the file looks cut off"):
        read_trace(cut)
    text = tmp_path / "text.parquet"
    text.write_text("id,submit_s,gpus\n", encoding="utf-8")
    with pytest.raises(TraceError, match="not a Parquet file"):
        read_trace(text, fmt="parquet")


def test_options_that_do_not_apply_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "jobs.parquet"
    write_parquet(JOBS, path)
    result = read_trace(path, options=ReadOptions(column_map={"gpus": "n"}))
    assert any("column map ignored" in w for w in result.warnings)


# ---- random damage --------------------------------------------------------------------------------


def _valid_bytes() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "jobs.parquet"
        write_parquet(JOBS, path)
        return path.read_bytes()


VALID = _valid_bytes()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=8),
    cut=st.integers(0, 40),
)
def test_damaged_files_only_raise_located_errors(edits: list[tuple[int, int]], cut: int) -> None:
    data = bytearray(VALID)
    for at, byte in edits:
        data[at] = byte
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.parquet"
        path.write_bytes(bytes(data[: len(data) - cut]))
        assert_located(path, lambda: read_trace(path), must_fail=cut > 0)  # no footer magic: not Parquet


KINDS = [
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10),
    st.booleans(),
]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    columns=st.lists(
        st.sampled_from(["id", "submit_s", "gpus", "mem_gb", "user", "may_span_nodes", "meta"]),
        min_size=1,
        max_size=7,
        unique=True,
    ),
    data=st.data(),
)
def test_random_values_only_raise_located_errors(columns: list[str], data: st.DataObject) -> None:
    rows = data.draw(st.integers(1, 4))
    frame: dict[str, pa.Array] = {}
    for column in columns:
        kind = data.draw(st.sampled_from(KINDS))
        frame[column] = pa.array([data.draw(st.one_of(st.none(), kind)) for _ in range(rows)])
    skip_bad = data.draw(st.booleans())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.parquet"
        pq.write_table(pa.table(frame), path)
        assert_located(path, lambda: read_trace(path, options=ReadOptions(skip_bad=skip_bad)))


def test_the_columnar_fast_path_gives_the_row_readers_jobs(tmp_path: Path) -> None:
    """A clean file goes through `jobs_from_arrow`; its jobs equal the row-by-row reader's."""
    from gpuplan.synth import synth_poisson
    from gpuplan.traces.fastcsv import jobs_from_arrow
    from gpuplan.traces.fields import job_from_json

    jobs = synth_poisson(400, seed=5, load=0.9, total_gpus=32)
    for k, j in enumerate(jobs):  # missing values, spanning jobs, integer-valued floats, empty names
        if k % 3 == 0:
            j.est_duration_s, j.mem_gb, j.user = None, None, ""
        if k % 5 == 0:
            j.may_span_nodes, j.duration_includes_sharing, j.meta = True, k % 10 == 0, {}
        if k % 7 == 0:
            j.duration_s = float(int(j.duration_s or 0))
    path = tmp_path / "t.parquet"
    write_trace(jobs, path)
    table = pq.read_table(path)
    fast = jobs_from_arrow(table)
    assert fast is not None and len(fast) == len(jobs)
    slow = [
        job_from_json({k: v for k, v in row.items() if v is not None} | _meta_of(row))
        for row in table.to_pylist()
    ]
    assert fast == slow == read_trace(path).jobs


def _meta_of(row: dict) -> dict:  # type: ignore[type-arg]
    import json

    text = row.get("meta")
    return {"meta": json.loads(text)} if text else {}

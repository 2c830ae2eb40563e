"""Absurd values and wide text encodings: a one-line error that names the field, or says how to convert."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuplan.cli import app
from gpuplan.traces import read_trace

SWF = Path(__file__).parent / "fixtures" / "swf" / "small.swf"
runner = CliRunner()


def _error_line(path: Path, *args: str) -> str:
    result = runner.invoke(app, ["simulate", str(path), "-c", "8xA100-80GB", *args])
    assert result.exit_code == 2 and result.stdout == "", (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "\\x00" not in lines[0] and "\ufffd" not in lines[0], "no mangled bytes"
    return lines[0]


@pytest.mark.parametrize(
    ("name", "text", "field"),
    [
        ("t.csv", "id,submit_s,gpus,duration_s\na,1e300,1,10\n", "submit_s"),
        ("t.csv", "id,submit_s,gpus,duration_s\na,0,1,4e9\n", "duration_s"),  # 127 years
        ("t.csv", "id,submit_s,gpus,duration_s,mem_gb\na,0,1,10,20000\n", "mem_gb"),  # 20 TB on a GPU
        ("t.csv", "id,submit_s,gpus,duration_s,requested_s\na,0,1,10,1e12\n", "requested_s"),
        ("t.csv", "id,submit_s,gpus,duration_s\na,0,2000000,10\n", "gpus"),
        ("t.jsonl", '{"id": "a", "submit_s": 1e300, "gpus": 1, "duration_s": 10}\n', "submit_s"),
        (
            "t.jsonl",
            '{"id": "a", "submit_s": 0, "gpus": 1, "duration_s": 10, "est_mem_gb": 1e6}\n',
            "est_mem_gb",
        ),
        ("g.csv", "job,submit,gpu_num,runtime\na,0,1,1e11\n", "runtime"),  # foreign CSV: its column name
    ],
)
def test_absurd_values_name_the_field(tmp_path: Path, name: str, text: str, field: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    line = _error_line(path)
    assert f"{name}:2" in line or f"{name}:1" in line
    assert f"column {field}" in line and "at most" in line


def test_absurd_values_in_parquet_and_swf(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"id": ["a"], "submit_s": [0.0], "gpus": [1], "duration_s": [1e300]}), tmp_path / "t.parquet"
    )
    assert "column duration_s" in _error_line(tmp_path / "t.parquet")
    lines = SWF.read_text(encoding="utf-8").splitlines(keepends=True)
    first = next(i for i, ln in enumerate(lines) if not ln.startswith(";"))
    cells = lines[first].split()
    cells[1] = "99999999999"  # submitted 3,000 years in
    lines[first] = "  ".join(cells) + "\n"
    (tmp_path / "t.swf").write_text("".join(lines), encoding="utf-8")
    line = _error_line(tmp_path / "t.swf")
    assert f"t.swf:{first + 1}" in line and "at most 100 years" in line


def test_values_just_inside_the_range_are_read(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("id,submit_s,gpus,duration_s,mem_gb\na,3e9,512,3e9,9999\n", encoding="utf-8")
    (job,) = read_trace(path).jobs
    assert (job.submit_s, job.gpus, job.duration_s, job.mem_gb) == (3e9, 512, 3e9, 9999.0)


@pytest.mark.parametrize(
    ("codec", "enc", "said"),
    [
        ("utf-16", "UTF-16", "byte-order mark"),
        ("utf-16-le", "UTF-16", "every other byte is NUL"),
        ("utf-16-be", "UTF-16", "every other byte is NUL"),
        ("utf-32", "UTF-32", "byte-order mark"),
    ],
)
@pytest.mark.parametrize("name", ["t.csv", "t.jsonl", "t.swf"])
def test_wide_encodings_say_how_to_convert(
    tmp_path: Path, codec: str, enc: str, said: str, name: str
) -> None:
    text = {
        "t.csv": "id,submit_s,gpus,duration_s\na,0,1,10\n",
        "t.jsonl": '{"id": "a", "submit_s": 0, "gpus": 1, "duration_s": 10}\n',
        "t.swf": SWF.read_text(encoding="utf-8"),
    }[name]
    path = tmp_path / name
    path.write_bytes(text.encode(codec))
    line = _error_line(path)
    assert f"the file is {enc} text" in line and said in line
    assert "iconv -f " in line and "-t UTF-8" in line


def test_the_suggested_conversion_reads(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes("id,submit_s,gpus,duration_s\na,0,1,10\n".encode("utf-16"))
    with pytest.raises(Exception, match="UTF-16LE"):
        read_trace(path)
    fixed = tmp_path / "t-utf8.csv"
    fixed.write_text(path.read_bytes().decode("utf-16-le").lstrip("\ufeff"), encoding="utf-8")
    assert [j.id for j in read_trace(fixed).jobs] == ["a"]


def test_utf8_with_a_byte_order_mark_reads(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbf" + b"id,submit_s,gpus,duration_s\na,0,1,10\n")
    assert [j.id for j in read_trace(path).jobs] == ["a"]

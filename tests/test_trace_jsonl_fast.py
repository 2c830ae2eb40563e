"""JSONL's columnar fast path (traces/fastjsonl.py): the same jobs as the exact line reader on clean
files, and no answer (so the exact reader runs and names the line) on anything it cannot prove clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan.errors import InputError
from gpuplan.traces import read_trace
from gpuplan.traces.fastjsonl import fast_jsonl_jobs
from gpuplan.traces.fields import job_from_json

_ROWS = [
    {
        "id": "a",
        "submit_s": 0,
        "gpus": 2,
        "mem_gb": 10.5,
        "duration_s": 60,
        "user": "ann",
        "may_span_nodes": True,
    },
    {"id": "b", "submit_s": 1.25, "gpus": 1.0, "est_duration_s": 30.0, "requested_s": 90, "name": "x y"},
    {"id": "c", "submit_s": 2, "gpus": 8, "gpu_util_pct": 55.5, "command": "echo 'hi'", "user": None},
    {"id": "d\u00e9", "submit_s": 3, "gpus": 1, "cpu_milli": 4000, "host_mem_gb": 16, "gpu_share": 0.5},
    {"id": "e", "submit_s": 4, "gpus": 4, "est_mem_gb": 3, "duration_includes_sharing": False},
]


def _exact(text: str) -> list[object]:
    return [job_from_json(json.loads(line)) for line in text.splitlines() if line.strip()]


def _lines(rows: list[dict[str, object]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


@pytest.mark.parametrize(
    "name, text",
    [
        ("plain", _lines(_ROWS)),
        ("no-final-newline", _lines(_ROWS).rstrip("\n")),
        ("crlf", _lines(_ROWS).replace("\n", "\r\n")),
        (
            "blank-and-indented",
            "\n" + _lines(_ROWS).replace('\n{"id": "c"', '\n\n   \n  {"id": "c"') + "\n\n",
        ),
        ("integer-ids", _lines([{**r, "id": i} for i, r in enumerate(_ROWS, start=7)])),
        ("bom", "\ufeff" + _lines(_ROWS)),
    ],
)
def test_clean_files_give_the_exact_readers_jobs(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / f"{name}.jsonl"
    path.write_text(text, encoding="utf-8")
    fast = fast_jsonl_jobs(path)
    assert fast is not None, "a clean file should take the fast path"
    assert fast == _exact(text.removeprefix("\ufeff"))
    assert read_trace(path).jobs == fast


@pytest.mark.parametrize(
    "name, text, line, where",
    [
        (
            "two-on-a-line",
            '{"id": "a", "submit_s": 0, "gpus": 1} {"id": "b", "submit_s": 0, "gpus": 1}\n',
            1,
            None,
        ),
        (
            "lone-cr",
            '{"id": "a", "submit_s": 0, "gpus": 1}\r{"id": "b", "submit_s": 0, "gpus": 1}\n',
            1,
            None,
        ),
        (
            "over-two-lines",
            '{"id": "a", "submit_s": 0, "gpus": 1}\n{"id": "b",\n"submit_s": 0, "gpus": 1}\n',
            2,
            None,
        ),
        (
            "float-id",
            '{"id": "a", "submit_s": 0, "gpus": 1}\n{"id": 5.0, "submit_s": 0, "gpus": 1}\n',
            2,
            "id",
        ),
        (
            "mixed-id",
            '{"id": 4, "submit_s": 0, "gpus": 1}\n{"id": true, "submit_s": 0, "gpus": 1}\n',
            2,
            "id",
        ),
        (
            "bool-as-number",
            '{"id": "a", "submit_s": 0, "gpus": 1, "may_span_nodes": 1}\n',
            1,
            "may_span_nodes",
        ),
        ("number-as-user", '{"id": "a", "submit_s": 0, "gpus": 1, "user": 7}\n', 1, "user"),
    ],
)
def test_what_the_fast_path_cannot_prove_goes_to_the_exact_reader(
    tmp_path: Path, name: str, text: str, line: int, where: str | None
) -> None:
    path = tmp_path / f"{name}.jsonl"
    path.write_text(text, encoding="utf-8")
    assert fast_jsonl_jobs(path) is None
    with pytest.raises(InputError) as err:
        read_trace(path)
    assert err.value.line == line
    assert err.value.column == where
    assert f"{name}.jsonl:{line}" in str(err.value) and "\n" not in str(err.value)


_META_ROWS = (
    '{"id": "a", "submit_s": 0, "gpus": 1, "meta": {"queue": "q1", "n": 1, "x": [1, 2.5], "d": {"k": true}}}\n'
    '{"id": "b", "submit_s": 1, "gpus": 1}\n'
    '{"id": "c", "submit_s": 2, "gpus": 1, "meta": null}\n'
    '{"id": "d", "submit_s": 3, "gpus": 1, "meta": {"n": 2.0, "queue": "q\\u00e9"}}\n'
)


def test_meta_objects_are_read_by_columns_as_the_exact_reader_makes_them(tmp_path: Path) -> None:
    path = tmp_path / "meta.jsonl"
    path.write_text(_META_ROWS, encoding="utf-8")
    fast = fast_jsonl_jobs(path)
    assert fast is not None
    assert fast == _exact(_META_ROWS)
    assert [j.meta for j in fast] == [
        {"queue": "q1", "n": 1, "x": [1, 2.5], "d": {"k": True}},
        {},
        {},
        {"n": 2.0, "queue": "q\u00e9"},
    ]
    assert type(fast[0].meta["n"]) is int and type(fast[3].meta["n"]) is float  # as json.loads
    assert fast[1].meta is not fast[2].meta  # each job its own default


@pytest.mark.parametrize(
    "name, text",
    [
        (
            "mixed-kinds",
            '{"id": "a", "submit_s": 0, "gpus": 1, "meta": {"q": 1}}\n{"id": "b", "submit_s": 0, "gpus": 1, "meta": {"q": "s"}}\n',
        ),
        ("big-int", '{"id": "a", "submit_s": 0, "gpus": 1, "meta": {"q": 123456789012345678901234567890}}\n'),
        ("nan", '{"id": "a", "submit_s": 0, "gpus": 1, "meta": {"q": NaN}}\n'),
        (
            "blank-line",
            '{"id": "a", "submit_s": 0, "gpus": 1, "meta": {"q": 1}}\n\n{"id": "b", "submit_s": 0, "gpus": 1}\n',
        ),
        ("meta-over-lines", '{"id": "a", "submit_s": 0, "gpus": 1, "meta":\n{"q": 1}}\n'),
    ],
)
def test_metas_the_columns_cannot_prove_are_read_line_by_line(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / f"{name}.jsonl"
    path.write_text(text, encoding="utf-8")
    assert fast_jsonl_jobs(path) is None
    if name == "meta-over-lines":
        with pytest.raises(InputError) as err:
            read_trace(path)
        assert err.value.line == 1
        return
    got = read_trace(path).jobs
    assert [j.meta for j in got] == [j.meta for j in _exact(text)]


@pytest.mark.parametrize(
    "name, text, where",
    [
        ("meta-key-twice", '{"id": "a", "submit_s": 0, "gpus": 1, "meta": {"q": {"k": 1, "k": 2}}}\n', None),
        (
            "meta-not-object",
            '{"id": "a", "submit_s": 0, "gpus": 1}\n{"id": "b", "submit_s": 0, "gpus": 1, "meta": "x"}\n',
            "meta",
        ),
        ("unknown-beside-meta", '{"id": "a", "submit_s": 0, "gpus": 1, "meta": {}, "gpu": 2}\n', "gpu"),
    ],
)
def test_bad_metas_are_named_by_the_exact_reader(
    tmp_path: Path, name: str, text: str, where: str | None
) -> None:
    path = tmp_path / f"{name}.jsonl"
    path.write_text(text, encoding="utf-8")
    assert fast_jsonl_jobs(path) is None
    with pytest.raises(InputError) as err:
        read_trace(path)
    assert err.value.column == where and f"{name}.jsonl:" in str(err.value)


def test_a_lone_surrogate_the_exact_reader_accepts_is_not_lost(tmp_path: Path) -> None:
    path = tmp_path / "sur.jsonl"
    path.write_text('{"id": "a\\ud800", "submit_s": 0, "gpus": 1}\n', encoding="utf-8")
    assert fast_jsonl_jobs(path) is None
    assert read_trace(path).jobs[0].id == "a\ud800"


def test_repeated_numbers_are_shared_and_equal_to_the_row_readers(tmp_path: Path) -> None:
    from gpuplan.traces.fastcsv import fast_own_csv_jobs
    from gpuplan.traces.fields import job_from_texts

    header = ["id", "submit_s", "gpus", "requested_s", "mem_gb"]
    rows = [
        [f"j{i}", str(i * 0.5), "1", "3600.0" if i % 3 else "-0.0", str(float(i % 4))] for i in range(300)
    ]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(",".join(r) for r in [header, *rows]) + "\n", encoding="utf-8")
    fast = fast_own_csv_jobs(path, header)
    assert fast is not None
    assert fast == [job_from_texts(dict(zip(header, r, strict=True))) for r in rows]
    assert [str(j.requested_s) for j in fast[:3]] == ["-0.0", "3600.0", "3600.0"]  # the sign of zero kept
    assert fast[0].mem_gb is fast[4].mem_gb  # one object per distinct value (0.0, 1.0, 2.0, 3.0)
    assert len({id(j.mem_gb) for j in fast}) == 4


def test_rows_with_one_meta_text_share_one_read_only_meta(tmp_path: Path) -> None:
    import copy
    import pickle

    from gpuplan.model import SharedMeta
    from gpuplan.traces import write_trace

    path = tmp_path / "t.csv"
    rows = [f'j{i},{i},1,"{{""kind"": ""k{i % 2}""}}"' for i in range(6)] + [
        "j6,6,1,",
        'j7,7,1,"{""a"": [1]}"',
    ]
    path.write_text("id,submit_s,gpus,meta\n" + "\n".join(rows) + "\n", encoding="utf-8")
    jobs = read_trace(path).jobs
    assert [j.meta for j in jobs] == [{"kind": f"k{i % 2}"} for i in range(6)] + [{}, {"a": [1]}]
    assert jobs[0].meta is jobs[2].meta and isinstance(jobs[0].meta, SharedMeta)
    assert type(jobs[6].meta) is dict and type(jobs[7].meta) is dict  # empty and nested: their own
    with pytest.raises(TypeError, match=r"job.meta = dict\(job.meta\)"):
        jobs[0].meta["kind"] = "changed"
    with pytest.raises(TypeError):
        jobs[0].meta.update(x=1)
    assert jobs[2].meta == {"kind": "k0"}
    own = jobs[0].meta.copy()
    own["x"] = 1
    assert type(own) is dict and jobs[0].meta == {"kind": "k0"}
    assert pickle.loads(pickle.dumps(jobs[0])) == jobs[0] and copy.deepcopy(jobs[1]) == jobs[1]
    write_trace(jobs, tmp_path / "back.jsonl")
    assert read_trace(tmp_path / "back.jsonl").jobs == jobs


def test_many_rows_of_few_meta_texts_share_them_by_columns_and_read_as_the_row_reader(tmp_path: Path) -> None:
    from gpuplan.model import SharedMeta
    from gpuplan.traces.fastcsv import fast_own_csv_jobs
    from gpuplan.traces.fields import job_from_texts

    header = ["id", "submit_s", "gpus", "meta"]
    texts = ['{"kind": "a", "n": 1}', '{"kind": "b"}', '{"checkpointable": false}']
    rows = [[f"j{i}", str(i), "1", texts[i % 3]] for i in range(400)]
    path = tmp_path / "t.csv"
    quoted = ['"' + t.replace('"', '""') + '"' for t in texts]
    lines = [",".join(header), *(f"j{i},{i},1,{quoted[i % 3]}" for i in range(400))]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    fast = fast_own_csv_jobs(path, header)
    assert fast == [job_from_texts(dict(zip(header, r, strict=True))) for r in rows]
    assert len({id(j.meta) for j in fast}) == 3 and all(isinstance(j.meta, SharedMeta) for j in fast)
    assert fast[2].checkpointable is False and fast[0].meta == {"kind": "a", "n": 1}
    # one empty and one nested meta among them: those rows get their own dicts, the rest still share
    lines[5] = "j4,4,1,"
    lines[8] = 'j7,7,1,"{""a"": [1]}"'
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    fast = fast_own_csv_jobs(path, header)
    assert fast is not None and fast[4].meta == {} and fast[7].meta == {"a": [1]}
    assert type(fast[4].meta) is dict and type(fast[7].meta) is dict and fast[4].meta is not fast[10].meta
    assert fast[0].meta is fast[3].meta
    lines[9] = 'j8,8,1,"[1, 2]"'  # not an object: the exact reader names the row
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert fast_own_csv_jobs(path, header) is None


def test_own_csv_ids_are_unique_by_ascending_order_or_by_hashing(tmp_path: Path) -> None:
    from gpuplan.traces.fastcsv import fast_own_csv_jobs

    header = ["id", "submit_s", "gpus"]
    path = tmp_path / "t.csv"
    cases = {
        "ascending by length, then bytes": ([f"j{i}" for i in range(1, 300)], True),
        "unordered, all distinct": ([f"j{i}" for i in range(299, 0, -1)] + ["a", "z9"], True),
        "a duplicate far apart": ([f"j{i}" for i in range(1, 300)] + ["j7"], False),
        "a duplicate next to itself": (["j1", "j2", "j2", "j3"], False),
        "equal length, descending bytes": (["b", "a"], True),
    }
    for what, (ids, fast) in cases.items():
        path.write_text("\n".join([",".join(header), *(f"{j},{i},1" for i, j in enumerate(ids))]) + "\n")
        jobs = fast_own_csv_jobs(path, header)
        assert (jobs is not None) == fast, what  # a duplicate: the exact reader names both lines
        assert jobs is None or [j.id for j in jobs] == ids, what

"""The Alibaba GPU trace v2023 reader: pods, the node list as the cluster, bad input, fuzzing, the real files."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzing import Mutated, assert_located, break_cell, mutated_files
from gpuplan.errors import InputError
from gpuplan.traces import ReadOptions, TraceError, TruncatedTraceError, read_trace
from gpuplan.traces.alibaba import GUESSED_MEM_GB, AlibabaGpuReader, gpu_mem_gb, read_node_list

FIXTURES = Path(__file__).parent / "fixtures" / "alibaba"
PODS = FIXTURES / "pods_default.csv"
NODES = FIXTURES / "test_node_list_gpu_node.csv"
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
REAL = DATA / "traces" / "alibaba-gpu-v2023"
REAL_PODS = REAL / "openb_pod_list_default.csv"
needs_real = pytest.mark.skipif(
    not REAL_PODS.is_file(), reason=f"shared data absent: {REAL_PODS} (see shared/data/README.md)"
)

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
GOOD = "p1,4000,8192,1,1000,,LS,Running,0,100,5\n"


def _pods(tmp_path: Path, body: str, with_nodes: bool = False) -> Path:
    path = tmp_path / "pods.csv"
    path.write_text(HEADER + body, encoding="utf-8")
    if with_nodes:
        shutil.copy(NODES, tmp_path / NODES.name)
    return path


def _row(**cells: str) -> str:
    names = HEADER.strip().split(",")
    values = dict(zip(names, GOOD.strip().split(",")))
    values.update(cells)
    return ",".join(values[n] for n in names) + "\n"


def _by_id(result) -> dict:  # type: ignore[no-untyped-def]
    return {j.id: j for j in result.jobs}


# ---- the fixture ----------------------------------------------------------------------------------


def test_fixture_maps_pods_to_jobs() -> None:
    result = read_trace(PODS)
    assert result.format == "alibaba-gpu-v2023"
    jobs = _by_id(result)
    assert list(jobs) == ["pod-a", "pod-b", "pod-c", "pod-d", "pod-f", "pod-g"]
    a, d = jobs["pod-a"], jobs["pod-d"]
    assert (a.submit_s, a.gpus, a.duration_s, a.mem_gb) == (0.0, 1, 500.0, None)
    assert a.meta == {
        "phase": "Running",
        "qos": "LS",
        "cpu_milli": 8000,
        "memory_mib": 16384,
        "start_s": 0.0,
        "end_s": 500.0,
    }
    assert (d.gpus, d.duration_s, d.meta["phase"]) == (8, 50.0, "Failed")
    assert jobs["pod-b"].duration_s == 1000.0 - 12.0


def test_cpu_only_pods_are_skipped_with_a_reason() -> None:
    result = read_trace(PODS)
    assert result.skipped == {"CPU-only pod (num_gpu 0)": 1}
    assert "1 pods skipped: CPU-only pod (num_gpu 0)" in result.warnings


def test_gpu_sharing_pods_get_a_share_and_memory() -> None:
    result = read_trace(PODS)
    jobs = _by_id(result)
    # pod-b: no gpu_spec, so the smallest GPU with known memory (P100, 16 GB; G2 is a guess).
    assert jobs["pod-b"].meta["gpu_share"] == 0.5 and jobs["pod-b"].mem_gb == 8.0
    # pod-c may only run on V100M32.
    assert jobs["pod-c"].meta["gpu_spec"] == "V100M32" and jobs["pod-c"].mem_gb == 0.25 * 32
    assert "gpu_share" not in jobs["pod-a"].meta
    assert any("a request, not measured memory" in w for w in result.warnings)


def test_pending_and_cut_off_pods_are_censored() -> None:
    result = read_trace(PODS)
    jobs = _by_id(result)
    assert jobs["pod-f"].duration_s is None and jobs["pod-f"].meta["end_s"] == 80.0
    assert "start_s" not in jobs["pod-f"].meta
    # pod-b and pod-g end at the last time of the file while Running: lower bounds.
    assert [j.id for j in result.jobs if j.meta.get("censored")] == ["pod-b", "pod-g"]
    assert any(c.startswith("2 Running pods are still running at the trace end") for c in result.censored)
    assert any(c.startswith("1 Pending (or Unknown) pods") for c in result.censored)


def test_node_list_next_to_the_pods_is_the_cluster() -> None:
    result = read_trace(PODS)
    cluster = result.cluster
    assert cluster is not None
    assert [(n.name, n.gpus, n.gpu.model, n.gpu.mem_gb) for n in cluster.nodes] == [
        ("node-0", 2, "P100", 16.0),
        ("node-1", 8, "G2", GUESSED_MEM_GB),
        ("node-3", 8, "G2", GUESSED_MEM_GB),
        ("node-4", 4, "V100M32", 32.0),
    ]
    assert cluster.sharing and cluster.max_jobs_per_gpu == 4  # the smallest share is 0.25
    assert any(f"cluster from the node list {NODES}" in w for w in result.warnings)
    assert any("1 nodes without GPUs left out" in w for w in result.warnings)
    assert any("GPU memory of G2 is not published" in w for w in result.warnings)


def test_without_a_node_list_there_is_no_cluster(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    shutil.copy(PODS, path)
    result = read_trace(path)
    assert result.cluster is None
    assert any("no *node_list*.csv" in w for w in result.warnings)
    assert _by_id(result)["pod-b"].mem_gb is None  # no GPU to take the share of
    assert _by_id(result)["pod-c"].mem_gb == 8.0  # its gpu_spec still says V100M32
    assert any("1 GPU-sharing pods have mem_gb unknown (no node list)" in w for w in result.warnings)


def test_explicit_node_list_and_preference_for_gpu_nodes(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    shutil.copy(PODS, path)
    other = tmp_path / "elsewhere.csv"
    shutil.copy(NODES, other)
    result = AlibabaGpuReader(node_list=other).read(path, ReadOptions())
    assert result.cluster is not None and result.cluster.total_gpus == 22
    shutil.copy(NODES, tmp_path / "x_node_list_all_node.csv")
    shutil.copy(NODES, tmp_path / "x_node_list_gpu_node.csv")
    result = read_trace(path)
    assert any(w.endswith("x_node_list_gpu_node.csv") for w in result.warnings)
    assert any("not used: x_node_list_all_node.csv" in w for w in result.warnings)


def test_gpu_memory_table() -> None:
    assert gpu_mem_gb("V100M16") == 16.0 and gpu_mem_gb("A10") == 24.0
    assert gpu_mem_gb("H100M80") == 80.0  # memory in the name
    assert gpu_mem_gb("G3") is None


def test_detected_from_the_header(tmp_path: Path) -> None:
    path = tmp_path / "pods.txt"
    path.write_text(HEADER + GOOD, encoding="utf-8")
    assert read_trace(path).format == "alibaba-gpu-v2023"


def test_optional_columns_may_be_left_out(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(
        "name,num_gpu,gpu_milli,pod_phase,creation_time,deletion_time,scheduled_time,zone\np,2,1000,Succeeded,0,9,1,eu\n",
        encoding="utf-8",
    )
    result = read_trace(path, fmt="alibaba-gpu-v2023")
    assert result.jobs[0].meta == {"phase": "Succeeded", "start_s": 1.0, "end_s": 9.0, "zone": "eu"}
    assert any("unknown column(s) kept" in w for w in result.warnings)


# ---- bad input: one test per class ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "column", "reason"),
    [
        (_row(num_gpu="two"), "num_gpu", "num_gpu: not an integer"),
        (_row(num_gpu="-1"), "num_gpu", "num_gpu: out of range"),
        (_row(gpu_milli="1200"), "gpu_milli", "gpu_milli: out of range"),
        (_row(gpu_milli="0"), "gpu_milli", "gpu_milli: does not match num_gpu"),
        (_row(num_gpu="4", gpu_milli="500"), "gpu_milli", "gpu_milli: does not match num_gpu"),
        (_row(num_gpu="0", gpu_milli="500"), "gpu_milli", "gpu_milli: does not match num_gpu"),
        (_row(pod_phase="Exploded"), "pod_phase", "pod_phase: unknown phase"),
        (_row(creation_time=""), "creation_time", "creation_time: missing"),
        (_row(creation_time="yesterday"), "creation_time", "creation_time: invalid"),
        (_row(deletion_time="-3"), "deletion_time", "deletion_time: invalid"),
        (_row(scheduled_time=""), "scheduled_time", "scheduled_time: missing"),
        (_row(creation_time="10", scheduled_time="5"), "scheduled_time", "scheduled_time: before creation"),
        (_row(deletion_time="3"), "deletion_time", "deletion_time: before scheduled_time"),
        (_row(name=" "), "name", "name: missing"),
        ("p1,4000,8192,1,1000,,LS\n", "pod_phase", "wrong number of fields"),
    ],
)
def test_bad_row_names_file_line_column_and_value(
    tmp_path: Path, line: str, column: str, reason: str
) -> None:
    path = _pods(tmp_path, GOOD.replace("p1", "p0") + line)
    with pytest.raises(InputError) as info:
        read_trace(path)
    err = info.value
    assert (err.path, err.line, err.column, err.reason) == (str(path), 3, column, reason)
    assert str(err).startswith(f"{path}:3: column {column}: value ")


def test_duplicate_pod_name(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="line 2 already has it") as info:
        read_trace(_pods(tmp_path, GOOD + GOOD))
    assert info.value.column == "name"


def test_truncated_last_row(tmp_path: Path) -> None:
    with pytest.raises(TruncatedTraceError):
        read_trace(_pods(tmp_path, GOOD + "p2,4000,8192,1"))


def test_empty_and_header_only_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(TraceError, match="empty"):
        read_trace(empty, fmt="alibaba-gpu-v2023")
    with pytest.raises(TraceError, match="no valid job"):
        read_trace(_pods(tmp_path, ""))


def test_missing_column_in_the_header(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("name,num_gpu,pod_phase\np,1,Running\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"pods.csv:1: header: column\(s\) \['gpu_milli'"):
        read_trace(path, fmt="alibaba-gpu-v2023")


def test_only_cpu_pods_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"no usable pod.*CPU-only"):
        read_trace(_pods(tmp_path, _row(num_gpu="0", gpu_milli="0")))


def test_bad_node_list_row_names_the_node_list(tmp_path: Path) -> None:
    nodes = tmp_path / "n_node_list.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,eight,G2\nn2,1,1,2,\nn1,1,1,2,T4\n", encoding="utf-8"
    )
    pods = _pods(tmp_path, GOOD)
    with pytest.raises(InputError) as info:
        read_trace(pods)
    assert (info.value.path, info.value.line, info.value.column) == (str(nodes), 2, "gpu")
    result = read_trace(pods, options=ReadOptions(skip_bad=True))
    assert result.skipped == {"node list: gpu: not an integer": 1, "node list: model: missing": 1}
    assert result.cluster is not None and [n.name for n in result.cluster.nodes] == ["n1"]
    nodes.write_text("sn,gpu\nn1,2\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"n_node_list.csv:1: header: column\(s\) \['model'\] missing"):
        read_trace(pods)


def test_node_list_without_gpu_nodes(tmp_path: Path) -> None:
    nodes = tmp_path / "n_node_list.csv"
    nodes.write_text("sn,gpu,model\nn1,0,nan\n", encoding="utf-8")
    result = read_node_list(nodes)
    assert result.cluster is None and any("no node with GPUs" in w for w in result.warnings)


def test_skip_bad_counts_each_reason(tmp_path: Path) -> None:
    body = (
        GOOD
        + _row(name="p2", num_gpu="x")
        + _row(name="p3", pod_phase="?")
        + _row(name="p4", num_gpu="0", gpu_milli="0")
    )
    result = read_trace(_pods(tmp_path, body), options=ReadOptions(skip_bad=True))
    assert [j.id for j in result.jobs] == ["p1"]
    assert result.skipped == {
        "num_gpu: not an integer": 1,
        "pod_phase: unknown phase": 1,
        "CPU-only pod (num_gpu 0)": 1,
    }


# ---- random and mutated lines ---------------------------------------------------------------------


def _seed_lines() -> list[str]:
    """Real pod rows when the shared data is here, else the fixture's (same format)."""
    source = REAL_PODS if REAL_PODS.is_file() else PODS
    with source.open(encoding="utf-8") as f:
        return [line for _, line in zip(range(40), f)]


SEED = _seed_lines()


def _gpu_pod_row(line: str) -> bool:
    cells = line.split(",")
    return len(cells) == 11 and cells[3].isdigit() and int(cells[3]) > 0


BREAK_CREATION_TIME = break_cell(8, "soon", data=_gpu_pod_row)  # a GPU pod needs a numeric creation_time


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated=mutated_files(SEED, breaker=BREAK_CREATION_TIME), skip_bad=st.booleans())
def test_mutated_lines_only_raise_located_errors(mutated: Mutated, skip_bad: bool) -> None:
    text = mutated.text
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.csv"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        read = AlibabaGpuReader(node_list=NODES).read
        assert_located(
            path, lambda: read(path, ReadOptions(skip_bad=skip_bad)), mutated.broken and not skip_bad
        )


# ---- the real openb trace -------------------------------------------------------------------------


@needs_real
def test_real_openb_trace() -> None:
    result = read_trace(REAL_PODS)
    assert result.format == "alibaba-gpu-v2023"
    assert len(result.jobs) + result.skipped_total == 8_152
    assert result.skipped == {"CPU-only pod (num_gpu 0)": 1_088}
    assert len(result.jobs) == 7_064
    cluster = result.cluster
    assert cluster is not None
    assert (len(cluster.nodes), cluster.total_gpus) == (1_213, 6_212)
    assert cluster.sharing
    phases: dict[str, int] = {}
    for job in result.jobs:
        phases[job.meta["phase"]] = phases.get(job.meta["phase"], 0) + 1
    assert phases == {"Running": 4_149, "Failed": 1_869, "Pending": 861, "Succeeded": 185}
    assert sum(1 for j in result.jobs if j.duration_s is None) == 861
    assert sum(1 for j in result.jobs if j.meta.get("censored")) == 32
    assert sum(1 for j in result.jobs if "gpu_share" in j.meta) == 3_078
    assert all(j.mem_gb is not None for j in result.jobs if "gpu_share" in j.meta)
    assert any("G3, G2" in w or "G2, G3" in w for w in result.warnings)

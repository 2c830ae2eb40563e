"""Slurm parsers on real captured Slurm 22.05 output (tests/fixtures/slurm, from ../shared/slurm/captured
and from the test cluster), and on each class of bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.errors import InputError
from gpuplan.slurm.parse import (
    parse_config,
    parse_gpu_count,
    parse_gpu_types,
    parse_hostlist,
    parse_limit_s,
    parse_local_time,
    parse_sinfo,
    parse_squeue,
)

FIX = Path(__file__).parent / "fixtures" / "slurm"


def _read(name: str) -> str:
    return (FIX / name).read_text()


def test_squeue_captured_default_fields() -> None:
    jobs = parse_squeue(_read("squeue_O.txt"))
    by_id = {j.job_id: j for j in jobs}
    assert len(jobs) == 34
    assert sum(j.is_pending for j in jobs) == 24 and sum(j.is_running for j in jobs) == 10
    # admin priority 500 printed as a float normalised by 2^32; held job 0
    assert by_id["20"].priority == 500 and by_id["24"].priority == 0 and by_id["39"].priority == 1
    assert by_id["18"].priority == 200
    # --gpus=8 shows in tres-per-job; --gres in tres-per-node times the node count
    assert by_id["20"].gpus == 8 and by_id["5"].gpus == 16 and by_id["8"].gpus == 0
    assert by_id["38"].time_limit_s is None and by_id["32"].time_limit_s == 2 * 86400
    assert by_id["24"].why_unmanaged() is not None and "held" in by_id["24"].why_unmanaged()
    assert by_id["22"].why_unmanaged() == "not eligible yet (Dependency)"
    assert by_id["25"].why_unmanaged() == "not eligible yet (BeginTime)"
    assert by_id["13"].start_s is None and by_id["20"].start_s is not None


def test_squeue_gpuplan_fields_arrays_names_and_nodes() -> None:
    jobs = parse_squeue(_read("squeue_O_gpuplan.txt"))
    by_id = {j.job_id: j for j in jobs}
    assert by_id["13"].name == "odd|name" and by_id["13"].nice == 100  # the separator inside a name
    assert by_id["10"].is_array_remainder and by_id["10"].why_unmanaged() is not None
    assert by_id["17"].array_task == "0" and not by_id["17"].is_array_remainder
    assert by_id["17"].array_job_id == "10" and by_id["16"].array_job_id is None
    assert by_id["8"].node_list == "node[1-2]" and by_id["8"].gpus == 16 and by_id["9"].gpus == 4
    assert by_id["16"].gpus == 0  # a CPU-only job
    assert by_id["12"].why_unmanaged() is not None and by_id["14"].why_unmanaged() is None


def test_sinfo_captured() -> None:
    nodes = parse_sinfo(_read("sinfo_N_O_gresused.txt"))
    assert [(n.name, n.gpus, n.gpus_used, n.gpus_free) for n in nodes] == [
        (f"node{i}", 8, 8, 0) for i in range(1, 5)
    ]
    live = parse_sinfo(_read("sinfo_N_O_gpuplan.txt"))
    assert [n.gpus_free for n in live] == [0, 0, 2, 8] and live[0].partitions == ("gpu",)


def test_sinfo_merges_partitions_and_knows_down_nodes() -> None:
    text = "NODELIST|STATE|GRES|GRES_USED|PARTITION|\nn1|idle|gpu:a100:4(S:0-1)|gpu:a100:1(IDX:0)|a*|\n" \
           "n1|idle|gpu:a100:4(S:0-1)|gpu:a100:1(IDX:0)|b|\nn2|drained|gpu:4|gpu:0|a*|\n"  # fmt: skip
    n1, n2 = parse_sinfo(text)
    assert n1.partitions == ("a", "b") and n1.gpus == 4 and n1.gpus_used == 1
    assert not n2.is_usable and n2.gpus_free == 0
    assert n1.gpu_types == (("a100", 4),) and n2.gpu_types == ()


@pytest.mark.parametrize(
    ("text", "types"),
    [
        ("gpu:8", ()),
        ("gpu:a100:4(S:0-1)", (("a100", 4),)),
        ("gres:gpu:h100:2,gres:gpu:l40s:6(S:0)", (("h100", 2), ("l40s", 6))),
        ("gpu:a100_80g:8,shard:a100_80g:16", (("a100_80g", 8),)),  # shards are not GPUs
        ("(null)", ()),
    ],
)
def test_gpu_types(text: str, types: tuple[tuple[str, int], ...]) -> None:
    assert parse_gpu_types(text) == types


def test_config_builtin() -> None:
    cfg = parse_config(_read("scontrol_show_config_builtin.txt"))
    assert cfg["SchedulerType"] == "sched/builtin" and cfg["PriorityType"] == "priority/multifactor"
    assert cfg["SelectType"] == "select/cons_tres"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("gres:gpu:8", 8), ("gres/gpu:a100:2", 2), ("gpu:8(S:0-1)", 8), ("gpu:a100:3(IDX:0-2)", 3),
     ("gres:gpu:2,gres:shard:1", 2), ("N/A", 0), ("", 0), ("gres:shard:4", 0), ("gpu", 1)],
)  # fmt: skip
def test_gpu_counts(text: str, expected: int) -> None:
    assert parse_gpu_count(text) == expected


def test_hostlists_limits_times() -> None:
    assert parse_hostlist("node[1-3,07],gpu5") == ["node1", "node2", "node3", "node07", "gpu5"]
    assert parse_hostlist("None assigned") == [] and parse_hostlist("n[08-10]") == ["n08", "n09", "n10"]
    assert (
        parse_limit_s("UNLIMITED") is None
        and parse_limit_s("1:00:00") == 3600
        and parse_limit_s("3:00") == 180
    )
    assert parse_limit_s("2-00:00:00") == 172800
    assert parse_local_time("N/A") is None
    assert parse_local_time("2026-11-30T00:38:02") == pytest.approx(
        parse_local_time("2026-11-30T00:38:00") + 2
    )


def test_bad_squeue_line_names_line_and_column() -> None:
    text = _read("squeue_O.txt").splitlines()
    i = next(k for k, line in enumerate(text) if "|train-4gpu|" in line)
    text[i] = text[i].replace("15:00", "15:xx")
    with pytest.raises(InputError) as e:
        parse_squeue("\n".join(text), "squeue.txt")
    assert f"squeue.txt:{i + 1}" in str(e.value) and "time_limit" in str(e.value)


def test_squeue_wrong_field_count_and_missing_header() -> None:
    with pytest.raises(InputError, match=r"squeue output:2.*fields like the header"):
        parse_squeue("JOBID|STATE|NODES|PRIORITY|\n1|PENDING|\n")
    with pytest.raises(InputError, match="columns for state"):
        parse_squeue("JOBID|NODES|PRIORITY|\n1|1|1|\n")
    assert parse_squeue("") == []


def test_sinfo_without_gres_column() -> None:
    with pytest.raises(InputError, match="NODELIST and GRES"):
        parse_sinfo("NODELIST|STATE|\nn1|idle|\n")


# -- the cluster a Slurm history ran on (`gpuplan slurm history`) --------------------------------------


def test_history_cluster_from_typed_and_untyped_gres() -> None:
    from gpuplan.slurm.cluster import ASSUMED_MEM_GB, history_cluster

    text = (
        "NODELIST|STATE|GRES|GRES_USED|PARTITION|\n"
        "a1|idle|gpu:a100_80g:8(S:0-1)|gpu:0|p*|\nh1|down*|gpu:h200:8|gpu:0|p*|\n"
        "x1|idle|gpu:a100:4|gpu:0|p*|\nc1|idle|(null)|(null)|p*|\nu1|idle|gpu:2|gpu:0|p*|\n"
        "m1|idle|gpu:l40s:2,gpu:t4:6|gpu:0|p*|\n"
    )
    cluster, warnings = history_cluster(parse_sinfo(text))
    nodes = {n.name: n for n in cluster.nodes}
    assert "c1" not in nodes and cluster.total_gpus == 30  # a down node is kept: past jobs ran on it
    assert (nodes["a1"].gpu.model, nodes["a1"].gpu.mem_gb) == ("a100_80g", 80.0)  # said in the name
    assert nodes["h1"].gpu.mem_gb == 141.0  # one size
    assert nodes["x1"].gpu.mem_gb == ASSUMED_MEM_GB and nodes["u1"].gpu.model == "gpu"
    assert (nodes["m1"].gpu.model, nodes["m1"].gpu.mem_gb) == ("t4", 16.0)  # the most numerous type
    assert any("'a100' does not say its memory" in w for w in warnings)
    assert any("names no GPU type" in w for w in warnings)
    assert any("node m1 holds several GPU types (2x l40s, 6x t4)" in w for w in warnings)
    assert all(w.endswith("edit the cluster file to correct it") for w in warnings)


def test_history_cluster_without_gpus_is_a_clear_error() -> None:
    from gpuplan.errors import GpuplanError
    from gpuplan.slurm.cluster import history_cluster

    with pytest.raises(GpuplanError, match="no node with GPUs"):
        history_cluster(parse_sinfo("NODELIST|STATE|GRES|GRES_USED|PARTITION|\nc1|idle|(null)|(null)|p*|\n"))

"""Cluster presets and TOML files: loading, node names, overrides and every class of bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.cluster import cluster_from_toml, load_cluster, preset_names
from gpuplan.errors import ClusterError, GpuplanError, UnknownNameError

FIXTURES = Path(__file__).parent / "fixtures" / "clusters"
NODES = "[[nodes]]\ngpus = 8\ngpu_mem_gb = 80\n"


def test_preset_names() -> None:
    assert preset_names() == ["1xH200-141GB", "4x8xA100-80GB", "8xA100-80GB"]


def test_preset_8xa100() -> None:
    spec = load_cluster("8xA100-80GB")
    assert spec.name == "8xA100-80GB"
    assert spec.total_gpus == 8
    assert len(spec.nodes) == 1
    assert spec.sharing is False
    assert spec.nodes[0].gpu.model == "A100-80GB"
    assert spec.nodes[0].gpu.mem_gb == 80
    assert spec.describe() == "8 GPUs on 1 node(s) (8x A100-80GB), exclusive"


def test_preset_4x8xa100() -> None:
    spec = load_cluster("4x8xA100-80GB")
    assert spec.total_gpus == 32
    assert len(spec.nodes) == 4
    assert [n.gpus for n in spec.nodes] == [8, 8, 8, 8]
    assert [n.name for n in spec.nodes] == ["node1", "node2", "node3", "node4"]
    assert spec.max_node_gpus == 8
    assert spec.sharing is False


def test_preset_h200_shares() -> None:
    spec = load_cluster("1xH200-141GB")
    assert spec.total_gpus == 1
    assert spec.sharing is True
    assert spec.max_jobs_per_gpu == 4
    assert spec.nodes[0].name == "h200"
    assert spec.nodes[0].gpu.mem_gb == 141


def test_heterogeneous_file_as_documented() -> None:
    spec = load_cluster(str(FIXTURES / "mixed.toml"))
    assert spec.name == "mixed"
    assert [n.name for n in spec.nodes] == ["a100-1", "a100-2", "l40s", "h100-4", "h100-5"]
    assert [n.gpu.model for n in spec.nodes] == ["A100-80GB"] * 2 + ["L40S-48GB"] + ["H100-80GB"] * 2
    assert [n.gpu.mem_gb for n in spec.nodes] == [80, 80, 48, 80, 80]
    assert spec.total_gpus == 36
    assert spec.sharing is True
    assert spec.max_jobs_per_gpu == 2
    assert spec.describe() == (
        "36 GPUs on 5 node(s) (2x8x A100-80GB, 4x L40S-48GB, 2x8x H100-80GB), sharing (up to 2 jobs/GPU)"
    )


def test_defaults_name_model_and_node_names() -> None:
    spec = load_cluster(str(FIXTURES / "hetero-exclusive.toml"))
    assert [n.name for n in spec.nodes] == ["l40s", "node2", "node3"]
    assert spec.sharing is False
    assert spec.max_jobs_per_gpu == 4
    bare = cluster_from_toml(NODES, "somewhere/my-box.toml")
    assert bare.name == "my-box"
    assert bare.nodes[0].name == "node1"
    assert bare.nodes[0].gpu.model == "GPU-80GB"


def test_path_as_pathlike_string_without_suffix(tmp_path: Path) -> None:
    path = tmp_path / "cluster.conf"
    path.write_text(NODES, encoding="utf-8")
    assert load_cluster(str(path)).total_gpus == 8


@pytest.mark.parametrize(("name", "default"), [("8xA100-80GB", False), ("1xH200-141GB", True)])
def test_sharing_override(name: str, default: bool) -> None:
    assert load_cluster(name).sharing is default
    assert load_cluster(name, sharing=default).sharing is default
    flipped = load_cluster(name, sharing=not default)
    assert flipped.sharing is (not default)
    assert flipped.nodes == load_cluster(name).nodes
    assert flipped.name == name


def test_sharing_override_on_file() -> None:
    spec = load_cluster(str(FIXTURES / "mixed.toml"), sharing=False)
    assert spec.sharing is False
    assert spec.max_jobs_per_gpu == 2
    assert "exclusive" in spec.describe()


BAD = {
    "invalid-toml": ('name = "x\n' + NODES, ["not valid TOML", "line 1"]),
    "unknown-top-key": ("colour = 1\n" + NODES, ["colour", "valid keys", "sharing", "nodes"]),
    "unknown-node-key": (NODES + "gpu_memory = 3\n", ["#1", "gpu_memory", "valid keys", "gpu_mem_gb"]),
    "missing-gpus": ("[[nodes]]\ngpu_mem_gb = 80\n", ["#1", "missing", "gpus"]),
    "missing-mem": ("[[nodes]]\ngpus = 8\n", ["#1", "missing", "gpu_mem_gb"]),
    "gpus-zero": ("[[nodes]]\ngpus = 0\ngpu_mem_gb = 80\n", ["#1", "gpus = 0", "positive integer"]),
    "gpus-string": ('[[nodes]]\ngpus = "8"\ngpu_mem_gb = 80\n', ["#1", "gpus = '8'", "positive integer"]),
    "gpus-float": ("[[nodes]]\ngpus = 8.0\ngpu_mem_gb = 80\n", ["#1", "gpus = 8.0", "positive integer"]),
    "mem-negative": ("[[nodes]]\ngpus = 8\ngpu_mem_gb = -80\n", ["#1", "gpu_mem_gb = -80", "positive"]),
    "mem-bool": ("[[nodes]]\ngpus = 8\ngpu_mem_gb = true\n", ["#1", "gpu_mem_gb = True", "positive"]),
    "mem-nan": ("[[nodes]]\ngpus = 8\ngpu_mem_gb = nan\n", ["#1", "gpu_mem_gb", "positive"]),
    "count-zero": ("[[nodes]]\ncount = 0\ngpus = 8\ngpu_mem_gb = 80\n", ["#1", "count = 0", "positive"]),
    "sharing-yes": ('sharing = "yes"\n' + NODES, ["sharing = 'yes'", "true or false"]),
    "max-jobs-zero": ("max_jobs_per_gpu = 0\n" + NODES, ["max_jobs_per_gpu = 0", "positive integer"]),
    "no-nodes": ('name = "x"\n', ["[[nodes]]", "at least one"]),
    "nodes-not-array": ("[nodes]\ngpus = 8\ngpu_mem_gb = 80\n", ["[[nodes]]", "at least one"]),
    "second-group": (NODES + "[[nodes]]\ngpus = 4\n", ["#2", "missing", "gpu_mem_gb"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_file(tmp_path: Path, case: str) -> None:
    text, needles = BAD[case]
    path = tmp_path / f"{case}.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ClusterError) as info:
        load_cluster(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}:"), message
    for needle in needles:
        assert needle in message, (needle, message)
    assert "\n" not in message


def test_invalid_toml_chains_the_cause(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[[nodes]\n", encoding="utf-8")
    with pytest.raises(ClusterError) as info:
        load_cluster(str(path))
    assert info.value.__cause__ is not None


def test_missing_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ClusterError) as info:
        load_cluster(str(path))
    assert str(path) in str(info.value)
    assert "preset" in str(info.value)


def test_unknown_preset_lists_presets() -> None:
    with pytest.raises(UnknownNameError) as info:
        load_cluster("16xB200")
    assert isinstance(info.value, GpuplanError)
    assert info.value.name == "16xB200"
    assert info.value.valid == preset_names()
    for name in preset_names():
        assert name in str(info.value)

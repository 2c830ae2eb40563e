"""CPU, host memory and GPU share as resources: a job fits a node only when every one fits (hand-computed)."""

from __future__ import annotations

import pytest

from gpuplan.cluster import cluster_from_toml, cluster_to_toml
from gpuplan.core.placement import get_placer, placer_names
from gpuplan.core.scheduler import Scheduler
from gpuplan.core.state import ClusterState, Need, need_of
from gpuplan.errors import ClusterError, JobNeverFitsError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec

GPU = GpuSpec("T4", 16.0)


def two_nodes(sharing: bool = False) -> ClusterSpec:
    # node a: 4 GPUs but only 8 cores; node b: 4 GPUs, 64 cores, 256 GiB
    return ClusterSpec(
        "two",
        (NodeSpec("a", 4, GPU, 8000, 64.0), NodeSpec("b", 4, GPU, 64000, 256.0)),
        sharing=sharing,
    )


@pytest.mark.parametrize("placer", placer_names())
def test_node_out_of_cpus_refuses_a_gpu_job(placer: str) -> None:
    st = ClusterState(two_nodes())
    st.place([0], None, Need(cpu_milli=7000))  # node a: 3 idle GPUs, 1000 milli-cores left
    for _ in range(4):  # four 2-core jobs: all on b, whichever placer ranks a first
        gpus = get_placer(placer).find(st, 1, None, need=Need(cpu_milli=2000))
        assert gpus is not None and st.gpu_node[gpus[0]] == 1
        st.place(gpus, None, Need(cpu_milli=2000))
    assert get_placer(placer).find(st, 1, None, need=Need(cpu_milli=2000)) is None  # b's GPUs are gone
    assert st.node_cpu_free == [1000.0, 56000.0]


def test_first_fit_skips_node_without_cpu_even_with_idle_gpus() -> None:
    st = ClusterState(two_nodes())
    p = get_placer("first-fit")
    st.place([0], None, Need(cpu_milli=7000))  # node a: 3 idle GPUs, 1000 milli-cores left
    assert st.node_cpu_free == [1000.0, 64000.0]
    gpus = p.find(st, 1, None, need=Need(cpu_milli=2000))
    assert gpus == [4]  # the first GPU of node b, though node a has idle GPUs
    assert p.find(st, 1, None, need=Need(cpu_milli=1000)) == [1]  # exactly what is left on a fits
    assert p.find(st, 1, None, need=Need(host_mem_gb=300.0)) is None  # no node has 300 GiB
    st.release([0], None, Need(cpu_milli=7000))
    assert st.node_cpu_free == [8000.0, 64000.0]


def test_gpu_share_is_its_own_resource() -> None:
    spec = ClusterSpec("s", (NodeSpec("n", 1, GpuSpec("V100M32", 32.0)),), sharing=True, max_jobs_per_gpu=8)
    st = ClusterState(spec)
    p = get_placer("best-fit")
    half = Need(gpu_share=0.6)
    st.place([0], 4.0, half)  # 4 GB of 32, 0.6 of the compute
    assert p.find(st, 1, 4.0, need=Need(gpu_share=0.5)) is None  # memory fits, the share does not
    assert p.find(st, 1, 4.0, need=Need(gpu_share=0.4)) == [0]
    assert p.find(st, 1, 4.0) == [0]  # a job without a share is bound by memory only
    st.release([0], 4.0, half)
    assert st.gpu_free_share == [1.0]


def test_whole_gpu_job_takes_the_share() -> None:
    spec = ClusterSpec("s", (NodeSpec("n", 1, GPU),), sharing=True)
    st = ClusterState(spec)
    st.place([0], None)  # memory unknown: the GPU whole
    assert st.gpu_free_share == [0.0]
    assert get_placer("first-fit").find(st, 1, None, need=Need(gpu_share=0.1)) is None
    st.release([0], None)
    assert st.gpu_free_share == [1.0]


def test_zero_gpu_job_takes_a_node() -> None:
    st = ClusterState(two_nodes())
    found = get_placer("best-fit").choose(st, 0, None, Need(cpu_milli=60000, host_mem_gb=10.0))
    assert found == (1, [])  # only node b has 60 cores
    st.place_node(1, Need(cpu_milli=60000, host_mem_gb=10.0))
    assert st.node_mem_free == [64.0, 246.0]


def test_spanning_job_takes_cpu_in_proportion() -> None:
    st = ClusterState(two_nodes())
    need = Need(cpu_milli=16000)
    gpus = get_placer("first-fit").find(st, 8, None, may_span=True, need=need)
    assert gpus == list(range(8))
    st.place(gpus, None, need)
    assert st.node_cpu_free == [0.0, 56000.0]  # 8000 on each node: half of the GPUs each


def test_need_of_only_what_the_cluster_tells_apart() -> None:
    job = Job("j", 0.0, 1, cpu_milli=4000, host_mem_gb=16.0, gpu_share=0.5, mem_gb=8.0)
    assert need_of(job, host=False, sharing=False) is None
    assert need_of(job, host=True, sharing=False) == Need(4000, 16.0, None)
    assert need_of(job, host=False, sharing=True) == Need(0.0, 0.0, 0.5)


def test_scheduler_never_fits_names_the_cpu() -> None:
    s = Scheduler(two_nodes(), "fifo", "none", "first-fit")
    with pytest.raises(JobNeverFitsError, match="milli-CPU"):
        s.submit(0, Job("big", 0.0, 1, cpu_milli=100000))


def test_scheduler_waits_for_cpu() -> None:
    spec = ClusterSpec("one", (NodeSpec("a", 4, GPU, 8000, None),))
    s = Scheduler(spec, "fifo", "easy", "best-fit")
    s.submit(0, Job("a", 0.0, 1, duration_s=10, est_duration_s=10, cpu_milli=6000))
    s.submit(1, Job("b", 0.0, 1, duration_s=10, est_duration_s=10, cpu_milli=6000))
    started = s.schedule(0.0)
    assert [x.jid for x in started] == [0]  # three GPUs idle, but no CPU for b
    s.finish(0, 10.0)
    assert [x.jid for x in s.schedule(10.0)] == [1]


def test_cluster_toml_round_trip_with_host_resources() -> None:
    text = """
name = "t"
[[nodes]]
count = 2
gpus = 8
gpu_mem_gb = 80
cpu_milli = 96000
host_mem_gb = 384
"""
    spec = cluster_from_toml(text, "t.toml")
    assert spec.nodes[0].cpu_milli == 96000 and spec.nodes[1].host_mem_gb == 384
    assert spec.has_host_resources
    again = cluster_from_toml(cluster_to_toml(spec), "again")
    assert again.nodes == spec.nodes
    with pytest.raises(ClusterError, match="cpu_milli = -1 must be a positive number"):
        cluster_from_toml(text.replace("96000", "-1"), "t.toml")


def test_every_placer_is_registered_for_needs() -> None:
    for name in placer_names():
        st = ClusterState(two_nodes())
        assert get_placer(name).find(st, 1, None, need=Need(cpu_milli=9000)) is not None


def test_sacct_gives_cpu_and_host_memory() -> None:
    from pathlib import Path

    from gpuplan.traces import read_trace

    fixtures = Path(__file__).parent / "fixtures" / "sacct"
    text = {j.id: j for j in read_trace(fixtures / "parsable_p.txt").jobs}
    # AllocTRES cpu=1 (no mem there), ReqTRES mem=16G
    assert (text["610"].cpu_milli, text["610"].host_mem_gb) == (1000.0, 16.0)
    assert (text["611"].cpu_milli, text["611"].host_mem_gb) == (2000.0, 32.0)
    js = read_trace(fixtures / "cluster.json").jobs
    assert all(j.cpu_milli is not None and j.cpu_milli >= 1000 for j in js)


def test_agent_node_from_the_os(tmp_path: object) -> None:
    from pathlib import Path

    from gpuplan.agent.engine import host_resources, node_spec
    from gpuplan.agent.gpus import GpuDevice

    meminfo = Path(str(tmp_path)) / "meminfo"
    meminfo.write_text("MemTotal:       16777216 kB\nMemFree:  1 kB\n", encoding="ascii")
    cpu, mem = host_resources(str(meminfo))
    assert mem == 16.0 and cpu is not None and cpu >= 1000
    assert host_resources(str(meminfo) + ".absent")[1] is None
    dev = GpuDevice.__new__(GpuDevice)  # only its name and memory are read
    object.__setattr__(dev, "name", "H200")
    object.__setattr__(dev, "mem_total_gb", 141.0)
    spec = node_spec([dev], sharing=True, host=(8000.0, 64.0))
    assert (spec.nodes[0].cpu_milli, spec.nodes[0].host_mem_gb) == (8000.0, 64.0)
    s = Scheduler(spec, "fifo", "none", "first-fit")
    with pytest.raises(JobNeverFitsError, match="milli-CPU"):
        s.submit(0, Job("big", 0.0, 1, mem_gb=1.0, cpu_milli=16000))


def test_helios_cpu_num_is_cpu_milli() -> None:
    from pathlib import Path

    from gpuplan.traces import read_trace

    jobs = {
        j.id: j for j in read_trace(Path(__file__).parent / "fixtures" / "helios" / "cluster_log.csv").jobs
    }
    assert jobs["j1"].cpu_milli == 48000.0 and jobs["j1"].meta["cpu_num"] == 48


def test_alibaba_reader_keeps_cpu_pods_when_asked() -> None:
    from pathlib import Path

    from gpuplan.traces.alibaba import AlibabaGpuReader
    from gpuplan.traces.base import ReadOptions

    pods = Path(__file__).parent / "fixtures" / "alibaba_frag" / "openb_pod_list_small.csv"
    kept = AlibabaGpuReader(cpu_pods=True).read(pods, ReadOptions())
    plain = AlibabaGpuReader().read(pods, ReadOptions())
    cpu_only = [j for j in kept.jobs if j.gpus == 0]
    assert cpu_only and len(kept.jobs) == len(plain.jobs) + len(cpu_only)
    assert all(j.cpu_milli and j.host_mem_gb for j in kept.jobs)
    node = kept.cluster.nodes[0]  # type: ignore[union-attr]
    assert (node.cpu_milli, node.host_mem_gb) == (96000, 384.0)  # 393216 MiB

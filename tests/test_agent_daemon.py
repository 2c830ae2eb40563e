"""The agent as a real daemon process on the fake device set, running real processes.

Covers issue #10's "Done when": start order as `gpuplan simulate`, memory booking, CUDA_VISIBLE_DEVICES,
cancel kills the whole group, the kill -9 / restart cycle, OOM requeue, an impossible job refused, the
socket's mode, the history read by `gpuplan audit` and `gpuplan predict fit`. Waiting polls real
processes with a deadline; no test sleeps for time to pass.
"""

from __future__ import annotations

import itertools
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent_helpers import Daemon, wait_until
from gpuplan.agent.gpus import open_backend
from gpuplan.agent.protocol import AgentError
from gpuplan.agent.store import connect, events_since
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec

DaemonFactory = Callable[..., Daemon]


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonFactory]:
    made: list[Daemon] = []

    def make(name: str = "home", **config: object) -> Daemon:
        d = Daemon(tmp_path / name, **config)
        made.append(d)
        return d.start()

    yield make
    for d in made:
        d.stop()


def _four_gpu_toml(tmp_path: Path, sharing: bool = False, mem: int = 80) -> str:
    path = tmp_path / "four.toml"
    path.write_text(
        f'name = "four"\nsharing = {str(sharing).lower()}\n[[nodes]]\nname = "n"\ngpus = 4\n'
        f'gpu_model = "A100-80GB"\ngpu_mem_gb = {mem}\n',
        encoding="utf-8",
    )
    return f"fake:{path}"


def _one_gpu_toml(tmp_path: Path) -> str:
    path = tmp_path / "one.toml"
    path.write_text(
        '[[nodes]]\nname = "n"\ngpus = 1\ngpu_model = "A100-80GB"\ngpu_mem_gb = 80\n', encoding="utf-8"
    )
    return f"fake:{path}"


# (name, gpus, true duration s, time limit s): FIFO+EASY backfills C before B but not D.
_ORDER_JOBS = [("A", 3, 1.0, 1.5), ("B", 4, 0.5, 1.0), ("C", 1, 0.5, 1.0), ("D", 1, 2.0, 3.0)]


@pytest.mark.parametrize(("policy", "backfill"), [("fifo", "easy"), ("fifo", "none"), ("sjf", "easy")])
def test_start_order_is_the_simulators(
    tmp_path: Path, daemon: DaemonFactory, policy: str, backfill: str
) -> None:
    spec = ClusterSpec("four", (NodeSpec("n", 4, GpuSpec("A100-80GB", 80.0)),))
    from gpuplan.sim.engine import simulate

    trace = [Job(n, 0.0, g, duration_s=d, requested_s=lim) for n, g, d, lim in _ORDER_JOBS]
    sim = {r.job_id: r.start_s for r in simulate(trace, spec, policy, backfill).records}
    d = daemon(gpus=_four_gpu_toml(tmp_path), policy=policy, backfill=backfill)
    ids = {
        n: d.submit(f"sleep {dur}", gpus=g, time_limit_s=lim, name=n, hold=True)
        for n, g, dur, lim in _ORDER_JOBS
    }
    d.call("release", ids=list(ids.values()))
    starts = {n: d.wait_state(jid, "done")["start_s"] for n, jid in ids.items()}
    t0 = min(starts.values())
    for a in ids:
        for b in ids:
            if sim[a] < sim[b]:
                assert starts[a] < starts[b], (a, b, sim, {k: round(v - t0, 2) for k, v in starts.items()})
            if sim[a] == sim[b]:
                assert abs(starts[a] - starts[b]) < 0.3, (a, b, sim, starts)
    if (policy, backfill) == ("fifo", "easy"):
        assert sim["C"] < sim["B"], "the scenario must exercise a backfill"


def test_cuda_visible_devices_is_exactly_the_jobs_gpus(tmp_path: Path, daemon: DaemonFactory) -> None:
    d = daemon()
    env = {"PATH": os.environ["PATH"], "CUDA_VISIBLE_DEVICES": "7"}
    cmd = 'echo "$CUDA_VISIBLE_DEVICES" > cvd{}'
    ids = [
        int(d.call("submit", command=cmd.format(g), gpus=g, cwd=str(tmp_path), env=env, hold=True)["id"])
        for g in (2, 3)
    ]
    d.call("release", ids=ids)  # one scheduling pass starts both
    for g, jid in zip((2, 3), ids):
        job = d.wait_state(jid, "done")
        assert (tmp_path / f"cvd{g}").read_text().strip() == ",".join(map(str, job["gpu_ids"]))
        assert len(job["gpu_ids"]) == g
    assert {tuple(d.job(i)["gpu_ids"]) for i in ids} == {(0, 1), (2, 3, 4)}


def test_memory_booking_prevents_double_booking(tmp_path: Path, daemon: DaemonFactory) -> None:
    d = daemon(gpus=_one_gpu_toml(tmp_path), sharing=True, backfill="none")
    a = d.submit("sleep 300", mem_gb=50.0)
    b = d.submit("sleep 300", mem_gb=50.0)
    c = d.submit("sleep 300", mem_gb=20.0)
    d.wait_state(a, "running")
    backend = open_backend(_one_gpu_toml(tmp_path), set_id=str(d.home))
    wait_until(lambda: backend.snapshot().gpus[0].mem_used_gb == 50.0, "the fake GPU to show job a's 50 GB")
    assert (
        d.job(b)["state"] == "queued" and d.job(c)["state"] == "queued"
    )  # FIFO, no backfill: c waits behind b
    d.call("cancel", ids=[a])
    d.wait_state(c, "running")
    assert d.job(b)["state"] == "running", "50 + 20 GB share the 80 GB GPU"
    wait_until(lambda: backend.snapshot().gpus[0].mem_used_gb == 70.0, "the fake GPU to show 50 + 20 GB")
    assert d.job(b)["start_s"] >= d.job(a)["end_s"]


def _pids_alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def test_cancel_kills_the_whole_process_group(tmp_path: Path, daemon: DaemonFactory) -> None:
    d = daemon(grace_s=0.3)
    script = "sleep 300 & echo $! >> pids; (trap '' TERM; sleep 300) & echo $! >> pids; wait"
    jid = d.submit(script)
    pidfile = d.home / "pids"
    wait_until(
        lambda: pidfile.exists() and len(pidfile.read_text().split()) == 2, "the job to write its pids"
    )
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(_pids_alive(pids)) == 2
    d.call("cancel", ids=[jid])
    job = d.wait_state(jid, "cancelled")
    assert _pids_alive(pids) == [], "every process of the group, even one ignoring SIGTERM, is gone"
    assert job["end_s"] is not None


def test_kill9_restart_cycles_lose_no_job_and_run_none_twice(tmp_path: Path) -> None:
    d = Daemon(tmp_path / "home", grace_s=1.0)
    ids: list[int] = []
    try:
        d.start()
        for cycle in range(20):
            for k in range(2):
                ids.append(
                    d.submit(
                        f"echo $GPUPLAN_JOB_ID >> {tmp_path}/runs; sleep 0.{2 + (cycle + k) % 5}", gpus=1 + k
                    )
                )
            if cycle % 2:
                wait_until(lambda: d.job(ids[-1])["state"] != "queued", "the newest job to leave the queue")
            d.kill9()
            d.start()
        for jid in ids:
            d.wait_state(jid, "done", "failed")
        runs = (tmp_path / "runs").read_text().split()
        assert sorted(map(int, runs)) == sorted(ids), "each job ran exactly once"
        jobs = [d.job(j) for j in ids]
        assert all(j["state"] == "done" for j in jobs), [(j["id"], j["state"], j["reason"]) for j in jobs]
        _assert_no_gpu_overlap(jobs)
        adopted = d.submit(f"sleep 1.5; echo $GPUPLAN_JOB_ID >> {tmp_path}/runs")
        d.wait_state(adopted, "running")
        d.kill9()
        d.start()
        job = d.wait_state(adopted, "done")
        assert job["reason"] == "" and job["exit_code"] == 0, "re-adopted, then seen ending by the new agent"
        assert (tmp_path / "runs").read_text().split().count(str(adopted)) == 1
    finally:
        d.stop()


def _assert_no_gpu_overlap(jobs: list[dict[str, object]]) -> None:
    """On an exclusive node no two jobs ever held one GPU at once."""
    per_gpu: dict[int, list[tuple[float, float, object]]] = {}
    for j in jobs:
        for g in j["gpu_ids"]:  # type: ignore[attr-defined]
            per_gpu.setdefault(g, []).append((j["start_s"], j["end_s"], j["id"]))  # type: ignore[arg-type]
    for g, spans in per_gpu.items():
        spans.sort()
        for (_s1, e1, a), (s2, _e2, b) in itertools.pairwise(spans):
            assert s2 >= e1, f"GPU {g}: job {b} started at {s2} while job {a} held it until {e1}"


def test_oom_is_requeued_once_with_raised_memory(tmp_path: Path, daemon: DaemonFactory) -> None:
    d = daemon()
    oom_once = 'if [ "$GPUPLAN_ATTEMPT" = 1 ]; then echo "torch.OutOfMemoryError: CUDA out of memory." >&2; exit 1; fi'
    once = d.submit(oom_once, mem_gb=20.0)
    always = d.submit(
        'echo "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB" >&2; exit 1', mem_gb=60.0
    )
    plain = d.submit("exit 3", mem_gb=20.0)
    job = d.wait_state(once, "done")
    assert job["attempt"] == 2 and job["mem_gb"] == 25.0 and job["declared_mem_gb"] == 20.0
    failed = d.wait_state(always, "failed")
    assert failed["attempt"] == 2 and failed["oom"] and "not retried again" in failed["reason"]
    assert failed["mem_gb"] == 75.0
    other = d.wait_state(plain, "failed")
    assert other["attempt"] == 1 and not other["oom"] and other["exit_code"] == 3


def test_impossible_job_is_refused_with_the_reason(daemon: DaemonFactory) -> None:
    d = daemon()
    with pytest.raises(AgentError, match="asks for 9 GPUs; this node has 8"):
        d.submit("true", gpus=9)
    with pytest.raises(AgentError, match="asks for 100 GB per GPU; this node's GPUs have 80 GB"):
        d.submit("true", mem_gb=100.0)
    assert d.call("queue")["jobs"] == []


def test_socket_mode_and_caller_uid_logged(daemon: DaemonFactory) -> None:
    d = daemon()
    assert stat.S_IMODE(d.paths.socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(d.paths.token.stat().st_mode) == 0o600
    jid = d.submit("true")
    d.call("status")
    events = events_since(connect(d.paths.db, readonly=True), 0)
    calls = [(e["action"], e["uid"], e["job_id"]) for e in events if e["uid"] != -1]
    assert calls == [("submit", os.getuid(), jid)]
    own = [(e["action"], e["job_id"]) for e in events if e["uid"] == -1]
    assert own == [("start", jid)], "the agent's own actions are logged with uid -1"


def test_foreign_process_memory_keeps_its_gpu(tmp_path: Path, daemon: DaemonFactory) -> None:
    d = daemon(gpus=_four_gpu_toml(tmp_path))
    env = {"PATH": os.environ["PATH"], "GPUPLAN_FAKE_SET": str(d.home), "GPUPLAN_FAKE_MEM_GB": "30",
           "CUDA_VISIBLE_DEVICES": "0"}  # fmt: skip
    foreign = subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)
    try:
        wait_until(
            lambda: d.call("status")["waiting"] == 0 and _foreign_seen(d),
            "the agent to see the foreign process",
        )
        jobs = [d.submit("sleep 300") for _ in range(4)]
        wait_until(lambda: sum(d.job(j)["state"] == "running" for j in jobs) == 3, "three jobs to run")
        assert all(0 not in d.job(j)["gpu_ids"] for j in jobs), (
            "GPU 0 holds a process the agent did not start"
        )
    finally:
        foreign.kill()
        foreign.wait()
    wait_until(lambda: all(d.job(j)["state"] == "running" for j in jobs), "the fourth job to get GPU 0")


def _foreign_seen(d: Daemon) -> bool:
    jid = d.submit("true", gpus=4, hold=True)
    d.call("release", ids=[jid])
    started = d.job(jid)["state"] != "queued"
    if not started:
        d.call("cancel", ids=[jid])
    return not started


def test_lost_gpu_is_out_of_service(tmp_path: Path, daemon: DaemonFactory) -> None:
    d = daemon(gpus=_four_gpu_toml(tmp_path).replace(".toml", ".toml,lost=2"))
    wait_until(lambda: d.call("status")["offline_gpus"] == [2], "GPU 2 to be out of service")
    jobs = [d.submit("sleep 300") for _ in range(4)]
    wait_until(lambda: sum(d.job(j)["state"] == "running" for j in jobs) == 3, "three jobs to run")
    assert sorted(g for j in jobs for g in d.job(j)["gpu_ids"]) == [0, 1, 3]


def test_history_is_read_by_audit_and_predict_fit(tmp_path: Path, daemon: DaemonFactory) -> None:
    d = daemon()
    ids = [
        d.submit(f"sleep 0.{2 + i}", name=f"train-{i % 2}", mem_gb=10.0 + i, time_limit_s=60.0)
        for i in range(6)
    ]
    ids.append(d.submit("exit 4", name="bad"))
    for jid in ids:
        d.wait_state(jid, "done", "failed")
    history, node = d.paths.history, d.paths.node_toml
    gp = [sys.executable, "-m", "gpuplan.cli"]
    audit = subprocess.run(
        [*gp, "audit", str(history), "--cluster", str(node), "--json"], capture_output=True, text=True
    )
    assert audit.returncode == 0, audit.stderr
    assert '"jobs": 7' in audit.stdout.replace("\n", " ") or '"jobs":7' in audit.stdout
    model = tmp_path / "dur.model"
    fit = subprocess.run([*gp, "predict", "fit", str(history), "--out", str(model), "--model", "global-median", "--json"],
                         capture_output=True, text=True)  # fmt: skip
    assert fit.returncode == 0, fit.stderr
    assert model.exists()
    from gpuplan.traces import read_trace

    jobs = read_trace(history).jobs
    assert len(jobs) == 7 and {j.meta["state"] for j in jobs} == {"COMPLETED", "FAILED"}
    assert all(j.duration_s is not None and j.duration_s >= 0 for j in jobs)
    # phases, where the samples saw the job: they fit in its duration (the reader checks it too)
    assert all((j.startup_s or 0.0) + (j.init_s or 0.0) <= (j.duration_s or 0.0) + 1e-9 for j in jobs)
    assert sorted(j.mem_gb for j in jobs if j.name.startswith("train")) == [
        10.0,
        11.0,
        12.0,
        13.0,
        14.0,
        15.0,
    ]


def test_job_that_ended_while_the_agent_was_down_keeps_its_exit_status(
    tmp_path: Path, daemon: DaemonFactory
) -> None:
    d = daemon()
    jid = d.submit("sleep 0.3; exit 5")
    d.wait_state(jid, "running")
    d.kill9()
    status = d.paths.job_dir(jid) / "status"
    wait_until(status.exists, "the job's wrapper to write its exit status")
    d.start()
    job = d.wait_state(jid, "failed")
    assert job["exit_code"] == 5 and job["attempt"] == 1


def test_job_that_cannot_start_fails_once(daemon: DaemonFactory) -> None:
    d = daemon()
    reply = d.call("submit", command="true", cwd="/nonexistent/dir", env={})
    job = d.wait_state(int(reply["id"]), "failed")
    assert job["reason"].startswith("failed to start") and job["attempt"] == 1
    assert d.call("status")["waiting"] == 0, "not queued again"

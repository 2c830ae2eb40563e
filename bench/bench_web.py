"""Dashboard benchmarks (issue #12): the queue view's API with 10,000 queued jobs in the agent's
store, and a what-if on a 10,000-job trace. The browser's own first render is printed by
tests/web (Playwright); these time the server side that it waits for.

`bench_queue` fills a store in a temporary GPUPLAN_HOME with `n` queued jobs, serves it on the fake
device set (FastAPI's TestClient, in process) and times the first page of `/api/queue` (store read and
plan), the planned Gantt and a second page. `bench_whatif` writes a Poisson trace of `n` jobs for one
8-GPU node and times `POST /api/whatif` with FIFO and SJF (3 runs with the FIFO baseline), then one
run's Gantt.
"""

from __future__ import annotations

import resource
import tempfile
import time
from pathlib import Path
from typing import Any


def _client(home: Path, trace_root: Path) -> Any:
    from fastapi.testclient import TestClient

    from gpuplan.agent.gpus import open_backend
    from gpuplan.agent.paths import AgentPaths
    from gpuplan.web.app import ServeConfig, create_app
    from gpuplan.web.live import NodeSource

    paths = AgentPaths.from_env(home)
    source = NodeSource(open_backend("fake:8xA100-80GB", set_id=str(paths.home)), paths, "fake:8xA100-80GB")
    return TestClient(create_app(ServeConfig(source, trace_root=trace_root)), base_url="http://127.0.0.1")


def _timed(call: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = call()
    return out, round(time.perf_counter() - t0, 3)


def bench_queue(n: int = 10_000) -> dict[str, object]:
    from gpuplan.agent.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        store = Store(home / "agent.db")
        now = time.time()
        store.conn.execute("BEGIN")
        for i in range(n):
            store.add_job(command="true", gpus=(1, 2, 1, 4, 8)[i % 5], mem_gb=20.0, state="queued",
                          submit_s=now - 3600 + i * 3600 / n, est_duration_s=600.0 + (i % 7) * 300.0)  # fmt: skip
        store.conn.execute("COMMIT")
        store.close()
        with _client(home, Path(tmp)) as client:
            first, first_s = _timed(lambda: client.get("/api/queue?offset=0&limit=100"))
            gantt, gantt_s = _timed(lambda: client.get("/api/queue/gantt"))
            _, next_s = _timed(lambda: client.get("/api/queue?offset=100&limit=100"))
    return {
        "case": "web-queue-10k",
        "jobs": n,
        "rows_in_first_page": len(first.json()["rows"]),
        "first_page_s": first_s,
        "gantt_s": gantt_s,
        "gantt_jobs": gantt.json()["jobs"],
        "next_page_s": next_s,
    }


def bench_whatif(n: int = 10_000) -> dict[str, object]:
    from gpuplan.synth import synth_poisson
    from gpuplan.traces import write_trace

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_trace(synth_poisson(n, seed=0, load=0.9, total_gpus=8), root / "trace.csv")
        (root / "home").mkdir()
        with _client(root / "home", root) as client:
            resp, whatif_s = _timed(
                lambda: client.post("/api/whatif", params={"path": "trace.csv", "policies": "fifo,sjf"})
            )
            res = resp.json()
            gantt, gantt_s = _timed(lambda: client.get(f"/api/whatif/{res['id']}/gantt/{res['best']}"))
    return {
        "case": "web-whatif-10k",
        "jobs": n,
        "runs": len(res["data"]["runs"]),
        "whatif_s": whatif_s,
        "response_kb": round(len(resp.content) / 1024, 1),
        "gantt_s": gantt_s,
        "gantt_kb": round(len(gantt.content) / 1024, 1),
    }


def _squeue_text(n: int, now_s: float) -> str:
    """`squeue -O` output (the header gpuplan asks for) of 4 running jobs and `n` pending ones."""
    from gpuplan.slurm.parse import SQUEUE_FIELDS

    fields = [f.upper() for f in SQUEUE_FIELDS]
    names = {"JOBID": "JOBID", "ARRAYJOBID": "ARRAY_JOB_ID", "ARRAYTASKID": "ARRAY_TASK_ID",
             "HETJOBID": "HET_JOB_ID", "USERNAME": "USER", "TIMELIMIT": "TIME_LIMIT", "TIMEUSED": "TIME",
             "NUMNODES": "NODES", "TRES-PER-JOB": "TRES_PER_JOB", "TRES-PER-NODE": "TRES_PER_NODE",
             "PRIORITYLONG": "PRIORITY", "SUBMITTIME": "SUBMIT_TIME", "STARTTIME": "START_TIME",
             "ELIGIBLETIME": "ELIGIBLE_TIME", "NODELIST": "NODELIST"}  # fmt: skip
    header = "|".join(names.get(f, f) for f in fields) + "|"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now_s - 60))
    lines = [header]
    for i in range(n + 4):
        running = i < 4
        row = {
            "JOBID": str(i + 1), "ARRAYJOBID": str(i + 1), "ARRAYTASKID": "N/A", "HETJOBID": "N/A",
            "PARTITION": "gpu", "USERNAME": f"user{i % 7}", "STATE": "RUNNING" if running else "PENDING",
            "TIMELIMIT": f"{10 + i % 50}:00", "TIMEUSED": "1:00" if running else "0:00", "NUMNODES": "1",
            "TRES-PER-JOB": "N/A", "TRES-PER-NODE": f"gres:gpu:{8 if running else (1, 2, 4, 8)[i % 4]}",
            "PRIORITYLONG": "1", "NICE": "0", "REASON": "None" if running else "Priority",
            "SUBMITTIME": stamp, "STARTTIME": stamp if running else "N/A", "ELIGIBLETIME": stamp,
            "DEPENDENCY": "(null)", "NODELIST": f"node{i + 1}" if running else "", "REQUEUE": "1",
            "NAME": f"job{i}", "ACCOUNT": f"acct{i % 3}",
        }  # fmt: skip
        lines.append("|".join(row[f] for f in fields) + "|")
    return "\n".join(lines) + "\n"


def _cpu_s() -> float:
    """CPU time of this process (user + sys, every thread: the app runs in TestClient's thread)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def bench_slurm_queue(n: int = 10_000) -> dict[str, object]:
    """`gpuplan serve --slurm`'s queue API with `n` pending jobs on 8 nodes x 8 GPUs (4 busy): the first
    page (squeue/sinfo text parsed; "best" chosen on the first PLAN_MAX_PENDING in Slurm's order, then
    every pending job planned with the chosen policy), a page read from the cache, and a forced re-read
    of the unchanged queue (parsed, not replanned). Slurm's commands are stand-ins printing generated
    text, so only gpuplan's side is timed: wall and CPU time of the first page, peak RSS."""
    from fastapi.testclient import TestClient

    from gpuplan.slurm.client import SlurmClient
    from gpuplan.slurm.runner import SlurmRunner
    from gpuplan.web.app import ServeConfig, create_app
    from gpuplan.web.slurmview import PLAN_MAX_PENDING, SlurmSource

    now = time.time()
    outputs = {
        "squeue": _squeue_text(n, now),
        "sinfo": "NODELIST|STATE|GRES|GRES_USED|PARTITION|\n"
        + "".join(
            f"node{i}|{'mixed' if i <= 4 else 'idle'}|gpu:8|gpu:{8 if i <= 4 else 0}|gpu*|\n"
            for i in range(1, 9)
        ),
        "scontrol": "SchedulerType           = sched/backfill\nPriorityType            = priority/multifactor\n",
    }

    class Printed(SlurmRunner):
        def run(self, args, *, input_text=None, retry=True):  # type: ignore[no-untyped-def]
            return outputs[args[0]]

    clock = [now]
    source = SlurmSource(SlurmClient(Printed(), clock=lambda: clock[0]), clock=lambda: clock[0])
    with TestClient(create_app(ServeConfig(source)), base_url="http://127.0.0.1") as client:
        cpu0 = _cpu_s()
        first, first_s = _timed(lambda: client.get("/api/slurm/queue?offset=0&limit=100"))
        first_cpu_s = round(_cpu_s() - cpu0, 3)
        _, cached_s = _timed(lambda: client.get("/api/slurm/queue?offset=100&limit=100"))
        clock[0] += source.cache_s
        _, reread_s = _timed(lambda: client.get("/api/slurm/queue?offset=0&limit=100"))
    page = first.json()
    return {
        "case": f"web-slurm-queue-{n // 1000}k",
        "pending_jobs": n,
        "planned_jobs": page["planned"],
        "policy_chosen_on": PLAN_MAX_PENDING,
        "policy": page["summary"]["policy"],
        "backfill": page["summary"]["backfill"],
        "first_page_s": first_s,
        "first_page_cpu_s": first_cpu_s,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "cached_page_s": cached_s,
        "reread_unchanged_s": reread_s,
    }

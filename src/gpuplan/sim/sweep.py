"""Many simulations at once: in this process, on local worker processes, or on a Dask cluster.

Every run is one `simulate` call of the one scheduling core; only where it runs differs. Each trace
(its jobs and cluster) is shipped once per worker: local processes get every trace in their
initializer, a Dask cluster gets each one scattered (broadcast) once, and the runs name the trace
they replay by key. The results come back as the same `SimResult`s, in the order of the runs, so a
table made from them is the same wherever they ran.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuplan.errors import GpuplanError

if TYPE_CHECKING:
    from gpuplan.core.preemption import PreemptionCost
    from gpuplan.model import ClusterSpec, Job
    from gpuplan.sim.result import SimResult

__all__ = ["Run", "TraceData", "default_workers", "run_all"]

TraceData = tuple["Sequence[Job]", "ClusterSpec"]
DoneFn = Callable[[int], None]  # called with the index of each run as it completes


@dataclass(frozen=True, slots=True)
class Run:
    """One simulation: the trace it replays (a key of the traces given to `run_all`) and its settings.

    `estimates` "history" learns each job's estimate online from the run's finished jobs;
    `lower_bound_s`: the trace's bound when the caller has it (saves each run computing it)."""

    trace: str
    policy: str
    backfill: str
    placer: str = "first-fit"
    oracle: bool = False
    estimates: str = "trace"
    preemption: PreemptionCost | None = None
    lower_bound_s: float | None = None


def default_workers() -> int:
    """The CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def run_one(data: TraceData, run: Run) -> SimResult:
    """Simulate one run on its trace's jobs and cluster (what every worker calls)."""
    from gpuplan.core.estimates import OnlineEstimator
    from gpuplan.sim.engine import simulate

    jobs, cluster = data
    return simulate(
        jobs,
        cluster,
        run.policy,
        run.backfill,
        run.placer,
        oracle=run.oracle,
        estimator=OnlineEstimator() if run.estimates == "history" else None,
        preemption=run.preemption,
        lower_bound_s=run.lower_bound_s,
    )


def run_all(
    traces: Mapping[str, TraceData],
    runs: Sequence[Run],
    workers: int = 1,
    dask: str | None = None,
    on_done: DoneFn | None = None,
) -> list[SimResult]:
    """Every run's result, in the order of `runs`.

    `dask`: the address of a Dask scheduler ("tcp://host:8786"); else `workers` local processes
    (1: in this process).

    Raises:
        GpuplanError: `workers` < 1, or Dask is not installed or its scheduler cannot be reached.
    """
    if workers < 1:
        raise GpuplanError(f"--workers {workers}: give 1 or more worker processes")
    if dask is not None:
        return _on_dask(traces, runs, dask, on_done)
    if workers == 1 or len(runs) <= 1:
        out = []
        for i, run in enumerate(runs):
            out.append(run_one(traces[run.trace], run))
            if on_done is not None:
                on_done(i)
        return out
    return _on_processes(traces, runs, min(workers, len(runs)), on_done)


_WORKER_TRACES: Mapping[str, TraceData] = {}


def _init_worker(traces: Mapping[str, TraceData]) -> None:
    global _WORKER_TRACES
    _WORKER_TRACES = traces


def _worker_run(run: Run) -> SimResult:
    return run_one(_WORKER_TRACES[run.trace], run)


def _on_processes(
    traces: Mapping[str, TraceData], runs: Sequence[Run], workers: int, on_done: DoneFn | None
) -> list[SimResult]:
    import multiprocessing
    import threading
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # fork while this process has no other thread: workers start at once and share the traces'
    # memory; else forkserver (forking a threaded process may deadlock): each worker then gets the
    # traces once, through its initializer (and a script calling this needs the usual
    # `if __name__ == "__main__":` guard, as with any multiprocessing program)
    forkable = threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if forkable else "forkserver")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(traces,)) as pool:
        futures = {pool.submit(_worker_run, run): i for i, run in enumerate(runs)}
        out: list[Any] = [None] * len(runs)
        for fut in as_completed(futures):
            i = futures[fut]
            out[i] = fut.result()
            if on_done is not None:
                on_done(i)
    return out


def _on_dask(
    traces: Mapping[str, TraceData], runs: Sequence[Run], address: str, on_done: DoneFn | None
) -> list[SimResult]:
    try:
        from distributed import Client
    except ImportError as e:  # pragma: no cover - dask[distributed] is a dependency
        raise GpuplanError("--dask needs dask.distributed: pip install 'dask[distributed]'") from e
    try:
        client = Client(address, timeout=30, set_as_default=False)
    except (OSError, TimeoutError) as e:
        raise GpuplanError(f"--dask {address}: cannot reach the Dask scheduler ({e})") from None
    tag = uuid.uuid4().hex[:12]  # keys unique to this call: a long-lived cluster keeps older results
    with client:
        # one copy of each trace per worker; hash=False: tokenizing a million jobs would cost a pass
        shipped = {k: client.scatter([v], broadcast=True, hash=False)[0] for k, v in traces.items()}
        futures = [
            client.submit(run_one, shipped[run.trace], run, pure=False, key=f"gpuplan-run-{tag}-{i}")
            for i, run in enumerate(runs)
        ]
        out: list[Any] = []
        for i, fut in enumerate(futures):  # in order: the progress moves as the first runs come back
            out.append(fut.result())
            if on_done is not None:
                on_done(i)
    return out

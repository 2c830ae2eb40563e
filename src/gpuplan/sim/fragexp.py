"""FGD's fragmentation experiment (Weng et al., USENIX ATC '23), with gpuplan's placers (`gpuplan frag`).

Scheduling only: pods never leave. The trace's pods (their GPU requests add up to some share of the
cluster) are topped up with pods drawn from them at random with replacement until the requested GPU
capacity reaches `arrive_to` (1.3: 130 %), the whole list is shuffled (one seed, one order), and pods
arrive one by one: each goes where the placer says, or fails when it fits nowhere, and the next is
tried. Measured: the share of the cluster's GPU capacity allocated as the arrivals grow.
docs/fragmentation.md has the figures and how they compare with the paper's.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gpuplan.core.fragmentation import Workload, cluster_fragmentation
from gpuplan.core.placement import get_placer
from gpuplan.core.state import ClusterState, Need
from gpuplan.model import ClusterSpec, Job

__all__ = ["FragPlacer", "FragRun", "arrival_order", "frag_experiment", "gpu_request", "run_one"]

CURVE_STEP = 0.01  # one point of the curve per 1 % of the GPU capacity arrived


def gpu_request(job: Job) -> float:
    """GPUs a pod asks for: its share of one GPU, or its whole GPUs."""
    if job.gpus == 1 and job.gpu_share is not None:
        return job.gpu_share
    return float(job.gpus)


def arrival_order(jobs: Sequence[Job], capacity_gpus: float, arrive_to: float, seed: int) -> list[int]:
    """Indices of `jobs`: all of them, then random draws with replacement until the requests reach
    `arrive_to` x the capacity, the whole list shuffled (`random.Random(seed)`)."""
    rng = random.Random(seed)
    order = list(range(len(jobs)))
    asked = sum(gpu_request(j) for j in jobs)
    target = arrive_to * capacity_gpus
    with_gpus = [i for i, j in enumerate(jobs) if gpu_request(j) > 0]
    while asked < target and with_gpus:
        i = rng.randrange(len(jobs))
        order.append(i)
        asked += gpu_request(jobs[i])
    rng.shuffle(order)
    return order


def _need(job: Job) -> Need:
    share = job.gpu_share if job.gpus == 1 and job.gpu_share is not None and job.gpu_share < 1 else None
    return Need(job.cpu_milli or 0.0, job.host_mem_gb or 0.0, share)


@dataclass(slots=True)
class FragRun:
    """One placer on one arrival order."""

    placer: str
    seed: int
    curve: list[tuple[float, float]] = field(default_factory=list)  # (arrived, allocated), capacity = 1
    failed: int = 0
    placed: int = 0
    alloc_at_100: float = 0.0
    alloc_at_end: float = 0.0
    arrived_at_end: float = 0.0
    frag_at_end_gpus: float = 0.0
    cpu_s: float = 0.0


def run_one(
    jobs: Sequence[Job], spec: ClusterSpec, placer_name: str, seed: int, arrive_to: float, workload: Workload
) -> FragRun:
    """Place the arrivals of one seed with one placer on an empty `spec`."""
    t0 = time.process_time()
    placer = get_placer(placer_name)
    if hasattr(placer, "set_workload"):
        placer.set_workload(workload)
    state = ClusterState(spec)
    capacity = float(spec.total_gpus)
    run = FragRun(placer_name, seed)
    needs = [_need(j) for j in jobs]
    requests = [gpu_request(j) for j in jobs]
    arrived = allocated = 0.0
    next_point = 0.0
    for i in arrival_order(jobs, capacity, arrive_to, seed):
        job, need = jobs[i], needs[i]
        found = placer.choose(state, job.gpus, None, need)
        arrived += requests[i]
        if found is None:
            run.failed += 1
        else:
            node, gpus = found
            if gpus:
                state.place(gpus, None, need)
            else:
                state.place_node(node, need)
            allocated += requests[i]
            run.placed += 1
        if arrived / capacity >= next_point:
            run.curve.append((round(arrived / capacity, 6), round(allocated / capacity, 6)))
            next_point = (int(arrived / capacity / CURVE_STEP) + 1) * CURVE_STEP
        if not run.alloc_at_100 and arrived >= capacity:
            run.alloc_at_100 = allocated / capacity
    run.alloc_at_end = allocated / capacity
    run.arrived_at_end = arrived / capacity
    run.curve.append((round(run.arrived_at_end, 6), round(run.alloc_at_end, 6)))
    run.frag_at_end_gpus = cluster_fragmentation(state, workload)
    run.cpu_s = time.process_time() - t0
    return run


@dataclass(slots=True)
class FragPlacer:
    """One placer over every seed: means and the mean curve."""

    placer: str
    runs: list[FragRun]

    @property
    def alloc_ratio_at_130(self) -> float:
        return sum(r.alloc_at_end for r in self.runs) / len(self.runs)

    @property
    def alloc_ratio_at_100(self) -> float:
        return sum(r.alloc_at_100 for r in self.runs) / len(self.runs)

    @property
    def failed(self) -> float:
        return sum(r.failed for r in self.runs) / len(self.runs)

    @property
    def frag_at_end_gpus(self) -> float:
        return sum(r.frag_at_end_gpus for r in self.runs) / len(self.runs)

    def curve(self) -> list[tuple[float, float]]:
        """The seed-mean allocated share at each 1 % of capacity arrived."""
        points: dict[float, list[float]] = {}
        for r in self.runs:
            for arrived, alloc in r.curve:
                step = round(int(arrived / CURVE_STEP + 1e-9) * CURVE_STEP, 4)
                points.setdefault(step, []).append(alloc)
        n = len(self.runs)
        return [(a, round(sum(v) / len(v), 6)) for a, v in sorted(points.items()) if len(v) == n]

    def as_dict(self, capacity_gpus: int) -> dict[str, Any]:
        return {
            "placer": self.placer,
            "alloc_ratio_at_100": round(self.alloc_ratio_at_100, 6),
            "alloc_ratio_at_130": round(self.alloc_ratio_at_130, 6),
            "unallocated_gpus_at_130": round((1 - self.alloc_ratio_at_130) * capacity_gpus, 1),
            "failed_pods": self.failed,
            "fragmentation_at_130_gpus": round(self.frag_at_end_gpus, 2),
            "seeds": [r.seed for r in self.runs],
            "per_seed_alloc_ratio_at_130": [round(r.alloc_at_end, 6) for r in self.runs],
            "cpu_s": round(sum(r.cpu_s for r in self.runs), 3),
            "placements": sum(r.placed + r.failed for r in self.runs),
            "curve": [{"arrived": a, "allocated": b} for a, b in self.curve()],
        }


_SHARED: dict[str, Any] = {}


def _init_worker(jobs: list[Job], spec: ClusterSpec, workload: Workload) -> None:
    _SHARED.update(jobs=jobs, spec=spec, workload=workload)


def _task(placer: str, seed: int, arrive_to: float) -> FragRun:
    return run_one(_SHARED["jobs"], _SHARED["spec"], placer, seed, arrive_to, _SHARED["workload"])


def frag_experiment(
    jobs: Sequence[Job],
    spec: ClusterSpec,
    placers: Sequence[str],
    seeds: Sequence[int],
    arrive_to: float = 1.3,
    workers: int | None = None,
) -> list[FragPlacer]:
    """Every placer on every seed's arrivals; `workers` processes (default: the CPUs, at most 8; 1 runs here).

    The workload whose types weigh fragmentation (fgd) is the trace's pods, before the top-up."""
    workload = Workload.from_jobs(jobs)
    tasks = [(p, s) for p in placers for s in seeds]
    if workers is None:
        workers = min(len(tasks), os.cpu_count() or 1, 8)
    if workers <= 1:
        runs = [run_one(jobs, spec, p, s, arrive_to, workload) for p, s in tasks]
    else:
        # the slow placers first, so that no worker is left with one at the end
        ordered = sorted(tasks, key=lambda ps: ps[0] != "fgd" and not ps[0].startswith("fgd"))
        with ProcessPoolExecutor(
            workers, initializer=_init_worker, initargs=(list(jobs), spec, workload)
        ) as pool:
            futures = {ps: pool.submit(_task, ps[0], ps[1], arrive_to) for ps in ordered}
            runs = [futures[ps].result() for ps in tasks]
    return [FragPlacer(p, [r for r in runs if r.placer == p]) for p in placers]

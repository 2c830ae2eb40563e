"""A slow, obvious scheduler written from docs/architecture.md's rules, to check the simulator against.

Scope: one exclusive node of G GPUs, and every job's planned duration equal to its true duration (exact
estimates, or an oracle run), so a running job's expected end is its real end. On one exclusive node the
GPUs are interchangeable: a schedule is a start time per job, and free capacity is one number.

It shares nothing with gpuplan's scheduling code but the policies' sort keys (the order is the policy's
business, not the scheduler's). Rules, from docs/architecture.md "The scheduling pass":

- the queue is sorted by `policy.key(job, index) + (index,)`;
- at each instant: finishes first, then arrivals, then one pass; a job that takes no time ends at the
  instant it starts, and its end is an event of its own (another pass at the same instant);
- none: start jobs in order while they fit; the first that does not fit blocks the rest;
- easy: as none, then the first blocked job (the head) gets a reservation at the earliest time it fits
  if running jobs end at their expected ends (the shadow); a later job starts now if it fits and either
  ends by the shadow or leaves the head placeable at the shadow;
- conservative: every waiting job in order gets the earliest start at which it fits throughout its run
  given the running jobs and the reservations before it; it starts if that is now. A job planned to
  take no time holds its GPUs for an instant.

Everything is recomputed from plain lists at every step: quadratic and clear on purpose.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpuplan.core.policies import get_policy
from gpuplan.model import Job

__all__ = ["reference_starts"]


@dataclass
class _Booking:
    """GPUs held over [start, end): a running job or a reservation."""

    start: float
    end: float
    gpus: int


def _held_for(start: float, duration: float) -> float:
    """End of a booking: a job planned to take no time still holds its GPUs for an instant."""
    return max(start + duration, math.nextafter(start, math.inf))


def reference_starts(
    jobs: Sequence[Job], node_gpus: int, policy: str, backfill: str, oracle: bool = False
) -> dict[str, float]:
    """Start time of every job (seconds from the first submit), by job id.

    Every job's `planning_duration_s(oracle)` must equal its `duration_s`, and every job must fit on
    the node (`gpus <= node_gpus`).
    """
    for j in jobs:
        assert j.planning_duration_s(oracle) == j.duration_s, f"{j.id}: not an exact estimate"
        assert j.gpus <= node_gpus, f"{j.id}: does not fit on the node"
    p = get_policy(policy)
    t0 = min(j.submit_s for j in jobs)
    release = [j.submit_s - t0 for j in jobs]
    duration = [float(j.duration_s or 0.0) for j in jobs]
    gpus = [j.gpus for j in jobs]
    rank = {i: (*p.key(j, i, oracle), i) for i, j in enumerate(jobs)}
    to_arrive = sorted(range(len(jobs)), key=lambda i: (release[i], i))
    waiting: list[int] = []
    running: list[tuple[float, int]] = []  # (end, index)
    start: dict[int, float] = {}
    while to_arrive or waiting or running:
        events = [e for e, _ in running] + ([release[to_arrive[0]]] if to_arrive else [])
        assert events, "jobs wait with nothing running and nothing to arrive"
        now = min(events)
        running = [(e, i) for e, i in running if e > now]  # finishes first
        while to_arrive and release[to_arrive[0]] <= now:
            waiting.append(to_arrive.pop(0))
        waiting.sort(key=lambda i: rank[i])
        chosen = _PASSES[backfill](now, waiting, running, node_gpus, gpus, duration)
        for i in chosen:
            start[i] = now
            waiting.remove(i)
            running.append((now + duration[i], i))
    return {jobs[i].id: s for i, s in start.items()}


def _free(running: list[tuple[float, int]], node_gpus: int, gpus: list[int]) -> int:
    return node_gpus - sum(gpus[i] for _, i in running)


def _pass_none(now, waiting, running, node_gpus, gpus, duration) -> list[int]:  # type: ignore[no-untyped-def]
    chosen: list[int] = []
    running = list(running)
    for i in waiting:
        if gpus[i] > _free(running, node_gpus, gpus):
            break
        chosen.append(i)
        running.append((now + duration[i], i))
    return chosen


def _pass_easy(now, waiting, running, node_gpus, gpus, duration) -> list[int]:  # type: ignore[no-untyped-def]
    chosen = _pass_none(now, waiting, running, node_gpus, gpus, duration)
    rest = waiting[len(chosen) :]
    if not rest:
        return chosen
    running = list(running) + [(now + duration[i], i) for i in chosen]
    head = rest[0]

    def free_at(t: float) -> int:  # free GPUs at t if every running job ends at its expected end
        return node_gpus - sum(gpus[i] for e, i in running if e > t)

    shadow = min(max(e, now) for e, _ in running if free_at(e) >= gpus[head])
    for i in rest[1:]:
        if gpus[i] > _free(running, node_gpus, gpus):
            continue
        ends_in_time = now + duration[i] <= shadow
        if ends_in_time or free_at(shadow) - gpus[i] >= gpus[head]:
            chosen.append(i)
            running.append((now + duration[i], i))
    return chosen


def _pass_conservative(now, waiting, running, node_gpus, gpus, duration) -> list[int]:  # type: ignore[no-untyped-def]
    booked = [_Booking(now, max(e, math.nextafter(now, math.inf)), gpus[i]) for e, i in running]
    chosen: list[int] = []
    for i in waiting:
        t = _earliest(now, booked, node_gpus, gpus[i], duration[i])
        booked.append(_Booking(t, _held_for(t, duration[i]), gpus[i]))
        if t == now:
            chosen.append(i)
    return chosen


def _earliest(now: float, booked: list[_Booking], node_gpus: int, g: int, d: float) -> float:
    """The earliest t >= now (now or a booking's end) with g GPUs free throughout [t, t + d)."""
    for t in sorted({now, *(b.end for b in booked if b.end >= now)}):
        end = _held_for(t, d)
        # free capacity only drops where a booking starts: check t and every such start inside the run
        checks = [t, *(b.start for b in booked if t < b.start < end)]
        if all(node_gpus - sum(b.gpus for b in booked if b.start <= x < b.end) >= g for x in checks):
            return t
    raise AssertionError("no start time: the job does not fit on the empty node")


_PASSES = {"none": _pass_none, "easy": _pass_easy, "conservative": _pass_conservative}

"""The jobs of one sacct file, whatever its form (`-P` text, its Arrow path, `--json`): unique ids,
rejected rows counted per reason, jobs left out (no GPUs), and the usage of step rows folded into
their jobs (peak memory and GPU use), with the checks that need the whole job (absurd GPU memory)."""

from __future__ import annotations

from array import array
from collections import Counter
from pathlib import Path
from typing import Any

from gpuplan.errors import InputError
from gpuplan.model import Job
from gpuplan.traces.base import TraceError, TraceResult
from gpuplan.traces.fields import JOB_FIELDS, MAX_MEM_GB, REPORTED_FIELDS
from gpuplan.traces.sacct_values import EXPECT_AT_MOST_MEM

__all__ = ["CPU_ONLY", "SHARES_ONLY", "Collector"]

CPU_ONLY = "no GPUs (CPU-only job)"
SHARES_ONLY = "GPU shares only (gres/shard or gres/mps, no whole GPU)"
_GIB = float(1 << 30)
_MAX_IDS_SHOWN = 5
_MAX_SAMPLES = 5


class Collector:
    """The jobs of one file: unique ids, rejected rows counted per reason, jobs left out, usage folding.

    It follows `RowSink` (same skipped counts, samples and missing fields) without its per-field scans
    of every job, which cost seconds on a million jobs.
    """

    def __init__(self, path: Path, skip_bad: bool, usage_column: str = "TRESUsageInMax") -> None:
        self.path = path
        self.usage_column = usage_column  # where the GPU memory peaks come from, for errors
        self.skip_bad = skip_bad
        self.jobs: list[Job] = []
        self.skipped: Counter[str] = Counter()
        self.samples: list[str] = []
        self.seen: set[str] = set()
        self.places = array("q")  # the line (text) or record index (JSON) of each kept job
        self.index: dict[str, int] | None = None  # job id -> position in jobs, built at the first duplicate
        # Peaks over each job's rows, by job id: MaxRSS bytes, gres/gpumem bytes, gres/gpuutil percent.
        self.rss: dict[str, int] = {}
        self.gpumem: dict[str, int] = {}
        self.gpuutil: dict[str, float] = {}
        self.left_out: dict[str, list[str]] = {}
        self.dropped: set[str] = set()  # ids of rows skipped or left out, so their steps are not orphans
        self.never_started = 0
        self.remainders = 0
        self.active = 0
        self.gave_mem = self.gave_util = False

    def keep(self, job: Job, where: int) -> int | None:
        """Keep the job; when its id was seen before, keep nothing and return where it was first.

        A set and an array of line numbers, rather than a dict of ids to lines: a million jobs, much less
        memory, and memory is most of the time on a machine where page faults are slow.
        """
        if job.id in self.seen:
            if self.index is None:
                self.index = {j.id: k for k, j in enumerate(self.jobs)}
            return self.places[self.index[job.id]]
        self.seen.add(job.id)
        if self.index is not None:
            self.index[job.id] = len(self.jobs)
        self.jobs.append(job)
        self.places.append(where)
        self.count_unfinished(job)
        return None

    def count_unfinished(self, job: Job) -> None:
        """Count a kept job that never started or is still running, for the notes."""
        if "never_started" in job.meta:
            self.never_started += 1
            self.remainders += "array_pending_remainder" in job.meta
        elif "elapsed_s" in job.meta:
            self.active += 1

    def reject(self, error: InputError) -> None:
        """Count a bad row under its reason, or raise it when skip_bad is off."""
        if not self.skip_bad:
            raise error
        self.skipped[error.reason] += 1
        if len(self.samples) < _MAX_SAMPLES:
            self.samples.append(f"skipped {error}")

    def leave_out(self, reason: str, job_id: str) -> None:
        """Count a job that is valid but has no place in a GPU trace (not an error, even without skip_bad)."""
        self.left_out.setdefault(reason, []).append(job_id)
        self.dropped.add(job_id)

    def add_usage(self, job_id: str, rss: int | None, gpumem: int | None, gpuutil: float | None) -> None:
        """Fold one row's usage into its job's peaks."""
        pairs: tuple[tuple[dict[str, Any], float | None], ...] = (
            (self.rss, rss),
            (self.gpumem, gpumem),
            (self.gpuutil, gpuutil),
        )
        for peaks, value in pairs:
            if value is not None and value > peaks.get(job_id, -1):
                peaks[job_id] = value

    def add_usage_columns(
        self, keys: list[str], rss: list[int | None] | None, gpu: list[tuple[int | None, float | None]] | None
    ) -> None:
        """Fold a chunk's usage: per row its job id, MaxRSS and (gpumem, gpuutil)."""
        if rss is not None:
            peaks = self.rss
            for key, value in zip(keys, rss):
                if value is not None and value > peaks.get(key, -1):
                    peaks[key] = value
        if gpu is not None:
            for key, (gpumem, gpuutil) in zip(keys, gpu):
                self.add_usage(key, None, gpumem, gpuutil)

    def result(self, fmt: str, notes: list[str]) -> TraceResult:
        """The TraceResult; jobs left out are counted in `skipped` under their reason.

        Raises:
            TraceError: no GPU job at all.
        """
        orphans = self._fold_usage()
        left = {reason: len(ids) for reason, ids in self.left_out.items()}
        if not self.jobs:
            self._no_jobs(left)
        for reason, ids in self.left_out.items():
            shown = ", ".join(ids[:_MAX_IDS_SHOWN]) + (", ..." if len(ids) > _MAX_IDS_SHOWN else "")
            notes.append(f"{len(ids)} job(s) left out, {reason}: {shown} (counted in `skipped`)")
        if orphans:
            notes.append(f"{orphans} job(s) with step rows but no allocation row: their usage is ignored")
        if self.never_started:
            notes.append(
                f"{self.never_started} job(s) never started (cancelled or pending; {self.remainders} pending "
                "array remainder(s)): kept with duration_s None and meta never_started, not runnable history"
            )
        rejected = sum(self.skipped.values())
        notes += self.samples
        if rejected > len(self.samples):
            notes.append(
                f"... {rejected - len(self.samples)} more skipped rows; counts per reason in `skipped`"
            )
        censored = []
        if self.active:
            censored.append(
                f"{self.active} job(s) still running or suspended: duration_s None, meta elapsed_s is a lower bound"
            )
        skipped = dict(self.skipped) | left
        return TraceResult(self.jobs, skipped, notes, str(self.path), fmt, self._missing(), censored=censored)

    def _no_jobs(self, left: dict[str, int]) -> None:
        if left:
            rejected = f", {dict(self.skipped)} rejected" if self.skipped else ""
            raise TraceError(f"{self.path}: the trace holds no GPU job ({left}{rejected})")
        total = sum(self.skipped.values())
        why = f"all {total} rows were skipped: {dict(self.skipped)}" if total else "no job rows"
        raise TraceError(f"{self.path}: the trace holds no valid job ({why})")

    def _fold_usage(self) -> int:
        """Apply the usage peaks to the jobs; returns how many jobs had usage rows but no allocation row."""
        rss, gpumem, gpuutil = self.rss, self.gpumem, self.gpuutil
        if not (rss or gpumem or gpuutil):
            return 0
        absurd: list[int] = []
        for k, job in enumerate(self.jobs):
            if rss and job.id in rss:
                job.meta["max_rss_gb"] = rss.pop(job.id) / _GIB
            if gpumem and job.id in gpumem:
                # gres/gpumem is taken as the job's total over its GPUs (docs/formats.md)
                total_gb = gpumem.pop(job.id) / _GIB
                if total_gb / max(1, job.gpus) > MAX_MEM_GB:
                    absurd.append(k)
                    self._absurd_memory(k, total_gb)
                    continue
                job.meta["gpumem_max_gb"] = total_gb
                job.mem_gb = total_gb / job.gpus
                self.gave_mem = True
            if gpuutil and job.id in gpuutil:
                util = gpuutil.pop(job.id)
                job.meta["gpuutil_max_pct"] = util
                job.gpu_util_pct = min(100.0, util / job.gpus)
                self.gave_util = True
        for k in reversed(absurd):  # only with skip_bad: else the first one raised
            self.dropped.add(self.jobs[k].id)
            del self.jobs[k]
            del self.places[k]
        return len((rss.keys() | gpumem.keys() | gpuutil.keys()) - self.dropped)

    def _absurd_memory(self, k: int, total_gb: float) -> None:
        """Reject job k, whose steps' gres/gpumem is beyond any GPU (raised unless skip_bad)."""
        job = self.jobs[k]
        value = f"gres/gpumem={total_gb:.0f}G over {job.gpus} GPU(s) of job {job.id} (its step rows)"
        json = self.usage_column != "TRESUsageInMax"  # JSON places are record indexes, not lines
        line, column = (
            (None, f"jobs[{self.places[k]}].{self.usage_column}")
            if json
            else (self.places[k], self.usage_column)
        )
        error = InputError(str(self.path), line, column, value, EXPECT_AT_MOST_MEM, "absurd GPU memory")
        self.reject(error)

    def _missing(self) -> list[str]:
        """Reported fields no job gives; each scan stops at the first job that has a value."""
        never = {"est_duration_s", "est_mem_gb"}  # sacct has no estimates; GPU usage comes from folding
        never |= {
            f for f, given in (("mem_gb", self.gave_mem), ("gpu_util_pct", self.gave_util)) if not given
        }
        return [
            f
            for f in JOB_FIELDS
            if f in REPORTED_FIELDS and (f in never or all(getattr(j, f) in (None, "") for j in self.jobs))
        ]

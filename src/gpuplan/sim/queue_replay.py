"""Replay a measured shared-GPU queue from solo profiles alone, and compare the timeline with the measurement.

The check of the sharing model on whole queues (docs/interference.md, "Whole queues"): a queue file (schema:
../shared/data/README.md, h200/queue-fifo.json) lists jobs of the kinds of a colocation file, started
strictly in order on one GPU as soon as their declared memory fits under a cap. Each job is rebuilt
from its kind's solo profile only (duration = solo wall_s, start-up = wall_s − init_s − run_s, init =
init_s, whole-job busy % = mean_gpu_util, memory = declared) and simulated on a one-GPU sharing cluster
whose memory is the cap, FIFO without backfill: nothing measured in the queue goes into the prediction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.core.interference import ColocationError, InterferenceModel
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec

__all__ = ["QueueJobFit", "QueueReplay", "format_queue_replay", "replay_queue", "solo_profile_job"]

_POSITIVE = "a number > 0"
_NON_NEGATIVE = "a number >= 0"


@dataclass(frozen=True, slots=True)
class QueueJobFit:
    """One job of the queue: measured and predicted start and end (seconds from the first start)."""

    name: str
    kind: str
    measured_start_s: float
    measured_end_s: float
    predicted_start_s: float
    predicted_end_s: float

    @property
    def end_rel_error(self) -> float:
        """(predicted − measured) / measured end."""
        return (self.predicted_end_s - self.measured_end_s) / self.measured_end_s


@dataclass(frozen=True, slots=True)
class QueueReplay:
    """The whole comparison: per-job rows in queue order and the makespans."""

    queue: str
    colocation: str
    rows: tuple[QueueJobFit, ...]
    measured_makespan_s: float
    predicted_makespan_s: float

    @property
    def makespan_rel_error(self) -> float:
        return (self.predicted_makespan_s - self.measured_makespan_s) / self.measured_makespan_s

    @property
    def max_end_rel_error(self) -> float:
        """The largest |relative error| of a job's end."""
        return max(abs(r.end_rel_error) for r in self.rows)


def solo_profile_job(job_id: str, solo: dict[str, Any], mem_gb: float) -> Job:
    """A job built from a colocation `solo` record: its three phases and whole-job busy %, submitted at 0."""
    wall_s, init_s, run_s = float(solo["wall_s"]), float(solo["init_s"]), float(solo["run_s"])
    return Job(
        id=job_id,
        submit_s=0.0,
        gpus=1,
        mem_gb=mem_gb,
        duration_s=wall_s,
        startup_s=max(0.0, wall_s - init_s - run_s),
        init_s=init_s,
        gpu_util_pct=float(solo["mean_gpu_util"]),
    )


def replay_queue(
    colocation: str | Path, queue: str | Path, model: InterferenceModel | None = None
) -> QueueReplay:
    """Simulate the queue of `queue` from the solo profiles of `colocation` and pair it with the measurement.

    Raises:
        ColocationError: either file is unreadable or misses or garbles a key (named in the message).
    """
    from gpuplan.sim.engine import simulate

    solo = _object(colocation, "solo", _read(colocation).get("solo"))
    doc = _read(queue)
    cap_gb = _number(queue, doc, "", "cap_gb", _POSITIVE, lambda x: x > 0)
    measured = _queue_jobs(queue, doc, solo)
    jobs = [solo_profile_job(name, solo[kind], mem) for name, kind, mem, _, _ in measured]
    cluster = ClusterSpec(
        "queue", (NodeSpec("gpu", 1, GpuSpec(str(doc.get("gpu", "GPU")), cap_gb)),), True, len(jobs)
    )
    result = simulate(jobs, cluster, "fifo", "none", interference=model or InterferenceModel.default())
    by_id = {r.job_id: r for r in result.records}
    rows = tuple(
        QueueJobFit(name, kind, start, end, by_id[name].start_s, by_id[name].end_s)
        for name, kind, _, start, end in measured
    )
    return QueueReplay(
        queue=str(queue),
        colocation=str(colocation),
        rows=rows,
        measured_makespan_s=_measured_makespan_s(queue, doc, rows),
        predicted_makespan_s=result.metrics.makespan_s,
    )


def format_queue_replay(replay: QueueReplay) -> str:
    """The comparison as a Markdown table plus a makespan line (docs/interference.md shows it)."""
    lines = [
        "| job | kind | measured start | predicted start | measured end | predicted end | end error |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in replay.rows:
        lines.append(
            f"| {r.name} | {r.kind} | {r.measured_start_s:.1f} | {r.predicted_start_s:.1f} | "
            f"{r.measured_end_s:.1f} | {r.predicted_end_s:.1f} | {100.0 * r.end_rel_error:+.1f} % |"
        )
    lines += [
        "",
        f"makespan: measured {replay.measured_makespan_s:.1f} s, predicted {replay.predicted_makespan_s:.1f} s "
        f"({100.0 * replay.makespan_rel_error:+.1f} %); largest job-end error "
        f"{100.0 * replay.max_end_rel_error:.1f} %",
    ]
    return "\n".join(lines) + "\n"


# --- reading ------------------------------------------------------------------------------------------


def _measured_makespan_s(path: str | Path, doc: dict[str, Any], rows: tuple[QueueJobFit, ...]) -> float:
    """The file's makespan_s when it gives one, else the last end less the first start."""
    if "makespan_s" in doc:
        return _number(path, doc, "", "makespan_s", _POSITIVE, lambda x: x > 0)
    return max(r.measured_end_s for r in rows) - min(r.measured_start_s for r in rows)


def _read(path: str | Path) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ColocationError(
            path, "(file)", f"cannot read: {e.strerror or e}", "a readable JSON file"
        ) from e
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ColocationError(path, "(document)", f"not JSON: {e}", "a JSON object") from e
    return _object(path, "(document)", doc)


def _queue_jobs(
    path: str | Path, doc: dict[str, Any], solo: dict[str, Any]
) -> list[tuple[str, str, float, float, float]]:
    """(name, kind, declared memory, measured start, measured end) in the order of `order`."""
    jobs = doc.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise ColocationError(path, "jobs", "is not a non-empty list", "a list of measured jobs", value=jobs)
    by_name: dict[str, tuple[str, str, float, float, float]] = {}
    for i, rec in enumerate(jobs):
        where = f"jobs[{i}]"
        rec = _object(path, where, rec)
        name, kind = str(rec.get("name", "")), rec.get("kind")
        if not name or name in by_name:
            raise ColocationError(
                path, f"{where}.name", f"{name!r} is empty or repeated", "a unique job name"
            )
        if kind not in solo:
            expected = f"a kind with a solo record in the colocation file: {', '.join(sorted(solo))}"
            raise ColocationError(path, f"{where}.kind", f"value {kind!r} has no solo profile", expected)
        mem = _number(path, rec, where, "declared_mem_gb", _POSITIVE, lambda x: x > 0)
        start = _number(path, rec, where, "start_s", _NON_NEGATIVE, lambda x: x >= 0)
        end = _number(path, rec, where, "end_s", f"a number > start_s ({start!r})", start.__lt__)
        by_name[name] = (name, str(kind), mem, start, end)
    order = doc.get("order", [r[0] for r in by_name.values()])
    if not isinstance(order, list) or sorted(map(str, order)) != sorted(by_name):
        raise ColocationError(path, "order", "does not list every job name once", "the names of jobs[*]")
    return [by_name[str(name)] for name in order]


def _number(path: str | Path, rec: dict[str, Any], where: str, key: str, expected: str, ok: Any) -> float:
    value = rec.get(key)
    name = f"{where}.{key}" if where else key
    if value is None:
        raise ColocationError(path, name, "missing", expected)
    if isinstance(value, bool) or not isinstance(value, int | float) or not ok(value):
        raise ColocationError(path, name, f"value {value!r} is not {expected}", expected, value=value)
    return float(value)


def _object(path: str | Path, where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ColocationError(path, where, f"is a {type(value).__name__}, not an object", "a JSON object")
    return value

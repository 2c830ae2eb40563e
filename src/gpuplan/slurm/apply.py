"""`gpuplan slurm apply` and `reset`: set a plan's order with `scontrol update`, and undo it.

Safety rules:
- The previous Priority and Nice of every job about to change are written to a state file FIRST
  (a job already recorded keeps its first, original values: applying twice never records our own).
- Only jobs still pending now are touched; a job that started or left since the plan is skipped.
- Changes go in plan order, first job first, each above every later one and above every job gpuplan
  does not manage, so a run cut short leaves a prefix of the plan in front: no job ever overtakes
  one planned before it.
- An unexpected refusal midway restores what was changed, then raises.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.slurm.client import SlurmClient
from gpuplan.slurm.parse import QueueJob
from gpuplan.slurm.runner import SlurmCommandError, SlurmError, SlurmPermissionError

__all__ = [
    "MODES",
    "ApplyResult",
    "apply_order",
    "check_mode",
    "default_state_path",
    "load_state",
    "reset_order",
    "save_state",
    "target_values",
]

MODES = ("priority", "nice")
_CHUNK = 500  # scontrol lines per process: one process each keeps 1,000 jobs well under a second
_GONE = ("Invalid job id", "Job is no longer pending", "Job has already finished", "already completing",
         "Job is pending execution", "Requested operation is presently disabled")  # fmt: skip


@dataclass
class ApplyResult:
    """What apply or reset did."""

    mode: str
    changed: dict[str, int] = field(default_factory=dict)  # job id -> value set
    skipped: dict[str, str] = field(default_factory=dict)  # job id -> why
    state_path: str = ""
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "dry_run": self.dry_run, "changed": self.changed, "skipped": self.skipped,
                "state_file": self.state_path}  # fmt: skip


def default_state_path() -> Path:
    """Where the previous values are recorded: $GPUPLAN_SLURM_STATE, else ~/.local/state/gpuplan/."""
    env = os.environ.get("GPUPLAN_SLURM_STATE")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "gpuplan" / "slurm-applied.json"


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise GpuplanError(f"unknown --mode {mode!r}; valid modes: {', '.join(MODES)}")
    return mode


def load_state(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"version": 1, "jobs": {}}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise GpuplanError(
            f"{path}: not a gpuplan Slurm state file ({e}); move it away or pass --state"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), dict):
        raise GpuplanError(
            f"{path}: no 'jobs' object: not a gpuplan Slurm state file; move it away or pass --state"
        )
    return data


def save_state(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def target_values(order: Sequence[str], mode: str, others_max_priority: int) -> list[int]:
    """Values to set, in `order`: priorities strictly decreasing and all above `others_max_priority`;
    nice values 0, 1, 2... (a higher nice runs later; raising nice needs no privilege)."""
    n = len(order)
    if mode == "nice":
        return list(range(n))
    top = max(others_max_priority, 1) + n
    return [top - i for i in range(n)]


def apply_order(
    client: SlurmClient,
    order: Sequence[str],
    *,
    mode: str = "priority",
    partitions: Sequence[str] = (),
    state_path: Path | None = None,
    dry_run: bool = False,
    chunk: int = _CHUNK,
    above: int = 0,
) -> ApplyResult:
    """Give the pending jobs of `order` priorities (or nice values) that make Slurm consider them in it.

    `above`: a priority every planned job must exceed besides the pending jobs left alone (the
    priorities of jobs about to be requeued, which come back pending with them).

    Raises:
        SlurmPermissionError: the caller may not change priorities (nothing stays changed).
        SlurmError: slurmctld stopped answering (what was set is a prefix of the plan; the message
            says how to restore it) or refused a change for another reason (restored, then raised).
    """
    check_mode(mode)
    path = state_path or default_state_path()
    result = ApplyResult(mode, state_path=str(path), dry_run=dry_run)
    now = {q.job_id: q for q in client.queue(partitions, states="PD")}
    todo = []
    for jid in order:
        q = now.get(jid)
        if q is None or not q.is_pending:
            result.skipped[jid] = "no longer pending (started, finished or cancelled since the plan)"
        elif q.why_unmanaged(client.clock()):
            result.skipped[jid] = q.why_unmanaged(client.clock()) or ""
        else:
            todo.append(q)
    data = load_state(path)
    recorded = data["jobs"]
    others = [
        _original(q, recorded).get("priority", q.priority) for q in now.values() if q.job_id not in order
    ]
    values = target_values([q.job_id for q in todo], mode, max([*others, above], default=1))
    key = "Priority" if mode == "priority" else "Nice"
    if dry_run:
        result.changed = {q.job_id: v for q, v in zip(todo, values)}
        return result
    for q in todo:
        recorded.setdefault(q.job_id, {"priority": q.priority, "nice": q.nice})
    data["mode"] = mode
    save_state(path, data)
    changes = [(q.job_id, f"{key}={v}") for q, v in zip(todo, values)]
    done: list[tuple[str, str]] = []
    try:
        for i in range(0, len(changes), chunk):
            part = changes[i : i + chunk]
            errors = client.update_jobs(part).errors
            _sort_errors(client, errors, result, partitions)
            done.extend((jid, kv) for jid, kv in part if jid not in errors)
    except SlurmPermissionError:
        _rollback(client, done, recorded, mode)
        raise
    except SlurmCommandError as e:
        raise SlurmError(
            f"Slurm stopped answering during apply ({e}). At most the first {len(done) + chunk} planned jobs "
            f"got new {key} values, in plan order (no job overtook one planned before it); run "
            f"`gpuplan slurm reset --state {path}` once slurmctld is back to restore the recorded values"
        ) from e
    except SlurmError:
        _rollback(client, done, recorded, mode)
        raise
    result.changed = {jid: int(kv.split("=", 1)[1]) for jid, kv in done}
    return result


def _original(q: QueueJob, recorded: dict[str, Any]) -> dict[str, Any]:
    rec = recorded.get(q.job_id)
    return rec if isinstance(rec, dict) else {"priority": q.priority, "nice": q.nice}


def _sort_errors(
    client: SlurmClient, errors: dict[str, str], result: ApplyResult, partitions: Sequence[str]
) -> None:
    """Errors of jobs that left the queue are skips; any other refusal is raised (after the caller's rollback)."""
    if not errors:
        return
    still = {q.job_id for q in client.queue(partitions, states="PD")}
    for jid, err in errors.items():
        if jid not in still or any(g in err for g in _GONE):
            result.skipped[jid] = f"no longer pending when its turn came ({err.strip().splitlines()[-1]})"
            continue
        from gpuplan.slurm.runner import PERMISSION_HINT, is_permission_error

        args = ["scontrol", "update", f"JobId={jid}"]
        if is_permission_error(err):
            raise SlurmPermissionError(args, 1, err, PERMISSION_HINT)
        raise SlurmCommandError(args, 1, err, "the changes made so far were restored")


def _rollback(
    client: SlurmClient, done: Sequence[tuple[str, str]], recorded: dict[str, Any], mode: str
) -> None:
    key = "priority" if mode == "priority" else "nice"
    back = [(jid, f"{key.capitalize()}={recorded[jid][key]}") for jid, _ in reversed(done) if jid in recorded]
    with contextlib.suppress(SlurmError):  # the caller's error says what failed; reset can still restore
        client.update_jobs(back)


def reset_order(client: SlurmClient, state_path: Path | None = None, dry_run: bool = False) -> ApplyResult:
    """Restore the recorded Priority (or Nice) of every recorded job still pending, then forget them.

    Raises:
        GpuplanError: no state file (nothing was applied with it).
        SlurmError: Slurm refused or is unreachable (the state file is kept for another try).
    """
    path = state_path or default_state_path()
    if not path.exists():
        raise GpuplanError(f"nothing to reset: no state file {path} (apply records one; pass --state FILE)")
    data = load_state(path)
    mode = check_mode(str(data.get("mode", "priority")))
    key = "priority" if mode == "priority" else "nice"
    recorded: dict[str, Any] = data["jobs"]
    result = ApplyResult(mode, state_path=str(path), dry_run=dry_run)
    pending = {q.job_id for q in client.queue(states="PD")}
    changes = [(jid, f"{key.capitalize()}={rec[key]}") for jid, rec in recorded.items() if jid in pending]
    for jid in recorded:
        if jid not in pending:
            result.skipped[jid] = "no longer pending"
    if dry_run:
        result.changed = {jid: int(kv.split("=", 1)[1]) for jid, kv in changes}
        return result
    errors = client.update_jobs(changes).errors
    _sort_errors(client, errors, result, ())
    result.changed = {jid: int(kv.split("=", 1)[1]) for jid, kv in changes if jid not in errors}
    path.unlink()
    return result

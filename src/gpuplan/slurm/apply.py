"""`gpuplan slurm apply` and `reset`: set a plan's order in Slurm, and undo it.

Three modes (docs/slurm.md has them side by side):
- `site-factor` (default): `scontrol update JobId=N SiteFactor=X` so that Slurm's own multifactor
  priority ranks the jobs in the planned order; age, job size and fair-share stay live (slurm/sitefactor.py).
  Reset writes each job's previous SiteFactor back.
- `priority`: `Priority=X`. Slurm then stops computing those jobs' priorities (multifactor is frozen
  for them); reset gives them back to the priority plugin by `scontrol hold` + `release` (a job whose
  priority was already set explicitly before gpuplan gets that number back instead).
- `nice`: `Nice=N` from sprio's parts, so that multifactor's sum minus nice ranks the caller's jobs in
  plan order (0 for the first, 0 or more for each next one: raising nice needs no privilege); without
  sprio (priority/basic) 0, 1, 2... Reset writes the previous Nice back.

Safety rules:
- The previous values of every job about to change are written to a state file FIRST (a job already
  recorded keeps its first, original values: applying twice never records our own).
- Then a journal of the pass (the lines to send and the values they replace) is written beside them;
  it is cleared once every line went through. A pass cut short (kill -9, slurmctld gone) leaves it, and
  the next `apply`, `watch` or `reset` first finishes it, so no half-applied order survives a restart.
- Only jobs still pending now are touched; a job that started or left since the plan is skipped.
- Priority and nice changes go in plan order, first job first, each above every later one.
- An unexpected refusal midway restores what this pass changed, then raises.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.slurm.client import SlurmClient
from gpuplan.slurm.parse import PrioRow, QueueJob
from gpuplan.slurm.runner import SlurmCommandError, SlurmError, SlurmPermissionError
from gpuplan.slurm.sitefactor import headroom_for, nice_values, site_factor_plan

__all__ = [
    "DEFAULT_HORIZON_S",
    "DEFAULT_MODE",
    "MODES",
    "PAUSE_ENV",
    "ApplyResult",
    "apply_order",
    "check_mode",
    "default_state_path",
    "finish_journal",
    "load_state",
    "reset_order",
    "save_state",
    "state_to_reset",
    "target_values",
]

MODES = ("site-factor", "priority", "nice")
DEFAULT_MODE = "site-factor"
DEFAULT_HORIZON_S = 3600.0
"""Site-factor mode: the order is set to survive this much age growth without a re-set."""
PAUSE_ENV = "GPUPLAN_TEST_PAUSE_FILE"
"""TEST-ONLY hook: when set, apply sends one line per scontrol process and, after the first one,
writes its pid to that file and sleeps 60 s, so a test can SIGKILL it between two scontrol calls."""
_KEY = {"site-factor": "SiteFactor", "priority": "Priority", "nice": "Nice"}
_RECORD = {"site-factor": "site_factor", "priority": "priority", "nice": "nice"}
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
    details: dict[str, Any] = field(default_factory=dict)  # site-factor: the plan of values (sitefactor.py)
    recovered: list[str] = field(default_factory=list)  # jobs whose interrupted pass was finished first
    released: list[str] = field(default_factory=list)  # reset of priority mode: held + released

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "dry_run": self.dry_run, "changed": self.changed, "skipped": self.skipped,
                "state_file": self.state_path, "recovered": self.recovered, "released": self.released,
                **self.details}  # fmt: skip


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
        return {"version": 2, "jobs": {}}
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
    """Write atomically and durably (fsync before the rename): it must survive kill -9 and power loss."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(data, indent=1, sort_keys=True))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def target_values(order: Sequence[str], mode: str, others_max_priority: int) -> list[int]:
    """Priority and nice modes, in `order`: priorities strictly decreasing and all above
    `others_max_priority`; nice values 0, 1, 2... (a higher nice runs later; raising nice needs no privilege):
    what nice mode sets without sprio (priority/basic); with it, `sitefactor.nice_values`."""
    n = len(order)
    if mode == "nice":
        return list(range(n))
    top = max(others_max_priority, 1) + n
    return [top - i for i in range(n)]


def finish_journal(client: SlurmClient, path: Path) -> list[str]:
    """Finish a pass that was cut short (its journal is still in the state file): send its lines again
    to the jobs still pending (each sets an absolute value, so sending one twice is harmless), then
    clear the journal. Returns the jobs set again."""
    data = load_state(path)
    journal = data.get("journal")
    if not isinstance(journal, dict):
        return []
    pending = {q.job_id for q in client.queue(states="PD")}
    lines = [(str(j), str(kv)) for j, kv in journal.get("lines", []) if str(j) in pending]
    errors = client.update_jobs(lines).errors
    data.pop("journal", None)
    save_state(path, data)
    return [j for j, _ in lines if j not in errors]


def apply_order(
    client: SlurmClient,
    order: Sequence[str],
    *,
    mode: str = DEFAULT_MODE,
    partitions: Sequence[str] = (),
    state_path: Path | None = None,
    dry_run: bool = False,
    chunk: int = _CHUNK,
    above: int = 0,
    weight: float = 1.0,
    horizon_s: float = DEFAULT_HORIZON_S,
    config: Mapping[str, str] | None = None,
) -> ApplyResult:
    """Make Slurm consider the pending jobs of `order` in that order (see the module docstring).

    `above` (priority mode): a priority every planned job must exceed besides the pending jobs left
    alone (the priorities of jobs about to be requeued, which come back pending with them).
    `weight`, `horizon_s` (site-factor mode): see slurm/sitefactor.py.

    Raises:
        SlurmPermissionError: the caller may not make the change (nothing stays changed).
        SlurmError: slurmctld stopped answering (the journal stays; the next apply or reset finishes
            it) or refused a change for another reason (this pass undone, then raised).
        GpuplanError: the state file holds changes of another mode (reset first).
    """
    check_mode(mode)
    path = state_path or default_state_path()
    result = ApplyResult(mode, state_path=str(path), dry_run=dry_run)
    if not dry_run:
        result.recovered = finish_journal(client, path)
    data = load_state(path)
    recorded: dict[str, Any] = data["jobs"]
    if recorded and data.get("mode", "priority") != mode:
        raise GpuplanError(
            f"{path} holds changes made with --mode {data.get('mode', 'priority')}; run `gpuplan slurm reset` "
            f"first (it undoes them), then apply with --mode {mode}"
        )
    if recorded and not dry_run:
        _forget_gone(client, recorded)
    now = {q.job_id: q for q in client.queue(partitions, states="PD")}
    rows = _prio_rows(client, mode)
    todo = _managed(order, now, rows, mode, client.clock(), result, _own_user(mode))
    if mode == "site-factor":
        changes, undo = _site_factor_changes(
            client, todo, now, rows, recorded, weight, horizon_s, config, result
        )
    else:
        others = [
            _original(q, recorded).get("priority", q.priority) for q in now.values() if q.job_id not in order
        ]
        values = target_values([q.job_id for q in todo], mode, max([*others, above], default=1))
        if mode == "nice" and rows and all(q.job_id in rows for q in todo):
            room = headroom_for(config if config is not None else client.config(), horizon_s)
            values = nice_values([q.job_id for q in todo], rows, room, _ages(client, now))
        changes = [(q.job_id, f"{_KEY[mode]}={v}") for q, v in zip(todo, values)]
        undo = [(q.job_id, f"{_KEY[mode]}={q.priority if mode == 'priority' else q.nice}") for q in todo]
    if dry_run:
        result.changed = {jid: int(kv.split("=", 1)[1]) for jid, kv in changes}
        return result
    changing = {jid for jid, _ in changes}
    new_ids = [q.job_id for q in todo if q.job_id in changing and q.job_id not in recorded]
    for q in todo:
        if q.job_id in changing:
            row = rows.get(q.job_id)
            recorded.setdefault(q.job_id, {"priority": q.priority, "nice": q.nice,
                                           "site_factor": row.site if row else 0,
                                           "frozen": bool(row and row.frozen)})  # fmt: skip
    data["mode"] = mode
    data["version"] = 2
    data["journal"] = {"started_s": client.clock(), "mode": mode, "lines": changes, "undo": undo}
    save_state(path, data)
    try:
        done = _send(client, changes, undo, chunk, path, result, partitions)
    except SlurmPermissionError:  # nothing stays changed: forget this pass's records too
        for jid in new_ids:
            recorded.pop(jid, None)
        data.pop("journal", None)
        if recorded or data.get("requeued"):
            save_state(path, data)
        else:
            path.unlink(missing_ok=True)
        raise
    data.pop("journal", None)
    save_state(path, data)
    result.changed = {jid: int(kv.split("=", 1)[1]) for jid, kv in done}
    return result


def _forget_gone(client: SlurmClient, recorded: dict[str, Any]) -> None:
    """Drop the records of jobs Slurm no longer knows (ended, and gone from squeue after MinJobAge):
    nothing is left to restore, and a watcher running for months must not grow its state file."""
    alive = {q.job_id for q in client.queue()}  # every partition, every live state
    for jid in [j for j in recorded if j not in alive]:
        del recorded[jid]


def _prio_rows(client: SlurmClient, mode: str) -> dict[str, PrioRow]:
    """sprio's rows (site-factor mode needs them; the others use them to record frozen jobs)."""
    try:
        return client.prio()
    except SlurmCommandError:
        if mode == "site-factor":
            raise
        return {}  # priority/basic has no sprio


def _own_user(mode: str) -> str | None:
    """Nice mode run by anyone but root changes only the caller's own jobs (Slurm refuses the others)."""
    if mode != "nice" or os.geteuid() == 0:
        return None
    import getpass

    return getpass.getuser()


def _managed(order: Sequence[str], now: Mapping[str, QueueJob], rows: Mapping[str, PrioRow], mode: str,
             now_s: float, result: ApplyResult, own_user: str | None = None) -> list[QueueJob]:  # fmt: skip
    todo = []
    for jid in order:
        q = now.get(jid)
        why = q.why_unmanaged(now_s) if q is not None and q.is_pending else None
        if q is None or not q.is_pending:
            result.skipped[jid] = "no longer pending (started, finished or cancelled since the plan)"
        elif why:
            result.skipped[jid] = why
        elif own_user is not None and q.user and q.user != own_user:
            result.skipped[jid] = (f"{q.user}'s job: --mode nice changes only your own jobs ({own_user}); "
                                   "an operator orders every job with --mode site-factor")  # fmt: skip
        elif mode == "site-factor" and jid not in rows:
            result.skipped[jid] = "not in sprio (no longer pending)"
        elif mode == "site-factor" and rows[jid].frozen:
            result.skipped[jid] = ("priority set explicitly (Priority=): multifactor and SiteFactor no longer "
                                   "move it; `scontrol hold` + `release` gives it back")  # fmt: skip
        else:
            todo.append(q)
    return todo


def _site_factor_changes(client: SlurmClient, todo: Sequence[QueueJob], now: Mapping[str, QueueJob],
                         rows: Mapping[str, PrioRow], recorded: Mapping[str, Any], weight: float, horizon_s: float,
                         config: Mapping[str, str] | None, result: ApplyResult
                         ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:  # fmt: skip
    ids = [q.job_id for q in todo]
    managed = set(ids)
    others = [j for j in now if j not in managed and j in rows]
    originals = {
        j: int(r["site_factor"]) for j, r in recorded.items() if isinstance(r, dict) and "site_factor" in r
    }
    room = headroom_for(config if config is not None else client.config(), horizon_s)
    sf = site_factor_plan(ids, rows, originals, others, room, weight, _ages(client, now))
    result.details = sf.as_dict()
    changes = [(j, f"SiteFactor={new}") for j, _, new in sf.changes]
    undo = [(j, f"SiteFactor={old}") for j, old, _ in sf.changes]
    return changes, undo


def _ages(client: SlurmClient, now: Mapping[str, QueueJob]) -> dict[str, float]:
    """Seconds each pending job has been eligible, from the clock (sprio's age lags by up to one
    PriorityCalcPeriod)."""
    now_s = client.clock()
    return {j: now_s - t for j, q in now.items() if (t := q.eligible_s or q.submit_s) is not None}


def _send(client: SlurmClient, changes: Sequence[tuple[str, str]], undo: Sequence[tuple[str, str]], chunk: int,
          path: Path, result: ApplyResult, partitions: Sequence[str]) -> list[tuple[str, str]]:  # fmt: skip
    pause = os.environ.get(PAUSE_ENV)
    if pause:
        chunk = 1
    done: list[tuple[str, str]] = []
    try:
        for i in range(0, len(changes), chunk):
            part = list(changes[i : i + chunk])
            errors = client.update_jobs(part).errors
            _sort_errors(client, errors, result, partitions)
            done.extend((jid, kv) for jid, kv in part if jid not in errors)
            if pause and i == 0 and len(changes) > 1:
                _test_pause(Path(pause))
    except SlurmPermissionError:
        _rollback(client, done, undo)
        raise
    except SlurmCommandError as e:
        raise SlurmError(
            f"Slurm stopped answering during apply ({e}). At most the first {len(done) + chunk} of "
            f"{len(changes)} changes went through; the pass is journaled in {path}: the next `gpuplan slurm "
            f"apply`, `watch` or `reset --state {path}` finishes it once slurmctld is back"
        ) from e
    except SlurmError:
        _rollback(client, done, undo)
        raise
    return done


def _test_pause(marker: Path) -> None:
    """TEST-ONLY (see PAUSE_ENV): say where we are, then wait to be killed."""
    marker.write_text(str(os.getpid()))
    time.sleep(60)


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


def _rollback(client: SlurmClient, done: Sequence[tuple[str, str]], undo: Sequence[tuple[str, str]]) -> None:
    """Put back the values this pass replaced on the jobs it changed, last change first."""
    before = dict(undo)
    back = [(jid, before[jid]) for jid, _ in reversed(done) if jid in before]
    with contextlib.suppress(SlurmError):  # the caller's error says what failed; reset can still restore
        client.update_jobs(back)


def state_to_reset(path: Path) -> dict[str, Any]:
    """The state file `reset` would undo.

    Raises:
        GpuplanError: no such file (nothing was applied with it), or not a state file.
    """
    if not path.exists():
        raise GpuplanError(f"nothing to reset: no state file {path} (apply records one; pass --state FILE)")
    return load_state(path)


def reset_order(client: SlurmClient, state_path: Path | None = None, dry_run: bool = False) -> ApplyResult:
    """Undo what apply did on every recorded job still pending, then forget them: site-factor and nice
    modes write the recorded value back; priority mode hands each job back to the priority plugin by
    hold + release (or writes back a priority that was already set explicitly before gpuplan).

    Raises:
        GpuplanError: no state file (nothing was applied with it).
        SlurmError: Slurm refused or is unreachable (the state file is kept for another try).
    """
    path = state_path or default_state_path()
    data = state_to_reset(path)  # an interrupted pass's journal is moot: every job it touched is recorded
    result = ApplyResult("priority", state_path=str(path), dry_run=dry_run)
    mode = check_mode(str(data.get("mode", "priority")))
    result.mode = mode
    key = _RECORD[mode]
    recorded: dict[str, Any] = data["jobs"]
    pending = {q.job_id for q in client.queue(states="PD")}
    for jid in recorded:
        if jid not in pending:
            result.skipped[jid] = "no longer pending"
    todo = {jid: rec for jid, rec in recorded.items() if jid in pending}
    release = [jid for jid, rec in todo.items() if mode == "priority" and not rec.get("frozen", False)]
    changes = [(jid, f"{_KEY[mode]}={rec.get(key, 0)}") for jid, rec in todo.items() if jid not in release]
    if dry_run:
        result.changed = {jid: int(kv.split("=", 1)[1]) for jid, kv in changes}
        result.released = release
        return result
    errors = client.update_jobs(changes).errors
    errors.update(client.hold_release(release).errors)
    _sort_errors(client, errors, result, ())
    result.changed = {jid: int(kv.split("=", 1)[1]) for jid, kv in changes if jid not in errors}
    result.released = [j for j in release if j not in errors]
    path.unlink()
    return result

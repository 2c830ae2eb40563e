"""The agent's SQLite store (WAL): jobs, GPU samples, per-job samples and the audit log (docs/agent.md).

The agent is the only writer. Readers (the CLI, the web dashboard, /metrics) open the file read-only
with `connect(path, readonly=True)` and use the read functions below; WAL lets them read while the
agent writes. Times are Unix seconds (`*_s`), memory GiB (`*_gb`).

Job states: `queued` (waiting for GPUs), `held`, `running`, `suspended` (a preemptive policy stopped
its processes in place: they keep their GPU memory), and the final ones `done` (exit 0), `failed`,
`cancelled`, `timeout`. A job requeued after a CUDA out-of-memory exit, or after a preemption that
stopped it (`checkpoint`, `requeue`), goes back to `queued` with `attempt` + 1 (after an OOM, with a
raised `mem_gb`); `preempted` (stopped by a preemption) and `requeued` (stopped by `gpuplan requeue`)
are the short-lived states of such an attempt between its end and its requeue, and what its history
line says (`PREEMPTED`, `REQUEUED`).

The submitter's environment (`env_json`) is kept only while an attempt may still need it: it is cut
to `KEPT_ENV` when the job starts (or, when an OOM retry or a checkpoint/requeue preemption may start
it again, when it ends for good). No reply ever carries it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

__all__ = [
    "ACTIVE_STATES",
    "FINAL_STATES",
    "KEPT_ENV",
    "SCHEMA_VERSION",
    "GpuSample",
    "JobProfile",
    "JobRow",
    "JobSample",
    "Store",
    "connect",
    "events_since",
    "get_job",
    "job_by_request",
    "job_phases",
    "job_profile",
    "job_samples_since",
    "jobs_by_state",
    "samples_since",
]

SCHEMA_VERSION = 3
FINAL_STATES = ("done", "failed", "cancelled", "timeout")
ACTIVE_STATES = ("queued", "held", "running", "suspended")

KEPT_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM")
"""What stays of a job's environment once no attempt can need the rest (and LC_* variables)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL DEFAULT '',
    user TEXT NOT NULL DEFAULT '',
    uid INTEGER NOT NULL DEFAULT -1,
    command TEXT NOT NULL,
    cwd TEXT NOT NULL DEFAULT '/',
    env_json TEXT NOT NULL DEFAULT '{}',
    gpus INTEGER NOT NULL,
    mem_gb REAL,
    declared_mem_gb REAL,
    time_limit_s REAL,
    est_duration_s REAL,
    priority INTEGER NOT NULL DEFAULT 0,
    after_id INTEGER,
    plan_rank INTEGER,
    state TEXT NOT NULL,
    submit_s REAL NOT NULL,
    start_s REAL,
    end_s REAL,
    gpu_ids TEXT NOT NULL DEFAULT '',
    pid INTEGER,
    pgid INTEGER,
    exit_code INTEGER,
    oom INTEGER NOT NULL DEFAULT 0,
    attempt INTEGER NOT NULL DEFAULT 1,
    reason TEXT NOT NULL DEFAULT '',
    preempt TEXT NOT NULL DEFAULT 'suspend',
    preemptions INTEGER NOT NULL DEFAULT 0,
    service_gpu_s REAL NOT NULL DEFAULT 0,
    run_since_promotion_s REAL NOT NULL DEFAULT 0,
    seg_start_s REAL,
    run_s REAL NOT NULL DEFAULT 0,
    suspended_s REAL NOT NULL DEFAULT 0,
    stopped_at_s REAL,
    request_id TEXT
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE TABLE IF NOT EXISTS gpu_samples (
    t_s REAL NOT NULL, gpu INTEGER NOT NULL, name TEXT NOT NULL DEFAULT '',
    util_pct REAL, mem_used_gb REAL, mem_total_gb REAL, power_w REAL, temp_c REAL,
    lost INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS gpu_samples_t ON gpu_samples(t_s);
CREATE TABLE IF NOT EXISTS job_samples (
    t_s REAL NOT NULL, job_id INTEGER NOT NULL, attempt INTEGER NOT NULL, gpu INTEGER NOT NULL,
    pid INTEGER NOT NULL, mem_gb REAL, util_pct REAL
);
CREATE INDEX IF NOT EXISTS job_samples_job ON job_samples(job_id, attempt);
CREATE INDEX IF NOT EXISTS job_samples_t ON job_samples(t_s);
CREATE TABLE IF NOT EXISTS events (
    t_s REAL NOT NULL, uid INTEGER NOT NULL, action TEXT NOT NULL, job_id INTEGER,
    detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS events_t ON events(t_s);
"""


@dataclass(frozen=True, slots=True)
class JobRow:
    """One row of `jobs` (see the module docstring for states).

    `gpu_ids` are the GPU indices the job runs on (what its CUDA_VISIBLE_DEVICES says); `mem_gb` is
    the memory booked per GPU (the declared one, raised after an OOM); `declared_mem_gb` what the
    user asked; `reason` why a job waits, failed or was refused.

    Preemption (docs/agent.md, "Preemption"): `preempt` is the job's mode (suspend, checkpoint,
    requeue, never); `preemptions` how often it was preempted (all attempts); `service_gpu_s` and
    `run_since_promotion_s` the GPU-service it attained before its current run segment (what
    las/tiresias/gittins rank by); `seg_start_s` when its current run segment began (its launch or
    its last resume); `run_s` the seconds this attempt ran in earlier segments; `suspended_s` the
    seconds this attempt spent suspended; `stopped_at_s` when it was last preempted (the start of
    its current suspension while `suspended`).
    """

    id: int
    name: str
    user: str
    uid: int
    command: str
    cwd: str
    env_json: str
    gpus: int
    mem_gb: float | None
    declared_mem_gb: float | None
    time_limit_s: float | None
    est_duration_s: float | None
    priority: int
    after_id: int | None
    plan_rank: int | None
    state: str
    submit_s: float
    start_s: float | None
    end_s: float | None
    gpu_ids: str
    pid: int | None
    pgid: int | None
    exit_code: int | None
    oom: int
    attempt: int
    reason: str
    preempt: str
    preemptions: int
    service_gpu_s: float
    run_since_promotion_s: float
    seg_start_s: float | None
    run_s: float
    suspended_s: float
    stopped_at_s: float | None
    request_id: str | None

    def run_time_s(self, now: float) -> float:
        """Seconds this attempt has run (suspended time excluded) up to `now` or its end."""
        if self.state == "running" and self.seg_start_s is not None:
            return self.run_s + max((self.end_s or now) - self.seg_start_s, 0.0)
        return self.run_s

    def attained_gpu_s(self, now: float) -> float:
        """GPU-seconds of service the job has attained (what preemptive policies rank by)."""
        if self.state == "running" and self.seg_start_s is not None:
            return self.service_gpu_s + self.gpus * max(now - self.seg_start_s, 0.0)
        return self.service_gpu_s

    @property
    def gpu_list(self) -> tuple[int, ...]:
        return tuple(int(g) for g in self.gpu_ids.split(",") if g)

    @property
    def env(self) -> dict[str, str]:
        return dict(json.loads(self.env_json))

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "env_json"}
        out["gpu_ids"] = list(self.gpu_list)
        out["oom"] = bool(self.oom)
        return out


_JOB_COLUMNS = tuple(f.name for f in fields(JobRow))


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one sample time (None: not available)."""

    t_s: float
    gpu: int
    name: str
    util_pct: float | None
    mem_used_gb: float | None
    mem_total_gb: float | None
    power_w: float | None
    temp_c: float | None
    lost: bool


@dataclass(frozen=True, slots=True)
class JobSample:
    """One process of a job on one GPU at one sample time (None: not available)."""

    t_s: float
    job_id: int
    attempt: int
    gpu: int
    pid: int
    mem_gb: float | None
    util_pct: float | None


@dataclass(frozen=True, slots=True)
class JobProfile:
    """What one attempt of a job used, from its samples.

    Attributes:
        job_id, attempt: the job and its attempt (1, or 2 after an OOM requeue).
        samples: how many samples saw it.
        peak_mem_gb: highest memory per GPU index (empty when never sampled).
        mean_util_pct: mean utilization over its samples (None when the device did not report it).
    """

    job_id: int
    attempt: int
    samples: int
    peak_mem_gb: dict[int, float]
    mean_util_pct: float | None

    @property
    def max_peak_mem_gb(self) -> float | None:
        return max(self.peak_mem_gb.values()) if self.peak_mem_gb else None


def connect(path: Path | str, readonly: bool = False) -> sqlite3.Connection:
    """Open the store. Read-only connections never create or change the file.

    Raises:
        sqlite3.OperationalError: read-only and the file does not exist (the agent never ran there).
    """
    if readonly:
        conn = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True, timeout=5.0, check_same_thread=False)
    else:
        conn = sqlite3.connect(str(path), timeout=5.0, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(_SCHEMA)
        _migrate(conn)
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    conn.row_factory = sqlite3.Row
    return conn


_ADDED_COLUMNS = (  # schema 2: preemption; 3: request_id (a store written by an older agent gains them)
    "preempt TEXT NOT NULL DEFAULT 'suspend'",
    "preemptions INTEGER NOT NULL DEFAULT 0",
    "service_gpu_s REAL NOT NULL DEFAULT 0",
    "run_since_promotion_s REAL NOT NULL DEFAULT 0",
    "seg_start_s REAL",
    "run_s REAL NOT NULL DEFAULT 0",
    "suspended_s REAL NOT NULL DEFAULT 0",
    "stopped_at_s REAL",
    "request_id TEXT",  # schema 3: the client's uuid of its submit (idempotent retries)
)


def _migrate(conn: sqlite3.Connection) -> None:
    have = {r[1] for r in conn.execute("PRAGMA table_info(jobs)").fetchall()}
    for column in _ADDED_COLUMNS:
        if column.split()[0] not in have:
            conn.execute(f"ALTER TABLE jobs ADD COLUMN {column}")
    conn.execute(
        "CREATE UNIQUE INDEX IF NOT EXISTS jobs_request ON jobs(request_id) WHERE request_id IS NOT NULL"
    )
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))


def _job(row: sqlite3.Row) -> JobRow:
    return JobRow(*(row[c] for c in _JOB_COLUMNS))


def jobs_by_state(conn: sqlite3.Connection, states: Sequence[str] | None = None) -> list[JobRow]:
    """Jobs in the given states (all when None), by id."""
    cols = ", ".join(_JOB_COLUMNS)
    if states is None:
        rows = conn.execute(f"SELECT {cols} FROM jobs ORDER BY id").fetchall()
    else:
        marks = ",".join("?" * len(states))
        rows = conn.execute(
            f"SELECT {cols} FROM jobs WHERE state IN ({marks}) ORDER BY id", tuple(states)
        ).fetchall()
    return [_job(r) for r in rows]


def get_job(conn: sqlite3.Connection, job_id: int) -> JobRow | None:
    row = conn.execute(f"SELECT {', '.join(_JOB_COLUMNS)} FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return _job(row) if row is not None else None


def job_by_request(conn: sqlite3.Connection, request_id: str) -> JobRow | None:
    """The job a client submitted with this request id (its uuid), if any."""
    cols = ", ".join(_JOB_COLUMNS)
    row = conn.execute(f"SELECT {cols} FROM jobs WHERE request_id = ?", (request_id,)).fetchone()
    return _job(row) if row is not None else None


def samples_since(conn: sqlite3.Connection, t_s: float) -> list[GpuSample]:
    """GPU samples taken after `t_s`, by time then GPU."""
    rows = conn.execute(
        "SELECT t_s, gpu, name, util_pct, mem_used_gb, mem_total_gb, power_w, temp_c, lost "
        "FROM gpu_samples WHERE t_s > ? ORDER BY t_s, gpu",
        (t_s,),
    ).fetchall()
    return [GpuSample(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], bool(r[8])) for r in rows]


def job_samples_since(conn: sqlite3.Connection, t_s: float) -> list[JobSample]:
    """Per-job process samples taken after `t_s`, by time, job, GPU (the dashboard's process table)."""
    rows = conn.execute(
        "SELECT t_s, job_id, attempt, gpu, pid, mem_gb, util_pct FROM job_samples WHERE t_s > ? "
        "ORDER BY t_s, job_id, gpu",
        (t_s,),
    ).fetchall()
    return [JobSample(*r) for r in rows]


def events_since(conn: sqlite3.Connection, t_s: float) -> list[dict[str, Any]]:
    """Audit-log entries (mutating calls with the caller's uid) after `t_s`."""
    rows = conn.execute(
        "SELECT t_s, uid, action, job_id, detail FROM events WHERE t_s > ? ORDER BY t_s", (t_s,)
    ).fetchall()
    return [dict(r) for r in rows]


def job_phases(
    conn: sqlite3.Connection, job_id: int, attempt: int, start_s: float, duration_s: float
) -> tuple[float | None, float | None]:
    """(startup_s, init_s) of one attempt from its samples (`gpuplan.core.phases`): no GPU memory yet,
    then memory but idle, then busy. Clipped so that both fit in `duration_s`; None where unknown."""
    from gpuplan.core.phases import JobSample, phases_from_samples

    rows = conn.execute(
        "SELECT t_s, mem_gb, util_pct FROM job_samples WHERE job_id = ? AND attempt = ?", (job_id, attempt)
    ).fetchall()
    phases = phases_from_samples(start_s, [JobSample(r[0], r[1], r[2]) for r in rows])
    startup = None if phases.startup_s is None else min(phases.startup_s, duration_s)
    init = None if phases.init_s is None else min(phases.init_s, duration_s - (startup or 0.0))
    return startup, init


def job_profile(conn: sqlite3.Connection, job_id: int, attempt: int | None = None) -> JobProfile:
    """Peak memory per GPU and mean utilization of one attempt (default: the latest) of a job."""
    if attempt is None:
        row = conn.execute("SELECT attempt FROM jobs WHERE id = ?", (job_id,)).fetchone()
        attempt = row[0] if row is not None else 1
    rows = conn.execute(
        "SELECT gpu, MAX(mem_gb), AVG(util_pct), COUNT(DISTINCT t_s) FROM job_samples "
        "WHERE job_id = ? AND attempt = ? GROUP BY gpu",
        (job_id, attempt),
    ).fetchall()
    peak = {r[0]: r[1] for r in rows if r[1] is not None}
    utils = [r[2] for r in rows if r[2] is not None]
    n = max((r[3] for r in rows), default=0)
    return JobProfile(job_id, attempt, n, peak, sum(utils) / len(utils) if utils else None)


class Store:
    """The agent's read-write handle. Every write is its own transaction (autocommit): a crash
    leaves the store as of the last completed call."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.conn = connect(self.path)

    def close(self) -> None:
        self.conn.close()

    def add_job(self, **values: Any) -> int:
        """Insert a job; returns its id (ids are never reused, even after deletions)."""
        unknown = set(values) - set(_JOB_COLUMNS)
        if unknown:
            raise ValueError(f"unknown job column(s) {sorted(unknown)}")
        cols = ", ".join(values)
        marks = ", ".join("?" * len(values))
        cur = self.conn.execute(f"INSERT INTO jobs ({cols}) VALUES ({marks})", tuple(values.values()))
        return int(cur.lastrowid or 0)

    def update_job(self, job_id: int, **values: Any) -> None:
        unknown = set(values) - set(_JOB_COLUMNS)
        if unknown:
            raise ValueError(f"unknown job column(s) {sorted(unknown)}")
        sets = ", ".join(f"{k} = ?" for k in values)
        self.conn.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*values.values(), job_id))

    def job(self, job_id: int) -> JobRow | None:
        return get_job(self.conn, job_id)

    def job_by_request(self, request_id: str) -> JobRow | None:
        return job_by_request(self.conn, request_id)

    def jobs(self, states: Sequence[str] | None = None) -> list[JobRow]:
        return jobs_by_state(self.conn, states)

    def add_samples(
        self,
        t_s: float,
        gpus: Iterable[
            tuple[int, str, float | None, float | None, float | None, float | None, float | None, bool]
        ],
        job_rows: Iterable[tuple[int, int, int, int, float | None, float | None]],
    ) -> None:
        """One sample time: GPU rows (gpu, name, util, used, total, power, temp, lost) and job rows
        (job_id, attempt, gpu, pid, mem_gb, util_pct), in one transaction."""
        with self.conn:
            self.conn.execute("BEGIN")
            self.conn.executemany(
                "INSERT INTO gpu_samples VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(t_s, *g[:7], int(g[7])) for g in gpus],
            )
            self.conn.executemany(
                "INSERT INTO job_samples VALUES (?, ?, ?, ?, ?, ?, ?)", [(t_s, *j) for j in job_rows]
            )

    def forget_env(self, job_id: int) -> None:
        """Drop the submitter's environment but for a few harmless variables (PATH, HOME, LANG, ...)."""
        row = self.conn.execute("SELECT env_json FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            return
        env = json.loads(row[0] or "{}")
        kept = {k: v for k, v in env.items() if k in KEPT_ENV or k.startswith("LC_")}
        if kept != env:
            self.conn.execute("UPDATE jobs SET env_json = ? WHERE id = ?", (json.dumps(kept), job_id))

    def log_event(
        self, t_s: float, uid: int, action: str, job_id: int | None = None, detail: str = ""
    ) -> None:
        self.conn.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?)", (t_s, uid, action, job_id, detail))

    def prune(self, before_s: float) -> int:
        """Delete GPU and job samples older than `before_s` (retention); returns rows deleted."""
        n = self.conn.execute("DELETE FROM gpu_samples WHERE t_s < ?", (before_s,)).rowcount
        n += self.conn.execute("DELETE FROM job_samples WHERE t_s < ?", (before_s,)).rowcount
        return n

    def prune_jobs(self, before_s: float) -> list[int]:
        """Delete jobs that ended before `before_s` (with their samples, events and history keys),
        except those a waiting job still depends on; returns their ids (the caller removes jobs/ID/)."""
        finals = ",".join("?" * len(FINAL_STATES))
        active = ",".join("?" * len(ACTIVE_STATES))
        ids = [r[0] for r in self.conn.execute(
            f"SELECT id FROM jobs WHERE state IN ({finals}) AND end_s < ? AND id NOT IN "
            f"(SELECT after_id FROM jobs WHERE after_id IS NOT NULL AND state IN ({active}))",
            (*FINAL_STATES, before_s, *ACTIVE_STATES),
        ).fetchall()]  # fmt: skip
        with self.conn:
            self.conn.execute("BEGIN")
            for chunk in (ids[i : i + 500] for i in range(0, len(ids), 500)):
                marks = ",".join("?" * len(chunk))
                self.conn.execute(f"DELETE FROM jobs WHERE id IN ({marks})", chunk)
                self.conn.execute(f"DELETE FROM job_samples WHERE job_id IN ({marks})", chunk)
                self.conn.executemany(
                    "DELETE FROM meta WHERE key LIKE ?", [(f"history:{j}.%",) for j in chunk]
                )
            self.conn.execute("DELETE FROM events WHERE t_s < ?", (before_s,))
        return ids

    def get_meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row is not None else None

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

"""The agent's SQLite store: schema, WAL, the read functions the dashboard uses, the token file."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

import pytest

from gpuplan.agent.paths import AgentPaths, agent_home, ensure_token, read_token
from gpuplan.agent.store import (
    Store,
    connect,
    events_since,
    get_job,
    job_phases,
    job_profile,
    jobs_by_state,
    samples_since,
)


def _store(tmp_path: Path) -> Store:
    return Store(tmp_path / "agent.db")


def _add(store: Store, state: str = "queued", **kw: object) -> int:
    return store.add_job(command="sleep 1", gpus=1, mem_gb=10.0, state=state, submit_s=100.0, **kw)


def test_store_is_wal_and_ids_are_not_reused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    a = _add(store)
    store.conn.execute("DELETE FROM jobs WHERE id = ?", (a,))
    assert _add(store) == a + 1


def test_jobs_by_state_and_get_job(tmp_path: Path) -> None:
    store = _store(tmp_path)
    q = _add(store, name="q")
    r = _add(store, state="running", name="r", gpu_ids="2,3")
    _add(store, state="done", name="d")
    conn = connect(store.path, readonly=True)
    assert [j.name for j in jobs_by_state(conn, ["queued", "running"])] == ["q", "r"]
    assert len(jobs_by_state(conn)) == 3
    job = get_job(conn, r)
    assert job is not None and job.gpu_list == (2, 3) and job.to_json()["gpu_ids"] == [2, 3]
    assert get_job(conn, 999) is None and get_job(conn, q) is not None


def test_readonly_connection_cannot_write_or_create(tmp_path: Path) -> None:
    store = _store(tmp_path)
    conn = connect(store.path, readonly=True)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        conn.execute("INSERT INTO meta VALUES ('x', 'y')")
    with pytest.raises(sqlite3.OperationalError):
        connect(tmp_path / "absent.db", readonly=True).execute("SELECT 1 FROM jobs")
    assert not (tmp_path / "absent.db").exists()


def test_samples_and_profile(tmp_path: Path) -> None:
    store = _store(tmp_path)
    jid = _add(store, state="running", gpu_ids="0,1")
    for t, mem, util in [(10.0, 5.0, 40.0), (11.0, 9.0, 60.0), (12.0, 7.0, None)]:
        gpus = [(g, "A100", util, mem, 80.0, None, 40.0, False) for g in (0, 1)]
        store.add_samples(t, gpus, [(jid, 1, 0, 4242, mem, util), (jid, 1, 1, 4242, mem + 1, util)])
    conn = connect(store.path, readonly=True)
    later = samples_since(conn, 10.5)
    assert [(s.t_s, s.gpu) for s in later] == [(11.0, 0), (11.0, 1), (12.0, 0), (12.0, 1)]
    assert later[0].power_w is None and later[0].mem_used_gb == 9.0
    prof = job_profile(conn, jid)
    assert prof.peak_mem_gb == {0: 9.0, 1: 10.0} and prof.max_peak_mem_gb == 10.0
    assert prof.mean_util_pct == pytest.approx(50.0) and prof.samples == 3
    assert job_profile(conn, jid, attempt=2).samples == 0
    assert store.prune(11.5) == 2 + 2 + 2 + 2
    assert [s.t_s for s in samples_since(conn, 0)] == [12.0, 12.0]


def test_phases_from_a_jobs_samples(tmp_path: Path) -> None:
    # started at 100: no memory at 101, memory but idle at 103 and 105, busy from 107: start-up 3 s, init 4 s
    store = _store(tmp_path)
    jid = _add(store, state="running", gpu_ids="0")
    for t, mem, util in [(101.0, None, None), (103.0, 2.0, 0.0), (105.0, 20.0, 1.0), (107.0, 20.0, 90.0)]:
        store.add_samples(t, [(0, "A100", util, mem, 80.0, None, 40.0, False)], [(jid, 1, 0, 7, mem, util)])
    conn = connect(store.path, readonly=True)
    assert job_phases(conn, jid, 1, 100.0, 60.0) == (3.0, 4.0)
    assert job_phases(conn, jid, 1, 100.0, 5.0) == (3.0, 2.0)  # clipped: both fit in the duration
    assert job_phases(conn, jid, 2, 100.0, 60.0) == (None, None)  # no samples of that attempt


def test_events_record_the_uid(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.log_event(5.0, 1234, "cancel", 7, "by test")
    assert events_since(store.conn, 0) == [
        {"t_s": 5.0, "uid": 1234, "action": "cancel", "job_id": 7, "detail": "by test"}
    ]


def test_unknown_column_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="colour"):
        _store(tmp_path).add_job(command="x", gpus=1, state="queued", submit_s=0.0, colour="red")


def test_home_layout_and_token_mode(tmp_path: Path) -> None:
    assert agent_home({"GPUPLAN_HOME": str(tmp_path / "h")}) == (tmp_path / "h").resolve()
    assert agent_home({"XDG_STATE_HOME": str(tmp_path / "x")}) == (tmp_path / "x" / "gpuplan").resolve()
    paths = AgentPaths.from_env(tmp_path / "h")
    paths.create()
    assert stat.S_IMODE(paths.token.stat().st_mode) == 0o600
    assert stat.S_IMODE(paths.home.stat().st_mode) == 0o700
    token = read_token(paths)
    assert len(token) == 64 and ensure_token(paths) == token, "the token is stable across starts"

"""The dashboard's job detail without a browser (`/api/jobs/ID`, `/jobs/ID`): on an agent's store while
no agent answers (the forecast seeded from the store, as the queue view's), an unknown job (404), a bad
id (400), the token rule for commands and another user's job; and on `serve --slurm`, the planner's
own reason and explanation (`gpuplan slurm plan --json`'s). The agent-answering path and the page are
tested in headless Chromium against `gpuplan show ID --json` (test_job_detail_browser.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dashboard_support import FakeAgentHome
from fastapi.testclient import TestClient
from test_slurm_units import Clock, FakeSlurm

from gpuplan.slurm.client import SlurmClient, live_state
from gpuplan.slurm.parse import parse_local_time
from gpuplan.slurm.planner import plan_queue
from gpuplan.slurm.runner import SlurmRunner
from gpuplan.web.app import ServeConfig, create_app
from gpuplan.web.slurmview import SlurmSource

LOCAL = "http://127.0.0.1"
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


@pytest.fixture
def home(tmp_path: Path) -> Iterator[FakeAgentHome]:
    h = FakeAgentHome(tmp_path / "home", token=True)
    try:
        yield h
    finally:
        h.close()


def _jobs(home: FakeAgentHome) -> dict[str, int]:
    """A (4 GPUs, 300 s) and B (4 GPUs, 120 s) run; W1 (8 GPUs) and W2 (4 GPUs, 30 s) wait; bob's job
    is held; one job has finished."""
    now = time.time()
    me = os.getuid()
    add = home.store.add_job
    ids = {
        "A": add(command="sleep 300", gpus=4, state="running", submit_s=now - 20, start_s=now - 10,
                 gpu_ids="0,1,2,3", time_limit_s=300.0, name="A", uid=me, cwd="/work/a"),
        "B": add(command="sleep 120", gpus=4, state="running", submit_s=now - 20, start_s=now - 10,
                 gpu_ids="4,5,6,7", time_limit_s=120.0, name="B", uid=me, cwd="/work/b"),
        "W1": add(command="python train.py --secret", gpus=8, state="queued", submit_s=now - 5,
                  time_limit_s=60.0, name="W1", uid=me, cwd="/work/w1"),
        "W2": add(command="sleep 30", gpus=4, state="queued", submit_s=now - 4, time_limit_s=30.0,
                  name="W2", uid=me, cwd="/work/w2"),
        "bob": add(command="bob's secret command", gpus=1, state="held", submit_s=now - 3,
                   time_limit_s=60.0, name="bobs", user="bob", uid=me + 12345, cwd="/home/bob"),
        "done": add(command="echo hi", gpus=1, state="done", submit_s=now - 100, start_s=now - 90,
                    end_s=now - 80, gpu_ids="2", exit_code=0, name="old", uid=me, cwd="/work/old"),
    }  # fmt: skip
    return ids


@pytest.fixture
def client(home: FakeAgentHome, tmp_path: Path) -> Iterator[TestClient]:
    token = home.paths.token.read_text().strip()
    app = create_app(ServeConfig(home.source("fifo", "easy"), token=token, trace_root=tmp_path))
    with TestClient(app, base_url=LOCAL) as c:
        yield c


def _auth(home: FakeAgentHome) -> dict[str, str]:
    return {"Authorization": f"Bearer {home.paths.token.read_text().strip()}"}


def test_a_waiting_jobs_detail_is_the_forecast_the_queue_view_shows(
    home: FakeAgentHome, client: TestClient
) -> None:
    ids = _jobs(home)
    queue = {r["job_id"]: r for r in client.get("/api/queue").json()["rows"]}
    w1 = client.get(f"/api/jobs/{ids['W1']}").json()
    assert w1["source"] == "store" and w1["agent_running"] is False
    fc = w1["forecast"]
    row = queue[str(ids["W1"])]
    assert (fc["expected_start_s"], fc["expected_end_s"], fc["reason"]) == (
        row["expected_start_s"], row["expected_end_s"], row["reason"],
    )  # fmt: skip
    assert fc["reason"] == "Resources" and fc["gpu_ids"] == list(range(8))
    # 8 GPUs: B frees 4 at its limit, then A's 4 (W2 backfills onto B's GPUs and ends before A)
    assert [w["job_id"] for w in fc["waiting_for"]] == [ids["W2"], ids["A"]], fc["waiting_for"]
    assert fc["ahead"] == [ids["W2"]], "backfill starts W2 ahead of W1"
    why = fc["explanation"]
    assert why.startswith(f"Resources; 8 GPUs; job {ids['W2']} frees 4 at "), why
    assert "backfill starts 1 job(s) ranked after it ahead of it" in why and "none delays its start" in why
    w2 = client.get(f"/api/jobs/{ids['W2']}").json()["forecast"]
    assert w2["reason"] == "Priority" and w2["expected_start_s"] < fc["expected_start_s"]


def test_a_running_and_a_finished_job(home: FakeAgentHome, client: TestClient) -> None:
    ids = _jobs(home)
    a = client.get(f"/api/jobs/{ids['A']}").json()
    assert a["job"]["state"] == "running" and a["job"]["gpu_ids"] == [0, 1, 2, 3]
    assert a["forecast"]["expected_end_s"] == pytest.approx(a["job"]["start_s"] + 300.0)
    done = client.get(f"/api/jobs/{ids['done']}").json()
    assert done["forecast"] is None and done["job"]["state"] == "done" and done["job"]["exit_code"] == 0
    assert done["job"]["end_s"] is not None and done["job"]["gpu_ids"] == [2]


def test_unknown_job_and_bad_ids(home: FakeAgentHome, client: TestClient) -> None:
    _jobs(home)
    missing = client.get("/api/jobs/999")
    assert missing.status_code == 404 and "no job 999" in missing.json()["detail"]
    for bad in ("abc", "0", "-1", "1e3", "9" * 30, "%00"):
        resp = client.get(f"/api/jobs/{bad}")
        assert resp.status_code == 400, (bad, resp.status_code)
        assert "is not a job id: agent job ids are numbers 1.." in resp.json()["detail"]
    page = client.get("/jobs/<script>")
    assert (
        page.status_code == 200 and '<script>"' not in page.text and 'data-job="&lt;script&gt;"' in page.text
    )


def test_commands_need_the_token_and_never_show_another_users(
    home: FakeAgentHome, client: TestClient
) -> None:
    ids = _jobs(home)
    anonymous = client.get(f"/api/jobs/{ids['W1']}").json()
    assert anonymous["command_visible"] is False and "command" not in anonymous["job"]
    assert "cwd" not in anonymous["job"] and "need the server's token" in anonymous["command_note"]
    wrong = client.get(f"/api/jobs/{ids['W1']}", headers={"Authorization": "Bearer nope"}).json()
    assert wrong["command_visible"] is False and "command" not in wrong["job"]
    mine = client.get(f"/api/jobs/{ids['W1']}", headers=_auth(home)).json()
    assert mine["command_visible"] is True and mine["job"]["command"] == "python train.py --secret"
    assert mine["job"]["cwd"] == "/work/w1"


def test_another_users_command_is_an_admins_only(home: FakeAgentHome, tmp_path: Path) -> None:
    ids = _jobs(home)
    token = home.paths.token.read_text().strip()
    source = home.source()
    source.uid = os.getuid()
    if source.uid == 0:  # root is the agent's admin: it reads every command (agent/access.py)
        with TestClient(
            create_app(ServeConfig(source, token=token, trace_root=tmp_path)), base_url=LOCAL
        ) as c:
            admin = c.get(f"/api/jobs/{ids['bob']}", headers=_auth(home)).json()
        assert admin["command_visible"] is True and admin["job"]["command"] == "bob's secret command"
    source.uid = os.getuid() + 4242  # the dashboard run by a third user, neither bob nor an admin
    with TestClient(create_app(ServeConfig(source, token=token, trace_root=tmp_path)), base_url=LOCAL) as c:
        bobs = c.get(f"/api/jobs/{ids['bob']}", headers=_auth(home))
    body = bobs.json()
    assert bobs.status_code == 200 and body["command_visible"] is False and body["job"]["user"] == "bob"
    assert "secret" not in bobs.text and "/home/bob" not in bobs.text, "another user's command stays hidden"
    assert "another user's job" in body["command_note"]


def test_a_read_only_server_never_shows_a_command(home: FakeAgentHome, tmp_path: Path) -> None:
    ids = _jobs(home)
    app = create_app(ServeConfig(home.source(), token=None, trace_root=tmp_path))
    with TestClient(app, base_url=LOCAL) as c:
        body = c.get(f"/api/jobs/{ids['W1']}", headers=_auth(home)).json()
    assert body["command_visible"] is False and "read-only server" in body["command_note"]


def test_the_slurm_views_job_detail_is_the_planners(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(FakeSlurm(tmp_path).bin))  # stand-ins printing captured output
    clock = Clock(parse_local_time((FIX / "squeue_O_gpuplan.now").read_text()))
    source = SlurmSource(SlurmClient(SlurmRunner(retries=0), clock=clock), clock=clock)
    with TestClient(create_app(ServeConfig(source)), base_url=LOCAL) as c:
        plan = plan_queue(live_state(SlurmClient(SlurmRunner(retries=0), clock=clock))).as_dict()
        assert plan["order"], "the captured queue has pending jobs to plan"
        for jid in plan["order"]:
            body = c.get(f"/api/jobs/{jid}").json()
            assert body["source"] == "slurm" and body["job"]["state"] == "pending"
            fc = body["forecast"]
            assert fc["reason"] == plan["reason"][jid] and fc["explanation"] == plan["explanation"][jid]
            assert fc["expected_start_s"] == pytest.approx(plan["now_s"] + plan["expected_start_s"][jid])
        running = next(r for r in c.get("/api/slurm/queue").json()["rows"] if r["state"] == "running")
        assert c.get(f"/api/jobs/{running['job_id']}").json()["forecast"]["reason"] == ""
        assert c.get("/api/jobs/424242").status_code == 404
        page = c.get(f"/jobs/{plan['order'][0]}").text
        assert 'data-view="job"' in page and 'data-slurm="1"' in page and "job-command" not in page

"""The dashboard's HTTP API without a browser: /metrics parsed with prometheus-client's parser while
jobs run on the fake device set, the read-only default and the token, the what-if API, paths."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_support import FakeAgentHome
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from gpuplan.agent.store import Store
from gpuplan.cluster import load_cluster
from gpuplan.synth import synth_article
from gpuplan.traces import write_trace
from gpuplan.web.app import ServeConfig, create_app
from gpuplan.web.metrics import DCGM_SERIES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MIB = 1024.0
LOCAL = "http://127.0.0.1"  # the Host check lets loopback names through (TestClient's default is not one)


def _client(home: FakeAgentHome, trace_root: Path, **config: Any) -> TestClient:
    token = config.pop("token", None)
    app = create_app(ServeConfig(home.source(), token=token, trace_root=trace_root, **config))
    return TestClient(app, base_url=LOCAL)


@pytest.fixture
def client(agent_home: FakeAgentHome, tmp_path: Path) -> Iterator[TestClient]:
    with _client(agent_home, tmp_path) as c:
        yield c


def _scrape(client: TestClient) -> dict[str, list[Any]]:
    resp = client.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    out: dict[str, list[Any]] = {}
    for fam in text_string_to_metric_families(resp.text):
        out.setdefault(fam.name, []).extend(fam.samples)
    return out


def _by(samples: list[Any], **labels: str) -> list[float]:
    return [s.value for s in samples if all(s.labels.get(k) == v for k, v in labels.items())]


# --------------------------------------------------------------------------- metrics


def test_metrics_while_jobs_run_on_the_fake_device_set(agent_home: FakeAgentHome, client: TestClient) -> None:
    first = agent_home.run((0, 1), 30.0, 70.0, name="train", user="ana")
    agent_home.enqueue(3)
    m = _scrape(client)
    for name in DCGM_SERIES:
        assert len(m[name]) == 8, name
        assert {"gpu", "UUID", "modelName", "Hostname"} <= set(m[name][0].labels)
    assert _by(m["DCGM_FI_DEV_FB_USED"], gpu="0") == [30.0 * MIB]
    assert _by(m["DCGM_FI_DEV_FB_FREE"], gpu="0") == [50.0 * MIB]
    assert _by(m["DCGM_FI_DEV_GPU_UTIL"], gpu="1") == [70.0]
    assert _by(m["gpuplan_process_gpu_memory_used_mib"], job_id=str(first), user="ana") == [30.0 * MIB] * 2
    assert _by(m["gpuplan_job_gpu_memory_used_mib"], job_id=str(first)) == [60.0 * MIB]
    assert _by(m["gpuplan_job_gpu_util_percent"], job_id=str(first)) == [70.0]
    assert _by(m["gpuplan_queue_length"]) == [3.0]
    assert _by(m["gpuplan_jobs"], state="running") == [1.0]
    assert _by(m["gpuplan_jobs"], state="waiting") == [3.0]
    waits = {s.name: s.value for s in m["gpuplan_job_wait_seconds"] if "le" not in s.labels}
    # the running job waited 50 s (not on a bucket edge: float rounding may not cross one)
    assert waits["gpuplan_job_wait_seconds_count"] == 1.0
    assert waits["gpuplan_job_wait_seconds_sum"] == pytest.approx(50.0, abs=1e-3)
    assert _by(m["gpuplan_job_wait_seconds"], le="60") == [1.0]
    assert _by(m["gpuplan_job_wait_seconds"], le="10") == [0.0]
    assert _by(m["gpuplan_queue_oldest_wait_seconds"])[0] == pytest.approx(3600.0, abs=60.0)
    assert _by(m["gpuplan_fake_devices"]) == [1.0]

    # the node changes: a second job starts on GPU 1 (shared), the first ends
    second = agent_home.run((1,), 12.5, 20.0, name="eval", user="bo")
    m = _scrape(client)
    assert _by(m["DCGM_FI_DEV_FB_USED"], gpu="1") == [42.5 * MIB]
    assert _by(m["gpuplan_process_gpu_memory_used_mib"], job_id=str(second)) == [12.5 * MIB]
    agent_home.stop(first)
    m = _scrape(client)
    assert _by(m["gpuplan_process_gpu_memory_used_mib"], job_id=str(first)) == []
    assert _by(m["DCGM_FI_DEV_FB_USED"], gpu="0") == [0.0]
    assert _by(m["DCGM_FI_DEV_FB_USED"], gpu="1") == [12.5 * MIB]
    assert _by(m["gpuplan_jobs"], state="running") == [1.0]
    # cumulative: both started jobs counted once, the ended one too
    assert _by(m["gpuplan_job_wait_seconds"], le="+Inf") == [2.0]


def test_metrics_of_a_lost_gpu_and_unsupported_fields(tmp_path: Path) -> None:
    home = FakeAgentHome(tmp_path / "home", spec="fake:8xA100-80GB,lost=3,unsupported=power_w")
    try:
        home.run((3,), 10.0)
        home.run((4,), 10.0)
        with _client(home, tmp_path) as client:
            m = _scrape(client)
    finally:
        home.close()
    assert _by(m["gpuplan_gpu_lost"], gpu="3") == [1.0]
    assert _by(m["gpuplan_gpu_lost"], gpu="4") == [0.0]
    assert _by(m["DCGM_FI_DEV_GPU_UTIL"], gpu="3") == []  # not available: left out, not zero
    assert len(m["DCGM_FI_DEV_GPU_UTIL"]) == 7  # the other GPUs still report
    assert m.get("DCGM_FI_DEV_POWER_USAGE", []) == []  # unsupported on every GPU
    assert _by(m["DCGM_FI_DEV_FB_USED"], gpu="4") == [10.0 * MIB]
    assert _by(m["gpuplan_process_gpu_memory_used_mib"], gpu="3") == []


# --------------------------------------------------------------------------- pages and reads


def test_pages_static_and_health(client: TestClient) -> None:
    for path in ("/node", "/queue", "/whatif", "/docs"):
        resp = client.get(path)
        assert resp.status_code == 200, path
        assert "FAKE device set fake:8xA100-80GB; no agent running" in resp.text
        assert "http://" not in resp.text and "https://" not in resp.text  # nothing from the internet
    health = client.get("/healthz").json()
    assert health["ok"] is True and health["fake"] is True and health["gpus"] == 8
    assert client.get("/favicon.ico").status_code == 204
    plotly_url = client.get("/node").text.split('id="plotly-js" src="')[1].split('"')[0]
    js = client.get(plotly_url)
    assert js.status_code == 200 and len(js.content) > 1_000_000
    assert "immutable" in js.headers["cache-control"]
    assert client.get("/static/nope.js").status_code == 404
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/metrics", "/healthz", "/api/node", "/api/queue", "/api/whatif"} <= set(paths)
    assert "/api/jobs/{job_id}/cancel" in client.get("/docs").text


def test_node_api_history_and_queue(agent_home: FakeAgentHome, client: TestClient) -> None:
    agent_home.run((5,), 8.0, name="x", user="u")
    agent_home.enqueue(2, gpus_cycle=(8,))
    node = client.get("/api/node").json()
    assert len(node["series"]["util_pct"]) == 8
    assert node["latest"]["gpus"][5]["mem_used_gb"] in (0, 8.0)  # sampled before or after the start
    q = client.get("/api/queue?offset=0&limit=2").json()
    assert (q["total"], q["running"], q["waiting"], len(q["rows"])) == (3, 1, 2, 2)
    assert [r["state"] for r in q["rows"]] == ["running", "waiting"]
    # the 8-GPU jobs wait for the running job (1 h planning estimate, marked) then run one after the other
    rows = client.get("/api/queue?offset=0&limit=10").json()["rows"]
    assert rows[0]["estimate_guessed"] is True
    assert rows[1]["expected_start_s"] == pytest.approx(rows[0]["expected_end_s"], abs=1.0)
    assert rows[2]["expected_start_s"] == pytest.approx(rows[1]["expected_end_s"], abs=1.0)
    gantt = client.get("/api/queue/gantt").json()
    assert gantt["jobs"] == 3
    assert sum(len(t["x"]) for t in gantt["figure"]["data"]) == 1 + 8 + 8
    assert client.get("/api/queue?limit=0").status_code == 422


# --------------------------------------------------------------------------- read-only and the token


def test_read_only_without_a_token(client: TestClient) -> None:
    resp = client.post("/api/jobs/1/cancel")
    assert resp.status_code == 403
    assert "read-only" in resp.json()["detail"]


def test_mutating_endpoint_needs_the_agents_token(tmp_path: Path) -> None:
    home = FakeAgentHome(tmp_path / "home", token=True)
    token = home.paths.token.read_text().strip()
    try:
        with _client(home, tmp_path, token=token) as client:
            assert client.post("/api/jobs/1/cancel").status_code == 403
            wrong = {"Authorization": "Bearer " + "0" * 64}
            assert client.post("/api/jobs/1/cancel", headers=wrong).status_code == 403
            right = {"Authorization": f"Bearer {token}"}
            resp = client.post("/api/jobs/1/cancel", headers=right)
    finally:
        home.close()
    # past the token check: no agent runs at this home, and the answer says so
    assert resp.status_code == 503
    assert "no agent running" in resp.json()["detail"]


def test_mutating_endpoints_bound_every_field_before_the_agent(tmp_path: Path) -> None:
    """Out-of-range values (a priority of 2**70, a job id of 20 digits) are refused here, with the
    agent's own ranges (agent/schema.py), before anything is sent to it: 422 or 400, never 500."""
    home = FakeAgentHome(tmp_path / "home", token=True)
    token = home.paths.token.read_text().strip()
    auth = {"Authorization": f"Bearer {token}"}
    job = {"command": "true", "cwd": str(tmp_path)}
    try:
        with _client(home, tmp_path, token=token) as client:
            bad = [{"priority": 2**70}, {"priority": -(2**63)}, {"gpus": 10**6}, {"mem_gb": 1e300},
                   {"time_limit_s": 1e12}, {"name": "n" * 10_000}, {"command": ""}, {"cwd": ""}]  # fmt: skip
            answers = [client.post("/api/jobs", json={**job, **b}, headers=auth) for b in bad]
            ids = ["99999999999999999999", "-1", "0", "1e3", "x" * 5000, " 7", "+7", "\u0667"]
            cancels = [client.post(f"/api/jobs/{i}/cancel", headers=auth) for i in ids]
            reorder = client.post("/api/queue/order", json={"order": []}, headers=auth)
            fine = client.post("/api/jobs", json={**job, "priority": 2**53 - 1}, headers=auth)
    finally:
        home.close()
    assert [r.status_code for r in answers] == [422] * len(bad), [r.text[:200] for r in answers]
    assert [r.status_code for r in cancels] == [400] * len(ids)  # as /api/jobs/ID answers them
    assert all("agent job ids are numbers 1..9007199254740991" in r.json()["detail"] for r in cancels)
    assert reorder.status_code == 422
    assert fine.status_code == 503  # in range: on to the agent, which does not run here


# --------------------------------------------------------------------------- what-if


@pytest.fixture
def article(tmp_path: Path) -> Path:
    path = tmp_path / "article.csv"
    write_trace(synth_article(0), path)
    return path


def test_whatif_by_path(client: TestClient, article: Path) -> None:
    resp = client.post(
        "/api/whatif", params={"path": article.name, "policies": "fifo,sjf,article", "backfills": "easy"}
    )
    assert resp.status_code == 200, resp.text
    res = resp.json()
    labels = [r["label"] for r in res["data"]["runs"]]
    assert sorted(labels) == ["article+easy", "fifo+easy", "fifo+none", "sjf+easy"]
    assert res["trace"] == {"source": "article.csv", "format": "csv", "jobs": 80, "skipped": 0}
    saved = {r["label"]: r for r in res["savings"]["rows"]}
    assert res["savings"]["baseline"] == "fifo+none"
    assert saved["fifo+none"]["gpu_hours_saved"] == 0.0
    best = res["data"]["runs"][res["best"]]
    fifo = next(r for r in res["data"]["runs"] if r["label"] == "fifo+none")
    expected_h = (fifo["metrics"]["makespan_s"] - best["metrics"]["makespan_s"]) * 8 / 3600
    assert saved[best["label"]]["gpu_hours_saved"] == pytest.approx(expected_h, abs=1e-3)
    assert saved[best["label"]]["usd_saved"] == pytest.approx(expected_h * 5.12, abs=0.02)
    assert "<table" in res["summary_html"]
    gantt = client.get(f"/api/whatif/{res['id']}/gantt/{res['best']}").json()
    assert sum(len(t["x"]) for t in gantt["figure"]["data"]) == sum(j.gpus for j in synth_article(0))
    assert client.get(f"/api/whatif/{res['id']}/gantt/99").status_code == 404


def test_whatif_takes_specs_with_several_parameters(client: TestClient, article: Path) -> None:
    """A policy spec's own commas (`las:quantum=60,promote=...`) do not split it into two policies."""
    resp = client.post(
        "/api/whatif",
        params={
            "path": article.name,
            "policies": "fairshare:half_life=1d,then=sjf,fifo",
            "backfills": "easy",
        },
    )
    assert resp.status_code == 200, resp.text
    labels = sorted(r["label"] for r in resp.json()["data"]["runs"])
    assert labels == ["fairshare:half_life=1d,then=sjf+easy", "fifo+easy", "fifo+none"]


def test_whatif_cluster_auto_follows_the_cli_rule(client: TestClient, article: Path, tmp_path: Path) -> None:
    """By default the trace's own cluster when it describes one (as every CLI command decides), else
    the default preset, said in the notes; a preset given wins."""
    res = client.post("/api/whatif", params={"path": article.name}).json()
    assert res["cluster"]["gpus"] == 8 and any("does not describe its cluster" in n for n in res["notes"])
    own = tmp_path / "own.csv"
    write_trace(synth_article(0)[:20], own, load_cluster("4x8xA100-80GB"))  # a cluster file beside it
    res = client.post("/api/whatif", params={"path": own.name}).json()
    assert res["cluster"]["gpus"] == 32 and any("the trace's own cluster" in n for n in res["notes"])
    res = client.post("/api/whatif", params={"path": own.name, "cluster": "8xA100-80GB"}).json()
    assert res["cluster"]["gpus"] == 8


def test_whatif_upload_bad_rows_named(tmp_path: Path) -> None:
    body = (FIXTURES / "cli" / "bad_row.csv").read_bytes()
    home = FakeAgentHome(tmp_path / "home", token=True)
    token = {"Authorization": f"Bearer {home.paths.token.read_text().strip()}"}
    try:
        with _client(home, tmp_path, token=token["Authorization"].split()[1]) as client:
            resp = client.post("/api/whatif", params={"name": "bad_row.csv"}, content=body, headers=token)
            skipped = client.post(
                "/api/whatif", params={"name": "bad_row.csv", "skip_bad": "true"}, content=body, headers=token
            )
    finally:
        home.close()
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err.startswith("bad_row.csv:3:") and "gpus" in err and "'two'" in err, err
    assert "/tmp" not in err and "gpuplan-upload-" not in err  # the user's file name, not the server's copy
    assert skipped.status_code == 200
    assert any("skipped 1 bad row" in n for n in skipped.json()["notes"])
    assert all("/tmp" not in n for n in skipped.json()["notes"])


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"path": "../../etc/passwd"}, "'..' is not allowed: paths must lie under the server's trace folder"),
        ({}, "no trace given"),
        ({"path": "article.csv", "cluster": "nope"}, "valid names"),
        ({"path": "article.csv", "policies": "bogus"}, "unknown policy 'bogus'"),
        ({"path": "article.csv", "prices": "A100-80GB=cheap"}, "'cheap' is not a number"),
        ({"path": "missing.csv"}, "missing.csv: no such trace file"),
    ],
)
def test_whatif_bad_requests(client: TestClient, article: Path, params: dict[str, str], message: str) -> None:
    resp = client.post("/api/whatif", params=params)
    assert resp.status_code == 400
    assert message in resp.json()["error"], resp.json()
    assert str(article.parent) not in resp.json()["error"]  # files relative to --traces, never absolute


def test_sse_stream_sends_snapshots(client: TestClient) -> None:
    with client.stream("GET", "/api/node/stream") as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        line = next(line for line in resp.iter_lines() if line.startswith("data: "))
    snap = json.loads(line.removeprefix("data: "))
    assert len(snap["gpus"]) == 8 and snap["gpus"][0]["uuid"] == "FAKE-0"


def test_grafana_dashboard_uses_only_exposed_series(agent_home: FakeAgentHome, client: TestClient) -> None:
    agent_home.run((0,), 10.0, name="g")
    agent_home.enqueue(1)
    exposed = set(_scrape(client))
    dash = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {n for e in exprs for n in re.findall(r"\b(?:DCGM_FI_[A-Z_]+|gpuplan_[a-z_]+)\b", e)}
    families = {
        re.sub(r"_(bucket|count|sum)$", "", n) if n.startswith("gpuplan_job_wait") else n for n in used
    }
    assert families <= exposed, families - exposed
    assert set(DCGM_SERIES) <= used  # every DCGM gauge has a panel
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])


def test_readings_come_from_the_agents_samples_while_it_records(
    agent_home: FakeAgentHome, tmp_path: Path
) -> None:
    """While the store holds fresh samples (an agent samples the node), they are what the views and
    /metrics show, and the node history starts with what the store recorded."""

    jid = agent_home.store.add_job(
        command="train", gpus=1, state="running", submit_s=0.0, start_s=1.0, gpu_ids="4", user="cy", name="t"
    )
    now = time.time()
    for k, t in enumerate((now - 300.0, now - 200.0, now - 1.0)):  # the first is outside a 250 s window
        gpu_rows = [(g, "A100-80GB", 10.0 * k + g, 1.0 + g, 80.0, 100.0, 40.0, False) for g in range(8)]
        agent_home.store.add_samples(t, gpu_rows, [(jid, 1, 4, 777, 5.5 + k, 60.0 + k)])
    with _client(agent_home, tmp_path, window_s=250.0) as client:
        node = client.get("/api/node").json()
        m = _scrape(client)
    assert node["series"]["time_s"][:2] == [now - 200.0, now - 1.0]
    assert node["series"]["util_pct"][3][:2] == [13.0, 23.0]
    assert node["latest"]["origin"] == "store"
    assert node["latest"]["processes"] == [
        {"gpu": 4, "pid": 777, "job_id": str(jid), "user": "cy", "name": "t", "mem_gb": 7.5, "util_pct": 62.0}
    ]
    assert _by(m["DCGM_FI_DEV_GPU_UTIL"], gpu="5") == [25.0]
    assert _by(m["gpuplan_process_gpu_memory_used_mib"], pid="777") == [7.5 * MIB]
    assert _by(m["gpuplan_job_gpu_util_percent"], job_id=str(jid), user="cy") == [62.0]


def test_dashboard_on_a_running_agent(tmp_path: Path) -> None:
    """A real agent daemon on the fake device set runs `sleep` jobs: the dashboard shows its queue in
    its order, /metrics moves with its jobs, and a cancel with its token goes through its socket."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the agent tests' daemon helper
    from agent_helpers import Daemon, wait_until
    from gpuplan.agent.gpus import open_backend
    from gpuplan.agent.paths import read_token
    from gpuplan.web.live import NodeSource

    daemon = Daemon(tmp_path / "home").start()
    try:
        paths = daemon.paths
        source = NodeSource(
            open_backend("fake:8xA100-80GB", set_id=str(paths.home)), paths, "fake:8xA100-80GB"
        )
        app = create_app(ServeConfig(source, token=read_token(paths), trace_root=tmp_path, sample_s=0.1))
        token = {"Authorization": f"Bearer {read_token(paths)}"}
        with TestClient(app, base_url=LOCAL) as client:
            job = {"command": "sleep 120", "gpus": 2, "mem_gb": 30.0, "name": "big", "cwd": str(tmp_path)}
            assert client.post("/api/jobs", json=job).status_code == 403
            assert client.post("/api/jobs", json={**job, "gpus": 0}, headers=token).status_code == 422
            first = client.post("/api/jobs", json=job, headers=token).json()["id"]
            daemon.wait_state(first, "running")
            second = daemon.submit("sleep 120", gpus=8, mem_gb=10.0, name="wide")
            third = daemon.submit("sleep 120", gpus=8, mem_gb=5.0, name="wide2")
            assert "agent pid" in client.get("/healthz").json()["source"]

            def job_mem(m: dict[str, list[Any]], jid: int) -> list[float]:
                return _by(m.get("gpuplan_job_gpu_memory_used_mib", []), job_id=str(jid))

            def scrape_until(ok: Any, what: str) -> dict[str, list[Any]]:
                def attempt() -> dict[str, list[Any]] | None:
                    m = _scrape(client)
                    return m if ok(m) else None

                got: dict[str, list[Any]] = wait_until(attempt, what)
                return got

            m = scrape_until(lambda m: job_mem(m, first) == [60.0 * MIB], "the first job's memory")
            assert _by(m["gpuplan_queue_length"]) == [2.0]
            order = [(r["job_id"], r["state"]) for r in client.get("/api/queue").json()["rows"]]
            assert order == [(str(first), "running"), (str(second), "waiting"), (str(third), "waiting")]

            reply = client.post("/api/queue/order", json={"order": [str(third), str(second)]}, headers=token)
            assert reply.status_code == 200 and reply.json()["matched"] == [third, second]
            want = [str(first), str(third), str(second)]
            # the dashboard rereads the queue once per sample period: poll with a deadline
            rows = wait_until(
                lambda: (
                    (rows := client.get("/api/queue").json()["rows"])
                    and [r["job_id"] for r in rows] == want
                    and rows
                ),
                "the new order on the queue view",
            )
            # the agent's forecast: behind a running job with neither estimate nor --time, no start
            assert rows[1]["expected_start_s"] is None and rows[1]["reason"] == "Resources"

            assert client.post(f"/api/jobs/{first}/cancel").status_code == 403
            assert client.post(f"/api/jobs/{first}/cancel", headers=token).status_code == 200
            daemon.wait_state(first, "cancelled")
            daemon.wait_state(third, "running")  # reordered: the third goes before the second
            m = scrape_until(lambda m: job_mem(m, third) == [40.0 * MIB], "the third job's memory")
            assert job_mem(m, first) == []
            assert client.post("/api/jobs/99/cancel", headers=token).status_code == 400  # the agent's answer
    finally:
        daemon.stop()


def test_an_unreadable_store_is_named_and_the_gpus_still_report(tmp_path: Path) -> None:
    home = FakeAgentHome(tmp_path / "home")
    try:
        home.run((1,), 12.0)
        home.store.close()
        home.paths.db.write_bytes(b"this is not a database\n" * 100)
        with _client(home, tmp_path) as client:
            queue = client.get("/api/queue").json()
            m = _scrape(client)
            node = client.get("/api/node").json()
            assert client.get("/queue").status_code == 200
    finally:
        home.store = Store(tmp_path / "other.db")  # close() closes a store; the broken one is closed
        home.close()
    assert queue["total"] == 0
    assert str(home.paths.db) in queue["error"] and "cannot read the agent's store" in queue["error"]
    assert _by(m["gpuplan_queue_readable"]) == [0.0]
    assert "gpuplan_queue_length" not in m
    assert _by(m["DCGM_FI_DEV_FB_USED"], gpu="1") == [12.0 * MIB]  # the GPUs still report
    assert node["latest"]["processes"][0]["mem_gb"] == 12.0 and node["latest"]["processes"][0]["job_id"] == ""

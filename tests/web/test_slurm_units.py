"""`gpuplan serve --slurm` without a live Slurm: the real SlurmRunner runs stand-in `squeue`, `sinfo`
and `scontrol` scripts on PATH that print captured Slurm 22.05 output (tests/fixtures/slurm), or fail
the way the real ones do when slurmctld is down; clocks are injected, nothing sleeps."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from promlint import lint_problems
from typer.testing import CliRunner

from gpuplan.cli import app as cli_app
from gpuplan.slurm.client import SlurmClient, live_state
from gpuplan.slurm.fairness import fairness_lines
from gpuplan.slurm.parse import parse_local_time
from gpuplan.slurm.planner import SLURM_ORDER, plan_queue, slurm_order
from gpuplan.slurm.runner import SlurmRunner
from gpuplan.web.app import ServeConfig, create_app
from gpuplan.web.slurmview import NO_GPU_READINGS, SlurmSource, node_rows, slurm_rows

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
NOW = parse_local_time((FIX / "squeue_O_gpuplan.now").read_text())
CAPTURED = {
    "squeue": FIX / "squeue_O_gpuplan.txt",
    "sinfo": FIX / "sinfo_N_O_gpuplan.txt",
    "scontrol": FIX / "scontrol_show_config_builtin.txt",
}
# what Slurm 22.05's clients print (exit 1) when slurmctld does not answer
DOWN = {
    "squeue": "slurm_load_jobs error: Unable to contact slurm controller (connect failure)",
    "sinfo": "slurm_load_partitions: Unable to contact slurm controller (connect failure)",
    "scontrol": "slurm_load_ctl_conf error: Unable to contact slurm controller (connect failure)",
}


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeSlurm:
    """A PATH directory with `squeue`, `sinfo` and `scontrol` stand-ins, switchable up and down."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.bin.mkdir()
        self.up()

    def _write(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)

    def up(self, squeue: Path = CAPTURED["squeue"]) -> None:
        for name, path in {**CAPTURED, "squeue": squeue}.items():
            self._write(name, f"exec /bin/cat {path}")

    def down(self) -> None:
        for name, text in DOWN.items():
            self._write(name, f"echo '{text}' >&2\nexit 1")

    def missing(self) -> None:
        for name in CAPTURED:
            (self.bin / name).unlink()


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    fake = FakeSlurm(tmp_path)
    monkeypatch.setenv("PATH", str(fake.bin))
    return fake


@pytest.fixture
def clock() -> Clock:
    assert NOW is not None
    return Clock(NOW)


def _client(clock: Clock) -> SlurmClient:
    return SlurmClient(SlurmRunner(retries=0), clock=clock)


@pytest.fixture
def served(fake_slurm: FakeSlurm, clock: Clock) -> Iterator[tuple[TestClient, SlurmSource]]:
    source = SlurmSource(_client(clock), cache_s=5.0, clock=clock)
    with TestClient(create_app(ServeConfig(source, sample_s=0.05)), base_url="http://localhost") as client:
        yield client, source


def _metrics(client: TestClient) -> dict[str, list]:  # type: ignore[type-arg]
    out: dict[str, list] = {}  # type: ignore[type-arg]
    for fam in text_string_to_metric_families(client.get("/metrics").text):
        out.setdefault(fam.name, []).extend(fam.samples)
    return out


def test_rows_from_captured_squeue_and_sinfo(fake_slurm: FakeSlurm, clock: Clock) -> None:
    state = live_state(_client(clock))
    plan = plan_queue(state)
    rows = slurm_rows(state, plan)
    running = [r for r in rows if r.state == "running"]
    # running first, by expected end (start + limit): the 5-min array tasks, the 10-min, the 30-min job
    assert [r.job_id for r in running] == ["17", "18", "8", "9"]
    start = parse_local_time("2026-12-01T21:49:14")
    assert start is not None
    assert [r.expected_end_s for r in running] == [start + 300, start + 300, start + 600, start + 1800]
    assert running[2].node_list == "node[1-2]" and running[2].gpus == 16
    pending = rows[len(running) :]
    planned = [r for r in pending if r.planned_rank is not None]
    assert [r.job_id for r in planned] == plan.order and [r.planned_rank for r in planned] == [1, 2, 3]
    for r in planned:  # the plan's own numbers, made absolute from the plan's now
        assert r.expected_start_s == NOW + plan.planned.starts[r.job_id]
        assert r.slurm_expected_start_s == NOW + plan.slurm.starts[r.job_id]
    # Slurm's rank counts every pending job (priority, then job id; 10 is first, held 12 last)
    assert (
        sorted(plan.slurm_order, key=lambda j: next(r.slurm_rank for r in planned if r.job_id == j))
        == plan.slurm_order
    )
    by_id = {r.job_id: r for r in pending}
    assert by_id["10"].slurm_rank == 1 and by_id["12"].slurm_rank == 7
    assert by_id["14"].estimate == "none" and by_id["14"].expected_end_s is None  # no limit: endless
    left_alone = {r.job_id: r.unmanaged for r in pending if r.unmanaged}
    assert set(left_alone) == {"10", "12", "15", "16"} and "held" in left_alone["12"]
    assert left_alone["16"] == "no GPUs requested" and "array remainder" in left_alone["10"]
    nodes = {n["name"]: n for n in node_rows(state)}
    assert [nodes[n]["gpus_used"] for n in sorted(nodes)] == [8, 8, 6, 0]
    assert nodes["node3"]["jobs"] == ["9", "17", "18"] and nodes["node2"]["jobs"] == ["8"]
    assert nodes["node4"]["gpus_free"] == 8 and nodes["node3"]["gpus_free"] == 2


def test_page_numbers_equal_gpuplan_slurm_plan_json(
    served: tuple[TestClient, SlurmSource], clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = served
    monkeypatch.setattr("gpuplan.commands.slurm._client", lambda: _client(clock))
    result = CliRunner().invoke(cli_app, ["slurm", "plan", "--json"])
    assert result.exit_code == 0, result.stderr
    cli = json.loads(result.stdout)
    assert client.get("/api/slurm/plan").json() == cli  # the same plan, key for key
    page = client.get("/api/slurm/queue").json()
    planned = [r for r in page["rows"] if r["planned_rank"] is not None]
    assert [r["job_id"] for r in planned] == cli["order"]
    assert {r["job_id"]: r["expected_start_s"] - cli["now_s"] for r in planned} == cli["expected_start_s"]
    ranks = {r["job_id"]: r["slurm_rank"] for r in page["rows"] if r["slurm_rank"] is not None}
    assert sorted(cli["slurm_order"], key=ranks.__getitem__) == cli["slurm_order"]
    s = page["summary"]
    assert s["planned"] == cli["expected"] and s["slurm_order"] == cli["slurm_order_expected"]
    assert s["gain"] == cli["gain"] and s["warnings"] == cli["warnings"] and s["policy"] == cli["policy"]
    assert s["estimates"] == "time limits" and s["no_limit_jobs"] == ["14"] and s["partitions"] == ["gpu"]
    assert page["running"] == 4 and page["pending"] == 7 and page["planned"] == 3 and page["unmanaged"] == 4
    # the text form prints the same who-gains-who-loses table, per user and per account
    text = CliRunner().invoke(cli_app, ["slurm", "plan"])
    assert text.exit_code == 0, text.stderr
    assert "\n".join(fairness_lines(cli["fairness"])) in text.stdout and "by account" in text.stdout


def test_one_read_per_cache_period_and_replan_only_on_change(
    served: tuple[TestClient, SlurmSource], fake_slurm: FakeSlurm, clock: Clock, tmp_path: Path
) -> None:
    client, source = served
    runner = source.client.runner
    for path in ("/api/slurm/queue", "/api/slurm/nodes", "/healthz", "/metrics", "/api/slurm/plan"):
        assert client.get(path).status_code == 200
    assert [c[0] for c in runner.calls] == ["sinfo", "squeue", "scontrol"]  # one read for all of them
    first = source.view()
    clock.now += 5.0
    client.get("/api/slurm/queue")
    assert len(runner.calls) == 6 and source.view().plan is first.plan  # same queue: not planned again
    assert source.view().version == first.version
    # a job submitted: the next read (after the cache period) plans again and bumps the version
    more = tmp_path / "squeue_more.txt"
    text = CAPTURED["squeue"].read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("13|"))
    more.write_text(text + line.replace("13|13|", "99|99|").replace("|odd|name|", "|late|") + "\n")
    fake_slurm.up(squeue=more)
    assert "99" not in [r["job_id"] for r in client.get("/api/slurm/queue").json()["rows"]]  # still cached
    clock.now += 5.0
    page = client.get("/api/slurm/queue").json()
    assert page["version"] == first.version + 1 and "99" in [r["job_id"] for r in page["rows"]]
    assert source.view().plan is not first.plan and "99" in source.view().plan.order  # type: ignore[union-attr]


def test_slurm_down_is_one_line_then_recovers(
    served: tuple[TestClient, SlurmSource], fake_slurm: FakeSlurm, clock: Clock
) -> None:
    client, source = served
    assert client.get("/api/slurm/queue").json()["error"] is None
    fake_slurm.down()
    clock.now += 5.0
    page = client.get("/api/slurm/queue").json()
    err = page["error"]
    assert "`sinfo -N -O" in err and "Unable to contact slurm controller" in err and "scontrol ping" in err
    assert "\n" not in err and "Traceback" not in err and page["rows"] == [] and page["summary"] is None
    health = client.get("/healthz")
    assert health.status_code == 200 and health.json()["ok"] is False
    assert health.json()["slurm"]["error"] == err
    for path in ("/queue", "/node", "/api/slurm/nodes", "/metrics", "/whatif"):
        assert client.get(path).status_code == 200, path
    assert client.get("/api/slurm/plan").status_code == 503
    m = _metrics(client)
    assert [s.value for s in m["gpuplan_queue_readable"]] == [0.0] and "gpuplan_jobs" not in m
    calls = len(source.client.runner.calls)
    client.get("/api/slurm/queue")
    assert len(source.client.runner.calls) == calls  # a failed read is cached too: Slurm is not hammered
    fake_slurm.up()
    clock.now += 5.0
    page = client.get("/api/slurm/queue").json()
    assert page["error"] is None and page["running"] == 4 and client.get("/healthz").json()["ok"] is True


def test_slurm_commands_missing(
    served: tuple[TestClient, SlurmSource], fake_slurm: FakeSlurm, clock: Clock
) -> None:
    client, _ = served
    fake_slurm.missing()
    clock.now += 5.0
    err = client.get("/api/slurm/queue").json()["error"]
    assert err.startswith("`sinfo` is not on PATH: install Slurm's client tools"), err


def test_every_pending_job_is_planned_and_the_choice_basis_is_shown(
    fake_slurm: FakeSlurm, clock: Clock
) -> None:
    source = SlurmSource(_client(clock), clock=clock, plan_max_pending=2)
    client = TestClient(create_app(ServeConfig(source)), base_url="http://127.0.0.1")
    view = source.view()
    assert view.plan is not None and view.summary is not None
    state = view.state
    assert state is not None
    pending = [r for r in view.rows if r.state == "pending"]
    managed = [r for r in pending if r.unmanaged is None]
    assert len(managed) > 2, "more manageable pending jobs than the policy is chosen on"
    # every manageable pending job gets a planned rank and the forecast's expected start and end
    assert all(r.planned_rank is not None and r.unplanned is None for r in managed), managed
    assert all(r.expected_start_s is not None for r in managed), managed
    assert all((r.expected_end_s is None) == (r.estimate == "none") for r in managed), managed
    assert sorted(r.planned_rank for r in managed) == list(range(1, len(managed) + 1))  # type: ignore[type-var]
    # the choice: "best" on the first 2 pending jobs in Slurm's order, then that policy on them all
    first = set(slurm_order([q for q in state.jobs if q.is_pending])[:2])
    sample = replace(state, jobs=[q for q in state.jobs if not q.is_pending or q.job_id in first])
    chosen = plan_queue(sample, policy="best").policy
    choice = view.summary["choice"]
    assert choice["policy"] == chosen == view.plan.policy
    assert (choice["chosen_on_pending"], choice["pending"]) == (2, 7)
    assert view.plan.order == plan_queue(state, policy=chosen).order, "all jobs, planned with the choice"
    page = client.get("/api/slurm/queue").json()
    assert page["planned"] == len(managed)
    note = page["summary"]["note"]
    assert "chosen on the first 2 of 7 pending jobs in Slurm's order" in note, note
    assert "every pending job is planned with it" in note
    # within the limit there is no choice to explain: "best" runs on every job
    whole = SlurmSource(_client(clock), clock=clock).view()
    assert whole.summary is not None and whole.summary["choice"] is None and whole.summary["note"] is None


def test_slurm_pages_metrics_and_read_only(served: tuple[TestClient, SlurmSource]) -> None:
    client, _ = served
    node = client.get("/node").text
    assert 'data-view="slurm-node"' in node and NO_GPU_READINGS.split(":")[0] in node
    queue = client.get("/queue").text
    assert 'data-view="slurm-queue"' in queue and "gpuplan slurm plan --policy best" in queue
    assert client.get("/", follow_redirects=False).headers["location"] == "/queue"
    for path in ("/api/jobs", "/api/queue/order", "/api/jobs/1/cancel"):
        assert client.post(path, json={}).status_code in (404, 405), path  # nothing changes Slurm here
    assert client.get("/api/node").status_code == 404
    m = _metrics(client)
    by_state = {s.labels["state"]: s.value for s in m["gpuplan_jobs"]}
    assert by_state == {"running": 4.0, "waiting": 7.0, "suspended": 0.0, "held": 0.0}  # every state, always
    assert m["gpuplan_queue_length"][0].value == 7.0
    used = {s.labels["node"]: s.value for s in m["gpuplan_slurm_node_gpus_allocated"]}
    assert used == {"node1": 8.0, "node2": 8.0, "node3": 6.0, "node4": 0.0}
    count = next(s.value for s in m["gpuplan_job_wait_seconds"] if s.name.endswith("_count"))
    assert count == 4.0  # the running jobs; a pending job's StartTime is Slurm's guess, not a start
    assert all(not m.get(name) for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"))
    assert [s.value for s in m["gpuplan_fake_devices"]] == [0.0]
    assert lint_problems(client.get("/metrics").text) == []  # promtool's rules (tests/web/promlint.py)


def test_sse_sends_the_version(served: tuple[TestClient, SlurmSource]) -> None:
    client, source = served
    with client.stream("GET", "/api/slurm/stream") as resp:
        line = next(line for line in resp.iter_lines() if line.startswith("data: "))
    event = json.loads(line.removeprefix("data: "))
    assert event["version"] == source.view().version and event["running"] == 4 and event["error"] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--partition", "gpu"], "--partition and --predict read a Slurm cluster: add --slurm"),
        (["--slurm", "--gpus", "nvml"], "with --slurm the nodes and the backfill mode are Slurm's"),
        (["--slurm", "--backfill", "easy"], "with --slurm the nodes and the backfill mode are Slurm's"),
        (["--slurm", "--policy", "las"], "preempts running jobs"),
        (["--slurm", "--policy", "nope"], "unknown policy 'nope'"),
        (["--slurm", "--slurm-cache-seconds", "-1"], "--slurm-cache-seconds must be >= 0"),
        (["--slurm", "--predict", "/no/model.json"], "--predict /no/model.json: no such model file"),
    ],
)
def test_serve_slurm_bad_options_one_line(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPLAN_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(cli_app, ["serve", *args])
    assert result.exit_code == 2
    err = result.stderr.strip()
    assert err.startswith("gpuplan: error: ") and message in err and "\n" not in err, err


def test_gpuplan_serve_slurm_as_a_process(fake_slurm: FakeSlurm, tmp_path: Path) -> None:
    """The real command with --slurm -p gpu: its JSON line, /healthz from the stand-in Slurm, SIGTERM."""
    import os

    from dashboard_support import serve_process

    env = {**os.environ, "GPUPLAN_HOME": str(tmp_path / "home"), "PATH": str(fake_slurm.bin)}
    with serve_process(["--slurm", "-p", "gpu"], env) as (announced, health):
        assert announced["slurm"] is True and announced["token"] is False
        assert announced["source"].startswith("Slurm cluster (gpu); read-only")
        assert health["ok"] is True and health["gpus"] == 32
        assert health["slurm"]["running"] == 4 and health["slurm"]["pending"] == 7


def test_unreadable_squeue_output_is_named(fake_slurm: FakeSlurm, clock: Clock, tmp_path: Path) -> None:
    bad = tmp_path / "squeue_bad.txt"
    header, first, *_ = CAPTURED["squeue"].read_text().splitlines()
    bad.write_text(f"{header}\n{first.replace('|1|0|Priority|', '|high|0|Priority|')}\n")
    fake_slurm.up(squeue=bad)
    view = SlurmSource(_client(clock), clock=clock).view()
    assert view.error is not None and view.rows == []
    # names the output, its line and column, and the raw value
    assert view.error.startswith("squeue -O output:2: column priority: value") and "'high'" in view.error
    assert "\n" not in view.error


def test_a_partition_without_gpu_nodes_is_a_plan_error(fake_slurm: FakeSlurm, clock: Clock) -> None:
    view = SlurmSource(_client(clock), partitions=("cpu",), clock=clock).view()
    assert view.error is None and view.plan is None and view.summary is None
    assert view.plan_error is not None and view.plan_error.startswith(
        "cannot plan the queue: no usable Slurm node with GPUs in the chosen partitions"
    )
    assert view.rows == []  # every captured job is in partition gpu


def test_slurm_order_as_a_plan_keeps_slurms_order(fake_slurm: FakeSlurm, clock: Clock) -> None:
    """What "best" may choose on the first jobs, Slurm's own order, planned on every pending job."""
    state = live_state(_client(clock))
    plan = plan_queue(state, policy=SLURM_ORDER)
    assert plan.policy == SLURM_ORDER and plan.order == plan.slurm_order
    assert plan.planned.starts == plan.slurm.starts and len(plan.order) > 2

"""Savings against FIFO by hand, cost options, the node history window, `gpuplan serve`'s errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuplan.cli import app
from gpuplan.errors import GpuplanError
from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec
from gpuplan.sim.result import Metrics, SimResult
from gpuplan.web.history import History
from gpuplan.web.live import GpuStatus, NodeStatus
from gpuplan.web.savings import DEFAULT_COSTS, parse_costs, savings_vs_fifo

CLUSTER = ClusterSpec("2xA100", (NodeSpec("n", 2, GpuSpec("A100-80GB", 80.0)),))


def _run(policy: str, backfill: str, makespan_s: float, gpu_hours: float) -> SimResult:
    m = Metrics(1, makespan_s, gpu_hours * 3600 / (2 * makespan_s), 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, gpu_hours)
    return SimResult(policy, backfill, "first-fit", False, CLUSTER, m, [], [], ["n/gpu0", "n/gpu1"])


def test_savings_by_hand() -> None:
    fifo = _run("fifo", "none", 10 * 3600.0, 12.0)  # 2 GPUs held 10 h, 12 GPU-h busy, 8 idle
    best = _run("sjf", "easy", 7 * 3600.0, 12.0)  # held 7 h: 14 GPU-h, 12 busy, 2 idle
    costs = parse_costs(["A100-80GB=2"], ["A100-80GB=300/100"])
    out = savings_vs_fifo([best, fifo], CLUSTER, costs)
    rows = {r["label"]: r for r in out["rows"]}
    assert out["baseline"] == "fifo+none"
    assert rows["sjf+easy"]["gpu_hours_saved"] == pytest.approx(6.0)  # 3 h x 2 GPUs
    assert rows["sjf+easy"]["usd_saved"] == pytest.approx(12.0)  # 6 GPU-h x $2
    # FIFO: 12 h x 300 W + 8 h x 100 W = 4.4 kWh; sjf: 12 x 300 + 2 x 100 = 3.8 kWh
    assert rows["sjf+easy"]["kwh_saved"] == pytest.approx(0.6)
    assert rows["fifo+none"] == {
        **rows["fifo+none"],
        "gpu_hours_saved": 0.0,
        "usd_saved": 0.0,
        "kwh_saved": 0.0,
    }
    assert out["costs"]["A100-80GB"]["source"] == "--watts given"


def test_savings_without_fifo_or_price() -> None:
    assert savings_vs_fifo([_run("sjf", "easy", 3600.0, 1.0)], CLUSTER, DEFAULT_COSTS)["rows"] == []
    h200 = ClusterSpec("h", (NodeSpec("h", 1, GpuSpec("H200-141GB", 141.0)),))
    runs = [_run("fifo", "none", 7200.0, 1.0), _run("sjf", "easy", 3600.0, 1.0)]
    rows = savings_vs_fifo(runs, h200, DEFAULT_COSTS)["rows"]
    assert [r["usd_saved"] for r in rows] == [None, None]  # no default price for the H200: none invented
    assert rows[1]["gpu_hours_saved"] == pytest.approx(1.0)


def test_parse_costs_keeps_unchanged_sources_and_rejects_bad_values() -> None:
    same = parse_costs(["A100-80GB=5.12"], [])
    assert same["A100-80GB"] == DEFAULT_COSTS["A100-80GB"]  # the same price keeps its documented source
    assert parse_costs(["T4=0.5"], [])["T4"].usd_per_h == 0.5
    for prices, watts, message in (
        (["A100-80GB"], [], "is not MODEL=VALUE"),
        (["A100-80GB=-1"], [], "finite number >= 0"),
        ([], ["A100-80GB=lots"], "'lots' is not a number"),
        ([], ["A100-80GB=400/x"], "'x' is not a number"),
    ):
        with pytest.raises(GpuplanError, match=message):
            parse_costs(prices, watts)


def _snap(t: float, util: float) -> NodeStatus:
    return NodeStatus(t, (GpuStatus(0, "u0", "A100-80GB", "n", 80.0, util, 1.0),), ())


def test_history_keeps_its_window() -> None:
    h = History(window_s=10.0)
    for t in range(21):
        h.add(_snap(float(t), float(t)))
    series = h.series()
    assert series["time_s"] == [float(t) for t in range(10, 21)]
    assert series["util_pct"] == [[float(t) for t in range(10, 21)]]
    latest = h.latest()
    assert latest is not None and latest.time_s == 20.0
    with pytest.raises(ValueError, match="window_s"):
        History(0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--price", "A100-80GB"], "--price: 'A100-80GB' is not MODEL=VALUE"),
        (["--traces", "/no/such/dir"], "--traces /no/such/dir: not a folder"),
        (["--gpus", "fake:nope"], "unknown"),
        (["--policy", "nope"], "unknown policy 'nope'"),
        (["--sample-seconds", "0"], "must be > 0"),
        (["--token-file", "/no/such/token"], "--token-file /no/such/token: cannot read it"),
        (["--max-upload-mb", "0"], "--max-upload-mb must be > 0"),
        (["--whatif-cache", "0"], "--whatif-cache >= 1"),
    ],
)
def test_serve_bad_options_one_line(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPLAN_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(app, ["serve", *args])
    assert result.exit_code == 2
    err = result.stderr.strip()
    assert err.startswith("gpuplan: error: ") and message in err and "\n" not in err, err


def test_serve_says_when_it_is_not_on_loopback(capsys: pytest.CaptureFixture[str]) -> None:
    from gpuplan.commands.serve import _announce

    _announce("127.0.0.1", 8000, "FAKE", False, as_json=True)
    out = capsys.readouterr()
    assert out.err == "" and '"url": "http://127.0.0.1:8000/"' in out.out
    _announce("0.0.0.0", 8000, "FAKE", True, as_json=False)
    out = capsys.readouterr()
    assert "listening on 0.0.0.0, not loopback" in out.err
    assert "changes and what-if uploads need the token" in out.out


def test_plan_keeps_the_agents_order_and_expected_starts() -> None:
    from gpuplan.cluster import load_cluster
    from gpuplan.web.live import QueueRow
    from gpuplan.web.queueplan import plan_queue

    now = 1000.0
    rows = [
        QueueRow("1", "running", 8, 0.0, est_duration_s=600.0, start_s=900.0, gpu_ids=tuple(range(8))),
        # sjf would put the short job first; the agent planned the long one first and says when
        QueueRow("2", "waiting", 8, 10.0, est_duration_s=5000.0, expected_start_s=1500.0, planned=True),
        QueueRow("3", "waiting", 8, 20.0, est_duration_s=50.0, expected_start_s=6500.0, planned=True),
    ]
    plan = plan_queue(rows, load_cluster("8xA100-80GB"), "sjf", "easy", now)
    page = plan.page(0, 10)["rows"]
    assert [r["job_id"] for r in page] == ["1", "2", "3"]
    assert [r["expected_start_s"] for r in page] == [900.0, 1500.0, 6500.0]
    ours = plan_queue([*rows[:1], *(QueueRow(r.job_id, r.state, r.gpus, r.submit_s, est_duration_s=r.est_duration_s) for r in rows[1:])],
                      load_cluster("8xA100-80GB"), "sjf", "easy", now)  # fmt: skip
    page = ours.page(0, 10)["rows"]
    assert [r["job_id"] for r in page] == ["1", "3", "2"]  # without the agent's plan: the policy's order
    assert page[1]["expected_start_s"] == pytest.approx(now + 500.0)  # when job 1 ends (900 + 600)
    assert page[2]["expected_start_s"] == pytest.approx(now + 550.0)


def test_the_store_seeded_forecast_names_a_time_limit_as_such() -> None:
    """While the agent does not answer, the view forecasts from the store's rows: a running job with
    only a --time is planned to its limit and named "its time limit", one with an estimate "its
    estimate", one with neither gets the default estimate and is listed as guessed."""
    from gpuplan.cluster import load_cluster
    from gpuplan.web.live import QueueRow
    from gpuplan.web.queueplan import store_forecast

    rows = [
        QueueRow("1", "running", 4, 0.0, time_limit_s=300.0, start_s=100.0, gpu_ids=(0, 1, 2, 3)),
        QueueRow(
            "2",
            "running",
            4,
            0.0,
            est_duration_s=500.0,
            time_limit_s=900.0,
            start_s=100.0,
            gpu_ids=(4, 5, 6, 7),
        ),
        QueueRow("3", "waiting", 8, 10.0),
    ]
    fc, handle, guessed = store_forecast(rows, load_cluster("8xA100-80GB"), "fifo", "easy", 200.0)
    assert fc[handle["1"]].end_s == pytest.approx(400.0) and fc[handle["2"]].end_s == pytest.approx(600.0)
    assert fc[handle["3"]].start_s == pytest.approx(600.0) and guessed == {"3"}
    text = fc.explain(handle["3"])
    assert "(its time limit)" in text and "(its estimate)" in text, text


def test_gpuplan_serve_as_a_process(tmp_path: Path) -> None:
    """The real command: prints its address as JSON, answers /healthz, stops on SIGTERM (by its pid)."""
    import os

    from dashboard_support import serve_process

    env = {**os.environ, "GPUPLAN_HOME": str(tmp_path / "home")}
    with serve_process(["--traces", str(tmp_path)], env) as (announced, health):
        assert announced["token"] is False and announced["slurm"] is False
        assert health["ok"] is True and health["gpus"] == 8
        assert "FAKE device set fake:8xA100-80GB; no agent running" in health["source"]


def test_suspended_and_held_agent_jobs_keep_their_state() -> None:
    """A job a preemptive policy suspended (GPUs held) is shown and counted as suspended, not as a
    plain waiting job; the queue length counts every job that is not running."""
    from prometheus_client.core import GaugeMetricFamily

    from gpuplan.cluster import load_cluster
    from gpuplan.web.live import _agent_row
    from gpuplan.web.metrics import _queue_metrics
    from gpuplan.web.queueplan import plan_queue

    rows = [
        _agent_row({"id": i, "state": s, "gpus": 1, "submit_s": 10.0 * i})
        for i, s in enumerate(["running", "suspended", "held", "queued", "queued"])
    ]
    assert [r.state for r in rows] == ["running", "suspended", "held", "waiting", "waiting"]
    metrics = {m.name: m for m in _queue_metrics(rows, now=100.0) if isinstance(m, GaugeMetricFamily)}
    by_state = {s.labels["state"]: s.value for s in metrics["gpuplan_jobs"].samples}
    assert by_state == {"running": 1, "suspended": 1, "held": 1, "waiting": 2}
    assert metrics["gpuplan_queue_length"].samples[0].value == 4
    assert metrics["gpuplan_queue_oldest_wait_seconds"].samples[0].value == 90.0  # the suspended job's
    page = plan_queue(rows, load_cluster("8xA100-80GB"), "fifo", "easy", now=100.0).page(0, 10)
    assert (page["running"], page["waiting"], page["suspended"]) == (1, 4, 1)

"""`gpuplan serve --slurm` on the real test cluster (sched/backfill: it runs after test_slurm_zbackfill.py,
so no restart; browser tests are grouped after it, so the cluster stops right after), in the session's
headless Chromium (tests/browser_support.py): running and pending rows, the planned order and
expected starts equal to `gpuplan slurm plan --json`, jobs submitted or ended during the test appear
or go without reload, the node view's allocation equals sinfo's, /metrics, and slurmctld stopped then
started again (the error line, then recovery).
A page error, a console error or a failed request fails the test; screenshots go to out/browser/."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from harness import SlurmCluster
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from browser_support import Watch, serve_in_thread, shot
from gpuplan.cli import app as cli_app
from gpuplan.slurm.client import SlurmClient
from gpuplan.slurm.runner import SlurmRunner
from gpuplan.web.app import ServeConfig, create_app
from gpuplan.web.slurmview import SlurmSource

TIMEOUT_MS = 30_000


def _rows(page: Any, state: str) -> list[dict[str, str]]:
    return list(
        page.evaluate(
            f"[...document.querySelectorAll('#slurm-queue-table tr[data-state=\"{state}\"]')].map(r => ({{...r.dataset}}))"
        )
    )


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=30) as resp:
        data: dict[str, Any] = json.loads(resp.read())
        return data


def _submit(c: SlurmCluster) -> dict[str, str]:
    """Two jobs running (the partition open), then five pending behind the closed partition and a held one."""
    c.set_partition(up=True)
    ids = {
        "run-a": c.sbatch("-N", "1", "--gres=gpu:8", "--time=5", "--job-name=run-a", script="sleep 300"),
        "run-b": c.sbatch("--gres=gpu:4", "--time=3", "--job-name=run-b", script="sleep 300"),
    }
    c.wait_running(list(ids.values()))
    c.set_partition(up=False)
    for name, args in {
        "wide": ("-N", "2", "--gres=gpu:8", "--time=4"),
        "whole": ("--gres=gpu:8", "--time=2"),
        "pair": ("--gres=gpu:2", "--time=1"),
        "four": ("--gres=gpu:4", "--time=3"),
        "nolimit": ("--gres=gpu:1",),  # the partition has no MaxTime: no limit, endless in the plan
        "held": ("--hold", "--gres=gpu:1", "--time=1"),
    }.items():
        ids[name] = c.sbatch(*args, f"--job-name={name}", script="sleep 1")
    return ids


def test_serve_slurm_in_the_browser(
    slurm_backfill: SlurmCluster, page: Any, watch: Watch, artifacts: Path
) -> None:
    slurm = slurm_backfill
    ids = _submit(slurm)
    source = SlurmSource(SlurmClient(SlurmRunner(timeout_s=10.0, retries=0, env=slurm.env)), cache_s=0.5)
    served = serve_in_thread(create_app(ServeConfig(source, sample_s=0.25)))
    try:
        _queue_view(slurm, page, served.url, ids, artifacts)
        _node_view(page, served.url, artifacts)
        _slurm_down_and_back(slurm, page, served.url, ids, artifacts)
    finally:
        page.goto("about:blank")  # closes the page's event stream: the server stops at once
        served.stop()
    watch.check()


def _queue_view(c: SlurmCluster, page: Any, url: str, ids: dict[str, str], artifacts: Path) -> None:
    page.goto(url + "/queue")
    page.wait_for_selector("body[data-rendered='table']", timeout=TIMEOUT_MS)
    cli = CliRunner().invoke(cli_app, ["slurm", "plan", "--json"])  # SLURM_CONF: the slurm fixture's
    assert cli.exit_code == 0, cli.stderr
    plan = json.loads(cli.stdout)
    running = _rows(page, "running")
    assert sorted(r["job"] for r in running) == sorted([ids["run-a"], ids["run-b"]])
    pending = _rows(page, "pending")
    assert len(pending) == 6 and {r["job"] for r in pending} == {
        ids[n] for n in ids if not n.startswith("run")
    }
    planned = [r for r in pending if r["plannedRank"]]
    assert [r["job"] for r in planned] == plan["order"] and len(plan["order"]) == 5
    for r in planned:  # the same expected start as the CLI's, up to the 1-s resolution of Slurm's times
        rel = plan["expected_start_s"][r["job"]]
        assert (r["expectedStart"] == "") == (rel is None), (r, rel)
        if rel is not None:
            assert abs(float(r["expectedStart"]) - (plan["now_s"] + rel)) <= 2.0, (r, plan)
    ranks = {r["job"]: int(r["slurmRank"]) for r in planned}
    assert sorted(plan["slurm_order"], key=ranks.__getitem__) == plan["slurm_order"]
    held = next(r for r in pending if r["job"] == ids["held"])
    assert not held["plannedRank"] and list(plan["unmanaged"]) == [ids["held"]]
    api = _get_json(url + "/api/slurm/plan")
    for key in ("order", "slurm_order", "policy", "backfill", "unmanaged", "warnings", "pending_jobs"):
        assert api[key] == plan[key], key
    basis = page.locator("#plan-basis").inner_text()
    assert f"planned as endless: {ids['nolimit']}" in basis and "time limits" in basis and "gpu" in basis
    assert page.locator("#plan-table tbody tr").count() == 3
    # who gains, who loses: the same table as `gpuplan slurm plan --json`
    fair = page.locator("#fairness-table tbody tr")
    assert fair.count() == len(plan["fairness"]["by_user"]) + len(plan["fairness"]["by_account"])
    for by in ("by_user", "by_account"):  # read a moment apart: the same groups, waits within Slurm's 1 s
        assert [(r["name"], r["jobs"]) for r in api["fairness"][by]] == [
            (r["name"], r["jobs"]) for r in plan["fairness"][by]
        ]
        for a, b in zip(api["fairness"][by], plan["fairness"][by]):
            for key in ("slurm_mean_wait_s", "plan_mean_wait_s"):
                assert (a[key] is None) == (b[key] is None) and abs((a[key] or 0) - (b[key] or 0)) <= 2.0, (
                    a,
                    b,
                )
    names = {fair.nth(i).get_attribute("data-name") for i in range(fair.count())}
    assert names == {r["name"] for r in plan["fairness"]["by_user"] + plan["fairness"]["by_account"]}
    shot(page, artifacts, "slurm-queue")
    # a job submitted, another ended: the page follows without reload
    page.evaluate("window.notReloaded = true")
    late = c.sbatch("--gres=gpu:1", "--time=1", "--job-name=late", script="sleep 1")
    page.wait_for_selector(f"#slurm-queue-table tr[data-job='{late}']", timeout=TIMEOUT_MS)
    c.run("scancel", ids["run-b"])
    page.wait_for_selector(
        f"#slurm-queue-table tr[data-job='{ids['run-b']}']", state="detached", timeout=TIMEOUT_MS
    )
    assert page.evaluate("window.notReloaded") is True
    metrics = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    fams = {f.name: f.samples for f in text_string_to_metric_families(metrics)}
    by_state = {s.labels["state"]: s.value for s in fams["gpuplan_jobs"]}
    assert by_state == {"running": 1.0, "waiting": 7.0, "suspended": 0.0, "held": 0.0}, by_state


def _node_view(page: Any, url: str, artifacts: Path) -> None:
    page.goto(url + "/node")
    page.wait_for_selector("body[data-rendered='nodes']", timeout=TIMEOUT_MS)
    nodes = {n.name: n for n in SlurmClient().nodes()}
    rows = page.locator("#slurm-node-table tbody tr")
    assert rows.count() == len(nodes) == 4
    for name, n in nodes.items():
        row = page.locator(f"#slurm-node-table tr[data-node='{name}']")
        assert row.locator(".gpus").inner_text() == "8" and row.locator(".used").inner_text() == str(
            n.gpus_used
        )
    assert sum(n.gpus_used for n in nodes.values()) == 8  # run-a alone is left running
    assert page.evaluate("document.getElementById('slurm-alloc')._fullData.length") == 2
    assert "No per-GPU readings" in page.locator("#no-gpu-readings").inner_text()
    shot(page, artifacts, "slurm-node")


def _slurm_down_and_back(c: SlurmCluster, page: Any, url: str, ids: dict[str, str], artifacts: Path) -> None:
    page.goto(url + "/queue")
    page.wait_for_selector("body[data-rendered='table'][data-slurm='ok']", timeout=TIMEOUT_MS)
    c.stop_ctld()
    try:
        page.wait_for_selector("body[data-slurm='error']", timeout=TIMEOUT_MS)
        error = page.locator("#slurm-error").inner_text()
        assert "Unable to contact slurm controller" in error and "scontrol ping" in error, error
        assert page.locator("#queue-counts").inner_text() == "No jobs shown: Slurm could not be read (above)."
        assert page.locator("#slurm-queue-table tbody tr").count() == 0
        health = _get_json(url + "/healthz")
        assert health["ok"] is False and health["slurm"]["error"] == error
        shot(page, artifacts, "slurm-down")
    finally:
        c.start_ctld()
    page.wait_for_selector("body[data-slurm='ok']", timeout=TIMEOUT_MS)
    page.wait_for_selector(f"#slurm-queue-table tr[data-job='{ids['run-a']}']", timeout=TIMEOUT_MS)
    assert page.locator("#slurm-error").is_hidden()
    assert _get_json(url + "/healthz")["ok"] is True

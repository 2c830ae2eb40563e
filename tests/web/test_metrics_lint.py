"""/metrics against promtool's lint: the rules written out (tests/web/promlint.py) on every run, and
the real `promtool check metrics` where it is installed (.ci/run installs it; CI=true requires it).
Only the DCGM_FI_* series may break a rule: their camelCase labels are dcgm-exporter's own."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from dashboard_support import FakeAgentHome
from fastapi.testclient import TestClient
from promlint import lint_problems, promtool_problems

from gpuplan.web.app import ServeConfig, create_app

EVERY_SERIES = {
    "gpuplan_queue_readable", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "gpuplan_gpu_lost", "gpuplan_process_gpu_memory_used_mib",
    "gpuplan_process_gpu_util_percent", "gpuplan_job_gpu_memory_used_mib", "gpuplan_job_gpu_util_percent",
    "gpuplan_queue_length", "gpuplan_jobs", "gpuplan_queue_oldest_wait_seconds", "gpuplan_job_wait_seconds",
    "gpuplan_fake_devices",
}  # fmt: skip
PLANTED = """# HELP gpuplan_bad_requests Requests.
# TYPE gpuplan_bad_requests counter
gpuplan_bad_requests_total{clientName="a"} 1
# HELP gpuplan_wait_ms Wait.
# TYPE gpuplan_wait_ms gauge
gpuplan_wait_ms 3
"""


@pytest.fixture(scope="module")
def exposition(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The /metrics text of a node with every series present: a lost GPU, running and queued jobs."""
    root = tmp_path_factory.mktemp("lint")
    home = FakeAgentHome(root / "home", spec="fake:8xA100-80GB,lost=7")
    try:
        home.run((0, 1), 30.0, 70.0, name="train", user="ana", submit_s=time.time() - 120)
        home.enqueue(3)
        config = ServeConfig(home.source(), trace_root=root)
        with TestClient(create_app(config), base_url="http://127.0.0.1") as client:
            yield client.get("/metrics").text
    finally:
        home.close()


def test_every_series_passes_the_lint_rules(exposition: str) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    names = {f.name for f in text_string_to_metric_families(exposition)}
    assert names == EVERY_SERIES  # every series was there to be checked (a new one joins the list)
    assert lint_problems(exposition) == []


def test_the_lint_rules_catch_what_promtool_catches() -> None:
    problems = lint_problems(PLANTED)
    assert any("'clientName' should be snake_case" in p for p in problems), problems
    assert any("abbreviated units ['ms']" in p for p in problems), problems
    assert any("wait series should end in its unit" in p for p in problems), problems
    no_help = PLANTED.replace("Requests.", "")
    assert any(p.endswith("no help text") for p in lint_problems(no_help))
    gauge = PLANTED.replace("counter", "gauge")
    assert any("non-counter metrics should not have '_total'" in p for p in lint_problems(gauge))


def test_promtool_flags_only_the_dcgm_series(exposition: str) -> None:
    problems = promtool_problems(exposition)
    if problems is None:
        pytest.skip("promtool is not installed (Debian's prometheus package has it; .ci/run installs it)")
    assert problems, "promtool found nothing: the DCGM series' camelCase labels should be reported"
    assert all(p.startswith("DCGM_FI_") and "camelCase" in p for p in problems), problems
    planted = promtool_problems(PLANTED)
    assert planted and any(p.startswith("gpuplan_bad_requests") for p in planted), planted

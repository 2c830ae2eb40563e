"""`gpuplan slurm watch` as a service (slurm/watch.py, slurm/health.py) against a small simulated Slurm:
the writer lock, drift-only re-sets, backoff while slurmctld is down, /healthz and /metrics."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.slurm.client import SlurmClient
from gpuplan.slurm.health import HealthServer
from gpuplan.slurm.parse import parse_config
from gpuplan.slurm.runner import SlurmCommandError, SlurmRunner
from gpuplan.slurm.sitefactor import headroom_for
from gpuplan.slurm.watch import Metrics, Watcher, WatchOptions, lock_path, writer_lock
from systemd_units import service_section

NOW = 1_000_000.0
_CONFIG = (
    "ClusterName = ci\nSchedulerType = sched/builtin\nPriorityType = priority/multifactor\n"
    "PriorityWeightAge = 1000\nPriorityMaxAge = 00:05:00\nPriorityCalcPeriod = 00:01:00\n"
)


class FakeSlurm(SlurmRunner):
    """Pending jobs with a multifactor base and a SiteFactor; `scontrol update ... SiteFactor=` changes
    it, squeue and sprio show base + site, as Slurm 22.05 does. `down` calls fail as a stopped slurmctld."""

    def __init__(self, limits_min: list[int]) -> None:
        super().__init__(sleep=lambda s: None)
        self.jobs = {str(10 + i): {"base": 500, "site": 0, "limit": m} for i, m in enumerate(limits_min)}
        self.down = 0
        self.lines: list[str] = []

    def run(self, args, *, input_text=None, retry=True):  # type: ignore[no-untyped-def]
        self.calls.append(list(args))
        if self.down:
            self.down -= 1
            raise SlurmCommandError(args, 1, "slurm_load_jobs error: Unable to contact slurm controller")
        fmt = "%Y-%m-%dT%H:%M:%S"
        sub = time.strftime(fmt, time.localtime(NOW - 30))
        if args[0] == "squeue":
            head = "JOBID|PARTITION|STATE|TIME_LIMIT|TIME|NODES|TRES_PER_NODE|PRIORITY|REASON|SUBMIT_TIME|ACCOUNT|USER|\n"
            return head + "".join(
                f"{j}|gpu|PENDING|{v['limit']}:00|0:00|1|gres:gpu:8|{v['base'] + v['site']}|Priority|{sub}|acct|u|\n"
                for j, v in self.jobs.items()
            )
        if args[0] == "sprio":
            head = "JOBID|USER|PRIORITY|SITE|AGE|ASSOC|FAIRSHARE|JOBSIZE|PARTITION|QOS|NICE|TRES|\n"
            return head + "".join(
                f"{j}|u|{v['base'] + v['site']}|{v['site']}|100|0|0|{v['base'] - 100}|0|0|0||\n"
                for j, v in self.jobs.items()
            )
        if args[0] == "sinfo":
            return "NODELIST|STATE|GRES|GRES_USED|PARTITION|\nnode1|mixed|gpu:8|gpu:8|gpu|\n"
        if args[:3] == ["scontrol", "show", "config"]:
            return _CONFIG
        if args == ["scontrol"] and input_text:
            for line in input_text.splitlines():
                if line.startswith("update JobId="):
                    self.lines.append(line)
                    jid, kv = line[len("update JobId=") :].split(" ", 1)
                    self.jobs[jid]["site"] = int(kv.split("=", 1)[1])
            return ""
        raise AssertionError(args)

    def order(self) -> list[str]:
        return sorted(self.jobs, key=lambda j: -(self.jobs[j]["base"] + self.jobs[j]["site"]))


def _watcher(slurm: FakeSlurm, tmp_path: Path, sleeps: list[float], logs: list[dict]) -> Watcher:
    opts = WatchOptions(policy="sjf", state_path=tmp_path / "applied.json", interval_s=30.0)
    client = SlurmClient(slurm, clock=lambda: NOW)
    return Watcher(client, opts, logs.append, sleeps.append, Metrics(lambda: NOW))


def test_watch_resets_only_the_jobs_that_drifted(tmp_path: Path) -> None:
    slurm = FakeSlurm([5, 4, 3, 2, 1])
    w = _watcher(slurm, tmp_path, [], [])
    assert w.run(2) == 1  # the second look finds everything in place
    assert slurm.order() == ["14", "13", "12", "11", "10"] and len(slurm.lines) == 4  # one job kept
    slurm.jobs["12"]["base"] += 10_000  # fair-share (say) lifts one job far above its place
    slurm.lines.clear()
    assert w.look() > 0
    assert slurm.order() == ["14", "13", "12", "11", "10"]
    assert len(slurm.lines) <= 2 and any("JobId=12 " in ln for ln in slurm.lines)


def test_backoff_while_slurmctld_is_down_then_resume(tmp_path: Path) -> None:
    slurm = FakeSlurm([3, 2, 1])
    sleeps: list[float] = []
    logs: list[dict] = []
    w = _watcher(slurm, tmp_path, sleeps, logs)
    slurm.down = 3
    w.run(5)
    assert sleeps == [2.0, 4.0, 8.0, 30.0]  # 3 failed looks back off; the 4th works, then the interval
    down = [e for e in logs if e["event"] == "slurm_unreachable"]
    assert (
        len(down) == 3
        and "slurmctld is not answering" in down[0]["message"]
        and "next try in 2 s" in down[0]["message"]
    )
    assert [e["event"] for e in logs].count("slurm_back") == 1
    reg = w.metrics.registry
    assert reg.get_sample_value("gpuplan_slurm_watch_errors_total", {"kind": "slurm_unreachable"}) == 3
    assert reg.get_sample_value("gpuplan_slurm_watch_passes_total") == 2 and slurm.order() == [
        "12",
        "11",
        "10",
    ]


def test_health_and_metrics_endpoints(tmp_path: Path) -> None:
    slurm = FakeSlurm([3, 2, 1])
    w = _watcher(slurm, tmp_path, [], [])
    server = HealthServer(w.metrics, stale_after_s=90.0).start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{base}/healthz", timeout=5)
        assert e.value.code == 503 and json.loads(e.value.read())["status"] == "starting"
        w.run(2)
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as r:
            body = json.loads(r.read())
        assert r.status == 200 and body["status"] == "ok" and body["plan_age_s"] == 0.0
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert "gpuplan_slurm_watch_passes_total 2.0" in text
        assert "gpuplan_slurm_watch_jobs_moved_total 2.0" in text  # 3 jobs, the last kept
        assert "gpuplan_slurm_watch_last_success_timestamp_seconds 1e+06" in text  # NOW
        assert (
            "gpuplan_slurm_watch_plan_age_seconds 0.0" in text
            and "gpuplan_slurm_watch_managed_jobs 3.0" in text
        )
        w.metrics.clock = lambda: NOW + 1000  # no look for 1000 s: stale
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{base}/healthz", timeout=5)
        assert e.value.code == 503 and json.loads(e.value.read())["status"] == "stale"
    finally:
        server.stop()


def test_second_writer_is_refused_naming_the_first(tmp_path: Path) -> None:
    state = tmp_path / "applied.json"
    with writer_lock(state, "ci", "gpuplan slurm watch", clock=lambda: NOW):
        with pytest.raises(GpuplanError) as e, writer_lock(state, "ci", "gpuplan slurm apply"):
            pass
        msg = str(e.value)
        assert f"pid {os.getpid()} on {socket.gethostname()}" in msg and "gpuplan slurm watch since" in msg
        assert "'ci'" in msg and "\n" not in msg
        with writer_lock(state, "other", "gpuplan slurm watch"):  # another cluster: its own lock
            pass
    with writer_lock(state, "ci", "gpuplan slurm apply"):  # released when the first one ended
        assert lock_path(state, "ci").name == "gpuplan-slurm-ci.lock"


def test_systemd_unit_runs_the_watcher_with_options_it_has() -> None:
    """contrib/systemd/gpuplan-slurm-watch.service: well-formed, and its ExecStart options exist."""

    from typer.testing import CliRunner

    from gpuplan.cli import app

    svc = service_section("gpuplan-slurm-watch.service")
    assert (
        svc["Type"] == "simple" and svc["Restart"] == "on-failure" and svc["RestartPreventExitStatus"] == "2"
    )
    assert (
        svc["StateDirectory"] == "gpuplan" and "GPUPLAN_SLURM_STATE=/var/lib/gpuplan/" in svc["Environment"]
    )
    argv = svc["ExecStart"].split()
    assert argv[1:3] == ["slurm", "watch"]
    helptext = CliRunner().invoke(app, ["slurm", "watch", "--help"], terminal_width=200).stdout
    for opt in (a for a in argv if a.startswith("--")):
        assert opt in helptext, opt


def test_nice_mode_by_a_plain_user_touches_only_their_own_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import getpass

    from gpuplan.slurm.apply import apply_order

    slurm = FakeSlurm([3, 2, 1])  # every job belongs to user "u"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(getpass, "getuser", lambda: "v")
    res = apply_order(SlurmClient(slurm, clock=lambda: NOW), ["12", "11", "10"], mode="nice",
                      state_path=tmp_path / "s.json", dry_run=True)  # fmt: skip
    assert res.changed == {} and set(res.skipped) == {"10", "11", "12"}
    assert "changes only your own jobs (v)" in res.skipped["10"]
    monkeypatch.setattr(getpass, "getuser", lambda: "u")
    res = apply_order(SlurmClient(slurm, clock=lambda: NOW), ["12", "11", "10"], mode="nice",
                      state_path=tmp_path / "s.json", dry_run=True)  # fmt: skip
    room = headroom_for(parse_config(_CONFIG), 3600.0)
    gap = room.base + room.drift + room.stale  # equal priorities (500), equal ages: no age lead
    assert res.changed == {"12": 0, "11": gap, "10": 2 * gap}  # each a full gap below the one before


def test_records_of_jobs_slurm_forgot_are_dropped(tmp_path: Path) -> None:
    slurm = FakeSlurm([3, 2, 1])
    w = _watcher(slurm, tmp_path, [], [])
    w.run(1)
    state = tmp_path / "applied.json"
    assert sorted(json.loads(state.read_text())["jobs"]) == ["11", "12"]  # 10, planned last, kept its value
    del slurm.jobs["12"]  # ended and gone from squeue
    slurm.jobs["13"] = {"base": 500, "site": 0, "limit": 1}
    w.look()
    assert sorted(json.loads(state.read_text())["jobs"]) == ["11", "13"]


def test_apply_text_says_what_was_set_kept_and_left_out_of_order(tmp_path: Path) -> None:
    from gpuplan.commands.slurm import apply_lines
    from gpuplan.slurm.apply import apply_order

    slurm = FakeSlurm([3, 2, 1])
    client = SlurmClient(slurm, clock=lambda: NOW)
    res = apply_order(client, ["12", "11", "10"], state_path=tmp_path / "s.json")
    text = "\n".join(apply_lines(res))
    assert "set SiteFactor on 2 job(s); skipped 0; previous values in" in text
    assert (
        "1 planned job(s) already in place kept their SiteFactor" in text
        and "210 priority points apart" in text
    )
    nudge = apply_order(client, ["10", "11", "12"], state_path=tmp_path / "n.json", weight=0.0, dry_run=True)
    text = "\n".join(apply_lines(nudge))
    assert (
        "would set SiteFactor on 0 job(s)" in text
        and "at --weight 0, 2 job(s) stay out of plan order: 10 12" in text
    )


def test_watch_cli_serves_health_and_metrics_on_health_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gpuplan slurm watch --health-port P`: the command itself serves /healthz and /metrics while it runs."""
    from typer.testing import CliRunner

    import gpuplan.commands.slurm as cmd
    from gpuplan.cli import app

    slurm = FakeSlurm([3, 2, 1])
    monkeypatch.setattr(cmd, "_client", lambda: SlurmClient(slurm, clock=lambda: NOW))
    with socket.socket() as s:  # a port free now, for the command to bind
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    seen: list[tuple[dict, str]] = []

    def between_looks(_s: float) -> None:  # the watcher's wait after its first look: ask the service
        base = f"http://127.0.0.1:{port}"
        with (
            urllib.request.urlopen(f"{base}/healthz", timeout=5) as r,
            urllib.request.urlopen(f"{base}/metrics", timeout=5) as m,
        ):
            seen.append((json.loads(r.read()), m.read().decode()))

    monkeypatch.setattr(cmd.time, "sleep", between_looks)
    res = CliRunner().invoke(app, ["slurm", "watch", "--iterations", "2", "--interval", "1", "--json",
                                   "--health-port", str(port), "--state", str(tmp_path / "s.json")])  # fmt: skip
    assert res.exit_code == 0, (res.stdout, res.stderr)
    events = [json.loads(line) for line in res.stdout.splitlines()]
    assert [e["port"] for e in events if e["event"] == "health"] == [port]
    ((health, metrics),) = seen
    assert health["status"] == "ok" and "gpuplan_slurm_watch_passes_total 1.0" in metrics
    assert "gpuplan_slurm_watch_jobs_moved_total 2.0" in metrics and slurm.order() == ["12", "11", "10"]
    with pytest.raises(urllib.error.URLError):  # stopped with the command
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)


def test_slurm_plan_takes_a_placer_and_says_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--placer` reaches the planner (its plan records it); an unknown one, or one with a preemptive
    policy, is one line before Slurm is asked."""
    from typer.testing import CliRunner

    import gpuplan.commands.slurm as cmd
    from gpuplan.cli import app

    slurm = FakeSlurm([3, 2, 1])
    monkeypatch.setattr(cmd, "_client", lambda: SlurmClient(slurm, clock=lambda: NOW))
    run = CliRunner().invoke
    default = run(app, ["slurm", "plan", "--policy", "sjf", "--json"])
    assert default.exit_code == 0, default.stderr
    assert json.loads(default.stdout)["placer"] == "best-fit"
    fgd = run(app, ["slurm", "plan", "--policy", "sjf", "--placer", "fgd", "--json"])
    assert fgd.exit_code == 0, fgd.stderr
    assert json.loads(fgd.stdout)["placer"] == "fgd"
    text = run(app, ["slurm", "plan", "--policy", "sjf", "--placer", "spread"])
    assert text.exit_code == 0 and "placer=spread" in text.stdout
    slurm.calls.clear()
    for args, needle in [
        (["plan", "--placer", "nope"], "unknown placer 'nope'"),
        (["apply", "--placer", "nope", "--dry-run"], "unknown placer 'nope'"),
        (["watch", "--placer", "nope", "--iterations", "1"], "unknown placer 'nope'"),
        (["plan", "--placer", "fgd", "--policy", "las"], "does not use the placer"),
    ]:
        bad = run(app, ["slurm", *args])
        assert bad.exit_code == 2 and len(bad.stderr.strip().splitlines()) == 1 and needle in bad.stderr
    assert slurm.calls == []


def test_apply_and_watch_plan_with_the_placer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    import gpuplan.commands.slurm as cmd
    from gpuplan.cli import app

    slurm = FakeSlurm([3, 2, 1])
    monkeypatch.setattr(cmd, "_client", lambda: SlurmClient(slurm, clock=lambda: NOW))
    res = CliRunner().invoke(app, ["slurm", "apply", "--placer", "fgd", "--dry-run", "--json",
                                   "--state", str(tmp_path / "s.json")])  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["plan"]["placer"] == "fgd"
    opts = WatchOptions(policy="sjf", state_path=tmp_path / "applied.json", placer="fgd")
    watcher = Watcher(SlurmClient(slurm, clock=lambda: NOW), opts, [].append, [].append, Metrics(lambda: NOW))
    watcher.look()
    assert watcher.plan is not None and watcher.plan.placer == "fgd"

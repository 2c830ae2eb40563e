"""Seam specs (core/params.py): `NAME:KEY=VALUE,...` parsed once into a typed constructor call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuplan.cli import app
from gpuplan.cluster import load_cluster
from gpuplan.core.backfill import Conservative, backfill_classes, get_backfill
from gpuplan.core.params import Param, SpecError, build, parse_spec, split_specs
from gpuplan.core.placement import BestFit, get_placer
from gpuplan.core.policies import get_policy, is_preemptive, policy_classes, preemptive_policy
from gpuplan.core.preemptive import Gittins, Las, Tiresias
from gpuplan.errors import GpuplanError, UnknownNameError
from gpuplan.model import Job
from gpuplan.sim.engine import simulate
from gpuplan.traces import write_jsonl

runner = CliRunner()


@pytest.mark.parametrize(
    ("spec", "cls", "attrs", "canonical"),
    [
        ("las", Las, {"quantum_gpu_s": 3600.0}, "las"),
        ("las:quantum=60", Las, {"quantum_gpu_s": 60.0}, "las:quantum=60"),
        (" las : quantum = 2h ", Las, {"quantum_gpu_s": 7200.0}, "las:quantum=2h"),
        ("las:quantum=1.5", Las, {"quantum_gpu_s": 1.5}, "las:quantum=1.5"),
        ("tiresias:threshold=3600", Tiresias, {"thresholds_gpu_s": (3600.0,)}, "tiresias"),
        ("tiresias:threshold=1h/10h,promote=0", Tiresias, {"thresholds_gpu_s": (3600.0, 36000.0), "promote_knob": 0.0},
         "tiresias:threshold=1h/10h,promote=0"),
        ("gittins:first=15m,levels=3,min_samples=2", Gittins, {"first_gpu_s": 900.0, "levels": 3, "min_samples": 2},
         "gittins:first=900,levels=3,min_samples=2"),
    ],
)  # fmt: skip
def test_a_spec_builds_its_class_with_typed_values_and_prints_back(
    spec: str, cls: type, attrs: dict[str, object], canonical: str
) -> None:
    pol = get_policy(spec)
    assert type(pol) is cls
    for name, value in attrs.items():
        assert getattr(pol, name) == value
    assert pol.spec == canonical
    again = get_policy(pol.spec)
    assert all(getattr(again, n) == getattr(pol, n) for n in attrs)


def test_backfill_and_placer_specs() -> None:
    cons = get_backfill("conservative:depth=7")
    assert isinstance(cons, Conservative) and cons.depth == 7 and cons.spec == "conservative:depth=7"
    assert get_backfill("conservative").spec == "conservative"
    assert isinstance(get_placer("pack"), BestFit) and get_placer("pack").spec == "best-fit"
    with pytest.raises(SpecError, match="placer 'spread' takes no parameters"):
        get_placer("spread:x=1")


@pytest.mark.parametrize(
    ("spec", "needles"),
    [
        ("las:quanta=5", ["unknown parameter 'quanta'", "quantum (GPU-seconds > 0", "default 1h"]),
        ("las:quantum=-1", ["quantum=-1 is not valid", "GPU-seconds > 0"]),
        ("las:quantum=abc", ["quantum=abc is not valid"]),
        ("las:quantum=inf", ["quantum=inf is not valid"]),
        ("las:quantum=3x", ["quantum=3x is not valid"]),
        ("las:quantum", ["'quantum' is not KEY=VALUE"]),
        ("las:quantum=1,quantum=2", ["parameter 'quantum' is given twice"]),
        ("fifo:quantum=1", ["policy 'fifo' takes no parameters"]),
        ("tiresias:threshold=2h/1h", ["ascending"]),
        ("tiresias:promote=-1", ["promote=-1 is not valid", "a number >= 0"]),
        ("gittins:levels=2.5", ["levels=2.5 is not valid", "a whole number >= 1"]),
        ("gittins:levels=0", ["levels=0 is not valid"]),
    ],
)
def test_a_bad_spec_is_one_clear_error_listing_what_is_valid(spec: str, needles: list[str]) -> None:
    with pytest.raises(SpecError) as e:
        get_policy(spec)
    text = str(e.value)
    assert "\n" not in text and repr(spec) in text
    for needle in needles:
        assert needle in text


def test_an_unknown_name_lists_the_names_static_ones_first() -> None:
    with pytest.raises(UnknownNameError) as e:
        get_policy("lass:quantum=5")
    assert e.value.name == "lass" and e.value.valid[0] == "fifo" and "las" in e.value.valid
    with pytest.raises(UnknownNameError, match="backfill mode 'eazy'"):
        get_backfill("eazy")


def test_a_name_parameter_takes_only_its_choices() -> None:
    class Wrap:
        name = "wrap"
        params = (Param("then", "then", "name", "tie-break policy", choices=lambda: ["fifo", "sjf"]),)

        def __init__(self, then: str = "fifo") -> None:
            self.then = then

    assert build("policy", {"wrap": Wrap}, "wrap:then=sjf").then == "sjf"
    with pytest.raises(SpecError, match="expected one of fifo, sjf"):
        build("policy", {"wrap": Wrap}, "wrap:then=las")


def test_split_specs_keeps_parameters_with_their_spec() -> None:
    assert split_specs("las:quantum=60,tiresias, fifo") == ["las:quantum=60", "tiresias", "fifo"]
    assert split_specs("fairshare:half_life=7d,then=sjf,fifo") == ["fairshare:half_life=7d,then=sjf", "fifo"]
    assert split_specs("gittins:first=1h,levels=3,min_samples=2") == [
        "gittins:first=1h,levels=3,min_samples=2"
    ]
    assert parse_spec("tiresias:threshold=1h/10h,promote=4") == (
        "tiresias",
        [("threshold", "1h/10h"), ("promote", "4")],
    )


def test_the_quantum_option_maps_to_each_policys_first_boundary() -> None:
    assert preemptive_policy("las", 60.0).spec == "las:quantum=60"
    assert preemptive_policy("tiresias:promote=2", 60.0).spec == "tiresias:threshold=60,promote=2"
    assert preemptive_policy("gittins", 60.0).spec == "gittins:first=60"
    with pytest.raises(GpuplanError, match="policy 'sjf' does not preempt"):
        preemptive_policy("sjf", 60.0)
    with pytest.raises(GpuplanError, match="must be > 0 GPU-seconds"):
        preemptive_policy("las", 0.0)
    with pytest.raises(SpecError, match="both in the spec and by an option"):
        preemptive_policy("las:quantum=30", 60.0)


def test_seams_declare_what_they_are() -> None:
    flags = {n: c.preemptive for n, c in policy_classes().items()}
    assert {n for n, p in flags.items() if p} == {"las", "tiresias", "gittins"}
    assert is_preemptive("las:quantum=60") and not is_preemptive("sjf")
    assert {n: c.plans_ahead for n, c in backfill_classes().items()} == {
        "none": False,
        "easy": True,
        "conservative": True,
    }


def test_gpuplan_policies_lists_every_parameter_with_its_default() -> None:
    r = runner.invoke(app, ["policies", "--json"])
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    las = next(p for p in rows["policies"] if p["name"] == "las")
    assert las["preemptive"] is True
    assert [(p["key"], p["default"], p["kind"]) for p in las["params"]] == [("quantum", "1h", "gpu_time")]
    cons = next(b for b in rows["backfill"] if b["name"] == "conservative")
    assert [(p["key"], p["default"]) for p in cons["params"]] == [("depth", "500")]
    text = runner.invoke(app, ["policies"]).stdout
    assert "quantum=1h" in text and "depth=500" in text


def _two_jobs(tmp_path: Path) -> tuple[Path, list[Job]]:
    jobs = [
        Job(id="a", submit_s=0.0, gpus=1, duration_s=100.0),
        Job(id="b", submit_s=50.0, gpus=1, duration_s=100.0),
    ]
    path = tmp_path / "two.jsonl"
    write_jsonl(jobs, path)
    return path, jobs


def test_a_spec_round_trips_through_simulate(tmp_path: Path) -> None:
    """`--policy las:quantum=30,las`: two runs labelled by their specs; the spec's run is the run of
    Las(quantum_gpu_s=5) and differs from las's own (A is preempted at B's arrival)."""
    path, jobs = _two_jobs(tmp_path)
    r = runner.invoke(
        app,
        [
            "simulate",
            str(path),
            "--cluster",
            "1xH200-141GB",
            "--exclusive",
            "--policy",
            "las:quantum=30,las",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.stderr
    runs = {run["policy"]: run for run in json.loads(r.stdout)}
    assert set(runs) == {"las:quantum=30", "las"}
    direct = simulate(jobs, load_cluster("1xH200-141GB", sharing=False), Las(quantum_gpu_s=30.0), "none")
    assert direct.policy == "las:quantum=30"
    assert runs["las:quantum=30"]["makespan_s"] == pytest.approx(direct.metrics.makespan_s)
    assert runs["las:quantum=30"]["makespan_s"] > runs["las"]["makespan_s"]  # a preemption's restart overhead
    bad = runner.invoke(app, ["simulate", str(path), "--policy", "las:quantum=0"])
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and "quantum=0 is not valid" in bad.stderr


def test_a_backfill_spec_round_trips_through_simulate(tmp_path: Path) -> None:
    path, _ = _two_jobs(tmp_path)
    r = runner.invoke(app, ["simulate", str(path), "--backfill", "conservative:depth=3,easy", "--json"])
    assert r.exit_code == 0, r.stderr
    assert sorted(run["backfill"] for run in json.loads(r.stdout)) == ["conservative:depth=3", "easy"]


def test_every_backfill_option_takes_a_spec(tmp_path: Path) -> None:
    path, _ = _two_jobs(tmp_path)
    for args in (
        ["mig", "plan", str(path), "--backfill", "conservative:depth=0"],
        ["predict", "eval", str(path), "--schedule", "--backfill", "conservative:depth=0"],
    ):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and "depth=0 is not valid" in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    ok = runner.invoke(app, ["mig", "plan", str(path), "--backfill", "conservative:depth=3", "--json"])
    assert ok.exit_code == 0, ok.stderr

"""The compiled core (gpuplan/compiled.py, setup.py): which modules this install runs compiled, and that
the compiled build and the plain source decide alike (the same schedules and forecasts, in two child
processes: this install as it is, and the source forced with GPUPLAN_PURE=1).

The golden schedules and the forecast property tests run on whatever this install is: compiled in CI
(`make test` after `make venv`, which builds it; the first test here fails in CI if it did not), so the
same test suite checks both the compiled build and, through the children below, the source."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

from gpuplan.compiled import COMPILED_MODULES, compiled_modules, source_reason

SRC = Path(__file__).resolve().parents[1] / "src"

_CHILD = """
import json, sys
from gpuplan.compiled import compiled_modules
from gpuplan.core.forecast import forecast
from gpuplan.core.scheduler import Scheduler
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.engine import simulate
from gpuplan.synth import synth_poisson

gpu = GpuSpec("A100-80GB", 80.0)
cluster = ClusterSpec("4x8", tuple(NodeSpec(f"n{i}", 8, gpu) for i in range(4)))
jobs = synth_poisson(600, seed=5, load=1.1, total_gpus=32)
runs = {}
for policy in ("fifo", "sjf", "las"):
    for backfill in ("none", "easy", "conservative"):
        for placer in ("first-fit", "best-fit"):
            r = simulate(jobs, cluster, policy, backfill, placer)
            runs[f"{policy}+{backfill}+{placer}"] = [(x.job_id, x.start_s, x.end_s, list(x.gpus)) for x in r.records]
for placer in ("spread", "fgd"):  # fgd: a placer class defined outside the compiled modules
    r = simulate(jobs, cluster, "fifo", "easy", placer)
    runs[f"fifo+easy+{placer}"] = [(x.job_id, x.start_s, x.end_s, list(x.gpus)) for x in r.records]
s = Scheduler(cluster, "fifo", "easy")
for k, j in enumerate(jobs[:400]):
    s.submit(k, j, now=0.0)
s.schedule(0.0)
fc = forecast(s, 0.0)
runs["forecast"] = sorted((jid, f.start_s, f.end_s, list(f.gpu_ids), f.reason) for jid, f in fc.jobs.items())
print(json.dumps({"compiled": compiled_modules(), "runs": runs}))
"""


def _child(pure: bool) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "GPUPLAN_PURE"}
    if pure:
        env["GPUPLAN_PURE"] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, timeout=240, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out: dict[str, object] = json.loads(proc.stdout)
    return out


def test_the_install_says_which_modules_run_compiled() -> None:
    state = compiled_modules()
    assert list(state) == list(COMPILED_MODULES)
    reason = source_reason()
    for name, compiled in state.items():
        base = SRC.joinpath(*name.split("."))
        built = list(base.parent.glob(base.name + ".*.so"))
        if reason is not None:  # the source is forced or the build is stale: all or nothing
            assert not compiled, (name, reason)
        else:
            assert compiled == bool(built), (name, built)
    if os.environ.get("CI") == "true" and not os.environ.get("GPUPLAN_NO_COMPILE"):
        # CI builds the core compiled (make venv); every module of it must run compiled
        assert all(state.values()), (state, reason)


def test_the_compiled_core_and_the_source_give_the_same_schedules_and_forecast() -> None:
    here, pure = _child(pure=False), _child(pure=True)
    assert not any(pure["compiled"].values())  # type: ignore[attr-defined]
    assert here["compiled"] == compiled_modules()  # what this install runs (compiled in CI)
    assert here["runs"] == pure["runs"]
    assert len(pure["runs"]) == 21  # type: ignore[arg-type]


def test_subclasses_of_the_compiled_seams_defined_elsewhere_run_on_the_compiled_core() -> None:
    # the built-in placers and backfill modes are compiled Python classes: a plugin's or a test's
    # subclass of them (here, in an interpreted module) is accepted by the compiled core (setup.py:
    # mypyc would otherwise check against the subclasses it compiled and refuse this one)
    from gpuplan.core.backfill import Easy
    from gpuplan.core.placement import FirstFit
    from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
    from gpuplan.sim.engine import simulate

    class Placer(FirstFit):
        name = "test-first-fit"

    class Mode(Easy):
        name = "test-easy"

    cluster = ClusterSpec("2x4", tuple(NodeSpec(f"n{i}", 4, GpuSpec("A100-80GB", 80.0)) for i in range(2)))
    jobs = [
        Job(str(i), float(i), 1 + i % 4, duration_s=30.0 + 7 * i, requested_s=60.0 + 7 * i) for i in range(30)
    ]
    ours = simulate(jobs, cluster, "fifo", Mode(), Placer())
    assert ours.records == simulate(jobs, cluster, "fifo", "easy", "first-fit").records
    assert isinstance(Placer(), FirstFit) and len(ours.records) == 30


def test_the_cores_records_pickle_for_sweeps_on_dask() -> None:
    from gpuplan.core.scheduler import Scheduler
    from gpuplan.core.view import Started
    from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
    from gpuplan.sim.engine import simulate

    cluster = ClusterSpec("1x8", (NodeSpec("n0", 8, GpuSpec("A100-80GB", 80.0)),))
    jobs = [Job(str(i), float(i), 1 + i % 4, duration_s=10.0 + i) for i in range(20)]
    result = simulate(jobs, cluster, "fifo", "easy")
    assert pickle.loads(pickle.dumps(result)).records == result.records
    s = Scheduler(cluster, "fifo", "easy")
    slot = s.submit(0, jobs[0])
    twin = pickle.loads(pickle.dumps(slot))
    assert (twin.jid, twin.gpus, twin.plan_s, twin.job) == (slot.jid, slot.gpus, slot.plan_s, slot.job)
    assert pickle.loads(pickle.dumps(Started(3, (1, 2)))) == Started(3, (1, 2))


def test_the_decisions_compare_hash_print_unpack_and_pickle_as_the_named_tuples_did() -> None:
    """`Started` and `Preempted` are compiled classes (were NamedTuples): every use of them still works."""
    from gpuplan.core.preemption import Preempted
    from gpuplan.core.view import Started

    st, p = Started(3, (1, 2)), Preempted(5, (0,), "checkpoint")
    assert st == Started(3, (1, 2)) and st != Started(3, (1,)) and st != (3, (1, 2))
    assert p == Preempted(5, (0,), "checkpoint") and p != Preempted(5, (0,), "requeue")
    assert len({st, Started(3, (1, 2)), p, Preempted(5, (0,), "checkpoint")}) == 2
    assert repr(st) == "Started(jid=3, gpu_ids=(1, 2))"
    assert repr(p) == "Preempted(jid=5, gpu_ids=(0,), action='checkpoint')"
    jid, gpus = st
    assert (jid, gpus) == (3, (1, 2)) and tuple(p) == (5, (0,), "checkpoint")
    assert pickle.loads(pickle.dumps(p)) == p and pickle.loads(pickle.dumps(st)) == st


def test_a_copy_of_the_package_without_the_compiled_library_runs_the_source(tmp_path: Path) -> None:
    """A copy of src/gpuplan alone (the library beside it left out: how the multi-user tests once
    copied it) must run the source and say why, never fail on `import gpuplan_core__mypyc`."""
    import shutil

    shutil.copytree(SRC / "gpuplan", tmp_path / "gpuplan", ignore=shutil.ignore_patterns("__pycache__"))
    code = (
        "import json, gpuplan; from gpuplan.compiled import compiled_modules, source_reason; "
        "from gpuplan.core.forecast import forecast; "
        "print(json.dumps([gpuplan.__file__, source_reason(), compiled_modules()]))"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("GPUPLAN_PURE", None)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    where, reason, state = json.loads(proc.stdout)
    assert Path(where).is_relative_to(tmp_path), where  # the copy ran, not the install
    built = any((SRC / "gpuplan" / "core").glob("forecast.*.so"))
    if built:  # the shims were copied without their library: the source runs, and it says so
        assert reason is not None and "gpuplan_core__mypyc" in reason, reason
    assert not any(state.values()), state

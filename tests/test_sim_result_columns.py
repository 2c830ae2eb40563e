"""The run's columnar parts behind the public API: the utilization Timeline and the records' order."""

from __future__ import annotations

import itertools
import pickle
from dataclasses import replace

from gpuplan.sim.metrics import compute_metrics, occupied_gpu_seconds
from gpuplan.sim.result import JobRecord, SimResult, Timeline, start_order


def test_a_timeline_reads_as_the_list_of_steps_it_holds() -> None:
    steps = [(0.0, 0), (1.5, 4), (3.0, 2)]
    tl = Timeline(steps)
    tl.add(4.0, 0)
    steps.append((4.0, 0))
    assert tl == steps and list(tl) == steps and len(tl) == 4
    assert tl[-1] == (4.0, 0) and tl[1:3] == steps[1:3] and tl.busy[-1] == 0
    tl[0] = (0.0, 1)
    assert tl[0] == (0.0, 1) and tl != steps
    assert pickle.loads(pickle.dumps(tl)) == tl  # sweeps ship results between processes
    assert occupied_gpu_seconds(tl, 5.0) == occupied_gpu_seconds(list(tl), 5.0) == 1.5 * 1 + 1.5 * 4 + 1.0 * 2


def test_start_order_is_start_then_job_id_and_stable() -> None:
    recs = [JobRecord(i, 0.0, s, s + 1, (0,)) for i, s in [("b", 2.0), ("a", 2.0), ("c", 1.0), ("a", 1.0)]]
    assert start_order(recs) == sorted(recs, key=lambda r: (r.start_s, r.job_id))
    assert [r.job_id for r in start_order(recs)] == ["a", "c", "a", "b"]


def _records(n: int, seed: int) -> list[JobRecord]:
    import random

    rng = random.Random(seed)
    out = []
    for i in range(n):
        submit = rng.uniform(0, 1e5)
        start = submit + rng.choice([0.0, rng.expovariate(1 / 3600)])
        end = start + rng.choice([0.5, 9.99, rng.expovariate(1 / 7200)])
        width = rng.choice([1, 1, 2, 3, 8])
        first = rng.randrange(0, 32 - width + 1)
        out.append(
            JobRecord(f"j{i}", submit, start, end, tuple(range(first, first + width)), user=f"u{i % 7}")
        )
    return out


def test_user_figures_by_columns_are_a_loops_figures_to_the_last_bit() -> None:
    from gpuplan.sim.fairness import BSLD_BOUND_S, user_figures

    recs = _records(5_000, seed=5)
    acc: dict[str, list[float]] = {}
    for r in recs:  # the plain loop, in record order
        run = r.end_s - r.start_s
        a = acc.setdefault(r.user, [0, 0.0, 0.0, 0.0])
        a[0] += 1
        a[1] += len(r.gpus) * run / 3600.0
        a[2] += r.start_s - r.submit_s
        a[3] += max((r.end_s - r.submit_s) / max(run, BSLD_BOUND_S), 1.0)
    expected = [
        {"user": u, "jobs": n, "gpu_hours": g, "mean_wait_s": w / n, "mean_bounded_slowdown": b / n}
        for u, (n, g, w, b) in sorted(acc.items())
    ]
    assert user_figures(recs) == expected
    assert user_figures([JobRecord("x", 0.0, 0.0, 1.0, (0,))]) == []


def test_occupied_gpu_seconds_is_a_loops_sum_to_the_last_bit() -> None:
    import random

    rng = random.Random(7)
    steps = [(0.0, 0)]
    for _ in range(10_000):
        steps.append((steps[-1][0] + rng.expovariate(1 / 37.3), rng.randrange(0, 1025)))
    until = steps[-1][0] + 11.1
    total = 0.0
    for (t, b), (t_next, _) in itertools.pairwise(steps):
        total += b * (min(t_next, until) - t)
    total += steps[-1][1] * (until - steps[-1][0])
    assert occupied_gpu_seconds(Timeline(steps), until) == occupied_gpu_seconds(steps, until) == total
    assert occupied_gpu_seconds(Timeline(steps), steps[5000][0]) < total  # steps after `until` count nothing


def test_spanned_jobs_counts_the_records_on_more_than_one_node() -> None:
    from dataclasses import replace

    from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec
    from gpuplan.sim.metrics import compute_metrics

    cluster = ClusterSpec("4x8", tuple(NodeSpec(f"n{i}", 8, GpuSpec("A100-80GB", 80.0)) for i in range(4)))
    labels = [f"n{i // 8}/gpu{i % 8}" for i in range(32)]
    recs = _records(2_000, seed=9)
    expected = sum(1 for r in recs if len({labels[g].split("/")[0] for g in r.gpus}) > 1)
    metrics = compute_metrics(recs, Timeline([(0.0, 0)]), 32, 0.0, 1.0)
    result = SimResult("fifo", "none", "first-fit", False, cluster, metrics, recs, Timeline(), labels)
    assert 0 < expected < len(recs) and result.spanned_jobs == expected
    assert replace(result, records=[r for r in recs if len(r.gpus) == 1]).spanned_jobs == 0


def test_start_order_of_many_ties_is_one_stable_sort_on_start_then_id() -> None:
    import random

    rng = random.Random(11)
    # few distinct starts and ids: long runs of equal starts, and equal (start, id) pairs whose order
    # must stay as it was (a stable sort); the records come in end order, as a run appends them
    recs = [
        JobRecord(f"j{rng.randrange(40)}", 0.0, s, s + rng.choice([1.0, 5.0, 60.0]), (0,))
        for s in (float(rng.randrange(200)) for _ in range(3_000))
    ]
    recs.sort(key=lambda r: r.end_s)
    want = sorted(recs, key=lambda r: (r.start_s, r.job_id))
    got = start_order(list(recs))
    assert [id(r) for r in got] == [id(r) for r in want]
    assert start_order([]) == [] and start_order(recs[:1]) == recs[:1]


def test_spanned_jobs_counts_each_record_of_a_shared_gpu_set_and_none_without_gpus() -> None:
    from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec
    from gpuplan.sim.metrics import compute_metrics

    cluster = ClusterSpec("2x2", tuple(NodeSpec(f"n{i}", 2, GpuSpec("A100-80GB", 80.0)) for i in range(2)))
    labels = ["n0/gpu0", "n0/gpu1", "n1/gpu0", "n1/gpu1"]
    across, within = (1, 2), (0, 1)  # one tuple shared by several records, as the simulator keeps them
    gpu_sets = [across, within, across, (), (3,), across, (0, 1, 2, 3), within]
    recs = [JobRecord(f"j{i}", 0.0, 0.0, 1.0, g) for i, g in enumerate(gpu_sets)]
    metrics = compute_metrics(recs, Timeline([(0.0, 0)]), 4, 0.0, 1.0)
    result = SimResult("fifo", "none", "first-fit", False, cluster, metrics, recs, Timeline(), labels)
    assert result.spanned_jobs == 4  # three records on `across` and the one on every GPU


def test_never_fitting_jobs_split_as_a_test_of_each_job_would() -> None:
    import random

    from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
    from gpuplan.sim.fits import allow_spanning, fits_on, split_never_fitting

    cluster = ClusterSpec("2x4", tuple(NodeSpec(f"n{i}", 4, GpuSpec("A100-40GB", 40.0)) for i in range(2)))
    rng = random.Random(3)
    jobs = [
        Job(
            f"j{i}",
            float(i),
            rng.choice([1, 2, 4, 6, 8, 9]),
            mem_gb=rng.choice([None, 10.0, 39.5, 41.0]),
            est_mem_gb=rng.choice([None, 5.0, 40.0, 45.0]),
            duration_s=1.0,
            may_span_nodes=rng.random() < 0.3,
        )
        for i in range(2_000)
    ]
    for oracle in (False, True):
        fits = fits_on(cluster, oracle)
        ok, never = split_never_fitting(jobs, cluster, oracle)
        assert ok == [j for j in jobs if fits(j)] and never == [j for j in jobs if not fits(j)]
        assert ok and never
    _, n = allow_spanning(jobs, cluster)
    assert n == sum(1 for j in jobs if 4 < j.gpus <= 8 and not j.may_span_nodes) > 0
    assert allow_spanning([j for j in jobs if j.gpus <= 4], cluster)[1] == 0


def test_sorting_gives_start_orders_records_and_the_columns_of_the_sorted_records() -> None:
    import numpy as np

    from gpuplan.sim.columns import RecordColumns, RecordList

    recs = _records(3_000, seed=12)
    for r in recs[::7]:  # ties in start, some of them with equal ids too
        r.start_s = 500.0
    recs[5].job_id = recs[12].job_id
    recs.sort(key=lambda r: r.end_s)  # as a run makes them
    want = start_order(list(recs))
    made = list(recs)
    got, columns = RecordColumns.sorting(made)
    assert isinstance(got, RecordList) and [id(r) for r in got] == [id(r) for r in want] and made == []
    fresh = RecordColumns(list(got))  # the same columns taken of the sorted records
    for name in ("submit_s", "start_s", "end_s"):
        assert np.array_equal(getattr(columns, name), getattr(fresh, name))
    assert [columns.users[c] for c in columns.user_codes] == [r.user for r in got]
    assert [columns.gpu_sets[c] for c in columns.set_codes] == [r.gpus for r in got]
    assert columns.widths().tolist() == [len(r.gpus) for r in got] and columns.exact_floats


def test_a_results_columns_are_kept_only_while_its_record_list_is_unchanged() -> None:
    from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec
    from gpuplan.sim.columns import RecordColumns

    cluster = ClusterSpec("4x8", tuple(NodeSpec(f"n{i}", 8, GpuSpec("A100-80GB", 80.0)) for i in range(4)))
    labels = [f"n{i // 8}/gpu{i % 8}" for i in range(32)]
    recs, columns = RecordColumns.sorting(_records(500, seed=3))
    metrics = compute_metrics(columns, Timeline([(0.0, 0)]), 32, 0.0, 1.0)
    assert metrics == compute_metrics(list(recs), Timeline([(0.0, 0)]), 32, 0.0, 1.0)
    result = SimResult("fifo", "none", "first-fit", False, cluster, metrics, recs, Timeline(), labels)
    assert result.keep_columns(columns).record_columns() is columns
    before = result.user_figures()
    recs[0] = JobRecord(recs[0].job_id, 0.0, 0.0, 1e6, (0, 8), user="late")  # a record replaced
    assert result.record_columns() is not columns and result.record_columns().end_s[0] == 1e6
    assert result.user_figures() != before and any(u["user"] == "late" for u in result.user_figures())
    plain = SimResult("fifo", "none", "first-fit", False, cluster, metrics, list(recs), Timeline(), labels)
    assert plain.keep_columns(result.record_columns()).record_columns() is not result.record_columns()
    assert plain.user_figures() == result.user_figures() and plain.spanned_jobs == result.spanned_jobs
    back = pickle.loads(pickle.dumps(result))  # as a sweep's worker sends it
    assert back.user_figures() == result.user_figures() and back.records == list(recs)
    assert back.record_columns() is back.record_columns()  # a RecordList again: taken once, kept


def test_a_twin_run_shares_its_first_runs_records_and_columns() -> None:
    from gpuplan.model import ClusterSpec, GpuSpec, NodeSpec
    from gpuplan.sim.matrix import run_matrix
    from gpuplan.synth import synth_poisson

    cluster = ClusterSpec("2x8", tuple(NodeSpec(f"n{i}", 8, GpuSpec("A100-80GB", 80.0)) for i in range(2)))
    jobs = [
        replace(j, est_duration_s=None, requested_s=None)
        for j in synth_poisson(300, seed=2, load=1.2, total_gpus=16)
    ]
    fifo, sjf = run_matrix(jobs, cluster, ["fifo", "sjf"], ["easy"], show_progress=False)  # sjf = fifo here
    assert fifo.records is sjf.records and fifo.record_columns() is sjf.record_columns()
    assert fifo.user_figures() == sjf.user_figures() and fifo.spanned_jobs == sjf.spanned_jobs


def test_a_record_list_counts_every_change_and_copies_as_a_record_list() -> None:
    import copy

    from gpuplan.sim.columns import RecordList

    recs = RecordList(_records(5, seed=1))
    changes = [
        lambda r: r.__setitem__(0, r[1]), lambda r: r.__delitem__(0), lambda r: r.__iadd__(r[:1]),
        lambda r: r.__imul__(1), lambda r: r.append(r[0]), lambda r: r.extend(r[:1]), lambda r: r.insert(0, r[1]),
        lambda r: r.pop(), lambda r: r.remove(r[0]), lambda r: r.sort(key=lambda x: x.end_s), lambda r: r.reverse(),
        lambda r: r.clear(),
    ]  # fmt: skip
    for n, change in enumerate(changes, start=1):
        change(recs)
        assert recs.version == n
    recs.extend(_records(3, seed=2))
    for other in (pickle.loads(pickle.dumps(recs)), copy.deepcopy(recs), copy.copy(recs)):
        assert type(other) is RecordList and other == recs and other.version == 0

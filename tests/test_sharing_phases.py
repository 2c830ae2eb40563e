"""The simulator's sharing path: jobs in three phases (start-up, init, GPU work) slowing each other down on
one GPU, checked against schedules computed by hand (three and more jobs per GPU), and the replay of a
measured queue from solo profiles alone (the invented fixture always; the real H200 queue when present)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuplan.core.interference import ColocationError, InterferenceModel
from gpuplan.errors import InputError
from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec
from gpuplan.sim.engine import simulate
from gpuplan.sim.queue_replay import format_queue_replay, replay_queue, solo_profile_job
from gpuplan.traces import read_trace, write_trace

FIXTURES = Path(__file__).parent / "fixtures"
SHARED_H200 = Path(__file__).parents[1].parent / "shared" / "data" / "h200"
H200_COLOCATION = SHARED_H200 / "colocation.json"
H200_QUEUE = SHARED_H200 / "queue-fifo.json"
needs_h200_queue = pytest.mark.skipif(
    not (H200_COLOCATION.is_file() and H200_QUEUE.is_file()),
    reason=f"real H200 queue data absent: {H200_QUEUE} (../shared/data is not shipped)",
)

# slowdown_i = 1 + Σ_j u_j (u as a fraction): a 100 % busy neighbour doubles a job's time; init takes twice
# as long while sharing.
ADDITIVE = InterferenceModel(alpha=0.0, beta=1.0, gamma=0.0, init_stretch=1.0)


def _one_gpu(mem_gb: float = 80.0, sharing: bool = True, max_jobs: int = 8) -> ClusterSpec:
    return ClusterSpec(
        "one", (NodeSpec("n", 1, GpuSpec("G", mem_gb)),), sharing=sharing, max_jobs_per_gpu=max_jobs
    )


def _ends(jobs: list[Job], model: InterferenceModel = ADDITIVE, **kw: Any) -> dict[str, float]:
    result = simulate(jobs, kw.pop("cluster", _one_gpu()), "fifo", "none", interference=model, **kw)
    return {r.job_id: r.end_s for r in result.records}


def _job(jid: str, duration_s: float, util: float = 100.0, **kw: Any) -> Job:
    return Job(jid, 0.0, 1, mem_gb=1.0, duration_s=duration_s, gpu_util_pct=util, **kw)


# --- hand-computed schedules, three and more jobs on one GPU -----------------------------------------------


def test_three_busy_jobs_share_the_gpu_in_thirds_then_halves() -> None:
    # rates 1/3 until a (3 s of work) ends at 9; b and c have done 3 s each; then 1/2 each: b's last 3 s
    # end at 15, c has 3 s left and runs alone: 18.
    ends = _ends([_job("a", 3.0), _job("b", 6.0), _job("c", 9.0)])
    assert ends == pytest.approx({"a": 9.0, "b": 15.0, "c": 18.0})


def test_four_equal_busy_jobs_end_together_at_four_times_their_length() -> None:
    assert _ends([_job(k, 5.0) for k in "abcd"]) == pytest.approx(dict.fromkeys("abcd", 20.0))


def test_three_phases_by_hand() -> None:
    # j1: start-up 2, init 2, GPU 4; j2: GPU 4; j3: init 4, GPU 2. Init runs at 1/2 while sharing.
    # 0-2: j1 start-up (1), j2 GPU alone among GPU-phase jobs (1), j3 init (1/2): j3 init 1 of 4.
    # 2-4: j1 init 1/2 (1 of 2), j2 ends at 4, j3 init 1/2 (2 of 4).
    # 4-6: j1 init 1/2 ends at 6; j3 init 3 of 4.  6-8: j1 GPU alone (1): 2 of 4; j3 init ends at 8.
    # 8-12: j1 and j3 both in GPU phase, 100 % busy: 1/2 each, 2 s left each: both end at 12.
    jobs = [
        _job("j1", 8.0, startup_s=2.0, init_s=2.0),
        _job("j2", 4.0),
        _job("j3", 6.0, init_s=4.0),
    ]
    assert _ends(jobs) == pytest.approx({"j1": 12.0, "j2": 4.0, "j3": 12.0})


def test_the_shipped_form_with_three_utils_by_hand() -> None:
    # alpha −0.1, beta 1, gamma 1: term = −0.1 + u_j (1 + (1 − u_i)), summed over the neighbours
    model = InterferenceModel(alpha=-0.1, beta=1.0, gamma=1.0)
    s_a = 1 + (-0.1 + 0.5) + (-0.1 + 0.2)  # a (100 %): 1.5
    s_b = 1 + (-0.1 + 1.0 * 1.5) + (-0.1 + 0.2 * 1.5)  # b (50 %): 2.6
    s_c = 1 + (-0.1 + 1.0 * 1.8) + (-0.1 + 0.5 * 1.8)  # c (20 %): 3.5
    t_a = 10.0 * s_a  # a ends first
    left_b, left_c = 10.0 - t_a / s_b, 10.0 - t_a / s_c
    s_b2, s_c2 = 1 + (-0.1 + 0.2 * 1.5), 1 + (-0.1 + 0.5 * 1.8)  # b and c alone together
    t_b = t_a + left_b * s_b2
    t_c = t_b + (left_c - left_b * s_b2 / s_c2)
    ends = _ends([_job("a", 10.0, 100.0), _job("b", 10.0, 50.0), _job("c", 10.0, 20.0)], model)
    assert ends == pytest.approx({"a": t_a, "b": t_b, "c": t_c})


def test_whole_job_busy_percent_counts_in_the_gpu_phase_only() -> None:
    # b: 25 % over 8 s, of which 4 s are start-up: 50 % busy in its GPU phase. a: GPU work only, 8 s, 100 %.
    # 0-4: b in start-up, a alone in the GPU phase (rate 1): 4 of 8 done.
    # from 4: a at 1 / (1 + 0.5) needs 6 s for its last 4: ends at 10; b at 1 / (1 + 1) does 3 of 4 by then.
    # 10-11: b alone: ends at 11.
    ends = _ends([_job("a", 8.0), _job("b", 8.0, 25.0, startup_s=4.0)])
    assert ends == pytest.approx({"a": 10.0, "b": 11.0})


def test_a_job_alone_keeps_its_duration_whatever_its_phases() -> None:
    job = _job("a", 10.0, startup_s=3.0, init_s=4.0)
    assert _ends([job]) == pytest.approx({"a": 10.0})
    assert _ends([job], cluster=_one_gpu(sharing=False)) == pytest.approx({"a": 10.0})


def test_a_duration_measured_while_sharing_is_never_slowed_but_still_slows_others() -> None:
    # s: init 3 then GPU 3 (100 %), never slowed: ends at 6. b: GPU 6 s, 100 %.
    # 0-3: s in init, b alone in the GPU phase: 3 done; 3-6: both in the GPU phase, b at 1/2: 1.5 done;
    # from 6: b alone, 1.5 left: ends at 7.5.
    shared = _job("s", 6.0, init_s=3.0, duration_includes_sharing=True)
    assert _ends([shared, _job("b", 6.0)]) == pytest.approx({"s": 6.0, "b": 7.5})


def test_memory_cap_holds_the_queue_in_order() -> None:
    # cap 10 GB: a (6 GB) and b (4 GB) share; c (6 GB) waits for a, d (1 GB) may not skip ahead of c.
    # a, b GPU 4 s each at 1/2: both end at 8; c and d start at 8 together, 4 s each at 1/2: 16.
    jobs = [
        Job(k, 0.0, 1, mem_gb=m, duration_s=4.0, gpu_util_pct=100.0) for k, m in zip("abcd", (6, 4, 6, 1))
    ]
    result = simulate(jobs, _one_gpu(mem_gb=10.0), "fifo", "none", interference=ADDITIVE)
    starts = {r.job_id: r.start_s for r in result.records}
    ends = {r.job_id: r.end_s for r in result.records}
    assert starts == pytest.approx({"a": 0.0, "b": 0.0, "c": 8.0, "d": 8.0})
    assert ends == pytest.approx({"a": 8.0, "b": 8.0, "c": 16.0, "d": 16.0})


# --- replay of a measured queue from solo profiles -----------------------------------------------------------


def test_solo_profile_job_splits_the_wall_time_into_phases() -> None:
    job = solo_profile_job(
        "x", {"wall_s": 15.705, "init_s": 5.887, "run_s": 5.188, "mean_gpu_util": 33.1}, 30.0
    )
    assert (job.duration_s, job.init_s, job.mem_gb, job.gpu_util_pct) == (15.705, 5.887, 30.0, 33.1)
    assert job.startup_s == pytest.approx(15.705 - 5.887 - 5.188)
    assert job.gpu_phase_s() == pytest.approx(5.188)


def test_fixture_queue_is_reproduced_by_the_model_fitted_on_the_fixture_pairs() -> None:
    # queue_small.json was generated by the coefficients behind colocation_small.json; the fit on the
    # pairs recovers them, so the replay from solo profiles must match the queue's timeline closely.
    model, _ = InterferenceModel.from_colocation(FIXTURES / "colocation_small.json")
    replay = replay_queue(FIXTURES / "colocation_small.json", FIXTURES / "queue_small.json", model)
    assert [r.name for r in replay.rows] == ["q1", "q2", "q3", "q4", "q5", "q6"]
    assert abs(replay.makespan_rel_error) < 0.005
    assert replay.max_end_rel_error < 0.005
    assert replay.rows[3].predicted_start_s == pytest.approx(replay.rows[2].predicted_end_s)  # waits for q3
    table = format_queue_replay(replay)
    assert table.count("\n| q") == 6 and "makespan: measured 135.0 s" in table


def test_fixture_queue_is_far_off_when_the_phases_are_ignored() -> None:
    # The same replay with a model that treats the whole job as GPU work (start-up and init contending):
    # this is what the simulator did before phases, and the error it makes.
    model, _ = InterferenceModel.from_colocation(FIXTURES / "colocation_small.json")
    whole = _whole_job_replay(FIXTURES / "colocation_small.json", FIXTURES / "queue_small.json", model)
    assert whole > 0.15


def _whole_job_replay(colocation: Path, queue: Path, model: InterferenceModel | None = None) -> float:
    """Makespan relative error of the replay when every job is all GPU work at its whole-job busy %."""
    solo = json.loads(colocation.read_text())["solo"]
    doc = json.loads(queue.read_text())
    by_name = {j["name"]: j for j in doc["jobs"]}
    jobs = [
        Job(n, 0.0, 1, mem_gb=by_name[n]["declared_mem_gb"], duration_s=solo[by_name[n]["kind"]]["wall_s"],
            gpu_util_pct=solo[by_name[n]["kind"]]["mean_gpu_util"])
        for n in doc["order"]
    ]  # fmt: skip
    cluster = _one_gpu(doc["cap_gb"], max_jobs=len(jobs))
    result = simulate(jobs, cluster, "fifo", "none", interference=model or InterferenceModel.default())
    return float((result.metrics.makespan_s - doc["makespan_s"]) / doc["makespan_s"])


@needs_h200_queue
def test_h200_queue_replayed_from_solo_profiles_within_10_pct_makespan_and_15_pct_per_job() -> None:
    replay = replay_queue(H200_COLOCATION, H200_QUEUE)
    assert len(replay.rows) == 10
    assert abs(replay.makespan_rel_error) <= 0.10, format_queue_replay(replay)
    for row in replay.rows:
        assert abs(row.end_rel_error) <= 0.15, (row, format_queue_replay(replay))


@needs_h200_queue
def test_h200_queue_whole_job_model_is_the_error_of_the_issue() -> None:
    # the issue measured +57 % (148.7 s) with the earlier coefficients; the whole-job view stays that far off
    assert _whole_job_replay(H200_COLOCATION, H200_QUEUE) > 0.5
    old = InterferenceModel(-0.24220529348485267, 1.3779498019397332, 1.8633373878756931)
    assert _whole_job_replay(H200_COLOCATION, H200_QUEUE, old) == pytest.approx(148.7 / 94.578 - 1, abs=0.002)


# --- bad queue files: each error names the file and the key ------------------------------------------------


def _queue_doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / "queue_small.json").read_text())
    return doc


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("cap_gb"), "cap_gb: missing"),
        (lambda d: d.update(cap_gb=-1), "cap_gb: value -1 is not a number > 0"),
        (lambda d: d.update(jobs=[]), "jobs: is not a non-empty list"),
        (lambda d: d["jobs"][1].update(kind="llm"), "jobs[1].kind: value 'llm' has no solo profile"),
        (lambda d: d["jobs"][2].update(name="q1"), "jobs[2].name: 'q1' is empty or repeated"),
        (lambda d: d["jobs"][0].update(end_s="late"), "jobs[0].end_s: value 'late' is not"),
        (lambda d: d["order"].pop(), "order: does not list every job name once"),
        (lambda d: d["jobs"].__setitem__(0, 3), "jobs[0]: is a int, not an object"),
    ],
)
def test_bad_queue_file(tmp_path: Path, change: Any, message: str) -> None:
    doc = _queue_doc()
    change(doc)
    path = tmp_path / "queue.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ColocationError) as info:
        replay_queue(FIXTURES / "colocation_small.json", path)
    assert str(path) in str(info.value) and message in str(info.value)


def test_queue_file_not_json(tmp_path: Path) -> None:
    path = tmp_path / "queue.json"
    path.write_text("{not json")
    with pytest.raises(ColocationError, match="not JSON"):
        replay_queue(FIXTURES / "colocation_small.json", path)


# --- the trace fields ------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_phases_survive_every_own_format(tmp_path: Path, suffix: str) -> None:
    jobs = [_job("a", 10.0, startup_s=2.5, init_s=3.0), _job("b", 4.0)]
    path = tmp_path / f"t{suffix}"
    write_trace(jobs, path)
    back = read_trace(path).jobs
    assert [(j.startup_s, j.init_s) for j in back] == [(2.5, 3.0), (None, None)]


def test_generic_csv_recognizes_startup_and_init_columns(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit,num_gpus,runtime,startup,init\nx,0,1,60,5,10\n", encoding="utf-8")
    (job,) = read_trace(path).jobs
    assert (job.duration_s, job.startup_s, job.init_s, job.gpu_phase_s()) == (60.0, 5.0, 10.0, 45.0)


@pytest.mark.parametrize(
    ("text", "where", "field"),
    [
        ("id,submit_s,gpus,duration_s,startup_s,init_s\na,0,1,10,4,7\n", "t.csv:2", "init_s"),
        ("id,submit_s,gpus,duration_s,startup_s\na,0,1,10,11\n", "t.csv:2", "startup_s"),
        ("id,submit_s,gpus,init_s\na,0,1,-1\n", "t.csv:2", "init_s"),
    ],
)
def test_bad_phases_name_the_line_and_field(tmp_path: Path, text: str, where: str, field: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_trace(path)
    assert where in str(e.value) and field in str(e.value)


def test_phases_longer_than_the_job_in_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "submit_s": 0, "gpus": 1, "duration_s": 5, "init_s": 6}\n', encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_trace(path)
    assert "t.jsonl:1" in str(e.value) and "startup_s + init_s at most duration_s (5.0 s)" in str(e.value)


def test_phases_longer_than_the_job_are_cut_to_its_duration() -> None:
    """Start-up 5 s and init 30 s of a 10 s job: the phases split its 10 s (5 + 5 + 0 on the GPU),
    so alone on a GPU it runs 10 s, not 15 (each phase was once capped on its own)."""
    assert _ends([_job("a", 10.0, startup_s=5.0, init_s=30.0)]) == {"a": 10.0}
    assert _ends([_job("b", 10.0, startup_s=30.0)]) == {"b": 10.0}

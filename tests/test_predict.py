"""Predictors, history features, leakage, evaluation, model files and scheduling with predictions."""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest

from gpuplan.cluster import load_cluster
from gpuplan.errors import UnknownNameError
from gpuplan.model import Job
from gpuplan.predict import (
    ModelFileError,
    PredictError,
    apply_model,
    compare_schedules,
    evaluate,
    get_predictor,
    history_stats,
    job_end_s,
    load_model,
    online_predictions,
    predictor_names,
    read_header,
    save_model,
    synth_history,
)
from gpuplan.predict.history import STAT_NAMES
from gpuplan.predict.modelfile import FORMAT
from gpuplan.predict.schedule import scaled_arrivals

SMALL_GBM = {"max_iter": 15}  # enough trees to exercise the model, quick to fit
COL = {n: i for i, n in enumerate(STAT_NAMES)}


def _job(
    jid: str, submit_s: float, duration_s: float | None, user: str = "u", name: str = "n", **kw: object
) -> Job:
    return Job(jid, submit_s, 1, duration_s=duration_s, user=user, name=name, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def history() -> list[Job]:
    return synth_history(1200, seed=5)


# ---- history features: only records that ended before the submit ----------------------------------


def test_a_running_job_is_not_yet_history() -> None:
    jobs = [
        _job("a", 0, 100),  # ends at 100
        _job("b", 50, 10),  # a still runs
        _job("c", 100, 10),  # a ends exactly now: not strictly before
        _job("d", 150, 10),  # a, b and c have all ended (c at 110)
    ]
    st = history_stats(jobs, "duration", online=jobs)
    assert st[0, COL["user_name_n"]] == 0
    assert st[1, COL["user_name_n"]] == 0
    assert st[2, COL["user_name_n"]] == 1  # b ended at 60
    assert st[2, COL["user_name_last"]] == 10
    assert st[3, COL["user_name_n"]] == 3
    assert st[3, COL["user_name_median"]] == 10  # median of 100, 10, 10
    assert st[3, COL["user_name_last"]] == 10  # c ended last (110)


def test_end_time_comes_from_meta_then_start_then_submit() -> None:
    assert job_end_s(_job("a", 0, 10, meta={"start_s": 500.0, "end_s": 510.0})) == 510.0
    assert job_end_s(_job("a", 0, 10, meta={"start_s": 500.0})) == 510.0
    assert job_end_s(_job("a", 0, 10)) == 10.0
    assert job_end_s(_job("a", 0, None)) is None
    assert job_end_s(_job("a", 0, 10, meta={"censored": True})) is None


def test_a_queued_job_becomes_history_when_it_ends_not_when_it_would_have() -> None:
    # a waited 1000 s in the queue: its record is history only from its real end
    jobs = [
        _job("a", 0, 10, meta={"start_s": 1000.0, "end_s": 1010.0}),
        _job("b", 500, 10),
        _job("c", 2000, 10),
    ]
    st = history_stats(jobs, "duration", online=jobs)
    assert st[1, COL["user_name_n"]] == 0
    assert st[2, COL["user_name_n"]] == 2


def test_a_zero_length_job_is_not_its_own_history() -> None:
    jobs = [_job("a", 5, 0.0)]
    assert history_stats(jobs, "duration", online=jobs)[0, COL["all_n"]] == 0
    rm = get_predictor("rolling-median").fit([_job("h", 0, 7.0)])
    assert rm.predict(jobs, past=[])[0] == 7.0  # the fitted median, not its own 0


def test_levels_fall_back_from_user_name_to_user_to_everyone() -> None:
    past = [_job("a", 0, 100, user="x", name="train"), _job("b", 0, 300, user="y", name="eval")]
    rm = get_predictor("rolling-median").fit(past)
    queries = [_job("q1", 1000, None, user="x", name="train"), _job("q2", 1000, None, user="x", name="new"),
               _job("q3", 1000, None, user="z", name="new")]  # fmt: skip
    assert rm.predict(queries).tolist() == [100.0, 100.0, 200.0]


# ---- leakage ---------------------------------------------------------------------------------------


def _ordered(jobs: list[Job]) -> list[Job]:
    return sorted(jobs, key=lambda j: j.submit_s)


@pytest.mark.parametrize("name", ["rolling-median", "gbm"])
def test_no_prediction_changes_when_later_records_change(history: list[Job], name: str) -> None:
    jobs = _ordered(history)
    params = SMALL_GBM if name == "gbm" else None
    before, _ = online_predictions(jobs, "duration", name, chunks=3, params=params)
    m = 1000  # in the last chunk, after the gbm's refit
    rng = np.random.default_rng(0)
    changed = jobs[:m] + [
        dataclasses.replace(j, duration_s=float(rng.uniform(1, 1e5)), name=f"x{k}", requested_s=None)
        for k, j in enumerate(jobs[m:])
    ]
    after, _ = online_predictions(changed, "duration", name, chunks=3, params=params)
    np.testing.assert_array_equal(before[:m], after[:m])
    assert not np.array_equal(before[m:], after[m:])


@pytest.mark.parametrize("name", ["rolling-median", "gbm"])
def test_no_prediction_uses_its_own_record_or_one_still_running(history: list[Job], name: str) -> None:
    jobs = _ordered(history)
    params = SMALL_GBM if name == "gbm" else None
    before, _ = online_predictions(jobs, "duration", name, chunks=3, params=params)
    i = 1000
    t = jobs[i].submit_s
    running = [k for k in range(i) if job_end_s(jobs[k]) >= t]  # type: ignore[operator]
    assert running, "the fixture should have jobs still running at this submit"
    changed = list(jobs)
    changed[i] = dataclasses.replace(jobs[i], duration_s=jobs[i].duration_s * 50)  # type: ignore[operator]
    for k in running:  # longer: still running at t, so still not history
        changed[k] = dataclasses.replace(jobs[k], duration_s=jobs[k].duration_s * 3)  # type: ignore[operator]
    after, _ = online_predictions(changed, "duration", name, chunks=3, params=params)
    assert after[i] == before[i]


def test_a_duration_hidden_in_the_next_record_does_not_help() -> None:
    rng = np.random.default_rng(1)
    dur = np.round(np.exp(rng.normal(7, 1, 1500)))
    base = [Job(f"j{k}", 600.0 * k, 1, duration_s=float(d), user="u") for k, d in enumerate(dur)]
    # job k+1's name and limit carry job k's duration
    leaky = [dataclasses.replace(j, name=f"after-{int(dur[k - 1])}" if k else "first",
                                 requested_s=float(dur[k - 1]) * 1000 if k else None) for k, j in enumerate(base)]  # fmt: skip
    plain = [dataclasses.replace(j, name=f"after-{k}", requested_s=1e9) for k, j in enumerate(base)]
    params = {"gbm": SMALL_GBM}
    names = ["global-median", "rolling-median", "gbm"]
    r_leaky = evaluate(leaky, "duration", names, chunks=3, params=params)
    r_plain = evaluate(plain, "duration", names, chunks=3, params=params)
    floor = r_plain.score_of("global-median").mae  # type: ignore[union-attr]
    for name in ("rolling-median", "gbm"):
        assert r_leaky.score_of(name).mae > 0.9 * floor  # type: ignore[union-attr,operator]
        assert r_leaky.score_of(name).within_2x < 0.8  # type: ignore[union-attr,operator]


# ---- predictors and bad input ----------------------------------------------------------------------


def test_registry_lists_the_predictors_and_refuses_unknown_names() -> None:
    assert predictor_names()[:4] == ["limit", "global-median", "rolling-median", "gbm"]
    with pytest.raises(UnknownNameError, match="valid names: limit, global-median"):
        get_predictor("lgbm")
    with pytest.raises(UnknownNameError, match="prediction target 'gpu'"):
        get_predictor("gbm", "gpu")
    with pytest.raises(PredictError, match=r"unknown parameter\(s\) alpha; valid: quantile"):
        get_predictor("gbm", alpha=0.9)
    with pytest.raises(PredictError, match=r"quantile 1\.5"):
        get_predictor("gbm", quantile=1.5)


def test_limit_predicts_the_time_limit_and_nothing_for_memory() -> None:
    jobs = [_job("a", 0, 10, requested_s=60.0), _job("b", 0, 10)]
    lim = get_predictor("limit").fit([])
    assert lim.predict(jobs)[0] == 60.0 and math.isnan(lim.predict(jobs)[1])
    assert np.isnan(get_predictor("limit", "memory").fit([]).predict(jobs)).all()


def test_no_duration_prediction_exceeds_the_time_limit() -> None:
    gm = get_predictor("global-median").fit([_job("h", 0, 1000.0)])
    assert gm.predict([_job("a", 0, None, requested_s=60.0), _job("b", 0, None)]).tolist() == [60.0, 1000.0]


def test_history_without_durations_is_a_clear_error() -> None:
    jobs = [_job("a", 0, None), _job("b", 1, None)]
    with pytest.raises(PredictError, match=r"no job in the history \(2 jobs\) has a known duration_s"):
        get_predictor("rolling-median").fit(jobs)
    with pytest.raises(PredictError, match="predict\\(\\) before fit\\(\\)"):
        get_predictor("gbm").predict(jobs)
    with pytest.raises(PredictError, match="no job has a known mem_gb"):
        evaluate(jobs, "memory")


def test_unknown_and_censored_durations_are_not_learnt(history: list[Job]) -> None:
    jobs = list(history[:600])
    jobs[0] = dataclasses.replace(jobs[0], duration_s=None)
    jobs[1] = dataclasses.replace(jobs[1], duration_s=1e9, meta={"censored": True})
    gm = get_predictor("global-median").fit(jobs)
    assert gm.training_size == 598
    assert gm.median_ < 1e9  # type: ignore[attr-defined]


def test_gbm_without_user_or_name_uses_the_record(history: list[Job]) -> None:
    # like the Alibaba pods: no user, no name; requests in meta
    jobs = [dataclasses.replace(j, user="", name="", meta={"cpu_milli": 1000 * j.gpus, "qos": j.meta["queue"]})
            for j in history[:700]]  # fmt: skip
    model = get_predictor("gbm", **SMALL_GBM).fit(jobs)
    features = model.feature_names()
    assert "user" not in features and not any(f.startswith("tok_") for f in features)
    assert {"gpus", "cpu_milli", "qos", "user_name_median"} <= set(features)
    pred = model.predict(history[700:800])
    assert np.isfinite(pred).all() and (pred >= 0).all()


def test_gbm_never_uses_fields_known_only_after_the_run(history: list[Job]) -> None:
    jobs = [dataclasses.replace(j, meta={**j.meta, "start_s": 1.0, "end_s": 2.0, "wait_s": 3.0, "phase": "x"})
            for j in history[:600]]  # fmt: skip
    features = get_predictor("gbm", **SMALL_GBM).fit(jobs).feature_names()
    assert not {"start_s", "end_s", "wait_s", "phase", "state"} & set(features)


def test_small_histories_fall_back_to_the_rolling_median(history: list[Job]) -> None:
    gbm = get_predictor("gbm").fit(history[:100])
    rm = get_predictor("rolling-median").fit(history[:100])
    np.testing.assert_array_equal(gbm.predict(history[100:150]), rm.predict(history[100:150]))
    assert gbm.feature_names() == ["user", "name"]


def test_gbm_is_deterministic(history: list[Job]) -> None:
    a = get_predictor("gbm", **SMALL_GBM).fit(history[:800]).predict(history[800:900])
    b = get_predictor("gbm", **SMALL_GBM).fit(history[:800]).predict(history[800:900])
    np.testing.assert_array_equal(a, b)


# ---- evaluation ------------------------------------------------------------------------------------


def test_evaluate_compares_every_predictor(history: list[Job]) -> None:
    report = evaluate(history, "duration", chunks=4, params={"gbm": SMALL_GBM})
    assert [s.predictor for s in report.scores] == ["limit", "global-median", "rolling-median", "gbm"]
    assert report.warmup_jobs == 300 and report.scored.sum() == 900
    by = {s.predictor: s for s in report.scores}
    assert all(s.coverage == 1.0 for s in report.scores)
    assert by["rolling-median"].mae < by["global-median"].mae  # type: ignore[operator]
    assert by["gbm"].mae < by["global-median"].mae  # type: ignore[operator]
    assert by["limit"].under == 0.0  # a run never outlasts its limit
    data = report.as_dict()
    json.dumps(data, allow_nan=False)
    assert data["scored_jobs"] == 900 and "gbm" in data["features"]
    assert np.isnan(report.predictions["gbm"][np.argsort([j.submit_s for j in history])[:300]]).all()


def test_memory_quantile_model_rarely_under_predicts() -> None:
    jobs = synth_history(2500, seed=11)
    report = evaluate(jobs, "memory", ["rolling-median", "gbm"], chunks=4)
    gbm, rm = report.score_of("gbm"), report.score_of("rolling-median")
    assert gbm.under <= 0.05  # type: ignore[union-attr,operator]
    assert rm.under > 0.3  # type: ignore[union-attr,operator]  # a median under-predicts half the time
    assert any("memory limit" in n for n in report.notes)


def test_evaluate_needs_two_chunks(history: list[Job]) -> None:
    with pytest.raises(PredictError, match="chunks = 1"):
        evaluate(history, "duration", chunks=1)


# ---- model files -----------------------------------------------------------------------------------


def test_model_file_round_trip(history: list[Job], tmp_path: Path) -> None:
    model = get_predictor("gbm", **SMALL_GBM).fit(history[:800])
    path = tmp_path / "dur.model"
    header = save_model(model, path, history="hist.jsonl")
    assert header.model == "gbm" and header.target == "duration" and header.training_size == 800
    assert "user_name_median" in header.features and header.fitted_at.endswith("+00:00")
    assert read_header(path) == header
    loaded_header, loaded = load_model(path)
    assert loaded_header == header
    np.testing.assert_array_equal(loaded.predict(history[800:900]), model.predict(history[800:900]))


def test_apply_model_fills_estimates_on_copies(history: list[Job], tmp_path: Path) -> None:
    save_model(get_predictor("rolling-median", "memory").fit(history[:800]), tmp_path / "mem.model")
    jobs = [dataclasses.replace(j, est_mem_gb=None) for j in history[800:850]]
    out = apply_model(jobs, tmp_path / "mem.model")
    assert all(j.est_mem_gb is None for j in jobs)  # the originals are untouched
    assert all(o.est_mem_gb is not None and o.est_mem_gb > 0 for o in out)
    assert [o.id for o in out] == [j.id for j in jobs]
    save_model(get_predictor("limit").fit([]), tmp_path / "lim.model")
    out = apply_model([_job("a", 0, None, requested_s=60.0), _job("b", 0, None, est_duration_s=5.0)],
                      tmp_path / "lim.model")  # fmt: skip
    assert [o.est_duration_s for o in out] == [60.0, 5.0]  # no limit: the estimate stays


def test_foreign_model_files_are_refused_without_unpickling(tmp_path: Path) -> None:
    foreign = tmp_path / "model.pkl"
    foreign.write_bytes(pickle.dumps({"weights": [1, 2]}))
    with pytest.raises(
        ModelFileError, match=r"model\.pkl: not a gpuplan model file .*gpuplan predict fit HISTORY"
    ):
        load_model(foreign)
    with pytest.raises(ModelFileError, match=r"nope\.model: no such model file"):
        load_model(tmp_path / "nope.model")


def _rewrite_header(path: Path, **changes: object) -> None:
    magic, header, rest = path.read_bytes().split(b"\n", 2)
    data = {**json.loads(header), **changes}
    path.write_bytes(magic + b"\n" + json.dumps(data).encode() + b"\n" + rest)


@pytest.mark.parametrize(
    ("changes", "what"),
    [
        ({"gpuplan_version": "0.0.1"}, "gpuplan 0.0.1"),
        ({"format_version": 0}, "model-file format 0"),
        ({"sklearn_version": "0.24.2"}, "scikit-learn 0.24.2"),
    ],
)
def test_stale_model_files_say_what_changed_and_how_to_refit(
    history: list[Job], tmp_path: Path, changes: dict[str, object], what: str
) -> None:
    path = tmp_path / "old.model"
    save_model(get_predictor("rolling-median", "memory").fit(history[:50]), path)
    _rewrite_header(path, **changes)
    msg = rf"old\.model: stale model file, made with {what} \(this is .*\); make a new one with "
    msg += r"`gpuplan predict fit HISTORY --target memory --model rolling-median --out .*old\.model`"
    with pytest.raises(ModelFileError, match=msg):
        load_model(path)


def test_damaged_model_files_name_the_problem(history: list[Job], tmp_path: Path) -> None:
    path = tmp_path / "cut.model"
    save_model(get_predictor("rolling-median").fit(history[:50]), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])
    with pytest.raises(
        ModelFileError, match=r"cut\.model: the model file is damaged or cut off .*--model rolling-median"
    ):
        load_model(path)
    path.write_bytes(FORMAT.encode() + b"\n{not json\n")
    with pytest.raises(ModelFileError, match="header is damaged"):
        read_header(path)
    with pytest.raises(ModelFileError, match="not fitted"):
        save_model(get_predictor("gbm"), tmp_path / "x.model")


# ---- scheduling with predictions ----------------------------------------------------------------------


def test_compare_schedules_reports_oracle_predicted_and_limit_runs(history: list[Job]) -> None:
    jobs = _ordered(history)[:300]
    pred = get_predictor("rolling-median").fit(jobs[:100]).predict(jobs)
    report = compare_schedules(
        jobs, pred, load_cluster("8xA100-80GB"), policies=("fifo", "sjf"), load_factor=2.0
    )
    assert report.baseline.policy == "fifo" and report.baseline.backfill == "none"
    assert {(r.policy, r.estimates) for r in report.runs} == {
        (p, e) for p in ("fifo", "sjf") for e in ("oracle", "predicted", "limit")
    }
    oracle = {r.policy: r.mean_jct_s for r in report.runs if r.estimates == "oracle"}
    assert oracle["sjf"] < report.baseline.mean_jct_s
    share = report.best["predicted"]
    assert share is not None and 0.0 < share <= 1.2
    json.dumps(report.as_dict(), allow_nan=False)


def test_without_contention_the_share_is_undefined() -> None:
    jobs = [Job(f"j{k}", 10_000.0 * k, 1, duration_s=100.0) for k in range(20)]
    report = compare_schedules(
        jobs, np.full(20, 100.0), load_cluster("8xA100-80GB"), policies=("fifo", "sjf")
    )
    assert report.best == {"predicted": None}  # no limits: no limit runs
    assert any("gains nothing" in n for n in report.notes)
    assert any("no job has a time limit" in n for n in report.notes)


def test_scaled_arrivals_compress_the_gaps() -> None:
    jobs = [_job("a", 100, 1), _job("b", 300, 1)]
    assert [j.submit_s for j in scaled_arrivals(jobs, 2.0)] == [100.0, 200.0]
    assert [j.submit_s for j in jobs] == [100, 300]

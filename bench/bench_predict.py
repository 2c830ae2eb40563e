"""Prediction benchmarks and the measurements of docs/predict.md.

`bench_predict(n_jobs)` times fitting and predicting on a synthetic history (`synth_history`): each
predictor is fitted on the first 90 % of the jobs and predicts the last 10 %. `evaluate_traces()`
runs the leakage-free evaluation and the scheduling comparison on every trace of ../shared that has
the fields, plus a synthetic history, with the settings docs/predict.md names.

    python bench/bench_predict.py [JOBS]      # fit/predict times, JSON on stdout (default 100,000 jobs)
    python bench/bench_predict.py --traces    # the docs/predict.md tables, JSON on stdout
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
SHARED = _ROOT.parent / "shared"
# (label, path or None for the synthetic history, --cluster or None for the trace's own, load factor, chunks)
TRACES: tuple[tuple[str, Path | None, str | None, float, int], ...] = (
    ("synthetic 20k (synth_history seed 3)", None, "4x8xA100-80GB", 1.0, 10),
    ("NASA iPSC/860 (SWF)", SHARED / "data/traces/pwa-nasa-ipsc-1993/NASA-iPSC-1993-3.1-cln.swf", None, 2.0, 10),
    ("Alibaba GPU v2023 (openb pods)", SHARED / "data/traces/alibaba-gpu-v2023/openb_pod_list_default.csv",
     "4x8xA100-80GB", 1.0, 10),
    ("captured sacct -P (37 jobs)", SHARED / "slurm/captured/sacct_P.txt", "4x8xA100-80GB", 1.0, 2),
)  # fmt: skip
SCHEDULE_JOBS = 4000


def bench_predict(
    n_jobs: int = 100_000, names: tuple[str, ...] = ("rolling-median", "gbm")
) -> list[dict[str, Any]]:
    """Fit on the first 90 % of a synthetic history of `n_jobs`, predict the last 10 %: seconds each."""
    from gpuplan.predict import get_predictor, synth_history

    t0 = time.perf_counter()
    jobs = synth_history(n_jobs, seed=1)
    gen_s = time.perf_counter() - t0
    cut = int(0.9 * n_jobs)
    rows = []
    for target in ("duration", "memory"):
        for name in names:
            model = get_predictor(name, target)
            t0 = time.perf_counter()
            model.fit(jobs[:cut])
            fit_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            model.predict(jobs[cut:], past=jobs[:cut])
            predict_s = time.perf_counter() - t0
            rows.append({
                "case": f"predict-{name}-{target}", "jobs": n_jobs, "train_jobs": cut, "predicted_jobs": n_jobs - cut,
                "generate_s": round(gen_s, 3), "fit_s": round(fit_s, 3), "predict_s": round(predict_s, 3),
                "features": len(model.feature_names()), "peak_rss_mb": _peak_rss_mb(),
            })  # fmt: skip
    return rows


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def evaluate_traces() -> list[dict[str, Any]]:
    """The evaluation of every available trace (see TRACES), as docs/predict.md reports it."""
    out = []
    for label, path, cluster, load_factor, chunks in TRACES:
        if path is not None and not path.exists():
            out.append({"trace": label, "skipped": f"{path} is absent"})
            continue
        out.append(_evaluate_one(label, path, cluster, load_factor, chunks))
    return out


def _evaluate_one(
    label: str, path: Path | None, cluster: str | None, load_factor: float, chunks: int
) -> dict[str, Any]:
    from gpuplan.cluster import load_cluster
    from gpuplan.predict import compare_schedules, evaluate, synth_history
    from gpuplan.traces import read_trace

    t0 = time.perf_counter()
    result = read_trace(path) if path is not None else None
    jobs = result.jobs if result is not None else synth_history(20_000, seed=3)
    row: dict[str, Any] = {"trace": label, "jobs": len(jobs), "evaluations": []}
    for target in ("duration", "memory"):
        if all(j.mem_gb is None for j in jobs) and target == "memory":
            continue
        t1 = time.perf_counter()
        report = evaluate(jobs, target, chunks=chunks)
        row["evaluations"].append({**report.as_dict(), "seconds": round(time.perf_counter() - t1, 1)})
        if target == "duration":
            duration = report
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))[duration.warmup_jobs :]
    keep = [i for i in order if jobs[i].duration_s is not None][:SCHEDULE_JOBS]
    spec = load_cluster(cluster) if cluster else result.cluster  # type: ignore[union-attr]
    t1 = time.perf_counter()
    sched = compare_schedules([jobs[i] for i in keep], duration.predictions["gbm"][keep], spec,  # type: ignore[arg-type]
                              load_factor=load_factor)  # fmt: skip
    row["schedule"] = {**sched.as_dict(), "seconds": round(time.perf_counter() - t1, 1)}
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def main(argv: list[str]) -> int:
    if "--traces" in argv:
        print(json.dumps(evaluate_traces(), indent=2, allow_nan=False))
        return 0
    n = int(argv[0]) if argv else 100_000
    print(json.dumps(bench_predict(n), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Which of several runs is best, and when there is nothing to choose between them.

Every output that compares runs (the CLI table, `--json`, the HTML report) asks here, so they never
disagree: a "best" run exists only when the runs could differ and do.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuplan.sim.result import PLAN_POLICY, SimResult

__all__ = ["PLAN_POLICY", "best_run", "contenders", "fifo_baseline", "no_winner_reason", "same_runs"]


def contenders(results: Sequence[SimResult]) -> list[SimResult]:
    """The runs that may be called best: policies a live queue can run (no oracle, no searched order);
    the oracle runs when there is nothing else, and every run as a last resort."""
    policies = [r for r in results if r.policy != PLAN_POLICY]
    return [r for r in policies if not r.oracle] or policies or list(results)


def _figures(r: SimResult) -> tuple[object, ...]:
    return tuple(round(v, 6) if isinstance(v, float) else v for v in r.metrics.as_dict().values())


def no_winner_reason(results: Sequence[SimResult]) -> str | None:
    """Why no run of `results` may be called best, or None when one may.

    Two cases: no job waited in any run (every job started when it was submitted, so no order and no
    backfill could change anything), or every run gives the same figures.
    """
    runs = contenders(results)
    if len(runs) < 2:
        return None
    waited = any(r.metrics.mean_wait_s > 0 for r in runs)
    identical = len({_figures(r) for r in runs}) == 1
    if not waited:
        same = "identical runs: " if identical else ""
        return (
            f"{same}no job waited in any of the {len(runs)} runs (each started at its submit time): "
            "the cluster always had room, so no order or backfill mode can do better; there is no best"
        )
    if identical:
        return (
            f"identical runs: all {len(runs)} runs give the same figures (on this trace the policies and "
            "backfill modes make the same decisions); there is no best"
        )
    return None


def best_run(results: Sequence[SimResult], ranked: bool = False) -> SimResult | None:
    """The best contender (smallest makespan, then mean JCT), or None when `no_winner_reason` says so.

    Args:
        results: the runs.
        ranked: `results` is already sorted best first (then the first contender is taken as is).
    """
    if no_winner_reason(results) is not None:
        return None
    runs = contenders(results)
    if ranked:
        return runs[0]
    return min(runs, key=lambda r: (round(r.metrics.makespan_s, 6), r.metrics.mean_jct_s, r.label))


def _rows_hash(r: SimResult) -> int:
    """With the figures, what makes two runs the same run: every job's start, end and GPUs."""
    return hash(
        tuple((rec.job_id, round(rec.start_s, 6), round(rec.end_s, 6), rec.gpus) for rec in r.records)
    )


def same_runs(results: Sequence[SimResult]) -> dict[int, str]:
    """Runs that are the same run as an earlier one under another name: {index in results: label of
    the first run with the same schedule}. Every output marks them instead of showing them as results
    of their own (on a trace without estimates, sjf+easy is fifo+easy)."""
    # Only runs whose figures match another's can be the same run: the others' schedules are never
    # fingerprinted (a million-job run alone costs nothing here, instead of seconds of key tuples).
    by_figures: dict[tuple[object, ...], list[int]] = {}
    for i, r in enumerate(results):
        by_figures.setdefault(_figures(r), []).append(i)
    out: dict[int, str] = {}
    for group in by_figures.values():
        if len(group) < 2:
            continue
        first: dict[int, str] = {}
        for i in group:
            rows = _rows_hash(results[i])
            if rows in first:
                out[i] = first[rows]
            else:
                first[rows] = results[i].label
    return out


def fifo_baseline(results: Sequence[SimResult]) -> SimResult | None:
    """The FIFO run the others are compared with: strict FIFO (fifo+none, the article's baseline)
    when it was run, else the FIFO run with the shortest makespan; None without a FIFO run."""
    fifo = [r for r in results if r.policy == "fifo" and not r.oracle] or [
        r for r in results if r.policy == "fifo"
    ]
    plain = [r for r in fifo if r.backfill == "none"]
    if plain:
        return plain[0]
    return min(fifo, key=lambda r: r.metrics.makespan_s) if fifo else None

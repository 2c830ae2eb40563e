"""Trace-reader benchmarks: `bench_sacct(rows, tmpdir)` times the `sacct -P` reader on a generated file.

The file repeats real `sacct -P` rows (../shared/slurm/captured/sacct_P.txt when present, else the
hand-written tests/fixtures/sacct/cluster_P.txt): each repetition renumbers the job ids, moves the dates
one day on and varies the elapsed times, so ids are unique and times are not all parsed from a cache.
Issue #3 floor: 1,000,000 rows in <= 10 s on a 2-core machine; aim >= 500,000 rows/s.

    python bench/bench_traces.py [ROWS] [--no-steps]
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
_SOURCES = (
    _ROOT.parent / "shared" / "slurm" / "captured" / "sacct_P.txt",
    _ROOT / "tests" / "fixtures" / "sacct" / "cluster_P.txt",
)
_TIME_COLUMNS = ("Submit", "Start", "End")


def _base_rows(with_steps: bool) -> tuple[str, list[list[str]]]:
    source = next(p for p in _SOURCES if p.exists())
    header, *lines = [line for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [line.split("|") for line in lines]
    if not with_steps:
        rows = [r for r in rows if "." not in r[0]]
    return header, rows


def _split_id(text: str) -> tuple[int, str]:
    digits = len(text) - len(text.lstrip("0123456789"))
    return int(text[:digits]), text[digits:]


def write_sacct_file(path: Path, rows: int, with_steps: bool = True) -> int:
    """Write a `sacct -P` file of about `rows` rows (whole repetitions of the base rows); returns the rows."""
    header, base = _base_rows(with_steps)
    names = header.split("|")
    id_cols = [names.index(c) for c in ("JobID", "JobIDRaw") if c in names]
    time_cols = [names.index(c) for c in _TIME_COLUMNS if c in names]
    elapsed = names.index("Elapsed") if "Elapsed" in names else None
    ids = [[_split_id(r[i]) for i in id_cols] for r in base]
    stride = 10 ** len(str(max(n for row in ids for n, _ in row) + 1))
    clock = [f"{h:02d}:{m:02d}:{s:02d}" for h in range(2) for m in range(60) for s in range(60)]
    reps = max(1, round(rows / len(base)))
    day0 = date(2020, 1, 1)
    with path.open("w", encoding="utf-8") as f:
        f.write(header + "\n")
        for k in range(reps):
            day = (day0 + timedelta(days=k)).isoformat()
            out = []
            for r, row_ids in zip(base, ids):
                cells = list(r)
                for i, (n, rest) in zip(id_cols, row_ids):
                    cells[i] = f"{n + k * stride}{rest}"
                for i in time_cols:
                    if cells[i][:2] in ("19", "20"):
                        cells[i] = day + cells[i][10:]
                if elapsed is not None and "." not in cells[0]:
                    cells[elapsed] = clock[(k * 7 + len(out)) % len(clock)]
                out.append("|".join(cells))
            f.write("\n".join(out) + "\n")
    return reps * len(base)


def python_loop_s() -> float:
    """CPU seconds of a fixed pure-Python loop: how fast this machine runs Python right now (about 0.25 s
    on an idle 2-core x86 VM; a busy or sandboxed machine is slower), to compare runs across machines."""
    c0 = time.process_time()
    total = 0
    for i in range(5_000_000):
        total += i
    return round(time.process_time() - c0, 3)


def bench_sacct(rows: int, tmpdir: str | Path, with_steps: bool = True) -> dict[str, object]:
    """Generate a `sacct -P` file of about `rows` rows in `tmpdir` and time reading it.

    Returns:
        rows, jobs, seconds (wall), cpu_s, rows_per_s (wall), peak_rss_mb (this process, ru_maxrss),
        file_mb, floor_s, aim_rows_per_s, within_floor, python_loop_s (see `python_loop_s`).
    """
    from gpuplan.traces import read_trace

    path = Path(tmpdir) / "sacct_bench.txt"
    written = write_sacct_file(path, rows, with_steps)
    t0, c0 = time.perf_counter(), time.process_time()
    result = read_trace(path, fmt="sacct")
    seconds, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    return {
        "case": f"sacct-{written}-rows" + ("" if with_steps else "-X"),
        "rows": written,
        "jobs": len(result.jobs),
        "seconds": round(seconds, 3),
        "cpu_s": round(cpu_s, 3),  # this process's CPU time: steadier than wall time on a busy machine
        "rows_per_s": round(written / seconds),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "file_mb": round(path.stat().st_size / 2**20, 1),
        "floor_s": 10.0,
        "aim_rows_per_s": 500_000,
        "within_floor": seconds <= 10.0,
        "python_loop_s": python_loop_s(),
    }


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    rows = int(args[0]) if args else 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(bench_sacct(rows, tmp, with_steps="--no-steps" not in sys.argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

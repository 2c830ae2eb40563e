"""What one simulated run produces: per-job records, a utilization timeline and the metrics."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from dataclasses import fields as dataclasses_fields
from itertools import chain
from operator import attrgetter
from typing import TYPE_CHECKING, Any, overload

from gpuplan.model import ClusterSpec
from gpuplan.sim.fairness import jain_index, user_figures

if TYPE_CHECKING:
    from gpuplan.sim.columns import RecordColumns

__all__ = ["PLAN_POLICY", "EstimateUse", "JobRecord", "Metrics", "SimResult", "Timeline", "start_order"]

PLAN_POLICY = "plan"  # the order `gpuplan plan` searched for with true outcomes (a what-if, not a policy)
_START = attrgetter("start_s")


@dataclass(slots=True)
class JobRecord:
    """Where and when one job ran. Times in seconds from the first submit of the trace."""

    job_id: str
    submit_s: float
    start_s: float
    end_s: float
    gpus: tuple[int, ...]  # global GPU indices, see SimResult.gpu_labels
    mem_gb: float | None = None
    name: str = ""
    user: str = ""


def start_order(records: list[JobRecord]) -> list[JobRecord]:
    """The records by start, then job id (equal pairs as they were): the order of a result's records,
    sorted in place (the run's own list) and returned. By columns (`sim.columns.start_permutation`):
    one stable sort of the starts, the ids read only where starts tie. The simulator sorts with
    `RecordColumns.sorting`, the same order, and keeps the columns for the run's figures."""
    import numpy as np

    from gpuplan.sim.columns import start_permutation

    order = start_permutation(np.fromiter(map(_START, records), np.float64, len(records)), records)
    records[:] = list(map(records.__getitem__, order.tolist()))
    return records


class Timeline(Sequence[tuple[float, int]]):
    """A run's utilization steps, (time_s, occupied GPUs from then on), read as a sequence of pairs but
    kept in two arrays: 16 bytes a step instead of a tuple and two numbers (about 110 bytes; a
    million-job pass has two million steps). Clocks add a step with `add` and read `busy[-1]`; the
    simulator's compiled loop (sim/engine.py) appends to both arrays itself, without a call per step."""

    __slots__ = ("busy", "times_s")

    def __init__(self, steps: Iterable[tuple[float, int]] = ()) -> None:
        self.times_s = array("d")
        self.busy = array("q")
        for t, b in steps:
            self.add(t, b)

    def add(self, time_s: float, busy: int) -> None:
        """A new step: `busy` GPUs occupied from `time_s` on."""
        self.times_s.append(time_s)
        self.busy.append(busy)

    def append(self, step: tuple[float, int]) -> None:
        self.add(*step)

    def __len__(self) -> int:
        return len(self.times_s)

    @overload
    def __getitem__(self, index: int) -> tuple[float, int]: ...
    @overload
    def __getitem__(self, index: slice) -> list[tuple[float, int]]: ...
    def __getitem__(self, index: int | slice) -> tuple[float, int] | list[tuple[float, int]]:
        if isinstance(index, slice):
            return list(zip(self.times_s[index], self.busy[index], strict=True))
        return (self.times_s[index], self.busy[index])

    def __setitem__(self, index: int, step: tuple[float, int]) -> None:
        self.times_s[index], self.busy[index] = step

    def __iter__(self) -> Iterator[tuple[float, int]]:
        return zip(self.times_s, self.busy, strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Timeline):
            return self.times_s == other.times_s and self.busy == other.busy
        if isinstance(other, Sequence):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list

    def __repr__(self) -> str:
        return f"Timeline({list(self)!r})"


@dataclass(slots=True)
class Metrics:
    """Figures of one run. Times in seconds from the first submit."""

    jobs: int
    makespan_s: float
    utilization: float  # occupied GPU-seconds / (GPUs x makespan_s); a GPU counts once while held
    mean_jct_s: float
    p50_jct_s: float
    p95_jct_s: float
    mean_wait_s: float
    p50_wait_s: float
    p95_wait_s: float
    mean_bounded_slowdown: float  # bound 10 s
    idle_gpu_hours_while_waiting: float
    lower_bound_s: float
    bound_ratio: float  # makespan_s / lower_bound_s
    gpu_hours: float  # occupied GPU-hours
    preemptions: int = 0  # running jobs suspended or requeued by a preemptive policy
    wasted_gpu_hours: float = 0.0  # GPU-hours of work lost to preemptions and of restart overhead

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass(slots=True)
class EstimateUse:
    """Where a run's duration estimates came from, and how many jobs had none when it needed one.

    Attributes:
        source: "oracle" (the true durations), "plan" (an order searched with the true durations),
            "trace" (est_duration_s, else requested_s, as read) or "history" (learned online from
            finished jobs, `--estimates history`).
        needed: whether the policy or the backfill mode uses estimates at all.
        without: jobs that had no estimate when submitted (0 when not needed).
        fallback: what the policy and the backfill did for those jobs ("" when none).
        by_level: history only: how many jobs got their estimate from each level (core/estimates.py).
    """

    source: str = "trace"
    needed: bool = False
    without: int = 0
    fallback: str = ""
    by_level: dict[str, int] = field(default_factory=dict)

    @property
    def uses_true_durations(self) -> bool:
        return self.source in ("oracle", "plan")

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "needed": self.needed,
            "jobs_without_estimate": self.without,
            "fallback": self.fallback,
            "by_level": dict(self.by_level),
        }

    def describe(self) -> str:
        """One line for tables and reports ("" when estimates did not matter)."""
        if not self.needed or self.uses_true_durations:
            return ""
        src = "estimates from the trace"
        if self.source == "history":
            src = (
                "estimates learned online from finished jobs"
                if self.by_level
                else "a distribution of finished jobs"
            )
        if not self.without:
            return f"{src}: every job had one"
        return f"{src}: {self.without} job(s) had none; {self.fallback}"


@dataclass(slots=True)
class SimResult:
    """One simulated run of one policy + backfill + placer on one cluster."""

    policy: str
    backfill: str
    placer: str
    oracle: bool
    cluster: ClusterSpec
    metrics: Metrics
    records: list[JobRecord]  # in start order
    util_timeline: Sequence[tuple[float, int]]  # (time_s, occupied GPUs) from that time on (a Timeline)
    gpu_labels: list[str]  # label of each global GPU index, e.g. "node1/gpu3"
    warnings: list[str] = field(default_factory=list)
    estimates: EstimateUse = field(default_factory=EstimateUse)
    fragmentation: Any = None  # sim.fragseries.FragSeries, set by `attach_fragmentation` (simulate)
    # sim.columns.RecordColumns of `records`: the simulator's (`keep_columns`), else taken on first use
    _columns: Any = field(default=None, init=False, repr=False, compare=False)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled with its records as columns (a sweep sends every result back from its worker): a
        third of the bytes and time of pickling each record."""
        fields = tuple(getattr(self, f) for f in _RESULT_FIELDS if f != "records")
        return (_rebuilt_result, (fields, _record_columns(self.records)))

    @property
    def spanned_jobs(self) -> int:
        """Jobs that ran on GPUs of more than one node."""
        import numpy as np

        # by columns over each distinct GPU set once, weighted by how many records hold it: a set
        # spans when the nodes of its GPUs (as numbers) do not all equal the node of its first GPU
        columns = self.record_columns()
        allocs = columns.gpu_sets
        widths = np.fromiter(map(len, allocs), np.intp, len(allocs))
        if len(allocs) == 0 or widths.max() < 2:
            return 0
        weights = np.bincount(columns.set_codes, minlength=len(allocs))
        if widths.min() < 1:  # a set without GPUs never spans
            keep = widths > 0
            allocs = [g for g, k in zip(allocs, keep.tolist(), strict=True) if k]
            widths, weights = widths[keep], weights[keep]
        nodes: dict[str, int] = {}
        node_of = np.array(
            [nodes.setdefault(label.split("/", 1)[0], len(nodes)) for label in self.gpu_labels]
        )
        on = node_of[np.fromiter(chain.from_iterable(allocs), np.intp, int(widths.sum()))]
        starts = np.cumsum(widths) - widths
        first = np.repeat(on[starts], widths)
        return int(weights[np.add.reduceat(on != first, starts) > 0].sum())

    def record_columns(self) -> RecordColumns:
        """The records as columns (sim/columns.py), for the run's figures: the simulator's own while
        its `RecordList` is unchanged, else taken anew (each column on first use)."""
        from gpuplan.sim.columns import RecordColumns

        if self._columns is not None and self._columns.holds(self.records):
            return self._columns
        columns = RecordColumns(self.records)
        if columns.holds(self.records):  # a RecordList (the simulator's): kept until it changes
            self._columns = columns
        return columns

    def keep_columns(self, columns: RecordColumns) -> SimResult:
        """Keep `columns`, taken of this result's records (`RecordColumns.sorting` returns both), for its
        figures; returns the result. Columns of another list, or of a changed one, are not kept."""
        if columns.holds(self.records):
            self._columns = columns
        return self

    @property
    def uses_true_durations(self) -> bool:
        """The run saw the true durations (an oracle run, or an order searched with them)."""
        return self.oracle or self.policy == PLAN_POLICY or self.estimates.uses_true_durations

    @property
    def label(self) -> str:
        suffix = " (oracle)" if self.oracle else ""
        return f"{self.policy}+{self.backfill}{suffix}"

    def summary(self) -> dict[str, object]:
        """The flat object `--json` prints for one run."""
        m = self.metrics
        return {
            "policy": self.policy,
            "backfill": self.backfill,
            "placer": self.placer,
            "oracle": self.oracle,
            "jobs": m.jobs,
            "makespan_s": m.makespan_s,
            "utilization": m.utilization,
            "mean_jct_s": m.mean_jct_s,
            "p50_jct_s": m.p50_jct_s,
            "p95_jct_s": m.p95_jct_s,
            "mean_wait_s": m.mean_wait_s,
            "p95_wait_s": m.p95_wait_s,
            "mean_bounded_slowdown": m.mean_bounded_slowdown,
            "idle_gpu_hours_while_waiting": m.idle_gpu_hours_while_waiting,
            "gpu_hours": m.gpu_hours,
            "lower_bound_s": m.lower_bound_s,
            "bound_ratio": m.bound_ratio,
            "preemptions": m.preemptions,
            "wasted_gpu_hours": m.wasted_gpu_hours,
            "uses_true_durations": self.uses_true_durations,
            "spanned_jobs": self.spanned_jobs,
            "estimates": self.estimates.as_dict(),
            "users": (users := self.user_figures()),
            "jain_index": jain_index([u["mean_bounded_slowdown"] for u in users]),
            "cluster": self.cluster.as_dict(),
            **(self.fragmentation.as_dict() if self.fragmentation is not None else {}),
        }

    def user_figures(self) -> list[dict[str, Any]]:
        """Per-user figures of the run (`sim.metrics.user_figures`); empty when no job names a user."""
        return user_figures(self.record_columns())


_RESULT_FIELDS = tuple(f.name for f in dataclasses_fields(SimResult) if f.init)
_RECORD_FIELDS = tuple(f.name for f in dataclasses_fields(JobRecord))
_TIME_FIELDS = ("submit_s", "start_s", "end_s")


def _record_columns(records: Sequence[JobRecord]) -> tuple[Any, ...]:
    return tuple(
        array("d", map(attrgetter(f), records)) if f in _TIME_FIELDS else list(map(attrgetter(f), records))
        for f in _RECORD_FIELDS
    )


def _rebuilt_result(fields: tuple[Any, ...], columns: tuple[Any, ...]) -> SimResult:
    from gpuplan.sim.columns import RecordList

    kept = dict(zip((f for f in _RESULT_FIELDS if f != "records"), fields, strict=True))
    # a RecordList, as the simulator returns: its columns are taken once and kept (sweep workers)
    return SimResult(records=RecordList(map(JobRecord, *columns)), **kept)

"""The trace reader seam: read options, the result record, `TraceReader` and the registry by name.

A new format is one module with one `TraceReader` subclass decorated with `@register_reader`; nothing
else needs to change. See docs/formats.md for the formats shipped with gpuplan.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from gpuplan.errors import GpuplanError, InputError, UnknownNameError
from gpuplan.model import ClusterSpec, Job
from gpuplan.traces.fields import JOB_FIELDS, TIME_FIELDS, TIME_UNITS

__all__ = [
    "FIELD_ALIASES",
    "TIME_UNITS",
    "ReadOptions",
    "TraceError",
    "TraceReader",
    "TraceResult",
    "TruncatedTraceError",
    "canonical_field",
    "detect_reader",
    "get_reader",
    "parse_time_unit",
    "reader_names",
    "register_reader",
    "split_pairs",
]

# Short names accepted wherever a Job field is named on the command line (`--map`, `--time-unit`).
FIELD_ALIASES: dict[str, str] = {
    "submit": "submit_s",
    "duration": "duration_s",
    "est_duration": "est_duration_s",
    "requested": "requested_s",
    "mem": "mem_gb",
    "est_mem": "est_mem_gb",
    "gpu_util": "gpu_util_pct",
}
_MAPPABLE: tuple[str, ...] = tuple(f for f in JOB_FIELDS if f != "meta")


class TraceError(GpuplanError):
    """A trace file that cannot be read as a whole (missing, empty, unknown format, bad header) or
    a trace option that cannot be parsed."""


class TruncatedTraceError(InputError):
    """The last line of a trace file is cut off (the file was copied or written only in part)."""


@dataclass(slots=True)
class TraceResult:
    """What a reader returns.

    Attributes:
        jobs: the valid jobs, in file order (so jobs with equal submit times keep their file order).
        skipped: with `skip_bad`, how many rows were skipped per reason, e.g. {"gpus: not an integer": 3}.
        warnings: things the user should know (ignored options, substituted ids, the first skipped rows).
        source: the file read.
        format: the reader's name.
        missing_fields: Job fields that no job of the file provides, e.g. ["mem_gb", "gpu_util_pct"].
        cluster: the cluster the trace itself describes (SWF header, Alibaba node list), if any.
        censored: notes on what the trace cuts off (e.g. "412 running pods: durations are lower bounds").
    """

    jobs: list[Job]
    skipped: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    source: str = ""
    format: str = ""
    missing_fields: list[str] = field(default_factory=list)
    cluster: ClusterSpec | None = None
    censored: list[str] = field(default_factory=list)

    @property
    def skipped_total(self) -> int:
        """Rows skipped for any reason."""
        return sum(self.skipped.values())


def canonical_field(name: str, allowed: tuple[str, ...] = _MAPPABLE) -> str:
    """The Job field a user means by `name` (a field name or a FIELD_ALIASES short name).

    Raises:
        UnknownNameError: not a field in `allowed`; the message lists the valid names.
    """
    key = name.strip()
    key = FIELD_ALIASES.get(key, key)
    if key not in allowed:
        valid = [*allowed, *(a for a, f in FIELD_ALIASES.items() if f in allowed)]
        raise UnknownNameError("trace field", name, valid)
    return key


def split_pairs(text: str, option: str, example: str) -> list[tuple[str, str]]:
    """Split 'KEY=VALUE,KEY=VALUE' (as given to `option`) into stripped pairs, in order.

    Raises:
        TraceError: an item without '=', an empty key or value, or a key given twice.
    """
    pairs: list[tuple[str, str]] = []
    for item in text.split(","):
        if not item.strip():
            continue
        key, eq, value = (part.strip() for part in item.partition("="))
        if not eq or not key or not value:
            raise TraceError(
                f"{option}: bad item {item.strip()!r} in {text!r}; expected KEY=VALUE pairs "
                f"separated by commas, e.g. {example}"
            )
        if any(key == k for k, _ in pairs):
            raise TraceError(f"{option}: {key!r} is given twice in {text!r}")
        pairs.append((key, value))
    if not pairs:
        raise TraceError(f"{option}: empty value; expected KEY=VALUE pairs, e.g. {example}")
    return pairs


def _checked_unit(unit: str) -> str:
    if unit not in TIME_UNITS:
        raise UnknownNameError("time unit", unit, list(TIME_UNITS))
    return unit


def parse_time_unit(text: str) -> str | dict[str, str]:
    """Parse a `--time-unit` value: one unit for all time fields ('ms') or per field ('submit=s,duration=ms').

    Raises:
        TraceError: bad syntax.
        UnknownNameError: an unknown unit or field; the message lists the valid ones.
    """
    if "=" not in text:
        return _checked_unit(text.strip())
    pairs = split_pairs(text, "--time-unit", "submit=s,duration=ms")
    return {canonical_field(k, TIME_FIELDS): _checked_unit(v) for k, v in pairs}


@dataclass(slots=True)
class ReadOptions:
    """How to read a trace.

    Attributes:
        column_map: our Job field -> the file's column name; overrides recognition (generic CSV).
            Keys may be FIELD_ALIASES short names; they are stored as field names.
        time_unit: the unit of every time field ("s", "ms", "min", "h"), or a dict time field -> unit
            (fields not named are in seconds). Formats whose fields end in `_s` ignore it.
        skip_bad: skip invalid rows and count them per reason in `TraceResult.skipped`.

    Raises:
        UnknownNameError: an unknown field or unit.
        TraceError: two keys of `column_map` name the same field.
    """

    column_map: dict[str, str] = field(default_factory=dict)
    time_unit: str | dict[str, str] = "s"
    skip_bad: bool = False

    def __post_init__(self) -> None:
        mapped = {canonical_field(k): v for k, v in self.column_map.items()}
        if len(mapped) != len(self.column_map):
            raise TraceError(f"column map {self.column_map!r} names the same field twice")
        self.column_map = mapped
        if isinstance(self.time_unit, str):
            self.time_unit = _checked_unit(self.time_unit)
        else:
            self.time_unit = {
                canonical_field(k, TIME_FIELDS): _checked_unit(v) for k, v in self.time_unit.items()
            }

    def unit_for(self, field_name: str) -> str:
        """The unit of time field `field_name` in the file."""
        if isinstance(self.time_unit, str):
            return self.time_unit
        return self.time_unit.get(field_name, "s")

    def units(self) -> dict[str, str]:
        """Time field -> unit, for every time field."""
        return {f: self.unit_for(f) for f in TIME_FIELDS}


class TraceReader(ABC):
    """One trace format: recognises its files and reads them into jobs.

    Subclass it, set `name` and `description`, and decorate the class with `@register_reader`.
    Readers are stateless; `get_reader` returns a fresh instance.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    # Detection order, highest first; a catch-all format (generic CSV) sits below 0.
    priority: ClassVar[int] = 0

    @abstractmethod
    def detect(self, path: Path, head: str) -> bool:
        """Whether the file looks like this format, from its name and its first ~4 KB of text."""

    @abstractmethod
    def read(self, path: Path, options: ReadOptions) -> TraceResult:
        """Read the whole file.

        Raises:
            InputError: an invalid row (unless `options.skip_bad`), located by file, line and column.
            TruncatedTraceError: the last line is cut off (unless `options.skip_bad`).
            TraceError: the file is missing or unreadable, has a bad header, or holds no valid job.
        """


_READERS: dict[str, type[TraceReader]] = {}


def register_reader(cls: type[TraceReader]) -> type[TraceReader]:
    """Register a reader class under its `name`; usable as a class decorator.

    Raises:
        ValueError: the class has no name, or another class already has it.
    """
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no name")
    if _READERS.get(cls.name, cls) is not cls:
        raise ValueError(
            f"trace format {cls.name!r} is already registered by {_READERS[cls.name].__qualname__}"
        )
    _READERS[cls.name] = cls
    return cls


def reader_names() -> list[str]:
    """Names of the registered trace formats, sorted."""
    return sorted(_READERS)


def get_reader(name: str) -> TraceReader:
    """A reader for format `name`.

    Raises:
        UnknownNameError: no such format; the message lists the registered ones.
    """
    if name not in _READERS:
        raise UnknownNameError("trace format", name, reader_names())
    return _READERS[name]()


def detect_reader(path: Path, head: str) -> TraceReader | None:
    """The first registered reader, by priority then registration order, that claims the file."""
    for cls in sorted(_READERS.values(), key=lambda c: -c.priority):
        reader = cls()
        if reader.detect(path, head):
            return reader
    return None

"""The exception tree of gpuplan. Every message says what failed, the offending input and the fix."""

from __future__ import annotations

__all__ = [
    "ClusterError",
    "GpuplanError",
    "InputError",
    "JobNeverFitsError",
    "ScheduleError",
    "UnknownNameError",
]


class GpuplanError(Exception):
    """Base of every error gpuplan raises on purpose; the CLI prints it as one line."""


class InputError(GpuplanError):
    """A bad value in an input file, located by file, line and column."""

    def __init__(
        self,
        path: str,
        line: int | None,
        column: str | None,
        value: object,
        expected: str,
        reason: str = "invalid",
    ) -> None:
        self.path = path
        self.line = line
        self.column = column
        self.value = value
        self.expected = expected
        self.reason = reason
        where = f"{path}:{line}" if line is not None else path
        col = f" column {column}:" if column else ""
        super().__init__(f"{where}:{col} value {value!r} is not valid (expected {expected})")


class ClusterError(GpuplanError):
    """A cluster description (preset or TOML file) that cannot be used."""


class UnknownNameError(GpuplanError):
    """A policy, placer, backfill mode or preset name that does not exist."""

    def __init__(self, kind: str, name: str, valid: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.valid = valid
        super().__init__(f"unknown {kind} {name!r}; valid names: {', '.join(valid)}")


class ScheduleError(GpuplanError):
    """The scheduler cannot go on with this workload on this cluster."""


class JobNeverFitsError(ScheduleError):
    """A job asks for more than any placement on the cluster can ever give."""

"""Ending a batch command's process without freeing its objects one by one.

A `gpuplan simulate` of a million jobs holds millions of objects (jobs, records, their floats) until
it returns; freeing them one by one takes about 0.3 s that nobody waits for, as the process ends
anyway. The console entry point (entry.py) opts in (`opt_in`); the command hands its large objects
over (`hand_over`), so they outlive it; once the command has returned, the entry point flushes stdout
and stderr and ends the process with the command's status at once (`end_if_handed`: `os._exit`).
In-process callers (tests through CliRunner, library use) never opt in: there the objects are freed
as ever. Commands that hold open resources past their return (a server, a Dask client) hand nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

__all__ = ["end_if_handed", "hand_over", "opt_in"]

_handed: list[Any] | None = None  # None: this process did not opt in


def opt_in() -> None:
    """Let commands hand their objects to the process's end (the console entry point only)."""
    global _handed
    _handed = []


def hand_over(*objects: Any) -> None:
    """Keep `objects` alive until the process ends (only when the process opted in)."""
    if _handed is not None:
        _handed.extend(objects)


def end_if_handed(status: int) -> None:
    """When a command handed objects over: flush stdout and stderr and end the process with `status`
    now, without freeing them (and without the interpreter's teardown). Else return."""
    if not _handed:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing more to say
            stream.flush()
    os._exit(status)

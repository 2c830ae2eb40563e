"""A simulated run's utilisation steps on their way to its `Timeline` (sim/result.py): gathered in typed
lists by the compiled loops of both simulator drivers (sim/engine.py, sim/preempt.py), and put on the
Timeline's arrays a batch at a time."""

from __future__ import annotations

import struct
from typing import Final, final

from gpuplan.sim.result import Timeline

__all__ = ["Steps"]

_STEP_BATCH: Final = 4096  # utilisation steps gathered before they go to the Timeline's arrays


@final
class Steps:
    """A run's utilisation steps (`Timeline.add`'s), gathered in typed lists and put on the Timeline's
    two arrays a batch at a time (one array append costs a generic method call; a million-job run has
    two million steps). `last`: the busy GPUs of the last step."""

    __slots__ = ("busy", "last", "timeline", "times_s")

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.times_s: list[float] = []
        self.busy: list[int] = []
        self.last = timeline.busy[-1] if len(timeline) else 0

    def note(self, t: float, busy: int) -> None:
        """`busy` GPUs occupied at `t`: a step where that changed."""
        if busy != self.last:
            self.times_s.append(t)
            self.busy.append(busy)
            self.last = busy
            if len(self.times_s) >= _STEP_BATCH:
                self.flush()

    def flush(self) -> None:
        """The gathered steps onto the Timeline's arrays, packed as their machine values (an array's own
        extend or append parses each number with a format string, several times the cost)."""
        n = len(self.times_s)
        if n:
            self.timeline.times_s.frombytes(struct.pack(f"{n}d", *self.times_s))
            self.timeline.busy.frombytes(struct.pack(f"{n}q", *self.busy))
            self.times_s.clear()
            self.busy.clear()

"""A progress bar that appears only when the work takes longer than a second."""

from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

__all__ = ["LazyProgress"]


class LazyProgress:
    """Counts steps; draws a Rich bar on stderr once `delay_s` has passed (never for quick work)."""

    def __init__(self, total: int, description: str, delay_s: float = 1.0, enabled: bool = True) -> None:
        self.total = total
        self.description = description
        self.delay_s = delay_s
        self.enabled = enabled
        self.done = 0
        self._t0 = time.monotonic()
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> LazyProgress:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    def advance(self, steps: int = 1, description: str | None = None) -> None:
        self.set(self.done + steps, description)

    def set(self, done: int, description: str | None = None) -> None:
        """Move the bar to `done` steps (shows it once the delay has passed)."""
        self.done = done
        if description:
            self.description = description
        if self._bar is None and self.enabled and time.monotonic() - self._t0 >= self.delay_s:
            # rich only once a bar is drawn (about 50 ms of imports a --json run never needs)
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._task = self._bar.add_task(self.description, total=self.total, completed=self.done)
            self._bar.start()
        elif self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=self.done, description=self.description)

"""Shared fuzzing helpers for the trace reader tests: mutate real lines, check errors are located."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from hypothesis import strategies as st

from gpuplan.errors import GpuplanError, InputError


def _split(line: str, sep: str | None) -> list[str]:
    return line.rstrip("\n").split(sep) if sep is not None else (line.split() or [""])


class Mutated(NamedTuple):
    """A damaged file and whether one of its damages is known to make it invalid (an error must follow
    unless bad rows are skipped)."""

    text: str
    broken: bool


Breaker = Callable[[str], "str | None"]
"""Turns one seed line into a copy that is known to be invalid (None: this line cannot be broken so)."""


def break_cell(index: int, value: str, sep: str | None = ",", data: Callable[[str], bool] = bool) -> Breaker:
    """A Breaker that puts `value` (something the column never accepts) in cell `index` of data lines."""

    def breaker(line: str) -> str | None:
        cells = _split(line, sep)
        if not data(line) or len(cells) <= index:
            return None
        cells[index] = value
        return (sep if sep is not None else " ").join(cells) + "\n"

    return breaker


def mutated_files(
    seed: Sequence[str], sep: str | None = ",", cell_max: int = 8, breaker: Breaker | None = None
) -> st.SearchStrategy[Mutated]:
    """Files made from `seed` lines with 1-4 of them damaged: a cell replaced (cells split by `sep`,
    whitespace when None), the line cut, text inserted, the line replaced by random text, or dropped;
    the final newline is sometimes missing. With a `breaker`, sometimes one more line, untouched so far
    and after an intact line end, is broken by it: such files are `broken`."""

    @st.composite
    def files(draw: st.DrawFn) -> Mutated:
        lines = list(seed)
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(lines) - 1))
            line = lines[i]
            kind = draw(st.sampled_from(["cell", "cut", "insert", "random", "drop"]))
            if kind == "cell":
                cells = _split(line, sep)
                cells[draw(st.integers(0, len(cells) - 1))] = draw(st.text(max_size=cell_max))
                line = (sep if sep is not None else " ").join(cells) + "\n"
            elif kind == "cut":
                line = line[: draw(st.integers(0, len(line)))]
            elif kind == "insert":
                at = draw(st.integers(0, len(line)))
                line = line[:at] + draw(st.text(max_size=6)) + line[at:]
            elif kind == "random":
                line = draw(st.text(max_size=60)) + "\n"
            else:
                line = ""
            lines[i] = line
        broken = breaker is not None and draw(st.booleans()) and _break_one(draw, lines, seed, breaker)
        text = "".join(lines)
        return Mutated(text.rstrip("\n") if draw(st.booleans()) else text, broken)

    return files()


def _break_one(draw: st.DrawFn, lines: list[str], seed: Sequence[str], breaker: Breaker) -> bool:
    """Break one line that no other damage touched and that starts a line of its own; False if none can."""
    ok = [
        i for i, line in enumerate(lines)
        if line == seed[i] and (i == 0 or lines[i - 1].endswith("\n")) and breaker(line) is not None
    ]  # fmt: skip
    if not ok:
        return False
    i = draw(st.sampled_from(ok))
    lines[i] = breaker(lines[i]) or lines[i]
    return True


def assert_located(path: Path, read: Callable[[], object], must_fail: bool = False) -> None:
    """Only GpuplanError escapes; an InputError names this file and a line, any other error this file.
    With `must_fail` (the file is known to be invalid), reading it must raise such an error."""
    try:
        read()
    except InputError as e:
        assert e.path == str(path) and e.line is not None
        assert str(e).startswith(f"{path}:{e.line}:")
    except GpuplanError as e:
        assert str(path) in str(e)
    else:
        assert not must_fail, f"{path} is known to be invalid but was read without an error"

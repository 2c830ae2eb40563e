"""Shared fuzzing helpers for the trace reader tests: mutate real lines, check errors are located."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from hypothesis import strategies as st

from gpuplan.errors import GpuplanError, InputError


def _split(line: str, sep: str | None) -> list[str]:
    return line.rstrip("\n").split(sep) if sep is not None else (line.split() or [""])


def mutated_files(seed: Sequence[str], sep: str | None = ",", cell_max: int = 8) -> st.SearchStrategy[str]:
    """Files made from `seed` lines with 1-4 of them damaged: a cell replaced (cells split by `sep`,
    whitespace when None), the line cut, text inserted, the line replaced by random text, or dropped;
    the final newline is sometimes missing."""

    @st.composite
    def files(draw: st.DrawFn) -> str:
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
        text = "".join(lines)
        return text.rstrip("\n") if draw(st.booleans()) else text

    return files()


def assert_located(path: Path, read: Callable[[], object]) -> None:
    """Only GpuplanError escapes; an InputError names this file and a line, any other error this file."""
    try:
        read()
    except InputError as e:
        assert e.path == str(path) and e.line is not None
        assert str(e).startswith(f"{path}:{e.line}:")
    except GpuplanError as e:
        assert str(path) in str(e)

"""Names a what-if request gives, checked before anything is opened, and messages made fit to send.

A what-if names an upload (`name`: a plain file name), a trace on the server (`path`) and maybe a
cluster file (`cluster`): both must lie under the server's trace folder (`--traces`), are resolved
(symbolic links followed) and checked to lie under it before any file is opened. A bad name is a
`BadNameError` (HTTP 400), never a server error. Error messages name files relative to that folder
(never the server's absolute paths) and quote a value of an uploaded file only as a short, escaped
excerpt.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from gpuplan.errors import GpuplanError, InputError

__all__ = [
    "MAX_MESSAGE_CHARS",
    "BadNameError",
    "public_message",
    "relative_name",
    "under_root",
    "upload_name",
]

MAX_NAME_CHARS = 255
MAX_PATH_CHARS = 1024
MAX_MESSAGE_CHARS = 600
_EXCERPT_CHARS = 40
_ROOT_WORDS = "the server's trace folder (--traces)"


class BadNameError(GpuplanError):
    """A file name or path in a request that the server will not use (HTTP 400)."""


def _printable(text: str) -> str:
    """`text` with every control or unprintable character written as its escape (`\\x00`)."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _shown(text: str) -> str:
    """A name as a message quotes it: escaped, cut to 80 characters."""
    return repr(_printable(text[:80]) + ("…" if len(text) > 80 else ""))


def upload_name(text: str) -> str:
    """The name of an uploaded trace: a plain file name (its extension picks the reader).

    Raises:
        BadNameError: empty, too long, a path (`/`, `\\`), `.` or `..`, or a control character.
    """
    why = _name_problem(text)
    if why:
        raise BadNameError(f"name {_shown(text)}: {why}; give the file's own name, like jobs.csv")
    return text


def _name_problem(text: str) -> str:
    if not text:
        return "empty"
    if len(text) > MAX_NAME_CHARS:
        return f"longer than {MAX_NAME_CHARS} characters"
    if not text.isprintable():
        return "has a control character"
    if "/" in text or "\\" in text:
        return "is a path, not a file name"
    if text in (".", ".."):
        return "is not a file name"
    return ""


def under_root(root: Path, text: str, what: str) -> Path:
    """The file `text` names under `root`, resolved; nothing is opened.

    Args:
        root: the server's trace folder (`--traces`).
        text: a relative path as the request gives it, e.g. `alibaba/jobs.csv`.
        what: the request field, for messages ("path", "cluster").

    Raises:
        BadNameError: absolute, `..`, a control character, too long, or resolving (through a
            symbolic link) outside `root`.
    """
    why = _path_problem(text)
    if why:
        raise BadNameError(f"{what} {_shown(text)}: {why}: paths must lie under {_ROOT_WORDS}")
    base = root.resolve()
    path = (base / text).resolve()
    if not path.is_relative_to(base):
        raise BadNameError(
            f"{what} {_shown(text)}: leads outside {_ROOT_WORDS} (a symbolic link?); paths must lie under it"
        )
    return path


def _path_problem(text: str) -> str:
    if not text:
        return "empty"
    if len(text) > MAX_PATH_CHARS:
        return f"longer than {MAX_PATH_CHARS} characters"
    if not text.isprintable():
        return "has a control character"
    posix = PurePosixPath(text.replace("\\", "/"))
    if posix.is_absolute() or text.startswith("~") or (len(text) > 1 and text[1] == ":"):
        return "is absolute"
    if ".." in posix.parts:
        return "'..' is not allowed"
    return ""


def relative_name(root: Path, path: Path) -> str:
    """`path` as the user knows it: relative to the trace folder."""
    try:
        return path.relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.name


def public_message(error: GpuplanError, root: Path, renames: Mapping[str, str] | None = None) -> str:
    """`error`'s message fit to send: files relative to `root`, values of input files as short
    escaped excerpts, `renames` applied (a temporary upload path -> the upload's name), control
    characters escaped, at most MAX_MESSAGE_CHARS long."""
    text = _input_message(error) if isinstance(error, InputError) else str(error)
    for old, new in (renames or {}).items():
        text = text.replace(old, new)
    for folder in {str(root), str(root.resolve())}:
        text = text.replace(folder + os.sep, "").replace(folder, "the trace folder")
    text = _printable(text)
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


def _input_message(e: InputError) -> str:
    """InputError's own message with the value cut to an excerpt (a cell may be megabytes long)."""
    where = f"{e.path}:{e.line}" if e.line is not None else e.path
    col = f" column {e.column}:" if e.column else ""

    def form(value: str) -> str:
        return f"{where}:{col} value {value} is not valid (expected {e.expected})"

    text = str(e)
    return form(_excerpt(e.value)) if text == form(repr(e.value)) else text  # a subclass's own words stay


def _excerpt(value: object) -> str:
    if isinstance(value, str) and len(value) > _EXCERPT_CHARS:
        return repr(value[:_EXCERPT_CHARS]) + f"… ({len(value):,} characters)"
    text = repr(value)
    return text if len(text) <= _EXCERPT_CHARS + 2 else text[:_EXCERPT_CHARS] + "…"

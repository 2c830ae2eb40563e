"""What a what-if may take from the server: an upload streamed to disk under a byte limit, and a
bounded line of what-ifs (one simulates at a time).

The upload is written to a temporary file as it arrives, in the chunks the server reads (tens of
KiB): memory stays that small whatever the body's size, and a body over the limit is refused (413)
as soon as the limit is passed, having read at most the limit plus one chunk. A `Content-Length`
over the limit is refused before a byte is read; a smaller one is not trusted: the count of bytes
actually read decides.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.requests import ClientDisconnect, Request

from gpuplan.errors import GpuplanError

__all__ = ["BusyError", "TooLargeError", "WhatIfGate", "check_declared", "has_body", "save_upload"]


class TooLargeError(GpuplanError):
    """A request body over the upload limit (HTTP 413)."""


class BusyError(GpuplanError):
    """The line of what-ifs is full (HTTP 429, with Retry-After)."""

    retry_after_s = 30


def has_body(request: Request) -> bool:
    """The request carries a body (an upload): a Content-Length above 0, or a chunked one."""
    length = request.headers.get("content-length", "").strip()
    return (length not in ("", "0")) or "transfer-encoding" in request.headers


def _declared(request: Request) -> int | None:
    text = request.headers.get("content-length")
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise GpuplanError(f"Content-Length {text[:40]!r} is not a number of bytes") from None


def check_declared(request: Request, limit_bytes: int) -> None:
    """Refuse a body whose Content-Length is over the limit, before reading any of it.

    Raises:
        TooLargeError: the declared length is over `limit_bytes`.
    """
    declared = _declared(request)
    if declared is not None and declared > limit_bytes:
        raise TooLargeError(_too_large(declared, limit_bytes, "declared"))


async def save_upload(request: Request, dest: Path, limit_bytes: int) -> int:
    """Stream the request body into the new file `dest`; the bytes written.

    Raises:
        TooLargeError: the body is over `limit_bytes` (declared or as read); `dest` is then partial.
    """
    check_declared(request, limit_bytes)
    size = 0
    with dest.open("xb") as out:
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit_bytes:
                    raise TooLargeError(_too_large(size, limit_bytes, "read"))
                out.write(chunk)
        except ClientDisconnect:
            raise GpuplanError(f"the client went away after {size:,} bytes of its upload") from None
        except OSError as e:  # the server's temporary folder is full or unwritable
            raise GpuplanError(
                f"the server cannot store the upload ({e.strerror or e}); tell its admin"
            ) from e
    return size


def _too_large(size: int, limit: int, how: str) -> str:
    seen = (
        f"it declares {size:,} bytes (Content-Length)"
        if how == "declared"
        else f"refused after {size:,} bytes"
    )
    return (
        f"the upload is over the {limit:,}-byte limit of `gpuplan serve --max-upload-mb` ({seen}): "
        "put the trace under the server's trace folder and give its path, or cut it"
    )


class WhatIfGate:
    """One what-if simulates at a time; `max_waiting` more may wait (reading their uploads
    meanwhile), in order of arrival; beyond that a request is refused at once (BusyError)."""

    def __init__(self, max_waiting: int = 4) -> None:
        if max_waiting < 0:
            raise GpuplanError(f"max_waiting {max_waiting}: must be >= 0")
        self.max_waiting = max_waiting
        self.admitted = 0  # running, waiting or reading an upload
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @asynccontextmanager
    async def admit(self) -> AsyncIterator[None]:
        """A place in line (no waiting: refused when the line is full).

        Raises:
            BusyError: one what-if runs and `max_waiting` wait already.
        """
        if self.admitted >= 1 + self.max_waiting:
            raise BusyError(
                f"busy: one what-if is simulating and {self.max_waiting} are waiting "
                f"(`gpuplan serve --whatif-queue`); try again in {BusyError.retry_after_s} s"
            )
        self.admitted += 1
        try:
            yield
        finally:
            self.admitted -= 1

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait for the one simulation slot, then hold it."""
        async with self._the_lock():
            yield

    def _the_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:  # a new event loop (tests start several)
            self._lock, self._loop = asyncio.Lock(), loop
        return self._lock

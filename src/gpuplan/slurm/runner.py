"""The one place gpuplan runs Slurm's commands (`squeue`, `sinfo`, `sacct`, `scontrol`, `sbatch`).

Commands come from PATH and inherit the environment, so `SLURM_CONF` picks the cluster exactly as for
Slurm's own tools. Every call has a timeout; errors that Slurm itself calls transient (the controller
busy or restarting, a socket timeout) are retried with exponential backoff; any other failure raises
`SlurmCommandError` naming the command, its exit status and its stderr. The sleep between retries is
injected so tests never wait.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuplan.errors import GpuplanError

__all__ = [
    "PERMISSION_HINT",
    "SlurmCommandError",
    "SlurmError",
    "SlurmNotFoundError",
    "SlurmPermissionError",
    "SlurmRunner",
    "is_permission_error",
    "is_transient",
]

# stderr fragments of failures that go away by themselves (slurmctld restarting, busy or slow).
_TRANSIENT = (
    "Socket timed out",
    "Unable to contact slurm controller",
    "Connection refused",
    "Resource temporarily unavailable",
    "Zero Bytes were transmitted or received",
    "Slurm backup controller in standby mode",
    "Transport endpoint is not connected",
    "Communication connection failure",
    "Unexpected message received",  # what `scontrol update` prints when slurmctld is not running
)
_PERMISSION = (
    "Access/permission denied",
    "Changes to job priority are not persistent",
    "Permission denied",
    "User not found on host",
    "Invalid user id",  # scontrol update on another user's job by a non-operator
)


class SlurmError(GpuplanError):
    """Something about Slurm prevents gpuplan from reading or changing the queue."""


class SlurmNotFoundError(SlurmError):
    """A Slurm command is not on PATH."""


class SlurmCommandError(SlurmError):
    """A Slurm command failed: the message names it, its exit status and its stderr."""

    def __init__(self, args: Sequence[str], returncode: int | None, stderr: str, hint: str = "") -> None:
        self.args_run = list(args)
        self.returncode = returncode
        self.stderr = stderr.strip()
        status = "timed out" if returncode is None else f"exited {returncode}"
        last = " / ".join(line for line in self.stderr.splitlines()[-3:] if line) or "(no stderr)"
        super().__init__(f"`{shlex.join(self.args_run)}` {status}: {last}{'; ' + hint if hint else ''}")


class SlurmPermissionError(SlurmCommandError):
    """Slurm refused a change the caller may not make (priorities need root, SlurmUser or an Operator)."""


def is_transient(stderr: str) -> bool:
    return any(t in stderr for t in _TRANSIENT)


def is_permission_error(stderr: str) -> bool:
    return any(t in stderr for t in _PERMISSION)


@dataclass
class SlurmRunner:
    """Runs Slurm commands with a timeout and retries.

    Attributes:
        timeout_s: limit for one attempt.
        retries: extra attempts after a transient failure (0 = none).
        backoff_s: first wait between attempts; doubled each time.
        env: environment for the commands (default: this process's, so SLURM_CONF applies).
        sleep: how to wait between attempts (tests pass a recorder).
    """

    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 0.5
    env: dict[str, str] | None = None
    sleep: Callable[[float], None] = time.sleep
    calls: list[list[str]] = field(default_factory=list)

    def run(self, args: Sequence[str], *, input_text: str | None = None, retry: bool = True) -> str:
        """Run `args` and return its stdout.

        Raises:
            SlurmNotFoundError: the command is not on PATH (Slurm's client tools not installed).
            SlurmCommandError: non-zero exit or timeout after the retries (message names the command).
        """
        exe = self._resolve(args[0])
        attempts = 1 + (self.retries if retry else 0)
        delay = self.backoff_s
        for attempt in range(attempts):
            self.calls.append(list(args))
            try:
                p = subprocess.run(
                    [exe, *args[1:]],
                    input=input_text,
                    capture_output=True,
                    text=True,
                    timeout=self.timeout_s,
                    env=self.env,
                    errors="replace",
                )
            except subprocess.TimeoutExpired as e:
                err = _text(e.stderr)
                if attempt + 1 < attempts:
                    self.sleep(delay)
                    delay *= 2
                    continue
                raise SlurmCommandError(args, None, err or f"no answer within {self.timeout_s:g} s",
                                        "is slurmctld up and reachable? (`scontrol ping`)") from None  # fmt: skip
            if p.returncode == 0:
                return p.stdout
            if is_transient(p.stderr) and attempt + 1 < attempts:
                self.sleep(delay)
                delay *= 2
                continue
            raise self._error(args, p.returncode, p.stderr)
        raise AssertionError("unreachable")  # pragma: no cover

    def _resolve(self, name: str) -> str:
        path = (self.env or os.environ).get("PATH")
        exe = shutil.which(name, path=path)
        if exe is None:
            raise SlurmNotFoundError(
                f"`{name}` is not on PATH: install Slurm's client tools (Debian: apt-get install slurm-client) "
                "or add their directory to PATH"
            )
        return exe

    @staticmethod
    def _error(args: Sequence[str], rc: int, stderr: str) -> SlurmCommandError:
        if is_permission_error(stderr):
            return SlurmPermissionError(args, rc, stderr, PERMISSION_HINT)
        if is_transient(stderr):
            return SlurmCommandError(
                args, rc, stderr, "slurmctld is not answering: is it running? (`scontrol ping`)"
            )
        return SlurmCommandError(args, rc, stderr)


PERMISSION_HINT = (
    "changing job priorities needs root, the SlurmUser, or a Slurm Operator/Admin "
    "(`sacctmgr modify user NAME set adminlevel=Operator`); `gpuplan slurm plan` and "
    "`gpuplan slurm apply --dry-run` work for everyone, and `--mode nice` orders your own jobs"
)


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")

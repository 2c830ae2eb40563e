"""The agent's per-user quota file (`gpuplan agent start --quotas FILE`, reloaded on SIGHUP or
`gpuplan agent reload`):

    [default]          # every user (overrides --max-gpus-per-user / --max-jobs-per-user)
    max_gpus = 4
    max_jobs = 8

    [users.alice]      # one user's own limits, field by field over the default
    max_gpus = 8
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from gpuplan.core.quotas import Quotas, UserQuota
from gpuplan.errors import GpuplanError

__all__ = ["load_quotas"]

_FIELDS = ("max_gpus", "max_jobs")


def load_quotas(path: Path, max_gpus: int | None = None, max_jobs: int | None = None) -> Quotas:
    """The quotas of `path` over the command line's defaults (`max_gpus`, `max_jobs`).

    Raises:
        GpuplanError: the file is unreadable, not TOML, or a field is not a positive integer (the message
            names the file, the field and the fix).
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise GpuplanError(
            f"{path}: cannot read the quota file ({e.strerror}); give a readable TOML file"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise GpuplanError(f"{path}: not valid TOML ({e}); see docs/multi-user.md for the format") from None
    unknown = sorted(set(data) - {"default", "users"})
    if unknown:
        raise GpuplanError(f"{path}: unknown table(s) {unknown}; valid: [default], [users.NAME]")
    default = _limits(path, "default", data.get("default", {}))
    gpus = max_gpus if default.max_gpus is None else default.max_gpus
    jobs = max_jobs if default.max_jobs is None else default.max_jobs
    users = data.get("users", {})
    if not isinstance(users, dict):
        raise GpuplanError(f"{path}: users must be tables, e.g. [users.alice] max_gpus = 8")
    per_user = {str(name): _limits(path, f"users.{name}", table) for name, table in users.items()}
    return Quotas(gpus, jobs, per_user)


def _limits(path: Path, where: str, table: Any) -> UserQuota:
    if not isinstance(table, dict):
        raise GpuplanError(f"{path}: [{where}] must be a table with max_gpus and/or max_jobs")
    unknown = sorted(set(table) - set(_FIELDS))
    if unknown:
        raise GpuplanError(f"{path}: [{where}] unknown field(s) {unknown}; valid: {', '.join(_FIELDS)}")
    out: dict[str, int] = {}
    for name in _FIELDS:
        if name not in table:
            continue
        v = table[name]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise GpuplanError(f"{path}: [{where}] {name} = {v!r}: give a whole number of at least 1")
        out[name] = v
    return UserQuota(out.get("max_gpus"), out.get("max_jobs"))

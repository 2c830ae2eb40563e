"""Per-user quotas: the most GPUs and the most running jobs a user may hold at once.

A waiting job whose start would take its user over a limit is passed by in a pass (it does not block
the jobs behind it) and `Scheduler.quota_reason(jid)` says why it waits; a job that asks for more GPUs
than its user may ever hold is refused at submit (`QuotaNeverFitsError`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuplan.errors import JobNeverFitsError

__all__ = ["QuotaNeverFitsError", "QuotaUse", "Quotas", "UserQuota"]


class QuotaNeverFitsError(JobNeverFitsError):
    """A job asks for more GPUs than its user's quota allows at all."""


@dataclass(frozen=True, slots=True)
class UserQuota:
    """Limits of one user (None: no limit)."""

    max_gpus: int | None = None
    max_jobs: int | None = None


@dataclass(frozen=True)
class Quotas:
    """The default limits and per-user overrides (an override replaces the default field by field)."""

    max_gpus: int | None = None
    max_jobs: int | None = None
    per_user: dict[str, UserQuota] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for what, v in (("max GPUs per user", self.max_gpus), ("max jobs per user", self.max_jobs)):
            if v is not None and v < 1:
                raise ValueError(f"{what} must be at least 1, got {v}")

    @property
    def is_empty(self) -> bool:
        return self.max_gpus is None and self.max_jobs is None and not self.per_user

    def limits(self, user: str) -> UserQuota:
        """The limits that apply to `user`."""
        own = self.per_user.get(user)
        if own is None:
            return UserQuota(self.max_gpus, self.max_jobs)
        return UserQuota(
            self.max_gpus if own.max_gpus is None else own.max_gpus,
            self.max_jobs if own.max_jobs is None else own.max_jobs,
        )

    def never_fits(self, user: str, gpus: int) -> str | None:
        """Why a job of `gpus` GPUs can never start under `user`'s quota, or None."""
        cap = self.limits(user).max_gpus
        if cap is not None and gpus > cap:
            who = user or "(no user)"
            return (
                f"quota: the job asks for {gpus} GPUs but {who} may hold at most {cap}: ask for at most "
                f"{cap} GPUs, or have the quota raised"
            )
        return None


class QuotaUse:
    """GPUs and running jobs per user (the Scheduler keeps it as jobs start and end)."""

    def __init__(self) -> None:
        self.gpus: dict[str, int] = {}
        self.jobs: dict[str, int] = {}

    def add(self, user: str, gpus: int) -> None:
        self.gpus[user] = self.gpus.get(user, 0) + gpus
        self.jobs[user] = self.jobs.get(user, 0) + 1

    def remove(self, user: str, gpus: int) -> None:
        self.gpus[user] -= gpus
        self.jobs[user] -= 1
        if not self.jobs[user]:
            del self.gpus[user], self.jobs[user]

    def reason(self, quotas: Quotas, user: str, gpus: int) -> str | None:
        """Why a job of `user` asking for `gpus` GPUs may not start now, or None when it may."""
        lim = quotas.limits(user)
        who = user or "(no user)"
        used_jobs = self.jobs.get(user, 0)
        if lim.max_jobs is not None and used_jobs >= lim.max_jobs:
            return f"quota: {who} runs {used_jobs} of {lim.max_jobs} jobs"
        used = self.gpus.get(user, 0)
        if lim.max_gpus is not None and used + gpus > lim.max_gpus:
            tail = "" if used >= lim.max_gpus else f" (this job asks for {gpus})"
            return f"quota: {who} uses {used} of {lim.max_gpus} GPUs{tail}"
        return None

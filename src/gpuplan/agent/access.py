"""Who may see and steer which job on an agent shared by several users.

The caller is the uid the kernel gives for the connection (SO_PEERCRED), never anything the client
sends. Every user sees every job with its user (as `squeue` shows them); another user's command line,
working directory, environment and logs are hidden. cancel, hold, release, requeue and apply act
only on the caller's own jobs, except for root and the members of the agent's `--admin-group`.
Each refusal is logged with the caller (the agent's log and the store's events).
"""

from __future__ import annotations

import grp
import logging
import pwd
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuplan.agent.protocol import AgentError

if TYPE_CHECKING:
    from gpuplan.agent.daemon import Agent
    from gpuplan.agent.store import JobRow

__all__ = [
    "OWNED_OPS",
    "AccessError",
    "Rights",
    "check_apply",
    "check_owner",
    "redact",
    "refuse",
    "rights_of",
    "user_name",
]

log = logging.getLogger("gpuplan.agent")

OWNED_OPS = {"cancel", "hold", "release", "requeue"}
"""Ops on job ids that only the job's owner (or an admin) may make."""
HIDDEN = "(hidden: another user's job)"


class AccessError(AgentError):
    """The caller may not act on another user's job."""


def user_name(uid: int) -> str:
    """The account name of `uid` (the uid as text when it has none)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


@dataclass(frozen=True, slots=True)
class Rights:
    """What the user on the other end of a connection may do (from its SO_PEERCRED uid)."""

    uid: int
    name: str
    admin: bool  # root, or a member of the admin group: may act on every job

    def owns(self, row: JobRow) -> bool:
        return row.uid == self.uid


def rights_of(uid: int, admin_group: str | None) -> Rights:
    """The caller of `uid`; `admin_group`: the group whose members act as admins (None: root only)."""
    name = user_name(uid)
    return Rights(uid, name, uid == 0 or _in_group(uid, name, admin_group))


def _in_group(uid: int, name: str, group: str | None) -> bool:
    if not group:
        return False
    try:
        g = grp.getgrnam(group)
    except KeyError:
        return False
    try:
        primary = pwd.getpwuid(uid).pw_gid
    except KeyError:
        primary = -1
    return name in g.gr_mem or primary == g.gr_gid


def check_owner(agent: Agent, caller: Rights, op: str, rows: list[JobRow]) -> None:
    """Refuse `op` when one of `rows` is another user's and the caller is no admin (logged).

    Raises:
        AccessError: the first job that is not the caller's, its owner, and who may.
    """
    if caller.admin:
        return
    for row in rows:
        if not caller.owns(row):
            refuse(agent, caller, op, row.id, _not_yours(agent, caller, op, row))


def check_apply(agent: Agent, caller: Rights, order: list[str], waiting: list[JobRow]) -> None:
    """Refuse a plan that names another user's waiting job (by id, or by a name only theirs carry)."""
    if caller.admin:
        return
    by_id = {str(r.id): r for r in waiting}
    for entry in order:
        row = by_id.get(entry)
        named = [r for r in waiting if r.name == entry]
        if row is None and named and not any(caller.owns(r) for r in named):
            row = named[0]
        if row is not None and not caller.owns(row):
            refuse(agent, caller, "apply", row.id, _not_yours(agent, caller, "apply", row))


def refuse(agent: Agent, caller: Rights, op: str, jid: int | None, message: str) -> None:
    """Log a refusal with its caller (agent log and store events) and raise it."""
    log.warning("uid %d (%s): %s refused: %s", caller.uid, caller.name, op, message)
    agent.store.log_event(agent.clock(), caller.uid, f"refused:{op}", jid, message)
    raise AccessError(message)


def _not_yours(agent: Agent, caller: Rights, op: str, row: JobRow) -> str:
    group = agent.config.admin_group
    who = f"root and the members of group {group}" if group else "root"
    return (
        f"{op} refused: job {row.id} belongs to {row.user or user_name(row.uid or 0)}, not to you "
        f"({caller.name}); only {who} may {op} another user's job"
    )


def redact(out: dict[str, Any], row: JobRow, caller: Rights) -> dict[str, Any]:
    """A job's JSON as `caller` may see it: another user's command, cwd and environment hidden."""
    if caller.admin or caller.owns(row):
        return out
    hidden = dict(out)
    for key in ("command", "cwd"):
        if key in hidden:
            hidden[key] = HIDDEN
    hidden.pop("env", None)
    hidden["hidden"] = True
    return hidden

"""Who may ask `gpuplan serve` what: the `Host` check (against DNS rebinding) and the token.

A request must name this server in its `Host` header.

A page on `evil.example` whose name the attacker then points at 127.0.0.1 is, to the browser, still
`evil.example`: it may read every answer of a dashboard on this machine. Its requests carry
`Host: evil.example`, which this check refuses (400) before any route runs.

Which names pass (`allowed_hosts`):
- bound to loopback (127.0.0.1, ::1, localhost): `localhost`, `127.0.0.1`, `::1` and the bound address;
- bound to one other address: that address, `localhost` names and this machine's host name;
- bound to every address (0.0.0.0, ::): any IP address literal (a rebinding page always has a
  name, never a literal), `localhost` names and this machine's host name;
- always: the names given with `--allowed-hosts` (a reverse proxy's public name, say); `*` there
  turns the check off.

What changes anything (the agent's endpoints) and what-if uploads need the token as
`Authorization: Bearer TOKEN` (`token_refusal`); a server without a token refuses them.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import socket
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any

from gpuplan.errors import GpuplanError

__all__ = [
    "LOOPBACK_NAMES",
    "HostCheck",
    "HostRule",
    "NotAllowedError",
    "allowed_hosts",
    "host_of",
    "is_loopback",
    "token_refusal",
]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_WILDCARDS = {"", "0.0.0.0", "::"}

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class HostRule:
    """The names a request's `Host` may give (lower case, without the port).

    Attributes:
        names: names and addresses that pass.
        any_ip: every IP address literal passes too (bound to all addresses).
        anything: no check at all (`--allowed-hosts '*'`).
    """

    names: frozenset[str] = LOOPBACK_NAMES
    any_ip: bool = False
    anything: bool = False

    def allows(self, host: str) -> bool:
        if self.anything or host in self.names:
            return True
        return self.any_ip and _is_ip(host)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    """`localhost` or a loopback address (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _machine_names() -> set[str]:
    names = {socket.gethostname().lower()}
    with contextlib.suppress(OSError):  # a resolver that does not answer: the short name still passes
        names.add(socket.getfqdn().lower())
    return names


def allowed_hosts(bind_host: str, extra: Iterable[str] = ()) -> HostRule:
    """The rule for a server bound to `bind_host`, plus the names in `extra` (see the module docstring)."""
    extra = {e.strip().lower().strip("[]") for e in extra if e.strip()}
    bind = bind_host.strip().lower().strip("[]")
    if "*" in extra:
        return HostRule(frozenset(extra - {"*"}), anything=True)
    names = set(LOOPBACK_NAMES) | extra | ({bind} if bind not in _WILDCARDS else set())
    if is_loopback(bind):
        return HostRule(frozenset(names))
    return HostRule(frozenset(names | _machine_names()), any_ip=bind in _WILDCARDS)


def host_of(header: str) -> str:
    """The name in a `Host` header, lower case, without the port: `[::1]:8000` -> `::1`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    if header.count(":") == 1:
        return header.split(":", 1)[0]
    return header  # a bare name, or an IPv6 literal without brackets


class HostCheck:
    """ASGI middleware: a request whose `Host` the rule refuses gets 400 and one line saying why."""

    def __init__(self, app: App, rule: HostRule) -> None:
        self.app = app
        self.rule = rule

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.rule.anything:  # lifespan; the app has no websockets
            await self.app(scope, receive, send)
            return
        raw = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
        if self.rule.allows(host_of(raw)):
            await self.app(scope, receive, send)
            return
        await _refuse(send, _why(raw))


def _why(raw: str) -> str:
    if not raw:
        return "no Host header: give the server's address as Host"
    return (
        f"Host {raw[:80]!a} is not a name of this server (a DNS-rebinding page would send one): "
        "open it by the address it listens on, or start `gpuplan serve` with --allowed-hosts NAME"
    )


async def _refuse(send: Send, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class NotAllowedError(GpuplanError):
    """A request the server's token does not allow (HTTP 403)."""


def token_refusal(token: str | None, authorization: str, what: str) -> str | None:
    """Why a request with header `Authorization: authorization` may not do `what` (plural: "changes");
    None: it may. `token` is the server's (None: it has none, so nothing that needs one is allowed)."""
    if token is None:
        return f"read-only server: no agent token file (nor --token-file): {what} refused"
    if not hmac.compare_digest(authorization.encode(), f"Bearer {token}".encode()):
        return f"{what} need the server's token as 'Authorization: Bearer TOKEN' (file $GPUPLAN_HOME/token)"
    return None

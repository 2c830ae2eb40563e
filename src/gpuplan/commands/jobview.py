"""`gpuplan queue` and `gpuplan show ID`: ask the agent (or read its store while it is down) and print.

Nothing here imports typer, Rich or the core: `gpuplan.entry` runs these two commands without building
the whole command tree (`fast_main`), so `gpuplan queue` with 2,000 waiting jobs starts, asks and prints
in a fraction of the time the full CLI takes to start (bench/bench_agent.py). commands/agent.py's typer
commands call the same functions, so both paths print the same bytes.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpuplan.errors import GpuplanError

if TYPE_CHECKING:
    from gpuplan.agent.paths import AgentPaths

__all__ = [
    "agent_call",
    "agent_paths",
    "ago",
    "ask_or_store",
    "fast_main",
    "listing_json",
    "print_json",
    "queue",
    "show",
]


def agent_paths() -> AgentPaths:
    """The agent this client talks to: GPUPLAN_HOME's, the user's own, else the system agent's."""
    from gpuplan.agent.paths import client_paths

    return client_paths()


def agent_call(op: str, **fields: Any) -> dict[str, Any]:
    """One request, checked here first (agent/schema.py: a bad id is refused even with no agent)."""
    from gpuplan.agent.protocol import call
    from gpuplan.agent.schema import validate

    validate({"op": op, **fields})
    return call(agent_paths().socket, {"op": op, **fields})


def ask_or_store(op: str, **fields: Any) -> dict[str, Any]:
    """`queue` or `show` from the agent, else read-only from its store while it is down (said on
    stderr; the reply's `agent_running` is false)."""
    from gpuplan.agent.protocol import AgentNotRunningError

    try:
        reply = agent_call(op, **fields)  # kept a Reply: a key it lacks is one line, not a traceback
        reply["agent_running"] = True
        return reply
    except AgentNotRunningError as e:
        reply = _from_store(op, fields, e)
    sys.stderr.write(
        f"gpuplan: the agent is not running: read-only view of its store {agent_paths().db} "
        "(no expected start times; start it with `gpuplan agent start`)\n"
    )
    return {**reply, "agent_running": False}


def _from_store(op: str, fields: dict[str, Any], down: Exception) -> dict[str, Any]:
    from gpuplan.agent.protocol import AgentError
    from gpuplan.agent.requests import job_json, show_reply
    from gpuplan.agent.store import ACTIVE_STATES, connect, get_job, jobs_by_state

    paths = agent_paths()
    if not paths.db.exists():
        raise down
    now = time.time()
    try:
        conn = connect(paths.db, readonly=True)
    except sqlite3.Error as e:
        raise AgentError(f"{down}; and its store {paths.db} is unreadable: {e}") from None
    try:
        if op == "queue":
            rows = sorted(jobs_by_state(conn, ACTIVE_STATES), key=lambda r: (r.state != "running", r.id))
            return {"now_s": now, "jobs": [{**job_json(r, now), "expected_start_s": None} for r in rows]}
        row = get_job(conn, fields["id"])
        if row is None:
            raise AgentError(f"no job {fields['id']} (see `gpuplan queue`)")
        return show_reply(conn, paths, row, now)
    except sqlite3.Error as e:
        raise AgentError(f"reading the store {paths.db} failed: {e}") from None
    finally:
        conn.close()


def print_json(data: dict[str, Any]) -> None:
    """A reply as indented JSON on stdout (what every agent command's --json prints)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def listing_json(data: dict[str, Any], key: str) -> str:
    """`data` as JSON with each item of its list `key` on one line (a 2,000-job queue indented field
    by field is 80,000 lines, and Python's indenting encoder is ~5x slower than the compact one)."""
    parts = []
    for k, v in data.items():
        if k == key and v:
            items = ",\n".join("    " + json.dumps(item, default=str) for item in v)
            parts.append(f"  {json.dumps(k)}: [\n{items}\n  ]")
        else:
            parts.append(f"  {json.dumps(k)}: {json.dumps(v, default=str)}")
    return "{\n" + ",\n".join(parts) + "\n}"


def queue(as_json: bool) -> None:
    """Running and waiting jobs, waiting ones in the order they will start, with expected start times."""
    reply = ask_or_store("queue")
    if as_json:
        sys.stdout.write(listing_json(reply, "jobs") + "\n")
        return
    _print_queue(reply["jobs"], reply["now_s"])


def _print_queue(jobs: list[dict[str, Any]], now: float) -> None:
    """The queue as aligned columns (plain text: a 2,000-row Rich table took seconds to lay out)."""
    head = ("ID", "STATE", "NAME", "GPUS", "MEM/GPU", "ON", "START", "END", "REASON", "COMMAND")
    rows = [head]
    for j in jobs:
        start = j["start_s"] if j["state"] in ("running", "suspended") else j.get("expected_start_s")
        end = j.get("expected_end_s")
        mem = "whole" if j["mem_gb"] is None else f"{j['mem_gb']:g}G"
        on = ",".join(map(str, j["gpu_ids"])) or "-"
        rows.append((str(j["id"]), j["state"], j["name"] or "-", str(j["gpus"]), mem, on,
                     "-" if start is None else ago(start - now), "-" if end is None else ago(end - now),
                     j["reason"] or "", j["command"][:60]))  # fmt: skip
    widths = [max(len(r[k]) for r in rows) for k in range(len(head) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1] for r in rows]
    sys.stdout.write("\n".join(line.rstrip() for line in lines) + "\n")


def ago(delta_s: float) -> str:
    """A time difference as `in 5m`, `12s ago`, `in 1.5h`."""
    sign = "in " if delta_s > 0 else ""
    d = abs(delta_s)
    text = f"{d:.0f}s" if d < 90 else (f"{d / 60:.0f}m" if d < 5400 else f"{d / 3600:.1f}h")
    return sign + text + ("" if delta_s > 0 else " ago")


def show(job_id: int, as_json: bool) -> None:
    """One job: its fields, where its logs are, the profile measured so far and its forecast."""
    reply = ask_or_store("show", id=job_id)
    if as_json:
        print_json(reply)
        return
    lines = [f"{k:16} {v}" for k, v in reply["job"].items()]
    lines += [f"{k:16} {v}" for k, v in reply["profile"].items()]
    why = (reply.get("forecast") or {}).get("explanation")
    if why:
        lines.append(f"{'forecast':16} {why}")
    lines += [f"{'stdout':16} {reply['stdout']}", f"{'stderr':16} {reply['stderr']}"]
    sys.stdout.write("\n".join(lines) + "\n")


def fast_main(argv: Sequence[str]) -> int | None:
    """Run `queue [--json]` or `show ID [--json]` without the command tree: the exit status, or None
    when `argv` is anything else (help, other options, other commands: the full CLI takes it)."""
    args = list(argv)
    as_json = "--json" in args
    if as_json:
        args.remove("--json")
    if args == ["queue"]:
        run = lambda: queue(as_json)  # noqa: E731
    elif len(args) == 2 and args[0] == "show" and args[1].isascii() and args[1].isdigit():
        run = lambda: show(int(args[1]), as_json)  # noqa: E731
    else:
        return None
    try:
        run()
        sys.stdout.flush()
    except GpuplanError as e:
        sys.stderr.write(f"gpuplan: error: {e}\n")
        return 2
    except BrokenPipeError:  # `gpuplan queue | head`: the reader left; status 1 and no traceback (as click)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0

"""`gpuplan agent start|stop|status` and the job commands `submit`, `queue`, `show`, `cancel`, `logs`,
`hold`, `release`, `requeue`, `apply` (docs/agent.md).

Registered by cli.py. Every command talks to the agent of `$GPUPLAN_HOME` over its Unix socket.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuplan.commands.jobview import agent_call, agent_paths, ask_or_store, queue, show

__all__ = [
    "agent_app",
    "apply_cmd",
    "cancel_cmd",
    "hold_cmd",
    "logs_cmd",
    "parse_duration_s",
    "parse_mem_gb",
    "queue_cmd",
    "release_cmd",
    "requeue_cmd",
    "show_cmd",
    "submit_cmd",
]

agent_app = typer.Typer(help="Run the local agent that runs jobs on this node's GPUs.", no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
IdsArg = Annotated[list[int], typer.Argument(help="Job id(s).")]

_MEM_UNITS = {"": 1.0, "g": 1.0, "gb": 1.0, "gib": 1.0, "m": 1 / 1024, "mb": 1 / 1024, "mib": 1 / 1024,
              "t": 1024.0, "tb": 1024.0, "tib": 1024.0}  # fmt: skip
_TIME_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_mem_gb(text: str) -> float:
    """`20G`, `20GB`, `512M`, `1.5T` or a plain number of GiB -> GiB.

    Raises:
        GpuplanError: anything else (the message shows valid forms).
    """
    from gpuplan.errors import GpuplanError

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _MEM_UNITS or float(m.group(1)) <= 0:
        raise GpuplanError(f"--mem {text!r}: expected memory per GPU such as 20G, 512M or 1.5T")
    return float(m.group(1)) * _MEM_UNITS[unit]


def parse_duration_s(text: str, option: str = "--time") -> float:
    """`90s`, `30m`, `2h`, `1d`, `1h30m` or `H:MM:SS` -> seconds.

    Raises:
        GpuplanError: anything else, including a bare number (ambiguous unit).
    """
    from gpuplan.errors import GpuplanError

    t = text.strip().lower()
    bad = GpuplanError(f"{option} {text!r}: expected a duration such as 90s, 30m, 2h, 1h30m, 30d or 1:30:00")
    if ":" in t:
        parts = t.split(":")
        if len(parts) > 3 or not all(p.isdigit() for p in parts):
            raise bad
        seconds = 0.0
        for p in parts:
            seconds = seconds * 60 + int(p)
    else:
        pieces = re.findall(r"([0-9]*\.?[0-9]+)\s*([a-z]+)", t)
        if not pieces or "".join(a + b for a, b in pieces) != t.replace(" ", ""):
            raise bad
        if any(u not in _TIME_UNITS for _, u in pieces):
            raise bad
        seconds = sum(float(n) * _TIME_UNITS[u] for n, u in pieces)
    if seconds <= 0:
        raise bad
    return seconds


# -- client plumbing -------------------------------------------------------------------------------


_paths = agent_paths
_call = agent_call


def _submit(fields: dict[str, Any]) -> tuple[int, str]:
    """Submit with a fresh request id (uuid); on a lost reply ask again by it: (job id, note).

    The agent answers a repeated request id with the job it already made, so a retry never makes
    a second job; when the agent is gone after the commit, the store tells (read-only).
    """
    import uuid

    from gpuplan.agent.protocol import AgentConnectionLost, AgentError, AgentNotRunningError

    request = {**fields, "request_id": str(uuid.uuid4())}
    lost: AgentError | None = None
    for attempt in range(4):
        try:
            reply = _call("submit", **request)
        except AgentConnectionLost as e:
            lost = e
            time.sleep(0.1 * (attempt + 1))
            continue
        except AgentNotRunningError:
            if lost is None:
                raise
            break
        note = (
            ""
            if lost is None
            else f"the first reply was lost ({lost}); the agent confirmed job {reply['id']}"
        )
        return int(reply["id"]), note
    return _submitted_per_store(request["request_id"], lost)


def _submitted_per_store(request_id: str, lost: Exception | None) -> tuple[int, str]:
    from gpuplan.agent.protocol import AgentError
    from gpuplan.agent.store import connect, job_by_request

    try:
        conn = connect(_paths().db, readonly=True)
        try:
            row = job_by_request(conn, request_id)
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise AgentError(
            f"the agent did not answer the submit ({lost}) and its store is unreadable: {e}"
        ) from None
    if row is None:
        raise AgentError(
            f"the agent did not answer ({lost}) and its store has no job with request id {request_id}: "
            "the job was NOT submitted; submit it again"
        )
    return row.id, f"the agent did not answer ({lost}); its store holds job {row.id} from this submit"


_ask_or_store = ask_or_store


def _emit(as_json: bool, data: dict[str, Any], text: str) -> None:
    if as_json:
        typer.echo(json.dumps(data, indent=2, default=str))
    elif text:
        typer.echo(text)


def _errors():  # type: ignore[no-untyped-def]
    from gpuplan.commands.common import cli_errors as errors

    return errors()


# -- agent start | stop | status -------------------------------------------------------------------


@agent_app.command("start")
def start_cmd(
    gpus: Annotated[str, typer.Option("--gpus", help="nvml (the real GPUs) or fake:PRESET_OR_TOML[,lost=I][,unsupported=FIELD] (no GPU needed).")] = "nvml",
    policy: Annotated[str, typer.Option("--policy", "-p", help="Ordering policy (see `gpuplan policies`).")] = "fifo",
    backfill: Annotated[str, typer.Option("--backfill", "-b", help="Backfill mode: none, easy, conservative.")] = "easy",
    placer: Annotated[str, typer.Option("--placer", help="GPU placer: first-fit, best-fit (pack), spread, fgd, fgd-pack.")] = "first-fit",
    sharing: Annotated[bool, typer.Option("--sharing/--exclusive", help="Let jobs share a GPU while their declared memory fits (default: one job per GPU).")] = False,
    max_jobs_per_gpu: Annotated[int, typer.Option("--max-jobs-per-gpu", min=1, help="With --sharing: most jobs on one GPU.")] = 4,
    sample_interval: Annotated[float, typer.Option("--sample-interval", min=0.01, help="Seconds between GPU samples.")] = 1.0,
    retention: Annotated[str, typer.Option("--retention", help="Finished jobs older than this (their rows, samples, events, logs and jobs/ID/ directories) are deleted, e.g. 30d, 12h.")] = "30d",
    sample_retention: Annotated[str, typer.Option("--sample-retention", help="GPU and job samples older than this are deleted, e.g. 7d.")] = "7d",
    grace: Annotated[float, typer.Option("--grace", min=0.0, help="Seconds between SIGTERM and SIGKILL on cancel or time limit.")] = 10.0,
    oom_retries: Annotated[int, typer.Option("--oom-retries", min=0, help="Requeues after a CUDA out-of-memory exit.")] = 1,
    oom_factor: Annotated[float, typer.Option("--oom-factor", min=1.0, help="Memory of a requeued OOM job: observed peak x this.")] = 1.25,
    predict: Annotated[list[Path] | None, typer.Option("--predict", help="A duration model from `gpuplan predict fit` (repeatable); default: the node's own history.")] = None,
    quantum_gpu_s: Annotated[float | None, typer.Option("--quantum-gpu-s", help="Preemptive policies: first level boundary in GPU-seconds (las quantum, tiresias threshold, gittins first grid point); default: their own (las 3600).")] = None,
    max_gpus_per_user: Annotated[int | None, typer.Option("--max-gpus-per-user", min=1, help="Most GPUs one user's running jobs may hold at once (a job beyond it waits, with the quota as its reason).")] = None,
    max_jobs_per_user: Annotated[int | None, typer.Option("--max-jobs-per-user", min=1, help="Most running jobs per user.")] = None,
    multi_user: Annotated[bool, typer.Option("--multi-user", help="As root: one agent for every local user (state /var/lib/gpuplan, socket /run/gpuplan; both in $GPUPLAN_HOME when set); each job runs as its submitter (docs/multi-user.md).")] = False,
    admin_group: Annotated[str | None, typer.Option("--admin-group", help="With --multi-user: members of this group may cancel, hold, release, requeue and apply every user's jobs, as root may.")] = None,
    quotas: Annotated[Path | None, typer.Option("--quotas", help="Per-user quotas, a TOML file ([default], [users.NAME]: max_gpus, max_jobs); reloaded on SIGHUP or `gpuplan agent reload`.")] = None,
    foreground: Annotated[bool, typer.Option("--foreground", help="Run in this process (logs on stderr) instead of in the background.")] = False,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Start the agent for $GPUPLAN_HOME (default ~/.local/state/gpuplan) in the background."""
    with _errors():
        from gpuplan.agent.daemon import AgentConfig
        from gpuplan.agent.gpus import open_backend
        from gpuplan.agent.server import check_multi_user, run_agent
        from gpuplan.core.backfill import get_backfill
        from gpuplan.core.placement import get_placer
        from gpuplan.core.policies import get_policy

        get_policy(policy), get_backfill(backfill), get_placer(placer)  # unknown names: one line, now
        if quantum_gpu_s is not None:
            from gpuplan.core.policies import preemptive_policy

            preemptive_policy(policy, quantum_gpu_s)  # a policy that does not preempt, a quantum <= 0
        if get_policy(policy).preemptive and sharing:
            from gpuplan.errors import GpuplanError

            raise GpuplanError(
                f"--policy {policy} preempts jobs and needs --exclusive: with --sharing jobs already share "
                "GPUs, and the simulator models preemption on exclusive GPUs only (docs/agent.md, Preemption)"
            )
        if quotas is not None:
            from gpuplan.agent.quotafile import load_quotas

            quotas = quotas.resolve()
            load_quotas(quotas)  # a bad file: one line, before the agent starts
        from gpuplan.agent.paths import AgentPaths

        paths = AgentPaths.system() if multi_user else AgentPaths.from_env()
        open_backend(gpus, set_id=str(paths.home)).close()
        config = AgentConfig(
            home=paths.home, gpus=gpus, policy=policy, backfill=backfill, placer=placer, sharing=sharing,
            max_jobs_per_gpu=max_jobs_per_gpu, sample_interval_s=sample_interval, retention_s=parse_duration_s(retention, "--retention"),
            sample_retention_s=parse_duration_s(sample_retention, "--sample-retention"),
            grace_s=grace, oom_retries=oom_retries, oom_factor=oom_factor,
            predict=[str(p.resolve()) for p in predict or []], quantum_gpu_s=quantum_gpu_s,
            max_gpus_per_user=max_gpus_per_user, max_jobs_per_user=max_jobs_per_user,
            quotas_file=None if quotas is None else str(quotas), multi_user=multi_user,
            admin_group=admin_group, run_dir=None if paths.run_dir is None else str(paths.run_dir),
        )  # fmt: skip
        check_multi_user(config)  # not root: one line now, not a dead daemon
        if foreground:
            import logging

            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
            run_agent(config)
            return
        status = _spawn(config)
        _emit(
            as_json,
            status,
            f"agent started: pid {status['pid']}, {len(status['gpus'])} GPU(s), home {status['home']}",
        )


def _spawn(config: Any) -> dict[str, Any]:
    """Start the daemon detached and wait (deadline 20 s) until it answers `status`."""
    from gpuplan.agent.paths import AgentPaths
    from gpuplan.agent.protocol import AgentError, AgentNotRunningError, call

    paths = AgentPaths(config.home, None if config.run_dir is None else Path(config.run_dir))
    paths.create(shared=config.multi_user)
    try:
        running = call(paths.socket, {"op": "status"}, timeout_s=5.0)
    except AgentNotRunningError:
        pass
    else:
        raise AgentError(f"an agent already runs for GPUPLAN_HOME={paths.home} (pid {running['pid']})")
    arg = json.dumps(config.to_json())
    fd = os.open(paths.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)  # private: it names users' commands (an older agent.log may be 0644)
    with os.fdopen(fd, "ab") as logf:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuplan.agent.server", arg],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True, close_fds=True,
        )  # fmt: skip
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AgentError(f"the agent exited at start (status {proc.returncode}): {_last_line(paths.log)}")
        try:
            return call(paths.socket, {"op": "status"}, timeout_s=5.0)
        except AgentNotRunningError:
            time.sleep(0.02)
    raise AgentError(f"the agent did not answer within 20 s; see {paths.log}")


def _last_line(path: Path) -> str:
    lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return lines[-1] if lines else "(empty log)"


@agent_app.command("stop")
def stop_cmd(
    kill_jobs: Annotated[bool, typer.Option("--kill-jobs", help="Cancel running jobs first (default: they keep running and are re-adopted at the next start).")] = False,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Stop the agent. Running jobs keep running unless --kill-jobs."""
    with _errors():
        from gpuplan.agent.protocol import AgentError

        reply = _call("stop", kill_jobs=kill_jobs)
        pid = int(reply["pid"])
        deadline = time.monotonic() + 60.0
        while _alive(pid):
            if time.monotonic() > deadline:
                raise AgentError(f"the agent (pid {pid}) did not stop within 60 s")
            time.sleep(0.02)
        _emit(as_json, {"pid": pid, "stopped": True}, f"agent stopped (pid {pid})")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (our child when started --foreground elsewhere) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return True


@agent_app.command("reload")
def reload_cmd(as_json: JsonOpt = False) -> None:
    """Read the agent's quota file (--quotas) again, as SIGHUP does (root and admins only on a shared agent)."""
    with _errors():
        reply = _call("reload")
        q = reply.get("quotas")
        text = "quotas reloaded: none" if q is None else (
            f"quotas reloaded: max GPUs per user {q['max_gpus'] or '-'}, max jobs per user {q['max_jobs'] or '-'}"
            f"{', own limits for ' + ', '.join(q['users']) if q['users'] else ''}"
        )  # fmt: skip
        _emit(as_json, reply, text)


@agent_app.command("status")
def status_cmd(as_json: JsonOpt = False) -> None:
    """The running agent: pid, GPUs, policy, queue length."""
    with _errors():
        s = _call("status")
        text = (
            f"agent pid {s['pid']} · home {s['home']} · GPUs: {len(s['gpus'])} ({s['backend']})"
            f"{' · offline: ' + ','.join(map(str, s['offline_gpus'])) if s['offline_gpus'] else ''}\n"
            f"policy {s['policy']} · backfill {s['backfill']} · placer {s['placer']} · "
            f"{'sharing' if s['sharing'] else 'exclusive'}\n"
            f"waiting {s['waiting']} · held {s['held']} · running {s['running']} · suspended {s['suspended']}"
            f"{' · preemptions ' + str(s['preemptions']) if s['preemptive'] or s['preemptions'] else ''}"
        )
        for p in s.get("external", []):
            mem = "?" if p["mem_gb"] is None else f"{p['mem_gb']:g} GB"
            text += f"\nnot ours: pid {p['pid']} ({p['user'] or '?'}) holds {mem} on GPU {p['gpu']}"
        _emit(as_json, s, text)


# -- job commands ----------------------------------------------------------------------------------


def submit_cmd(
    command: Annotated[list[str], typer.Argument(help="The command, after --: one shell string or words.")],
    gpus: Annotated[int, typer.Option("--gpus", "-g", min=1, help="GPUs the job needs.")] = 1,
    mem: Annotated[str | None, typer.Option("--mem", help="GPU memory per GPU, e.g. 20G (default: whole GPUs).")] = None,
    time_limit: Annotated[str | None, typer.Option("--time", "-t", help="Time limit, e.g. 30m, 2h, 1:30:00 (killed after it).")] = None,
    name: Annotated[str, typer.Option("--name", "-n", help="Job name (estimates come from past runs of this name).")] = "",
    priority: Annotated[int, typer.Option("--priority", help="Higher starts first, before the policy's order.")] = 0,
    after: Annotated[int | None, typer.Option("--after", help="Start only after job ID completed successfully.")] = None,
    hold: Annotated[bool, typer.Option("--hold", help="Submit held: it waits until `gpuplan release ID`.")] = False,
    preempt: Annotated[str, typer.Option("--preempt", help="How a preemptive policy (las, tiresias, gittins) may take its GPUs: suspend (SIGSTOP in place; it keeps its GPU memory), checkpoint (SIGTERM: it saves and restarts from its checkpoint), requeue (killed, restarts from scratch), never.")] = "suspend",
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Submit a job to the local agent: gpuplan submit --gpus 1 --mem 20G --time 2h -- python train.py"""
    with _errors():
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        text = command[0] if len(command) == 1 else shlex.join(command)
        jid, note = _submit(dict(
            command=text, gpus=gpus, mem_gb=parse_mem_gb(mem) if mem else None,
            time_limit_s=parse_duration_s(time_limit) if time_limit else None, name=name, priority=priority,
            after_id=after, hold=hold, cwd=os.getcwd(), env=env, preempt=preempt,
        ))  # fmt: skip
        if note:
            typer.echo(f"gpuplan: {note}", err=True)
        _emit(as_json, {"id": jid}, str(jid))


def queue_cmd(as_json: JsonOpt = False) -> None:
    """Running and waiting jobs, waiting ones in the order they will start, with expected start times."""
    with _errors():
        queue(as_json)


def show_cmd(job_id: Annotated[int, typer.Argument(help="Job id.")], as_json: JsonOpt = False) -> None:
    """One job: its fields, where its logs are, and the profile measured so far."""
    with _errors():
        show(job_id, as_json)


def _ids_command(op: str, verb: str):  # type: ignore[no-untyped-def]
    def command(ids: IdsArg, as_json: JsonOpt = False) -> None:
        with _errors():
            reply = _call(op, ids=ids)
            _emit(as_json, reply, "\n".join(f"{verb} {i}" for i in reply["ids"]))

    return command


cancel_cmd = _ids_command("cancel", "cancelling")
cancel_cmd.__doc__ = "Cancel jobs: waiting ones leave the queue, running ones get SIGTERM, then SIGKILL after the grace period."
hold_cmd = _ids_command("hold", "held")
hold_cmd.__doc__ = "Hold waiting jobs: they stay queued but do not start until released."
release_cmd = _ids_command("release", "released")
release_cmd.__doc__ = "Release held jobs back into the queue."
requeue_cmd = _ids_command("requeue", "requeued")
requeue_cmd.__doc__ = "Put jobs back in the queue: a running one is stopped first; a finished one runs again."


def logs_cmd(
    job_id: Annotated[int, typer.Argument(help="Job id.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new output until the job ends.")] = False,
    stderr: Annotated[bool, typer.Option("--stderr", help="Show the job's stderr instead of its stdout.")] = False,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Print a job's stdout (or --stderr); -f follows it until the job ends."""
    with _errors():
        from gpuplan.agent.protocol import AgentError

        path = _paths().job_dir(job_id) / ("stderr" if stderr else "stdout")
        first = _ask_or_store("show", id=job_id)  # an unknown id is an error, not an empty log
        _own_logs(first, job_id)
        if as_json:
            _emit(
                True,
                {
                    "id": job_id,
                    "path": str(path),
                    "text": _read(path),
                    "agent_running": first["agent_running"],
                },
                "",
            )
            return
        if not follow or not first["agent_running"]:
            sys.stdout.write(_read(path))
            if follow:
                typer.echo("gpuplan: not following: the agent is not running", err=True)
            return
        pos = 0
        while True:
            state = _call("show", id=job_id)["job"]["state"]
            pos = _print_from(path, pos)
            if state not in ("queued", "held", "running", "suspended"):
                _print_from(path, pos)
                return
            time.sleep(0.2)
            if not path.parent.exists() and state != "queued":
                raise AgentError(f"job {job_id} has no log directory {path.parent}")


def _own_logs(shown: dict[str, Any], job_id: int) -> None:
    """Refuse another user's logs (a shared agent hides them; the files are the submitter's, 0600)."""
    from gpuplan.agent.protocol import AgentError

    if shown.get("logs_readable") is False:
        raise AgentError(
            f"job {job_id} belongs to {shown['job'].get('user') or 'another user'}: its logs are its submitter's to read"
        )


def _read(path: Path) -> str:
    from gpuplan.agent.protocol import AgentError

    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    except PermissionError:
        raise AgentError(f"cannot read {path}: permission denied (another user's job's log)") from None


def _print_from(path: Path, pos: int) -> int:
    try:
        with open(path, "rb") as f:
            f.seek(pos)
            data = f.read()
    except FileNotFoundError:
        return pos
    sys.stdout.write(data.decode(errors="replace"))
    sys.stdout.flush()
    return pos + len(data)


def apply_cmd(
    plan: Annotated[Path, typer.Argument(help="plan.json written by `gpuplan plan --out`.")],
    as_json: JsonOpt = False,
) -> None:
    """Give waiting jobs the order of a plan (plan ids match job ids, else unique job names). The agent
    keeps its own placer: a plan made with another (`gpuplan plan --placer`) gets a warning."""
    with _errors():
        from gpuplan.core.placement import get_placer
        from gpuplan.optimize.planfile import read_plan

        data = read_plan(plan)
        order = data["order"]
        reply = _call("apply", order=[str(x) for x in order])
        agent_placer = get_placer(str(_call("status")["placer"])).spec
        if agent_placer != data["placer"]:
            typer.echo(
                f"gpuplan: warning: {plan} was planned with placer {data['placer']}; this agent places with "
                f"{agent_placer}: its placements may differ from the plan's (restart the agent with "
                f"--placer {data['placer']} to follow them)",
                err=True,
            )
        text = f"{len(reply['matched'])} job(s) take the plan's order; {len(reply['unmatched'])} plan id(s) match no waiting job"
        _emit(as_json, reply, text)

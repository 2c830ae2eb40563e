"""Pure parsers for Slurm 22.05 output: text in, records out (tests feed them captured output).

- `squeue -O 'JobID:|,...'` (fields named by the header, every line ends with `|`): `parse_squeue`
- `sinfo -N -O 'NodeList:|,StateLong:|,Gres:|,GresUsed:|,...'`: `parse_sinfo`
- `sprio -o '%i|%u|%Y|%S|...|'` (the jobs' multifactor components): `parse_sprio`
- `scontrol show config`: `parse_config`
- hostlists (`node[1-3,7]`), GPU counts in TRES/GRES strings, limits and times.

Slurm prints times in the cluster's local time without a zone; they are read as local time here,
the same clock `time.time()` gives the live commands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from gpuplan.errors import InputError
from gpuplan.traces.sacct import parse_duration

__all__ = [
    "SINFO_FIELDS",
    "SPRIO_FORMAT",
    "SQUEUE_FIELDS",
    "NodeInfo",
    "PrioRow",
    "QueueJob",
    "parse_config",
    "parse_gpu_count",
    "parse_gpu_types",
    "parse_hostlist",
    "parse_limit_s",
    "parse_local_time",
    "parse_sinfo",
    "parse_sprio",
    "parse_squeue",
]

# What `squeue -O` is asked for (Name last: a job name may contain the separator).
SQUEUE_FIELDS = (
    "JobID", "ArrayJobID", "ArrayTaskID", "HetJobID", "Partition", "UserName", "State", "TimeLimit",
    "TimeUsed", "NumNodes", "tres-per-job", "tres-per-node", "PriorityLong", "Nice", "Reason",
    "SubmitTime", "StartTime", "EligibleTime", "Dependency", "NodeList", "Requeue", "Account", "Name",
)  # fmt: skip
SINFO_FIELDS = ("NodeList", "StateLong", "Gres", "GresUsed", "Partition")

_NO_VALUE = frozenset({"", "N/A", "(null)", "None", "Unknown", "NONE"})
_NO_LIMIT = frozenset({"UNLIMITED", "INFINITE", "NOT_SET", "Partition_Limit"})
_DOWN_WORDS = (
    "down",
    "drain",
    "fail",
    "maint",
    "reboot",
    "future",
    "inval",
    "powered_down",
    "not_responding",
)


@dataclass(slots=True)
class QueueJob:
    """One line of squeue: a job (an array task, or the pending remainder of an array)."""

    job_id: str
    name: str
    user: str
    partition: str
    state: str
    time_limit_s: float | None
    elapsed_s: float
    num_nodes: int
    gpus: int
    priority: int
    nice: int
    reason: str
    submit_s: float | None
    start_s: float | None
    node_list: str
    array_job_id: str | None = None
    array_task: str | None = None
    het_job_id: str | None = None
    dependency: str = ""
    eligible_s: float | None = None
    requeue: bool | None = None  # Slurm may requeue it (squeue Requeue 1/0; None: not asked)
    account: str = ""

    @property
    def is_pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def is_running(self) -> bool:
        return self.state in ("RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED")

    @property
    def is_array_remainder(self) -> bool:
        """The pending rest of an array (`13_[2-5%2]`): one line for many tasks."""
        return self.array_task is not None and not self.array_task.isdigit()

    def why_unmanaged(self, now_s: float | None = None) -> str | None:
        """Why gpuplan leaves this pending job's priority alone (None: it may reorder it)."""
        if self.is_array_remainder:
            return "pending array remainder (its tasks get ids only when they start)"
        if self.het_job_id is not None:
            return "heterogeneous job component"
        if self.priority == 0 or self.reason.startswith("JobHeld"):
            return "held (priority 0): release it first"
        if self.reason.startswith("Dependency") or self.reason == "BeginTime":
            return f"not eligible yet ({self.reason})"
        if self.dependency:
            return f"not eligible yet (dependency {self.dependency})"
        if now_s is not None and self.eligible_s is not None and self.eligible_s > now_s + 1:
            return "not eligible yet (BeginTime)"
        return None


@dataclass(slots=True)
class NodeInfo:
    """One node as sinfo shows it: GPUs in all and in use, state, partitions."""

    name: str
    state: str
    gpus: int
    gpus_used: int
    partitions: tuple[str, ...]
    gpu_types: tuple[tuple[str, int], ...] = ()  # (Slurm's GPU type name, count) from Gres, when typed

    @property
    def is_usable(self) -> bool:
        """Up and not draining: jobs may start on it."""
        s = self.state.lower()
        return not any(w in s for w in _DOWN_WORDS)

    @property
    def gpus_free(self) -> int:
        return max(self.gpus - self.gpus_used, 0) if self.is_usable else 0


def _bad(what: str, line: int, column: str, value: str, expected: str) -> InputError:
    return InputError(what, line, column, value, expected)


def _split_o(text: str, what: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and rows of `-O 'Field:|,...'` output (each line ends with `|`)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return [], []
    header = lines[0].rstrip("|").split("|")
    rows = []
    for number, ln in enumerate(lines[1:], start=2):
        cells = ln[:-1].split("|") if ln.endswith("|") else ln.split("|")
        if len(cells) > len(header):  # only the last field (Name) may hold the separator
            cells = [*cells[: len(header) - 1], "|".join(cells[len(header) - 1 :])]
        if len(cells) != len(header):
            raise _bad(
                what, number, "", ln, f"{len(header)} '|'-separated fields like the header {lines[0]!r}"
            )
        rows.append((number, cells))
    return header, rows


def parse_limit_s(text: str) -> float | None:
    """`3:00`, `1:00:00`, `2-00:00:00` -> seconds; `UNLIMITED` and friends -> None."""
    t = text.strip()
    if t in _NO_LIMIT or t in _NO_VALUE:
        return None
    return parse_duration(t)


def parse_local_time(text: str) -> float | None:
    """`2026-11-30T00:38:02` (local time, no zone) -> epoch seconds; `N/A`, `Unknown` -> None."""
    t = text.strip()
    if t in _NO_VALUE:
        return None
    return datetime.strptime(t, "%Y-%m-%dT%H:%M:%S").timestamp()


def parse_gpu_count(text: str) -> int:
    """GPUs in a TRES/GRES string: `gres:gpu:8`, `gres/gpu:a100:2`, `gpu:8(S:0-1)`, `gpu:a100:3(IDX:0-2)`.

    Several entries (`gres:gpu:2,gres:shard:1`) add up over the `gpu` ones; `N/A` or none is 0."""
    t = text.strip()
    if t in _NO_VALUE:
        return 0
    total = 0
    for item in re.sub(r"\([^)]*\)", "", t).split(","):
        item = item.strip()
        for prefix in ("gres:", "gres/"):
            if item.startswith(prefix):
                item = item[len(prefix) :]
        parts = item.split(":")
        if parts[0] != "gpu":
            continue
        if len(parts) == 1 or not parts[-1].isdigit():
            total += 1 if len(parts) == 1 or not parts[-1] else 0
            continue
        total += int(parts[-1])
    return total


def parse_gpu_types(text: str) -> tuple[tuple[str, int], ...]:
    """Typed GPU entries of a GRES string: `gpu:a100:4(S:0),gpu:h100:4` -> (('a100', 4), ('h100', 4));
    untyped ones (`gpu:8`) give nothing."""
    t = text.strip()
    if t in _NO_VALUE:
        return ()
    out: list[tuple[str, int]] = []
    for item in re.sub(r"\([^)]*\)", "", t).split(","):
        item = item.strip()
        for prefix in ("gres:", "gres/"):
            item = item.removeprefix(prefix)
        parts = item.split(":")
        if len(parts) == 3 and parts[0] == "gpu" and parts[1] and parts[2].isdigit():
            out.append((parts[1], int(parts[2])))
    return tuple(out)


def parse_hostlist(text: str) -> list[str]:
    """`node[1-3,7],gpu5` -> ['node1', 'node2', 'node3', 'node7', 'gpu5'] (zero padding kept)."""
    t = text.strip()
    if t in _NO_VALUE or t == "None assigned":
        return []
    out: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?([^,\[]*)", t):
        prefix, ranges, suffix = m.group(1), m.group(2), m.group(3)
        if ranges is None:
            out.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            for n in range(int(lo), int(hi or lo) + 1):
                out.append(f"{prefix}{n:0{width}d}{suffix}")
    return [h.lstrip(",") for h in out if h.lstrip(",")]


def _priority(text: str) -> int:
    """PriorityLong is an integer; plain `Priority` is normalised by 2^32 (`0.00000011641532` = 500)."""
    t = text.strip()
    if "." in t:
        return round(float(t) * 4294967296.0)
    return int(t)


def _int(text: str, default: int = 0) -> int:
    t = text.strip()
    return default if t in _NO_VALUE else int(t)


def _flag(text: str) -> bool | None:
    """squeue's 0/1 columns: `1` -> True, `0` -> False, empty or N/A -> None."""
    t = text.strip()
    if t in _NO_VALUE:
        return None
    if t not in ("0", "1"):
        raise ValueError(f"{t!r} is not 0 or 1")
    return t == "1"


def _opt(text: str) -> str | None:
    t = text.strip()
    return None if t in _NO_VALUE else t


_SQUEUE_HEADERS = {
    "JOBID": "job_id", "ARRAY_JOB_ID": "array_job_id", "ARRAY_TASK_ID": "array_task", "HET_JOB_ID": "het_job_id",
    "PARTITION": "partition", "USER": "user", "STATE": "state", "TIME_LIMIT": "time_limit", "TIME": "elapsed",
    "NODES": "num_nodes", "TRES_PER_JOB": "tres_job", "TRES_PER_NODE": "tres_node", "PRIORITY": "priority",
    "NICE": "nice", "REASON": "reason", "SUBMIT_TIME": "submit", "START_TIME": "start", "NODELIST": "node_list",
    "ELIGIBLE_TIME": "eligible", "DEPENDENCY": "dependency", "REQUEUE": "requeue",
    "ACCOUNT": "account", "NAME": "name",
}  # fmt: skip
_REQUIRED = ("job_id", "state", "num_nodes", "priority")


def parse_squeue(text: str, what: str = "squeue output") -> list[QueueJob]:
    """Jobs from `squeue -O 'JobID:|,...'` output (with its header line; fields found by header).

    Raises:
        InputError: a missing required column or a bad value (names the line and column).
    """
    header, rows = _split_o(text, what)
    if not header:
        return []
    index = {_SQUEUE_HEADERS[h]: i for i, h in enumerate(header) if h in _SQUEUE_HEADERS}
    missing = [c for c in _REQUIRED if c not in index]
    if missing:
        raise _bad(
            what, 1, "header", "|".join(header), f"columns for {', '.join(missing)} (run: squeue -O ...)"
        )
    return [_queue_job(cells, index, what, number) for number, cells in rows]


def _queue_job(cells: list[str], index: dict[str, int], what: str, number: int) -> QueueJob:
    def cell(key: str, default: str = "") -> str:
        i = index.get(key)
        return cells[i].strip() if i is not None else default

    try:
        nodes = _int(cell("num_nodes"), 1)
        per_job, per_node = parse_gpu_count(cell("tres_job")), parse_gpu_count(cell("tres_node"))
        task = _opt(cell("array_task"))
        return QueueJob(
            job_id=cell("job_id"), name=cell("name"), user=cell("user"), partition=cell("partition"),
            state=cell("state"), time_limit_s=parse_limit_s(cell("time_limit")),
            elapsed_s=parse_limit_s(cell("elapsed")) or 0.0, num_nodes=nodes,
            gpus=per_job or per_node * nodes, priority=_priority(cell("priority")), nice=_int(cell("nice")),
            reason=cell("reason"), submit_s=parse_local_time(cell("submit")),
            start_s=parse_local_time(cell("start")), node_list=cell("node_list"),
            array_job_id=_opt(cell("array_job_id")) if task is not None else None, array_task=task,
            het_job_id=_opt(cell("het_job_id")), dependency=_opt(cell("dependency")) or "",
            eligible_s=parse_local_time(cell("eligible")), requeue=_flag(cell("requeue")),
            account=cell("account"),
        )  # fmt: skip
    except (ValueError, InputError) as e:
        col = _bad_column(cells, index)
        raise _bad(what, number, col, "|".join(cells), f"squeue -O values ({e})") from None


def _bad_column(cells: list[str], index: dict[str, int]) -> str:
    checks = {
        "time_limit": parse_limit_s, "elapsed": parse_limit_s, "num_nodes": _int, "priority": _priority,
        "nice": _int, "submit": parse_local_time, "start": parse_local_time, "eligible": parse_local_time,
        "requeue": _flag,
    }  # fmt: skip
    for key, fn in checks.items():
        i = index.get(key)
        if i is None:
            continue
        try:
            fn(cells[i])
        except (ValueError, InputError):
            return key
    return ""


# `sprio -o FORMAT`: job id, user, priority, then the weighted components (site, age, assoc, fair-share,
# job size, partition, QOS), the nice adjustment and the weighted TRES string. Parsed by position: the
# header names PARTITION twice in other formats, and sprio has no `-O`.
SPRIO_FORMAT = "%i|%u|%Y|%S|%A|%B|%F|%J|%P|%Q|%N|%T|"
_SPRIO_HEADER = ("JOBID", "USER", "PRIORITY", "SITE", "AGE", "ASSOC", "FAIRSHARE", "JOBSIZE", "PARTITION", "QOS",
                 "NICE", "TRES")  # fmt: skip
_PRIO_FACTORS = ("age", "assoc", "fairshare", "job_size", "partition", "qos")


@dataclass(slots=True)
class PrioRow:
    """One pending job's multifactor priority as sprio shows it: the total and its weighted parts.

    Slurm 22.05: priority = site + age + assoc + fairshare + job_size + partition + qos (+ TRES) - nice,
    summed as floating point, truncated, and at least 1 (sprio rounds each part, so the parts can
    exceed the total by about one per part)."""

    job_id: str
    user: str
    priority: int
    site: int
    age: int
    assoc: int
    fairshare: int
    job_size: int
    partition: int
    qos: int
    nice: int
    tres: str = ""

    @property
    def factors(self) -> int:
        """The weighted factors without the site factor and nice."""
        return sum(getattr(self, f) for f in _PRIO_FACTORS)

    @property
    def frozen(self) -> bool:
        """The priority was set explicitly (`scontrol update Priority=`): multifactor no longer computes
        it, and sprio shows every factor as 0 while the total is the value set."""
        if self.factors != 0 or self.tres:
            return False
        return self.priority != max(self.site - self.nice, 1)  # no parts, so nothing to round

    @property
    def base(self) -> int:
        """What multifactor gives this job without its site factor (the total minus the site factor;
        from the parts when the total sits at Slurm's floor of 1)."""
        if self.priority <= 1:
            return self.factors - self.nice
        return self.priority - self.site


def parse_sprio(text: str, what: str = "sprio output") -> list[PrioRow]:
    """Rows of `sprio -o SPRIO_FORMAT` (header line first; an empty queue prints only the header).

    Raises:
        InputError: another header (another format or Slurm version), or a bad number (names the line).
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = tuple(c.strip() for c in lines[0].rstrip("|").split("|"))
    if header != _SPRIO_HEADER:
        raise _bad(
            what,
            1,
            "header",
            lines[0],
            f"the header {'|'.join(_SPRIO_HEADER)}| (run: sprio -o '{SPRIO_FORMAT}')",
        )
    out = []
    for number, ln in enumerate(lines[1:], start=2):
        cells = [c.strip() for c in ln.rstrip("|").split("|")]
        if len(cells) < len(_SPRIO_HEADER) - 1:
            raise _bad(what, number, "", ln, f"{len(_SPRIO_HEADER)} '|'-separated fields")
        cells += [""] * (len(_SPRIO_HEADER) - len(cells))
        nums = []
        for col, cell in zip(_SPRIO_HEADER[2:11], cells[2:11]):
            try:
                nums.append(_int(cell))
            except ValueError:
                raise _bad(what, number, col, cell, "an integer") from None
        p, site, age, assoc, fs, size, part, qos, nice = nums
        out.append(PrioRow(cells[0], cells[1], p, site, age, assoc, fs, size, part, qos, nice, cells[11]))
    return out


_SINFO_HEADERS = {"NODELIST": "name", "STATE": "state", "GRES": "gres", "GRES_USED": "gres_used",
                  "PARTITION": "partition"}  # fmt: skip


def parse_sinfo(text: str, what: str = "sinfo output") -> list[NodeInfo]:
    """Nodes from `sinfo -N -O 'NodeList:|,StateLong:|,Gres:|,GresUsed:|,Partition:|'` (header kept).

    sinfo -N prints a node once per partition: the lines are merged. A trailing `*` (default
    partition) is dropped.

    Raises:
        InputError: no NODELIST/GRES column, or a line with the wrong number of fields.
    """
    header, rows = _split_o(text, what)
    if not header:
        return []
    index = {_SINFO_HEADERS[h]: i for i, h in enumerate(header) if h in _SINFO_HEADERS}
    for need in ("name", "gres"):
        if need not in index:
            raise _bad(
                what, 1, "header", "|".join(header), "NODELIST and GRES columns (run: sinfo -N -O ...)"
            )
    nodes: dict[str, NodeInfo] = {}
    for _, cells in rows:
        name = cells[index["name"]].strip()
        part = cells[index["partition"]].strip().rstrip("*") if "partition" in index else ""
        if name in nodes:
            if part and part not in nodes[name].partitions:
                nodes[name].partitions += (part,)
            continue
        used = cells[index["gres_used"]] if "gres_used" in index else ""
        state = cells[index["state"]].strip() if "state" in index else "idle"
        gres = cells[index["gres"]]
        nodes[name] = NodeInfo(name, state, parse_gpu_count(gres), parse_gpu_count(used),
                               (part,) if part else (), parse_gpu_types(gres))  # fmt: skip
    return list(nodes.values())


def parse_config(text: str) -> dict[str, str]:
    """`scontrol show config` -> {'SchedulerType': 'sched/backfill', ...} (first `Key = value` wins)."""
    out: dict[str, str] = {}
    for ln in text.splitlines():
        key, sep, value = ln.partition("=")
        key = key.strip()
        if not sep or not key or " " in key:
            continue
        out.setdefault(key, value.strip())
    return out

"""What gpuplan asks Slurm, one batched command each (through `SlurmRunner`, the only subprocess user)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.slurm.parse import (
    SINFO_FIELDS,
    SPRIO_FORMAT,
    SQUEUE_FIELDS,
    NodeInfo,
    PrioRow,
    QueueJob,
    parse_config,
    parse_sinfo,
    parse_sprio,
    parse_squeue,
)
from gpuplan.slurm.runner import SlurmCommandError, SlurmPermissionError, SlurmRunner

if TYPE_CHECKING:
    from gpuplan.slurm.planner import LiveState

__all__ = ["SlurmClient", "UpdateOutcome", "live_state"]


def _format(fields: Iterable[str]) -> str:
    return ",".join(f"{f}:|" for f in fields)


@dataclass(slots=True)
class UpdateOutcome:
    """What a batch of `scontrol update` lines did: per job id, the error text (absent = it worked)."""

    errors: dict[str, str] = field(default_factory=dict)


@dataclass
class SlurmClient:
    """Reads the queue, the nodes and the config; changes priorities; runs sacct.

    `clock` gives "now" in epoch seconds (injected in tests)."""

    runner: SlurmRunner = field(default_factory=SlurmRunner)
    clock: Callable[[], float] = time.time
    update_lines: int = 0  # `scontrol update` lines sent so far (one per changed job)

    def queue(self, partitions: Sequence[str] = (), states: str = "PD,R,CG,CF,S") -> list[QueueJob]:
        """`squeue -O ... -t STATES [-p P]` (array tasks of a running array each on their own line)."""
        args = ["squeue", "-O", _format(SQUEUE_FIELDS), "-t", states]
        if partitions:
            args += ["-p", ",".join(partitions)]
        return parse_squeue(self.runner.run(args), "squeue -O output")

    def nodes(self, partitions: Sequence[str] = ()) -> list[NodeInfo]:
        """`sinfo -N -O NodeList,StateLong,Gres,GresUsed,Partition [-p P]`."""
        args = ["sinfo", "-N", "-O", _format(SINFO_FIELDS)]
        if partitions:
            args += ["-p", ",".join(partitions)]
        return parse_sinfo(self.runner.run(args), "sinfo -N -O output")

    def prio(self) -> dict[str, PrioRow]:
        """`sprio -o SPRIO_FORMAT`: every pending job's priority and its weighted factors, by job id."""
        return {
            r.job_id: r
            for r in parse_sprio(self.runner.run(["sprio", "-o", SPRIO_FORMAT]), "sprio -o output")
        }

    def config(self) -> dict[str, str]:
        """`scontrol show config` as a dict."""
        return parse_config(self.runner.run(["scontrol", "show", "config"]))

    def update_jobs(self, changes: Sequence[tuple[str, str]]) -> UpdateOutcome:
        """Run `scontrol update JobId=N KEY=VALUE` for every (job id, 'KEY=VALUE'), in the given order,
        as ONE scontrol process reading the lines on stdin (one controller round trip each).

        scontrol prints errors without naming the line, so a failed batch is run again line by line
        from the first line that may have failed; each error is then tied to its job.

        Raises:
            SlurmCommandError: scontrol itself cannot run or the controller is unreachable.
        """
        if not changes:
            return UpdateOutcome()
        self.update_lines += len(changes)
        text = "".join(f"update JobId={jid} {kv}\n" for jid, kv in changes) + "quit\n"
        try:
            self.runner.run(["scontrol"], input_text=text, retry=False)
        except SlurmCommandError as e:
            if e.returncode is None or _controller_down(e.stderr):
                raise
            return self._update_one_by_one(changes)  # some line was refused: find which
        return UpdateOutcome()

    def _update_one_by_one(self, changes: Sequence[tuple[str, str]]) -> UpdateOutcome:
        outcome = UpdateOutcome()
        for jid, kv in changes:
            try:
                self.runner.run(["scontrol", "update", f"JobId={jid}", kv], retry=False)
            except SlurmCommandError as e:
                if e.returncode is None or _controller_down(e.stderr):
                    raise
                outcome.errors[jid] = e.stderr or str(e)
        return outcome

    def hold_release(self, job_ids: Sequence[str]) -> UpdateOutcome:
        """`scontrol hold N` then `release N` for each job (one scontrol process): hands a job whose
        priority was set explicitly back to the priority plugin (Slurm 22.05 has no other way).

        Raises:
            SlurmCommandError: scontrol itself cannot run or the controller is unreachable.
        """
        if not job_ids:
            return UpdateOutcome()
        text = "".join(f"hold {j}\nrelease {j}\n" for j in job_ids) + "quit\n"
        try:
            self.runner.run(["scontrol"], input_text=text, retry=False)
            return UpdateOutcome()
        except SlurmCommandError as e:
            if e.returncode is None or _controller_down(e.stderr):
                raise
        outcome = UpdateOutcome()
        for j in job_ids:  # some line was refused: find which, one job at a time
            try:
                self.runner.run(["scontrol"], input_text=f"hold {j}\nrelease {j}\nquit\n", retry=False)
            except SlurmCommandError as e:
                if e.returncode is None or _controller_down(e.stderr):
                    raise
                outcome.errors[j] = e.stderr or str(e)
        return outcome

    def requeue(self, job_ids: Sequence[str]) -> UpdateOutcome:
        """`scontrol requeue JOBID` for each job, one process each so every error names its job.

        Raises:
            SlurmPermissionError: the caller may not requeue (root, SlurmUser or Operator needed).
            SlurmCommandError: scontrol itself cannot run or the controller is unreachable.
        """
        outcome = UpdateOutcome()
        for jid in job_ids:
            try:
                self.runner.run(["scontrol", "requeue", jid], retry=False)
            except SlurmCommandError as e:
                if e.returncode is None or _controller_down(e.stderr) or isinstance(e, SlurmPermissionError):
                    raise
                outcome.errors[jid] = e.stderr or str(e)
        return outcome

    def sacct_text(self, since: str, until: str = "now", columns: Sequence[str] = ()) -> str:
        """`sacct -a -P -S SINCE -E UNTIL -o COLUMNS` (all users, allocation and step rows)."""
        from gpuplan.traces.sacct import SACCT_COLUMNS

        cols = ",".join(columns or SACCT_COLUMNS)
        return self.runner.run(["sacct", "-a", "-P", "-S", since, "-E", until, "-o", cols])

    def submit(self, args: Sequence[str]) -> str:
        """`sbatch --parsable ARGS` -> the job id."""
        return self.runner.run(["sbatch", "--parsable", *args]).strip().split(";")[0]

    def write_sacct(self, since: str, path: Path, until: str = "now") -> Path:
        path.write_text(self.sacct_text(since, until))
        return path


def _controller_down(stderr: str) -> bool:
    from gpuplan.slurm.runner import is_transient

    return is_transient(stderr)


def live_state(client: SlurmClient, partitions: Sequence[str] = ()) -> LiveState:
    """Nodes, jobs (running anywhere on those nodes, pending in the partitions) and config, now."""
    from gpuplan.slurm.planner import LiveState

    nodes = client.nodes(partitions)
    jobs = client.queue()
    return LiveState(nodes, jobs, client.clock(), client.config(), tuple(partitions))

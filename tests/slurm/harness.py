"""A real Slurm 22.05 for the tests: munged, MariaDB, slurmdbd, slurmctld and 4 slurmd x 8 fake GPUs.

Everything lives in one temporary directory (configs, state, logs, sockets, MariaDB data) and uses
free TCP ports, so it touches neither /etc/slurm nor a Slurm already running on the host. The fake
GPUs are `File=` gres entries that are symlinks to /dev/null (slurmd wants a character device; facts
in ../shared/slurm/NOTES.md). Every daemon is stopped by the PID it wrote, also when a test fails.

Used by tests/slurm/conftest.py (one cluster per test session) and by bench/bench_slurm.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DEFAULT_WEIGHTS", "GPUS_PER_NODE", "NODES", "SlurmCluster", "install_hint", "missing_binaries"]

NODES = 4
# Non-zero Age and JobSize weights, as real sites set them (with zero weights an explicit Priority=
# freezing multifactor goes unseen). Age: 1000 after PriorityMaxAge (5 min), i.e. ~3.3 per second.
DEFAULT_WEIGHTS = {"Age": 1000, "Fairshare": 0, "JobSize": 1000, "Partition": 0, "QOS": 0}
GPUS_PER_NODE = 8
_BINARIES = ("munged", "slurmctld", "slurmd", "slurmdbd", "mariadbd", "mariadb-install-db", "sbatch", "sacct")
_DB_PASS = "gpuplan-test"


def missing_binaries() -> list[str]:
    """Slurm/MariaDB/munge programs the harness needs that are not on PATH (or in /usr/sbin)."""
    return [b for b in _BINARIES if _which(b) is None]


def install_hint() -> str:
    return (
        "install the Debian packages: printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod +x "
        "/usr/sbin/policy-rc.d && apt-get install -y --no-install-recommends slurmctld slurmd slurm-client "
        "munge slurmdbd mariadb-server (as .ci/run does)"
    )


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class SlurmCluster:
    """One running test cluster. `env` is what a Slurm client needs (SLURM_CONF, PATH)."""

    root: Path
    scheduler: str = "builtin"
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    started_s: float = 0.0
    weights: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    _mariadb: subprocess.Popen[bytes] | None = None
    base_path: str = field(default_factory=lambda: os.environ.get("PATH", "") + ":/usr/sbin:/sbin")

    @classmethod
    def start(cls, scheduler: str = "builtin", accounting: bool = True) -> SlurmCluster:
        root = Path(tempfile.mkdtemp(prefix="gpuplan-slurm-"))
        os.chmod(root, 0o755)
        names = ["ctld", "dbd", "mysql", *(f"node{i}" for i in range(1, NODES + 1))]
        c = cls(root=root, scheduler=scheduler, ports=dict(zip(names, _free_ports(len(names)))))
        try:
            c._layout()
            c._start_munge()
            if accounting:
                c._start_mariadb()
                c._start_slurmdbd()
            c.write_config(scheduler, accounting)
            c._start_ctld(clear=True)
            c._start_slurmds()
            c.wait_idle()
        except BaseException:
            c.stop()
            raise
        return c

    # -- paths and environment -----------------------------------------------------------------
    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = self.base_path  # as at start: a test's PATH changes never reach the harness
        env.pop("SLURM_JOB_ID", None)
        return env

    def run(
        self, *args: str, check: bool = True, timeout_s: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        """Run a command against this cluster (env with SLURM_CONF)."""
        p = subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=timeout_s)
        if check and p.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args)} exited {p.returncode}: {p.stderr.strip()} {p.stdout.strip()}"
            )
        return p

    def _layout(self) -> None:
        for d in ("etc", "state", "log", "spool", "dev", "out", "munge", "mysql"):
            (self.root / d).mkdir()
        for i in range(GPUS_PER_NODE):
            (self.root / "dev" / f"nvidia{i}").symlink_to("/dev/null")
        shutil.chown(self.root / "munge", "munge", "munge")
        os.chmod(self.root / "munge", 0o755)
        shutil.chown(self.root / "mysql", "mysql", "mysql")
        os.chmod(self.root / "out", 0o1777)

    # -- configs -------------------------------------------------------------------------------
    def write_config(self, scheduler: str, accounting: bool = True) -> None:
        """slurm.conf, gres.conf, cgroup.conf for sched/`scheduler` + priority/multifactor (`self.weights`).

        MessageTimeout=5 (default 10): a client facing a stopped slurmctld gives up after ~4 s, not ~9 s."""
        r, p = self.root, self.ports
        # Prompt scheduling for second-long test jobs: the main loop every 1 s (Slurm's default is 60 s;
        # a job's end still frees its nodes ~1 s later, the slurmd's own pause), backfill every 1 s.
        params = "sched_interval=1" + (",bf_interval=1,bf_resolution=1" if scheduler == "backfill" else "")
        acct = (
            f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\n"
            f"AccountingStoragePort={p['dbd']}\nAccountingStorageTRES=gres/gpu\n"
            f"AccountingStoragePass={r}/munge/munge.sock\n"
            if accounting
            else "AccountingStorageType=accounting_storage/none\n"
        )
        weights = "".join(f"PriorityWeight{k}={v}\n" for k, v in self.weights.items())
        nodes = "".join(
            f"NodeName=node{i} NodeAddr=127.0.0.1 Port={p[f'node{i}']} CPUs=32 Sockets=1 CoresPerSocket=32 "
            f"ThreadsPerCore=1 RealMemory=64000 Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN\n"
            for i in range(1, NODES + 1)
        )
        self.conf.write_text(
            f"""ClusterName=ci
SlurmctldHost=localhost
SlurmctldPort={p["ctld"]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={r}/munge/munge.sock
StateSaveLocation={r}/state
SlurmctldPidFile={r}/state/slurmctld.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdPidFile={r}/spool/slurmd-%n.pid
SlurmdSpoolDir={r}/spool/slurmd-%n
SlurmdLogFile={r}/log/slurmd-%n.log
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
KillWait=5
MessageTimeout=5
MinJobAge=300
InactiveLimit=0
Waittime=0
SchedulerType=sched/{scheduler}
SchedulerParameters={params}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
PriorityType=priority/multifactor
{weights}PriorityMaxAge=00:05:00
PriorityCalcPeriod=00:00:10
PriorityFavorSmall=NO
GresTypes=gpu
MaxJobCount=20000
{acct}{nodes}PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""
        )
        (r / "etc" / "gres.conf").write_text(
            f"AutoDetect=off\nNodeName=node[1-{NODES}] Name=gpu File={r}/dev/nvidia[0-{GPUS_PER_NODE - 1}]\n"
        )
        (r / "etc" / "cgroup.conf").write_text(
            "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nConstrainCores=no\nConstrainDevices=no\nConstrainRAMSpace=no\n"
        )
        self.scheduler = scheduler

    # -- daemons -------------------------------------------------------------------------------
    def _start_munge(self) -> None:
        m = self.root / "munge"
        subprocess.run(
            ["runuser", "-u", "munge", "--", _which("munged") or "munged", "--force", f"--socket={m}/munge.sock",
             f"--pid-file={m}/munged.pid", f"--seed-file={m}/munged.seed", f"--log-file={m}/munged.log"],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        self.pids["munged"] = _read_pid(m / "munged.pid")

    def _start_mariadb(self) -> None:
        d = self.root / "mysql"
        sock = d / "mysqld.sock"
        subprocess.run(
            [_which("mariadb-install-db") or "mariadb-install-db", "--user=mysql", f"--datadir={d}/data",
             "--skip-test-db", "--auth-root-authentication-method=socket"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        self._mariadb = subprocess.Popen(
            ["runuser", "-u", "mysql", "--", _which("mariadbd") or "mariadbd", f"--datadir={d}/data",
             f"--socket={sock}", f"--port={self.ports['mysql']}", "--bind-address=127.0.0.1",
             f"--pid-file={d}/mysqld.pid", f"--log-error={d}/mysqld.err", "--skip-name-resolve",
             "--innodb-buffer-pool-size=64M"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        _wait(lambda: _ok(["mariadb-admin", f"--socket={sock}", "ping"]), 60, "MariaDB", d / "mysqld.err")
        self.pids["mariadbd"] = _read_pid(d / "mysqld.pid")
        sql = (
            "CREATE DATABASE slurm_acct_db;"
            f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{_DB_PASS}';"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
        )
        subprocess.run(
            ["mariadb", f"--socket={sock}", "-e", sql], check=True, capture_output=True, timeout=30
        )

    def _start_slurmdbd(self) -> None:
        r = self.root
        dbd = r / "etc" / "slurmdbd.conf"
        dbd.write_text(
            f"AuthType=auth/munge\nAuthInfo=socket={r}/munge/munge.sock\nDbdHost=localhost\n"
            f"DbdPort={self.ports['dbd']}\nSlurmUser=root\nStorageType=accounting_storage/mysql\n"
            f"StorageHost=127.0.0.1\nStoragePort={self.ports['mysql']}\nStorageLoc=slurm_acct_db\n"
            f"StorageUser=slurm\nStoragePass={_DB_PASS}\nLogFile={r}/log/slurmdbd.log\n"
            f"PidFile={r}/state/slurmdbd.pid\n"
        )
        os.chmod(dbd, 0o600)
        # slurmdbd reads slurmdbd.conf next to SLURM_CONF; the accounting CLIs need a slurm.conf too.
        self.write_config(self.scheduler, accounting=True)
        subprocess.run(
            [_which("slurmdbd") or "slurmdbd"], env=self.env, check=True, capture_output=True, timeout=30
        )
        _wait(lambda: self.run("sacctmgr", "-n", "list", "cluster", check=False).returncode == 0, 60, "slurmdbd",
              r / "log" / "slurmdbd.log")  # fmt: skip
        self.pids["slurmdbd"] = _read_pid(r / "state" / "slurmdbd.pid")
        self.run("sacctmgr", "-i", "add", "cluster", "ci")
        self.run("sacctmgr", "-i", "add", "account", "default", "Description=tests", "Organization=gpuplan")

    def _start_ctld(self, clear: bool) -> None:
        args = [_which("slurmctld") or "slurmctld"] + (["-c"] if clear else [])
        self.started_s = time.time()
        subprocess.run(args, env=self.env, check=True, capture_output=True, timeout=30)
        log = self.root / "log" / "slurmctld.log"
        _wait(lambda: self.run("scontrol", "ping", check=False).stdout.count("UP") > 0, 60, "slurmctld", log)
        self.pids["slurmctld"] = _read_pid(self.root / "state" / "slurmctld.pid")

    def _start_slurmds(self) -> None:
        for i in range(1, NODES + 1):
            subprocess.run([_which("slurmd") or "slurmd", "-N", f"node{i}"], env=self.env, check=True,
                           capture_output=True, timeout=30)  # fmt: skip
            self.pids[f"slurmd-node{i}"] = _wait_pid(self.root / "spool" / f"slurmd-node{i}.pid")

    def wait_idle(self, timeout_s: float = 60.0) -> None:
        """Until every node is idle and registered since the current slurmctld started."""

        def ready() -> bool:
            p = self.run("sinfo", "-h", "-N", "-o", "%T", check=False)
            states = p.stdout.split()
            return not (p.returncode != 0 or len(states) != NODES or any(s != "idle" for s in states))

        _wait(ready, timeout_s, "4 idle nodes", self.root / "log" / "slurmctld.log")

    def stop_ctld(self) -> None:
        """Stop slurmctld (by PID); jobs and nodes stay as they are."""
        _stop_pid(self.pids.pop("slurmctld"), 30)

    def start_ctld(self) -> None:
        """Start slurmctld again on its saved state."""
        self._start_ctld(clear=False)

    def restart_ctld(self, scheduler: str) -> None:
        """Restart slurmctld with another SchedulerType (queue state is kept; jobs should be gone)."""
        self.cancel_all()
        self.write_config(scheduler, accounting="slurmdbd" in self.pids)
        _stop_pid(self.pids.pop("slurmctld"), 30)
        self._start_ctld(clear=False)
        self.run("scontrol", "update", "NodeName=node[1-4]", "State=RESUME", check=False)
        self.wait_idle()
        self.set_partition(up=True)

    def set_weights(self, **weights: int) -> None:
        """Change PriorityWeight* (e.g. Age=0) by `scontrol reconfigure`: no restart, jobs kept."""
        self.weights.update(weights)
        self.write_config(self.scheduler, accounting="slurmdbd" in self.pids)
        self.run("scontrol", "reconfigure")

    # -- helpers for tests ---------------------------------------------------------------------
    def sbatch(self, *args: str, script: str = "sleep 1") -> str:
        """Submit a job; returns its id (`sbatch --parsable`)."""
        p = self.run("sbatch", "--parsable", f"--chdir={self.root}/out", f"--output={self.root}/out/%j.out",
                     *args, f"--wrap={script}")  # fmt: skip
        return p.stdout.strip().split(";")[0]

    def wait_done(self, ids: Sequence[str], timeout_s: float = 120.0) -> None:
        """Until none of `ids` is pending, running or completing."""
        wanted = set(ids)

        def done() -> bool:
            p = self.run("squeue", "-h", "-t", "PD,R,CG,CF,S", "-o", "%A", check=False)
            return p.returncode == 0 and not wanted & set(p.stdout.split())

        _wait(done, timeout_s, f"{len(wanted)} jobs to finish", self.root / "log" / "slurmctld.log")

    def wait_running(self, ids: Sequence[str], timeout_s: float = 30.0) -> None:
        """Until every one of `ids` is RUNNING."""

        def running() -> bool:
            p = self.run("squeue", "-h", "-t", "R", "-o", "%A", check=False)
            return set(ids) <= set(p.stdout.split())

        _wait(running, timeout_s, f"jobs {', '.join(ids)} running", self.root / "log" / "slurmctld.log")

    def sacct_times(self, ids: Sequence[str], timeout_s: float = 30.0) -> dict[str, tuple[float, float]]:
        """Start and End (epoch s) of each job from sacct, once slurmdbd has them all."""
        from datetime import datetime

        out: dict[str, tuple[float, float]] = {}

        def read() -> bool:
            p = self.run(
                "sacct", "-a", "-X", "-n", "-P", "-j", ",".join(ids), "-o", "JobID,Start,End", check=False
            )
            out.clear()
            for line in p.stdout.splitlines():
                jid, start, end = line.split("|")
                if start[:1].isdigit() and end[:1].isdigit():
                    out[jid] = (
                        datetime.fromisoformat(start).timestamp(),
                        datetime.fromisoformat(end).timestamp(),
                    )
            return len(out) == len(set(ids))

        _wait(read, timeout_s, "sacct Start/End of every job")
        return out

    def priorities(self) -> dict[str, int]:
        """Pending jobs' priorities (squeue %Q)."""
        p = self.run("squeue", "-h", "-t", "PD", "-o", "%A %Q")
        return {a: int(b) for a, b in (line.split() for line in p.stdout.splitlines())}

    def set_partition(self, up: bool) -> None:
        self.run("scontrol", "update", "PartitionName=gpu", f"State={'UP' if up else 'DOWN'}")

    def cancel_all(self, timeout_s: float = 30.0) -> None:
        """Cancel every job and wait until none is left running or pending."""
        self.run("scancel", "--full", "-u", "root", check=False)
        ids = self.run("squeue", "-h", "-o", "%A", check=False).stdout.split()
        if ids:
            self.run("scancel", *ids, check=False)

        def empty() -> bool:
            p = self.run("squeue", "-h", "-t", "PD,R,CG,CF,S", "-o", "%A", check=False)
            return p.returncode == 0 and not p.stdout.split()

        _wait(empty, timeout_s, "an empty queue", self.root / "log" / "slurmctld.log")

    def stop(self) -> None:
        """Stop every daemon this harness started, by PID (jobs first: slurmd leaves them running)."""
        self._adopt_pid_files()
        if "slurmctld" in self.pids:
            with contextlib.suppress(Exception):
                self.cancel_all(timeout_s=15)
        for name in [n for n in self.pids if n.startswith("slurmd-")] + ["slurmctld", "slurmdbd", "mariadbd"]:
            if name in self.pids:
                _stop_pid(self.pids.pop(name), 30)
        if self._mariadb is not None:  # the runuser parent of mariadbd
            try:
                self._mariadb.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._mariadb.kill()
                self._mariadb.wait()
            self._mariadb = None
        for pid in _stepds_of(self.conf):
            _stop_pid(pid, 5)
        if "munged" in self.pids:
            _stop_pid(self.pids.pop("munged"), 10)
        if os.environ.get("GPUPLAN_KEEP_SLURM_DIR") is None:
            shutil.rmtree(self.root, ignore_errors=True)

    def _adopt_pid_files(self) -> None:
        """Daemons that wrote a pid file before start-up failed are stopped too."""
        r = self.root
        files = {"munged": r / "munge" / "munged.pid", "mariadbd": r / "mysql" / "mysqld.pid",
                 "slurmdbd": r / "state" / "slurmdbd.pid", "slurmctld": r / "state" / "slurmctld.pid"}  # fmt: skip
        files.update({f"slurmd-node{i}": r / "spool" / f"slurmd-node{i}.pid" for i in range(1, NODES + 1)})
        for name, path in files.items():
            try:
                text = path.read_text().strip()
            except OSError:
                continue
            if name not in self.pids and text.isdigit():
                self.pids[name] = int(text)


def _ok(args: Sequence[str]) -> bool:
    try:
        return subprocess.run(list(args), capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _wait(ready, timeout_s: float, what: str, log: Path | None = None) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
    tail = ""
    if log is not None and log.exists():
        tail = " | last log lines: " + " / ".join(log.read_text(errors="replace").splitlines()[-8:])
    raise RuntimeError(f"test Slurm: {what} not ready after {timeout_s:.0f} s{tail}")


def _read_pid(path: Path) -> int:
    _wait(lambda: path.exists() and path.read_text().strip().isdigit(), 30, f"pid file {path}")
    return int(path.read_text().strip())


def _wait_pid(path: Path) -> int:
    return _read_pid(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _stop_pid(pid: int, timeout_s: float) -> None:
    """SIGTERM, then SIGKILL after `timeout_s`."""
    if not _alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)


def _stepds_of(conf: Path) -> list[int]:
    """slurmstepd processes started for this cluster (their environment names our SLURM_CONF)."""
    out = []
    needle = f"SLURM_CONF={conf}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if not (d / "comm").read_text().startswith("slurmstepd"):
                continue
            if needle in (d / "environ").read_bytes():
                out.append(int(d.name))
        except OSError:
            continue
    return out

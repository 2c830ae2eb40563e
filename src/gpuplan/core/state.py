"""ClusterState: which GPUs hold jobs and how much memory each has left. The one mutable picture of a cluster
that the simulator, the local agent and the Slurm loop all schedule against."""

from __future__ import annotations

from gpuplan.model import ClusterSpec

__all__ = ["ClusterState"]


class ClusterState:
    """Free GPUs and free memory per GPU.

    GPUs have global indices 0..G-1 in node order. A job holds a set of GPUs and, on each, `mem_gb` of
    memory; a job whose memory is unknown (None) holds whole GPUs. Without sharing a GPU holds one job.

    Two holds that are not jobs (the live clocks need them): a GPU taken out of service
    (`set_offline`) is never placed on, and a job already running there runs on until it ends;
    memory held by processes the scheduler did not start (`hold_external`) counts as one more
    occupant of that GPU (with sharing, its memory is taken; without, the GPU is not free). GPUs
    with such a hold are listed in `held`, so planners that count GPUs freed by ending jobs skip them.
    """

    __slots__ = (
        "external_gb",
        "ff_hint",
        "gpu_cap_gb",
        "gpu_free_gb",
        "gpu_njobs",
        "gpu_node",
        "idle_total",
        "max_share",
        "min_cap_gb",
        "node_cap_gb",
        "node_gpus",
        "node_idle",
        "offline",
        "sharing",
        "spec",
        "suspended_gb",
        "suspended_n",
    )

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.sharing = spec.sharing
        self.max_share = spec.max_jobs_per_gpu if spec.sharing else 1
        self.gpu_node: list[int] = []
        self.gpu_cap_gb: list[float] = []
        self.node_gpus: list[list[int]] = []
        self.node_cap_gb: list[float] = []
        for n, node in enumerate(spec.nodes):
            first = len(self.gpu_node)
            self.node_gpus.append(list(range(first, first + node.gpus)))
            self.node_cap_gb.append(node.gpu.mem_gb)
            self.gpu_node.extend([n] * node.gpus)
            self.gpu_cap_gb.extend([node.gpu.mem_gb] * node.gpus)
        self.min_cap_gb = min(self.node_cap_gb)
        self.gpu_free_gb = list(self.gpu_cap_gb)
        self.gpu_njobs = [0] * len(self.gpu_node)
        self.node_idle = [len(g) for g in self.node_gpus]
        # first-fit hint: ff_hint[g] <= the first node with at least g idle GPUs (exclusive clusters).
        # Lowering a node's idle count never breaks it; `release` lowers the hint when it must.
        self.ff_hint = [0] * (max(self.node_idle) + 2)
        self.idle_total = len(self.gpu_node)
        self.offline: set[int] = set()
        self.external_gb: dict[int, float] = {}
        self.suspended_gb: dict[int, float] = {}
        self.suspended_n: dict[int, int] = {}

    @property
    def held(self) -> set[int]:
        """GPUs with a hold that is not a job (offline, or memory held by others); empty when none."""
        if not self.external_gb:
            return self.offline
        return self.offline | set(self.external_gb)

    @property
    def total_gpus(self) -> int:
        return len(self.gpu_node)

    @property
    def busy_gpus(self) -> int:
        """GPUs that hold at least one job."""
        return len(self.gpu_node) - self.idle_total

    def gpu_label(self, gpu: int) -> str:
        node = self.gpu_node[gpu]
        return f"{self.spec.nodes[node].name}/gpu{gpu - self.node_gpus[node][0]}"

    def take_gb(self, gpu: int, mem_gb: float | None) -> float:
        """Memory a job of `mem_gb` per GPU takes on `gpu` (all of it when unknown or exclusive)."""
        if mem_gb is None or not self.sharing:
            return self.gpu_cap_gb[gpu]
        return mem_gb

    def place(self, gpus: list[int] | tuple[int, ...], mem_gb: float | None) -> None:
        """Book a job on `gpus`; the caller (a placer) has checked that it fits."""
        if not self.sharing:  # exclusive: a GPU is taken whole; its free memory is not consulted
            node_idle, njobs, node_of = self.node_idle, self.gpu_njobs, self.gpu_node
            for g in gpus:
                if njobs[g] == 0:
                    node_idle[node_of[g]] -= 1
                    self.idle_total -= 1
                njobs[g] += 1
            return
        for g in gpus:
            if self.gpu_njobs[g] == 0:
                self.node_idle[self.gpu_node[g]] -= 1
                self.idle_total -= 1
            self.gpu_njobs[g] += 1
            self.gpu_free_gb[g] -= self.take_gb(g, mem_gb)

    def release(self, gpus: list[int] | tuple[int, ...], mem_gb: float | None) -> None:
        """Undo `place` for a job that ended."""
        if not self.sharing:
            node_idle, njobs, node_of, hint = self.node_idle, self.gpu_njobs, self.gpu_node, self.ff_hint
            for g in gpus:
                njobs[g] -= 1
                if njobs[g] == 0:
                    n = node_of[g]
                    node_idle[n] += 1
                    self.idle_total += 1
                    if hint[node_idle[n]] > n:
                        hint[node_idle[n]] = n
            return
        for g in gpus:
            self.gpu_njobs[g] -= 1
            self.gpu_free_gb[g] += self.take_gb(g, mem_gb)
            if self.gpu_njobs[g] == 0:
                n = self.gpu_node[g]
                self.node_idle[n] += 1
                self.idle_total += 1
                self.gpu_free_gb[g] = self.gpu_cap_gb[g]  # no drift from float sums
                if self.ff_hint[self.node_idle[n]] > n:
                    self.ff_hint[self.node_idle[n]] = n

    def gpu_fits(self, gpu: int, mem_gb: float | None) -> bool:
        """Whether one more job with `mem_gb` per GPU fits on `gpu` now."""
        n = self.gpu_njobs[gpu]
        if n == 0:
            return mem_gb is None or mem_gb <= self.gpu_cap_gb[gpu]
        if not self.sharing or mem_gb is None or n >= self.max_share:
            return False
        return mem_gb <= self.gpu_free_gb[gpu]

    # -- holds that are not jobs ---------------------------------------------------------------
    def set_offline(self, gpu: int, offline: bool = True) -> None:
        """Take a GPU out of service (or back with offline=False). Jobs running there keep running."""
        self._check_gpu(gpu)
        if offline == (gpu in self.offline):
            return
        if offline:
            self.offline.add(gpu)
            self._occupy(gpu, self.max_share, 0.0)  # as full as a GPU gets: nothing more fits
        else:
            self.offline.discard(gpu)
            self._vacate(gpu, self.max_share, 0.0)

    def hold_external(self, gpu: int, mem_gb: float) -> None:
        """Set the memory held on `gpu` by processes the scheduler did not start (0 removes the hold).

        Call it again with the new figure (e.g. the observed peak): it replaces the previous one.
        """
        self._check_gpu(gpu)
        if mem_gb < 0 or mem_gb != mem_gb:
            raise ValueError(f"external memory on GPU {gpu} must be >= 0 GB, not {mem_gb!r}")
        old = self.external_gb.pop(gpu, None)
        if old is not None:
            self._vacate(gpu, 1, old)
        if mem_gb > 0:
            self.external_gb[gpu] = mem_gb
            self._occupy(gpu, 1, mem_gb)

    def hold_suspended(self, gpus: tuple[int, ...] | list[int], mem_gb: float | None) -> None:
        """A job suspended in place keeps `mem_gb` per GPU on `gpus` (None: all of each GPU)."""
        for g in gpus:
            take = self.gpu_cap_gb[g] if mem_gb is None else mem_gb
            self.suspended_gb[g] = self.suspended_gb.get(g, 0.0) + take
            self.suspended_n[g] = self.suspended_n.get(g, 0) + 1
            self._occupy(g, 1, take)

    def drop_suspended(self, gpus: tuple[int, ...] | list[int], mem_gb: float | None) -> None:
        """Undo `hold_suspended` (the job resumes, or left)."""
        for g in gpus:
            take = self.gpu_cap_gb[g] if mem_gb is None else mem_gb
            n = self.suspended_n[g] - 1
            if n:
                self.suspended_n[g] = n
                self.suspended_gb[g] -= take
            else:
                del self.suspended_n[g], self.suspended_gb[g]
            self._vacate(g, 1, take)

    def only_suspended(self, gpu: int) -> bool:
        """Whether every occupant of `gpu` is a suspended job (no running job, no other hold)."""
        n = self.suspended_n.get(gpu, 0)
        return n > 0 and self.gpu_njobs[gpu] == n

    def fits_beside_suspended(self, gpu: int, mem_gb: float | None) -> bool:
        """Whether a job of `mem_gb` per GPU fits on `gpu` beside the suspended jobs it holds (only
        jobs that declare their memory ever do)."""
        return (
            mem_gb is not None
            and self.only_suspended(gpu)
            and mem_gb + self.suspended_gb[gpu] <= self.gpu_cap_gb[gpu] + 1e-9
        )

    def vacate_all(self, gpu: int) -> None:
        """Take every occupant off `gpu` (a trial copy's way to treat it as idle)."""
        self._vacate(gpu, self.gpu_njobs[gpu], 0.0)

    def _check_gpu(self, gpu: int) -> None:
        if not 0 <= gpu < len(self.gpu_node):
            raise ValueError(f"no GPU {gpu}: cluster {self.spec.name!r} has GPUs 0..{len(self.gpu_node) - 1}")

    def _occupy(self, gpu: int, occupants: int, mem_gb: float) -> None:
        if self.gpu_njobs[gpu] == 0:
            self.node_idle[self.gpu_node[gpu]] -= 1
            self.idle_total -= 1
        self.gpu_njobs[gpu] += occupants
        if self.sharing:
            self.gpu_free_gb[gpu] -= mem_gb

    def _vacate(self, gpu: int, occupants: int, mem_gb: float) -> None:
        self.gpu_njobs[gpu] -= occupants
        if self.sharing:
            self.gpu_free_gb[gpu] += mem_gb
        if self.gpu_njobs[gpu] == 0:
            n = self.gpu_node[gpu]
            self.node_idle[n] += 1
            self.idle_total += 1
            self.gpu_free_gb[gpu] = self.gpu_cap_gb[gpu]
            if self.ff_hint[self.node_idle[n]] > n:
                self.ff_hint[self.node_idle[n]] = n

    def without_jobs(self) -> ClusterState:
        """The cluster with no job on it, but with the same offline GPUs and external holds."""
        new = self.copy()
        new.gpu_free_gb = list(self.gpu_cap_gb)
        new.gpu_njobs = [0] * len(self.gpu_node)
        new.node_idle = [len(g) for g in self.node_gpus]
        new.ff_hint = [0] * len(self.ff_hint)
        new.idle_total = len(self.gpu_node)
        new.offline, new.external_gb = set(), {}
        new.suspended_gb, new.suspended_n = {}, {}
        for g in sorted(self.offline):
            new.set_offline(g)
        for g, mem in sorted(self.external_gb.items()):
            new.hold_external(g, mem)
        return new

    def copy(self) -> ClusterState:
        """A copy whose bookings are independent (the static layout is shared)."""
        new = object.__new__(ClusterState)
        new.spec = self.spec
        new.sharing = self.sharing
        new.max_share = self.max_share
        new.gpu_node = self.gpu_node
        new.gpu_cap_gb = self.gpu_cap_gb
        new.node_gpus = self.node_gpus
        new.node_cap_gb = self.node_cap_gb
        new.min_cap_gb = self.min_cap_gb
        new.gpu_free_gb = self.gpu_free_gb.copy()
        new.gpu_njobs = self.gpu_njobs.copy()
        new.node_idle = self.node_idle.copy()
        new.ff_hint = self.ff_hint.copy()
        new.idle_total = self.idle_total
        new.offline = self.offline.copy()
        new.external_gb = self.external_gb.copy()
        new.suspended_gb = self.suspended_gb.copy()
        new.suspended_n = self.suspended_n.copy()
        return new

    def fragmentation(self) -> float:
        """Share of idle GPUs that sit on nodes which are partly busy (0 = every idle GPU on an empty node)."""
        if self.idle_total == 0:
            return 0.0
        stranded = sum(idle for idle, gpus in zip(self.node_idle, self.node_gpus) if idle < len(gpus))
        return stranded / self.idle_total

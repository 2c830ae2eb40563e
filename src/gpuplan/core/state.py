"""ClusterState: which GPUs hold jobs and how much memory each has left. The one mutable picture of a cluster
that the simulator, the local agent and the Slurm loop all schedule against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gpuplan.model import ClusterSpec, Job

__all__ = ["ClusterState", "Need", "need_of"]

_EPS: Final = 1e-9
# list items are updated as `a[i] = a[i] + 1`: the compiled core makes `a[i] += 1` a generic number call


@dataclass(slots=True, frozen=True)
class Need:
    """What a job needs beyond GPU count and GPU memory (None everywhere means the old GPU-only rules).

    Attributes:
        cpu_milli: CPU on its node, thousandths of a core (0: none); a job spanning nodes takes it in
            proportion to its GPUs on each.
        host_mem_gb: host memory on its node in GiB (0: none), split as cpu_milli.
        gpu_share: the share of one GPU's compute it takes (single-GPU jobs on sharing clusters);
            None: a job of unknown memory takes its GPUs whole, one of known memory takes no share.
    """

    cpu_milli: float = 0.0
    host_mem_gb: float = 0.0
    gpu_share: float | None = None

    def __reduce__(self) -> tuple[type[Need], tuple[float, float, float | None]]:
        """Pickled as its constructor's arguments: compiled and frozen, it cannot be rebuilt field by
        field (a sweep's worker or a deepcopy would get FrozenInstanceError)."""
        return (Need, (self.cpu_milli, self.host_mem_gb, self.gpu_share))


def need_of(job: Job, host: bool, sharing: bool) -> Need | None:
    """The job's needs a cluster can tell apart, or None when there are none (the fast GPU-only path):
    CPU and host memory only when some node limits them (`host`: `ClusterSpec.has_host_resources`);
    a GPU share only on a `sharing` cluster, for a job of one GPU."""
    cpu = mem = 0.0
    if host:
        cpu = job.cpu_milli or 0.0
        mem = job.host_mem_gb or 0.0
    share = job.gpu_share if sharing and job.gpus == 1 else None
    if share is not None and share >= 1.0:
        share = None if job.planning_mem_gb() is None else 1.0
    if not cpu and not mem and share is None:
        return None
    return Need(cpu, mem, share)


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
        "changed",
        "external_gb",
        "ff_hint",
        "gpu_cap_gb",
        "gpu_free_gb",
        "gpu_free_share",
        "gpu_njobs",
        "gpu_node",
        "idle_total",
        "max_share",
        "min_cap_gb",
        "node_cap_gb",
        "node_cpu_free",
        "node_gpus",
        "node_idle",
        "node_mem_free",
        "offline",
        "sharing",
        "spec",
        "suspended_gb",
        "suspended_n",
    )

    def __init__(
        self, spec: ClusterSpec, copy_of: ClusterState | None = None, idle_mask: list[int] | None = None
    ) -> None:
        """The empty cluster of `spec`; `copy_of`: a copy of that state's bookings (what `copy` does:
        the object is made by its constructor, as a compiled class must be), or with `idle_mask` a
        view of them (what `masked` does)."""
        if copy_of is not None:
            if idle_mask is not None:
                self._mask_of(copy_of, idle_mask)
            else:
                self._copy_bookings(copy_of)
            return
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
        self.node_cpu_free = _host_caps(spec, "cpu_milli")
        self.node_mem_free = _host_caps(spec, "host_mem_gb")
        self.gpu_free_share: list[float] | None = [1.0] * len(self.gpu_node) if spec.sharing else None
        self.changed: set[int] | None = None

    def track_changes(self) -> set[int]:
        """Start recording in `changed` the nodes whose bookings change (idempotent); returns the set."""
        if self.changed is None:
            self.changed = set()
        return self.changed

    def host_fits(self, node: int, need: Need, fraction: float = 1.0) -> bool:
        """Whether `fraction` of the job's CPU and host memory fit on `node` now."""
        cpu, mem = self.node_cpu_free, self.node_mem_free
        if cpu is None or mem is None:
            return True
        return (
            need.cpu_milli * fraction <= cpu[node] + _EPS and need.host_mem_gb * fraction <= mem[node] + _EPS
        )

    def gpu_fits_need(self, gpu: int, mem_gb: float | None, share: float | None) -> bool:
        """Whether one more job with `mem_gb` per GPU and a GPU share `share` fits on `gpu` now."""
        if share is None:
            return self.gpu_fits(gpu, mem_gb)
        n = self.gpu_njobs[gpu]
        if n == 0:
            return mem_gb is None or mem_gb <= self.gpu_cap_gb[gpu]
        fs = self.gpu_free_share
        if fs is None or n >= self.max_share or (mem_gb is not None and mem_gb > self.gpu_free_gb[gpu]):
            return False
        return share <= fs[gpu] + _EPS

    def fits_need(self, gpus: list[int] | tuple[int, ...], mem_gb: float | None, need: Need) -> bool:
        """Whether a job with `need` fits on exactly `gpus` now (each GPU, and each node's CPU and
        host memory for its part of the job)."""
        if not all(self.gpu_fits_need(g, mem_gb, need.gpu_share) for g in gpus):
            return False
        per_node: dict[int, int] = {}
        for g in gpus:
            per_node[self.gpu_node[g]] = per_node.get(self.gpu_node[g], 0) + 1
        return all(self.host_fits(n, need, k / len(gpus)) for n, k in per_node.items())

    def _take_host(
        self, gpus: list[int] | tuple[int, ...], need: Need, node: int | None, sign: float
    ) -> None:
        cpu, mem = self.node_cpu_free, self.node_mem_free
        if cpu is None or mem is None or not (need.cpu_milli or need.host_mem_gb):
            return
        if node is not None or len(gpus) <= 1:
            parts = {node if node is not None else self.gpu_node[gpus[0]]: 1.0}
        else:
            parts = {}
            for g in gpus:
                n = self.gpu_node[g]
                parts[n] = parts.get(n, 0.0) + 1.0 / len(gpus)
        for n, frac in parts.items():
            cpu[n] -= sign * need.cpu_milli * frac
            mem[n] -= sign * need.host_mem_gb * frac

    def _take_share(self, gpus: list[int] | tuple[int, ...], mem_gb: float | None, need: Need | None) -> None:
        fs = self.gpu_free_share
        if fs is None:
            return
        share = need.gpu_share if need is not None else None
        take = share if share is not None else (1.0 if mem_gb is None else 0.0)
        if take:
            for g in gpus:
                fs[g] -= take

    def place_node(self, node: int, need: Need) -> None:
        """Book a job of no GPU (CPU and host memory only) on `node`."""
        self._take_host((), need, node, 1.0)
        if self.changed is not None:
            self.changed.add(node)

    def release_node(self, node: int, need: Need) -> None:
        """Undo `place_node`."""
        self._take_host((), need, node, -1.0)
        if self.changed is not None:
            self.changed.add(node)

    def _note_changed(self, gpus: list[int] | tuple[int, ...]) -> None:
        assert self.changed is not None
        node_of = self.gpu_node
        self.changed.update(node_of[g] for g in gpus)

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

    def place(
        self, gpus: list[int] | tuple[int, ...], mem_gb: float | None, need: Need | None = None
    ) -> None:
        """Book a job on `gpus` (and its `need`, if any); the caller (a placer) has checked that it fits."""
        if need is not None:
            self._take_host(gpus, need, None, 1.0)
        if self.changed is not None:
            self._note_changed(gpus)
        if not self.sharing:  # exclusive: a GPU is taken whole; its free memory is not consulted
            self._take_whole(gpus if isinstance(gpus, tuple) else tuple(gpus))
            return
        for g in gpus:
            if self.gpu_njobs[g] == 0:
                at = self.gpu_node[g]
                self.node_idle[at] = self.node_idle[at] - 1
                self.idle_total -= 1
            self.gpu_njobs[g] = self.gpu_njobs[g] + 1
            self.gpu_free_gb[g] = self.gpu_free_gb[g] - (
                self.take_gb(g, mem_gb) if not _share_only(mem_gb, need) else 0.0
            )
        if mem_gb is None or need is not None:
            self._take_share(gpus, mem_gb, need)

    def _take_whole(self, gpus: tuple[int, ...]) -> None:
        """`place` on an exclusive cluster (a tuple: the compiled loop indexes it, no iterator)."""
        node_idle, njobs, node_of = self.node_idle, self.gpu_njobs, self.gpu_node
        taken = 0  # GPUs that were idle
        for g in gpus:
            k = njobs[g]
            if k == 0:
                at = node_of[g]
                node_idle[at] = node_idle[at] - 1
                taken += 1
            njobs[g] = k + 1
        if taken:
            self.idle_total -= taken

    def _give_whole(self, gpus: tuple[int, ...]) -> None:
        """`release` on an exclusive cluster."""
        node_idle, njobs, node_of, hint = self.node_idle, self.gpu_njobs, self.gpu_node, self.ff_hint
        freed = 0  # GPUs now idle
        for g in gpus:
            k = njobs[g] - 1
            njobs[g] = k
            if k == 0:
                n = node_of[g]
                m = node_idle[n] + 1
                node_idle[n] = m
                freed += 1
                if hint[m] > n:
                    hint[m] = n
        if freed:
            self.idle_total += freed

    def release(
        self, gpus: list[int] | tuple[int, ...], mem_gb: float | None, need: Need | None = None
    ) -> None:
        """Undo `place` for a job that ended (the same `need`)."""
        if need is not None:
            self._take_host(gpus, need, None, -1.0)
        if self.changed is not None:
            self._note_changed(gpus)
        if not self.sharing:
            self._give_whole(gpus if isinstance(gpus, tuple) else tuple(gpus))
            return
        if mem_gb is None or need is not None:
            fs = self.gpu_free_share
            share = need.gpu_share if need is not None else None
            take = share if share is not None else (1.0 if mem_gb is None else 0.0)
            if fs is not None and take:
                for g in gpus:
                    fs[g] = fs[g] + take
        for g in gpus:
            self.gpu_njobs[g] = self.gpu_njobs[g] - 1
            self.gpu_free_gb[g] = self.gpu_free_gb[g] + (
                self.take_gb(g, mem_gb) if not _share_only(mem_gb, need) else 0.0
            )
            if self.gpu_njobs[g] == 0:
                n = self.gpu_node[g]
                self.node_idle[n] = self.node_idle[n] + 1
                self.idle_total += 1
                self.gpu_free_gb[g] = self.gpu_cap_gb[g]  # no drift from float sums
                if self.gpu_free_share is not None:
                    self.gpu_free_share[g] = 1.0
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
        if self.changed is not None:
            self.changed.add(self.gpu_node[gpu])
        if self.gpu_njobs[gpu] == 0:
            at = self.gpu_node[gpu]
            self.node_idle[at] = self.node_idle[at] - 1
            self.idle_total -= 1
        self.gpu_njobs[gpu] = self.gpu_njobs[gpu] + occupants
        if self.sharing:
            self.gpu_free_gb[gpu] = self.gpu_free_gb[gpu] - mem_gb

    def _vacate(self, gpu: int, occupants: int, mem_gb: float) -> None:
        if self.changed is not None:
            self.changed.add(self.gpu_node[gpu])
        self.gpu_njobs[gpu] = self.gpu_njobs[gpu] - occupants
        if self.sharing:
            self.gpu_free_gb[gpu] = self.gpu_free_gb[gpu] + mem_gb
        if self.gpu_njobs[gpu] == 0:
            n = self.gpu_node[gpu]
            self.node_idle[n] = self.node_idle[n] + 1
            self.idle_total += 1
            self.gpu_free_gb[gpu] = self.gpu_cap_gb[gpu]
            if self.gpu_free_share is not None:
                self.gpu_free_share[gpu] = 1.0
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
        new.node_cpu_free = _host_caps(self.spec, "cpu_milli")
        new.node_mem_free = _host_caps(self.spec, "host_mem_gb")
        new.gpu_free_share = [1.0] * len(self.gpu_node) if self.sharing else None
        new.offline, new.external_gb = set(), {}
        new.suspended_gb, new.suspended_n = {}, {}
        for g in sorted(self.offline):
            new.set_offline(g)
        for g, mem in sorted(self.external_gb.items()):
            new.hold_external(g, mem)
        return new

    def copy(self) -> ClusterState:
        """A copy whose bookings are independent (the static layout is shared)."""
        return ClusterState(self.spec, copy_of=self)

    def masked(self, node_idle: list[int]) -> ClusterState:
        """A view for a placer's `find` with each node's idle count lowered to `node_idle` (a plan's
        mask: the GPUs it may use now). Every booking is this state's own, shared, not copied (a
        copy of the per-GPU lists per start was most of a conservative pass's copying): nothing may
        change them through the view. It has its own first-fit hint, which `find` updates."""
        return ClusterState(self.spec, copy_of=self, idle_mask=node_idle)

    def _mask_of(self, other: ClusterState, node_idle: list[int]) -> None:
        self._share_bookings(other)
        self.node_idle = node_idle
        self.idle_total = sum(node_idle)

    def _share_bookings(self, other: ClusterState) -> None:
        """Every field `other`'s, shared, but the first-fit hint (a placer's `find` updates it)."""
        self.spec = other.spec
        self.sharing = other.sharing
        self.max_share = other.max_share
        self.gpu_node = other.gpu_node
        self.gpu_cap_gb = other.gpu_cap_gb
        self.node_gpus = other.node_gpus
        self.node_cap_gb = other.node_cap_gb
        self.min_cap_gb = other.min_cap_gb
        self.ff_hint = other.ff_hint.copy()
        self.idle_total = other.idle_total
        self.changed = None
        self.gpu_free_gb = other.gpu_free_gb
        self.gpu_njobs = other.gpu_njobs
        self.node_idle = other.node_idle
        self.offline = other.offline
        self.external_gb = other.external_gb
        self.suspended_gb = other.suspended_gb
        self.suspended_n = other.suspended_n
        self.node_cpu_free = other.node_cpu_free
        self.node_mem_free = other.node_mem_free
        self.gpu_free_share = other.gpu_free_share

    def _copy_bookings(self, other: ClusterState) -> None:
        """`_share_bookings`, then a copy of every booking (the static layout stays shared)."""
        self._share_bookings(other)
        self.gpu_free_gb = self.gpu_free_gb.copy()
        self.gpu_njobs = self.gpu_njobs.copy()
        self.node_idle = self.node_idle.copy()
        self.offline = self.offline.copy()
        self.external_gb = self.external_gb.copy()
        self.suspended_gb = self.suspended_gb.copy()
        self.suspended_n = self.suspended_n.copy()
        if self.node_cpu_free is not None:
            self.node_cpu_free = self.node_cpu_free.copy()
        if self.node_mem_free is not None:
            self.node_mem_free = self.node_mem_free.copy()
        if self.gpu_free_share is not None:
            self.gpu_free_share = self.gpu_free_share.copy()

    def fragmentation(self) -> float:
        """Share of idle GPUs that sit on nodes which are partly busy (0 = every idle GPU on an empty node)."""
        if self.idle_total == 0:
            return 0.0
        stranded = sum(idle for idle, gpus in zip(self.node_idle, self.node_gpus) if idle < len(gpus))
        return stranded / self.idle_total


def _host_caps(spec: ClusterSpec, attr: str) -> list[float] | None:
    """Per node its `cpu_milli` or `host_mem_gb` (inf where not given); None when no node limits either."""
    if not spec.has_host_resources:
        return None
    inf = float("inf")
    return [inf if getattr(n, attr) is None else float(getattr(n, attr)) for n in spec.nodes]


def _share_only(mem_gb: float | None, need: Need | None) -> bool:
    """A job of unknown memory with a GPU share: bound by its share alone, it takes no GPU memory."""
    return mem_gb is None and need is not None and need.gpu_share is not None

"""MIG (Multi-Instance GPU) profiles and layouts: which slices a GPU model can be cut into, and where.

From NVIDIA's MIG user guide ("Supported MIG Profiles"; `nvidia-smi mig -lgip` / `-lgipp`): A100, H100
and H200 have 7 compute slices and 8 memory slices. A profile `Ng.Mgb` takes N compute slices and a
fixed number of memory slices; its GPU instance can only be created at certain starting memory slices
("placements") and occupies `span` memory slices from there. The placements (the same on GA100 and
GH100, memory slices 0-7):

| profile | compute | memory slices | placements (start) | at most |
|---|---|---|---|---|
| 1g (1/8 memory) | 1/7 | 1 | 0, 1, 2, 3, 4, 5, 6 | 7 |
| 1g+me (media extensions) | 1/7 | 1 | 0, 1, 2, 3, 4, 5, 6 | 1 |
| 1g (2/8 memory) | 1/7 | 2 | 0, 2, 4, 6 | 4 |
| 2g | 2/7 | 2 | 0, 2, 4 | 3 |
| 3g | 3/7 | 4 | 0, 4 | 2 |
| 4g | 4/7 | 4 | 0 | 1 |
| 7g | 7/7 | 8 | 0 | 1 |

A layout (a list of profile names for one GPU) is valid when each profile exists on that GPU model, no
profile exceeds its count, the compute slices sum to at most 7, and the instances can be placed without
two of them sharing a memory slice (searched exhaustively: at most 7 instances). `place_layout` returns
the placement or raises `MigLayoutError` saying which rule the layout breaks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuplan.errors import GpuplanError
from gpuplan.model import GpuSpec, NodeSpec

__all__ = [
    "COMPUTE_SLICES",
    "MEMORY_SLICES",
    "MIG_GPUS",
    "MigGpu",
    "MigLayoutError",
    "MigProfile",
    "MigSlice",
    "mig_gpu",
    "mig_node_specs",
    "place_layout",
    "slice_slowdown",
    "valid_layouts",
]

COMPUTE_SLICES = 7
MEMORY_SLICES = 8


class MigLayoutError(GpuplanError):
    """A MIG layout that cannot exist on its GPU; the message says which rule it breaks and the fix."""


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile of one GPU model.

    Attributes:
        name: as nvidia-smi shows it without the "MIG " prefix, e.g. "3g.40gb", "1g.10gb+me".
        compute_slices: compute slices (of 7): the slice's share of the SMs is compute_slices / 7.
        memory_slices: memory slices (of 8) the instance owns.
        mem_gb: its memory, as the profile name says.
        placements: the memory slices it may start at.
        max_count: most instances of it on one GPU.
    """

    name: str
    compute_slices: int
    memory_slices: int
    mem_gb: float
    placements: tuple[int, ...]
    max_count: int

    @property
    def compute_fraction(self) -> float:
        """Share of the whole GPU's SMs."""
        return self.compute_slices / COMPUTE_SLICES


@dataclass(frozen=True, slots=True)
class MigGpu:
    """A MIG-capable GPU model: its memory and its profiles by name (smallest first)."""

    model: str
    mem_gb: float
    profiles: dict[str, MigProfile]


@dataclass(frozen=True, slots=True)
class MigSlice:
    """One placed GPU instance: its profile and the first memory slice it occupies."""

    profile: MigProfile
    start: int

    @property
    def slices(self) -> range:
        return range(self.start, self.start + self.profile.memory_slices)


# (compute slices, memory slices, placements, max count, media extensions) per profile shape, in the
# order of the guide's tables; the names come from each GPU's per-slice memory.
_SHAPES: tuple[tuple[int, int, tuple[int, ...], int, bool], ...] = (
    (1, 1, (0, 1, 2, 3, 4, 5, 6), 7, False),
    (1, 1, (0, 1, 2, 3, 4, 5, 6), 1, True),
    (1, 2, (0, 2, 4, 6), 4, False),
    (2, 2, (0, 2, 4), 3, False),
    (3, 4, (0, 4), 2, False),
    (4, 4, (0,), 1, False),
    (7, 8, (0,), 1, False),
)
# GPU model -> (memory GB, the memory in the name of the 1-, 2-, 4- and 8-memory-slice profiles)
_MODELS: dict[str, tuple[float, dict[int, int]]] = {
    "A100-40GB": (40.0, {1: 5, 2: 10, 4: 20, 8: 40}),
    "A100-80GB": (80.0, {1: 10, 2: 20, 4: 40, 8: 80}),
    "H100-80GB": (80.0, {1: 10, 2: 20, 4: 40, 8: 80}),
    "H200-141GB": (141.0, {1: 18, 2: 35, 4: 71, 8: 141}),
}


def _gpu(model: str, mem_gb: float, names_gb: dict[int, int]) -> MigGpu:
    profiles: dict[str, MigProfile] = {}
    for compute, memory, placements, max_count, media in _SHAPES:
        name = f"{compute}g.{names_gb[memory]}gb" + ("+me" if media else "")
        profiles[name] = MigProfile(name, compute, memory, float(names_gb[memory]), placements, max_count)
    return MigGpu(model, mem_gb, profiles)


MIG_GPUS: dict[str, MigGpu] = {m: _gpu(m, mem, names) for m, (mem, names) in _MODELS.items()}
_ALIASES = {"H200": "H200-141GB", "H100": "H100-80GB", "A100": "A100-80GB", "H200-140GB": "H200-141GB"}


def mig_gpu(model: str) -> MigGpu:
    """The MIG tables of a GPU model: "A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB" (any case; the
    bare names "A100", "H100", "H200" mean the 80, 80 and 141 GB parts).

    Raises:
        MigLayoutError: a model without MIG tables (the message lists the known ones).
    """
    key = model.strip().upper().replace(" ", "-")
    key = _ALIASES.get(key, key)
    for name, gpu in MIG_GPUS.items():
        if name.upper() == key:
            return gpu
    raise MigLayoutError(
        f"GPU model {model!r} has no MIG profile table; MIG models: {', '.join(MIG_GPUS)} "
        "(set the node's gpu_model to one of them)"
    )


def place_layout(model: str, layout: Sequence[str]) -> tuple[MigSlice, ...]:
    """Place a layout (profile names, any order) on one GPU of `model`.

    Returns:
        the slices, in the order of `layout`, each at its first memory slice.

    Raises:
        MigLayoutError: unknown model or profile, too many of a profile, more than 7 compute or 8 memory
            slices, or no placement without overlap; the message names the rule and the layout.
    """
    gpu = mig_gpu(model)
    shown = "[" + ", ".join(layout) + "]"
    if not layout:
        raise MigLayoutError(f"MIG layout {shown} on {gpu.model}: empty (give at least one profile)")
    profiles = [_profile(gpu, name, shown) for name in layout]
    _check_counts(gpu, profiles, shown)
    starts = _search(profiles)
    if starts is None:
        raise MigLayoutError(
            f"MIG layout {shown} on {gpu.model}: the instances cannot be placed without sharing a memory "
            f"slice (placements: {_placements_text(profiles)})"
        )
    return tuple(MigSlice(p, s) for p, s in zip(profiles, starts, strict=True))


def mig_node_specs(name: str, gpu: GpuSpec, layouts: Sequence[Sequence[str]]) -> list[NodeSpec]:
    """A node whose GPUs carry MIG layouts, as the scheduler sees it: one node of its whole GPUs (those
    with an empty layout), then one single-GPU node per slice, named NODE/gpuI:PROFILE@START.

    Raises:
        MigLayoutError: a layout invalid on `gpu.model`, or a model without MIG tables.
    """
    whole = sum(1 for layout in layouts if not layout)
    out = [NodeSpec(name, whole, gpu)] if whole else []
    for i, layout in enumerate(layouts):
        if not layout:
            continue
        for sl in place_layout(gpu.model, layout):
            p = sl.profile
            spec = GpuSpec(f"{gpu.model} MIG {p.name}", p.mem_gb, p.compute_fraction, p.name)
            out.append(NodeSpec(f"{name}/gpu{i}:{p.name}@{sl.start}", 1, spec))
    return out


def slice_slowdown(util_pct: float | None, compute_fraction: float) -> float:
    """How much longer a job's GPU phase takes on a slice with `compute_fraction` of the GPU's SMs.

    A job busy u % of the time on a whole GPU needs u % of its compute: on a slice it keeps its speed
    while u / 100 <= compute_fraction and slows in proportion beyond (max(1, u / (100 · fraction))).
    Unknown busy % (None or NaN) counts as 100 %: the slice's full slowdown 1 / fraction.
    """
    if compute_fraction >= 1.0:
        return 1.0
    u = 100.0 if util_pct is None or util_pct != util_pct else min(max(util_pct, 0.0), 100.0)
    return max(1.0, u / (100.0 * compute_fraction))


def valid_layouts(model: str, full_only: bool = False) -> list[tuple[str, ...]]:
    """Every valid layout of `model` as a sorted tuple of profile names (largest first), without
    media-extension profiles. With `full_only`, only those that cannot take one more instance."""
    gpu = mig_gpu(model)
    plain = sorted((p for p in gpu.profiles.values() if not p.name.endswith("+me")), key=_size_key)
    found: set[tuple[str, ...]] = set()
    _grow(gpu, plain, [], 0, found)
    if full_only:
        found = {lay for lay in found if not any(_fits_more(gpu, lay, p) for p in plain)}
    return sorted(found, key=lambda lay: (len(lay), lay))


def _grow(
    gpu: MigGpu, plain: list[MigProfile], chosen: list[MigProfile], first: int, found: set[tuple[str, ...]]
) -> None:
    for i in range(first, len(plain)):
        trial = [*chosen, plain[i]]
        if sum(p.compute_slices for p in trial) > COMPUTE_SLICES or _search(trial) is None:
            continue
        if any(c > p.max_count for p, c in _counts(trial)):
            continue
        found.add(tuple(p.name for p in trial))
        _grow(gpu, plain, trial, i, found)


def _fits_more(gpu: MigGpu, layout: tuple[str, ...], extra: MigProfile) -> bool:
    try:
        place_layout(gpu.model, [*layout, extra.name])
    except MigLayoutError:
        return False
    return True


def _size_key(p: MigProfile) -> tuple[int, int]:
    return (-p.compute_slices, -p.memory_slices)


def _counts(profiles: Iterable[MigProfile]) -> list[tuple[MigProfile, int]]:
    by_name = Counter(p.name for p in profiles)
    seen = {p.name: p for p in profiles}
    return [(seen[n], c) for n, c in by_name.items()]


def _profile(gpu: MigGpu, name: str, shown: str) -> MigProfile:
    key = name.strip().lower().removeprefix("mig ").removeprefix("mig-")
    if key in gpu.profiles:
        return gpu.profiles[key]
    raise MigLayoutError(
        f"MIG layout {shown} on {gpu.model}: unknown profile {name!r}; {gpu.model} profiles: "
        f"{', '.join(gpu.profiles)}"
    )


def _check_counts(gpu: MigGpu, profiles: list[MigProfile], shown: str) -> None:
    for p, c in _counts(profiles):
        if c > p.max_count:
            raise MigLayoutError(
                f"MIG layout {shown} on {gpu.model}: {c} x {p.name}, at most {p.max_count} per GPU"
            )
    media = sum(c for p, c in _counts(profiles) if p.name.endswith("+me"))
    if media > 1:
        raise MigLayoutError(
            f"MIG layout {shown} on {gpu.model}: {media} media-extension (+me) profiles, at most 1"
        )
    compute = sum(p.compute_slices for p in profiles)
    if compute > COMPUTE_SLICES:
        raise MigLayoutError(
            f"MIG layout {shown} on {gpu.model}: {compute} compute slices, the GPU has {COMPUTE_SLICES}"
        )
    memory = sum(p.memory_slices for p in profiles)
    if memory > MEMORY_SLICES:
        raise MigLayoutError(
            f"MIG layout {shown} on {gpu.model}: {memory} memory slices, the GPU has {MEMORY_SLICES}"
        )


def _search(profiles: Sequence[MigProfile]) -> list[int] | None:
    """Starting memory slices for `profiles` (in their order) without overlap, or None; largest first."""
    order = sorted(range(len(profiles)), key=lambda i: _size_key(profiles[i]))
    starts = [0] * len(profiles)
    used = [False] * MEMORY_SLICES

    def place(k: int) -> bool:
        if k == len(order):
            return True
        p = profiles[order[k]]
        for s in p.placements:
            span = range(s, s + p.memory_slices)
            if any(used[x] for x in span):
                continue
            for x in span:
                used[x] = True
            starts[order[k]] = s
            if place(k + 1):
                return True
            for x in span:
                used[x] = False
        return False

    return starts if place(0) else None


def _placements_text(profiles: Sequence[MigProfile]) -> str:
    seen = dict.fromkeys(p.name for p in profiles)
    by_name = {p.name: p for p in profiles}
    return "; ".join(f"{n} at {', '.join(map(str, by_name[n].placements))}" for n in seen)

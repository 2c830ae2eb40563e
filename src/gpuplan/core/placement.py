"""Placers pick the GPUs a job gets: first-fit, best-fit (pack) and spread (fgd, fgd-pack: core/fgd.py), one
registry by name.

A multi-GPU job gets all its GPUs on one node unless it may span nodes and no single node can host it.
A job with a `Need` (CPU, host memory, a GPU share) fits a node only when every resource fits there;
without one, the GPU-only paths below run unchanged.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from functools import partial
from operator import itemgetter
from typing import Any, ClassVar

from mypy_extensions import mypyc_attr

from gpuplan.core.nodegroups import NodeScores
from gpuplan.core.params import Configurable, build, register_in
from gpuplan.core.state import ClusterState, Need
from gpuplan.model import Job

__all__ = [
    "BestFit",
    "FirstFit",
    "Placer",
    "Spread",
    "free_share_on",
    "get_placer",
    "placer_classes",
    "placer_names",
    "register_placer",
]


_SECOND = itemgetter(1)  # sort keys without closures: methods of these classes are compiled (mypyc)
_MAX_MEMO = 500_000  # node-state scores kept before starting afresh
_CLASS_MEMOS: dict[type, dict[str, Any]] = {}  # per placer class: its node-state scores (memo_home)


@mypyc_attr(allow_interpreted_subclasses=True)  # fgd, plugins and test doubles subclass it
class Placer(Configurable, ABC):
    """Chooses GPUs for a job on a ClusterState. Subclasses only rank nodes and GPUs (a placer that
    takes parameters declares them in `params`, core/params.py)."""

    # class attributes (ClassVar), not fields: the registry, --help and subclasses in interpreted
    # code (fgd's placers, plugins) read and set them on the class (`name` too: `_NAMES` below)
    description: ClassVar[str] = ""

    @abstractmethod
    def node_key(self, state: ClusterState, node: int, fitting: int) -> tuple[float, ...]:
        """Rank of a node that can host the job (smaller first); `fitting` = its GPUs the job fits on."""

    @abstractmethod
    def gpu_key(self, state: ClusterState, gpu: int) -> tuple[float, ...]:
        """Rank of a GPU within the chosen node (smaller first)."""

    def fitting_gpus(self, state: ClusterState, node: int, mem_gb: float | None) -> int:
        """How many GPUs of `node` one more job with `mem_gb` per GPU fits on."""
        if not state.sharing:
            cap_ok = mem_gb is None or mem_gb <= state.node_cap_gb[node]
            return state.node_idle[node] if cap_ok else 0
        return sum(1 for g in state.node_gpus[node] if state.gpu_fits(g, mem_gb))

    def learn(self, job: Job) -> None:
        """A job was submitted to the scheduler using this placer (placers that weigh the workload,
        like fgd, learn its mix here; the others ignore it)."""
        return None

    def node_can_host(self, state: ClusterState, node: int, gpus: int, mem_gb: float | None) -> bool:
        return self.fitting_gpus(state, node, mem_gb) >= gpus

    def find(
        self,
        state: ClusterState,
        gpus: int,
        mem_gb: float | None,
        may_span: bool = False,
        need: Need | None = None,
    ) -> list[int] | None:
        """GPUs for a job of `gpus` GPUs and `mem_gb` per GPU (and `need`), or None when it does not fit now."""
        if need is not None:
            found = self.choose(state, gpus, mem_gb, need)
            if found is not None:
                return found[1]
            return self._span_need(state, gpus, mem_gb, need) if may_span else None
        if state.sharing:
            best_node = self._best_node_shared(state, gpus, mem_gb)
        elif gpus > state.idle_total:
            return None
        else:
            counts = state.node_idle
            if mem_gb is not None and mem_gb > state.min_cap_gb:
                caps = state.node_cap_gb
                counts = [k if mem_gb <= caps[n] else 0 for n, k in enumerate(counts)]
            best_node = self.choose_node(state, counts, gpus)  # -1 when no node has `gpus`
        if best_node >= 0:
            if not state.sharing:
                njobs = state.gpu_njobs
                return [g for g in state.node_gpus[best_node] if njobs[g] == 0][:gpus]
            return self._pick(state, state.node_gpus[best_node], gpus, mem_gb)
        if may_span:
            return self._span(state, gpus, mem_gb)
        return None

    # -- jobs with a Need: every resource must fit ------------------------------------------------
    def choose(
        self, state: ClusterState, gpus: int, mem_gb: float | None, need: Need
    ) -> tuple[int, list[int]] | None:
        """The node and GPUs for a job with `need` on one node (a job of 0 GPUs gets a node and []),
        or None when no node hosts every resource it needs now.

        On clusters of more than `scores_from` nodes, a placer with a `score_width` keeps each node's
        score per request and rescores only the nodes that changed (core/nodegroups.py)."""
        if self.score_width and len(state.node_gpus) > self.scores_from:
            request = (gpus, mem_gb, need.cpu_milli, need.host_mem_gb, need.gpu_share)
            home = self.memo_home()
            memo = home.get("scores")
            if memo is None or len(memo) > _MAX_MEMO:
                memo = home["scores"] = {}
                home["ids"] = {}  # node-state numbers go with the scores they key
            found = self.node_scores(state, home["ids"]).best(
                request,
                self.score_width,
                memo,
                partial(self.score_many, state, gpus=gpus, mem_gb=mem_gb, need=need),
            )
            if found is None:
                return None
            return found[0], self.pick_scored(state, found[0], gpus, mem_gb, need, found[1])
        best: tuple[float, ...] | None = None
        best_node = -1
        for node in range(len(state.node_gpus)):
            fitting = self._fitting_need(state, node, gpus, mem_gb, need)
            if fitting < 0:
                continue
            key = self.need_node_key(state, node, fitting, need)
            if best is None or key < best:
                best, best_node = key, node
                if self.first_wins:
                    break
        if best_node < 0:
            return None
        return best_node, self.pick_need(state, best_node, gpus, mem_gb, need)

    score_width: ClassVar[int] = 0
    """How many numbers `need_score` gives (0: the placer ranks nodes by more than their state)."""
    scores_from: ClassVar[int] = 64
    """Clusters of more nodes than this use the kept per-node scores (when `score_width`)."""

    def need_score(self, state: ClusterState, node: int, fitting: int, need: Need) -> tuple[float, ...]:
        """A node's rank for a job with a Need from its state alone (`score_width` numbers; the lowest
        index wins among equals)."""
        raise NotImplementedError

    def score_node(
        self, state: ClusterState, node: int, gpus: int, mem_gb: float | None, need: Need
    ) -> tuple[tuple[float, ...], Any] | None:
        """(`need_score`, what `pick_scored` needs) of a node that hosts the job, else None."""
        fitting = self._fitting_need(state, node, gpus, mem_gb, need)
        return None if fitting < 0 else (self.need_score(state, node, fitting, need), None)

    def score_many(
        self, state: ClusterState, nodes: list[int], gpus: int, mem_gb: float | None, need: Need
    ) -> list[tuple[tuple[float, ...], Any] | None]:
        """`score_node` of several nodes (a placer may evaluate them together)."""
        return [self.score_node(state, n, gpus, mem_gb, need) for n in nodes]

    def pick_scored(
        self, state: ClusterState, node: int, gpus: int, mem_gb: float | None, need: Need, extra: Any
    ) -> list[int]:
        """The job's GPUs on the node `score_node` ranked first (default: `pick_need`)."""
        return self.pick_need(state, node, gpus, mem_gb, need)

    @staticmethod
    def _fitting_need(state: ClusterState, node: int, gpus: int, mem_gb: float | None, need: Need) -> int:
        """GPUs of `node` the job fits on if every other resource fits there too (0 for a job of no
        GPU), or -1 when it does not fit."""
        if not state.host_fits(node, need):
            return -1
        if not gpus:
            return 0
        share, njobs = need.gpu_share, state.gpu_njobs
        if mem_gb is None and share is None:  # whole GPUs: the idle ones
            fitting = sum(1 for g in state.node_gpus[node] if njobs[g] == 0)
        elif mem_gb is None and state.gpu_free_share is not None:  # a share alone decides
            fs, most, s = state.gpu_free_share, state.max_share, share - 1e-9  # type: ignore[operator]
            fitting = sum(
                1 for g in state.node_gpus[node] if njobs[g] == 0 or (njobs[g] < most and s <= fs[g])
            )
        else:
            fitting = sum(1 for g in state.node_gpus[node] if state.gpu_fits_need(g, mem_gb, share))
        if not state.sharing and fitting > state.node_idle[node]:
            fitting = state.node_idle[node]  # a plan's masked copy lowers the idle counts only
        return fitting if fitting >= gpus else -1

    def memo_home(self) -> dict[str, Any]:
        """Where the scores of node states are kept: shared by every placer of this class (a score
        depends on the node's state alone), so runs in one process reuse what earlier runs met."""
        return _CLASS_MEMOS.setdefault(type(self), {})

    def node_scores(self, state: ClusterState, ids: dict[tuple[Any, ...], int]) -> NodeScores:
        """The kept per-node scores of `state` (a few states: the live one and a pass's copies)."""
        cache: dict[int, NodeScores] | None = getattr(self, "_scores_cache", None)
        if cache is None:
            cache = {}
            self._scores_cache: dict[int, NodeScores] = cache
        scores = cache.get(id(state))
        if scores is not None and scores.current(state) and scores.ids is ids:
            scores.refresh()
            return scores
        if len(cache) >= 4:
            cache.pop(next(iter(cache)))
        scores = cache[id(state)] = NodeScores(state, ids)
        return scores

    def need_node_key(self, state: ClusterState, node: int, fitting: int, need: Need) -> tuple[float, ...]:
        """Rank of a node that hosts a job with a Need (default: `node_key`)."""
        return self.node_key(state, node, fitting)

    def need_gpu_key(self, state: ClusterState, gpu: int, need: Need) -> tuple[float, ...]:
        """Rank of a GPU for a job with a Need (default: `gpu_key`)."""
        return self.gpu_key(state, gpu)

    def pick_need(
        self, state: ClusterState, node: int, gpus: int, mem_gb: float | None, need: Need
    ) -> list[int]:
        """The job's GPUs on `node` (which hosts it), by `need_gpu_key`."""
        fit = [g for g in state.node_gpus[node] if state.gpu_fits_need(g, mem_gb, need.gpu_share)]
        if len(fit) > gpus:
            fit.sort(key=partial(self.need_gpu_key, state, need=need))
        return sorted(fit[:gpus])

    def _span_need(
        self, state: ClusterState, gpus: int, mem_gb: float | None, need: Need
    ) -> list[int] | None:
        """Several nodes for a spanning job with a Need: the roomiest nodes first, each taking the job's
        CPU and host memory in proportion to the GPUs it gives."""
        if gpus <= 1:
            return None
        nodes_spec = state.spec.nodes
        fits = []
        for n, node_gpus in enumerate(state.node_gpus):
            k = (
                0
                if nodes_spec[n].gpu.mig_profile
                else sum(1 for g in node_gpus if state.gpu_fits_need(g, mem_gb, None))
            )
            while k and not state.host_fits(n, need, k / gpus):
                k -= 1
            fits.append(k)
        if sum(fits) < gpus:
            return None
        chosen: list[int] = []
        for n, f in sorted(((n, f) for n, f in enumerate(fits) if f), key=_SECOND, reverse=True):
            take = min(f, gpus - len(chosen))
            if not state.host_fits(n, need, take / gpus):
                continue
            chosen.extend(self.pick_need(state, n, take, mem_gb, Need(need.cpu_milli, need.host_mem_gb)))
            if len(chosen) == gpus:
                return sorted(chosen)
        return None

    def choose_node(self, state: ClusterState, counts: list[int], gpus: int) -> int:
        """Exclusive clusters: the node to use given each node's fitting GPU count, or -1.

        Subclasses may override this with a faster equivalent of ranking by `node_key`.
        """
        best: tuple[float, ...] | None = None
        best_node = -1
        for node, fitting in enumerate(counts):
            if fitting >= gpus:
                key = self.node_key(state, node, fitting)
                if best is None or key < best:
                    best, best_node = key, node
        return best_node

    first_wins: ClassVar[bool] = False  # the first node that fits is the best one: stop scanning there
    node_local: ClassVar[bool] = False
    """On an exclusive cluster, for a job on one node, its answer depends only on the nodes that have the
    job's GPUs idle (which one, by each one's own state): the preemptive pass then releases only the
    victims on nodes that can host the job (core/preemption.py). A subclass that ranks by anything else
    (the whole cluster's state) sets it False."""

    def _best_node_shared(self, state: ClusterState, gpus: int, mem_gb: float | None) -> int:
        if self.first_wins:
            for node in range(len(state.node_gpus)):
                if self.fitting_gpus(state, node, mem_gb) >= gpus:
                    return node
            return -1
        best: tuple[float, ...] | None = None
        best_node = -1
        for node in range(len(state.node_gpus)):
            fitting = self.fitting_gpus(state, node, mem_gb)
            if fitting >= gpus:
                key = self.node_key(state, node, fitting)
                if best is None or key < best:
                    best, best_node = key, node
        return best_node

    def _pick(self, state: ClusterState, candidates: list[int], gpus: int, mem_gb: float | None) -> list[int]:
        fit = [g for g in candidates if state.gpu_fits(g, mem_gb)]
        if len(fit) > gpus:
            fit.sort(key=partial(self.gpu_key, state))
        return sorted(fit[:gpus])

    def _span(self, state: ClusterState, gpus: int, mem_gb: float | None) -> list[int] | None:
        if state.sharing:
            fits = [self.fitting_gpus(state, n, mem_gb) for n in range(len(state.node_gpus))]
        elif mem_gb is None or mem_gb <= state.min_cap_gb:
            fits = state.node_idle
        else:
            caps = state.node_cap_gb
            fits = [k if mem_gb <= caps[n] else 0 for n, k in enumerate(state.node_idle)]
        nodes_spec = state.spec.nodes
        if any(node.gpu.mig_profile for node in nodes_spec):  # a job never spans MIG slices
            fits = [0 if nodes_spec[n].gpu.mig_profile else f for n, f in enumerate(fits)]
        if sum(fits) < gpus:
            return None
        nodes = [(n, f) for n, f in enumerate(fits) if f > 0]
        # fewest nodes first: take the roomiest nodes, then let the placer's own rank break ties
        if state.sharing:
            ranked = sorted(
                ((-f, self.node_key(state, n, f)), n, f) for n, f in nodes
            )  # n breaks ties, as the order
            nodes = [(n, f) for _, n, f in ranked]
        else:  # every built-in placer ranks equally roomy idle nodes by index: a stable sort suffices
            nodes.sort(key=_SECOND, reverse=True)  # stable: equally roomy nodes keep index order
        chosen: list[int] = []
        njobs = state.gpu_njobs
        for n, f in nodes:
            take = min(f, gpus - len(chosen))
            if state.sharing:
                chosen.extend(self._pick(state, state.node_gpus[n], take, mem_gb))
            else:
                chosen.extend([g for g in state.node_gpus[n] if njobs[g] == 0][:take])
            if len(chosen) == gpus:
                break
        return sorted(chosen)


@mypyc_attr(allow_interpreted_subclasses=True)  # fgd, plugins and test doubles subclass it
class FirstFit(Placer):
    description: ClassVar[str] = "lowest-numbered node and GPUs that fit"
    node_local: ClassVar[bool] = True
    first_wins: ClassVar[bool] = True
    score_width: ClassVar[int] = 1

    def need_score(self, state: ClusterState, node: int, fitting: int, need: Need) -> tuple[float, ...]:
        return (0.0,)

    def choose_node(self, state: ClusterState, counts: list[int], gpus: int) -> int:
        if counts is state.node_idle and gpus < len(state.ff_hint):
            hint = state.ff_hint  # no node before hint[gpus] has `gpus` idle GPUs: start there
            for n in range(hint[gpus], len(counts)):
                if counts[n] >= gpus:
                    hint[gpus] = n
                    return n
            hint[gpus] = len(counts)
            return -1
        for n, k in enumerate(counts):
            if k >= gpus:
                return n
        return -1

    def node_key(self, state: ClusterState, node: int, fitting: int) -> tuple[float, ...]:
        return (node,)

    def gpu_key(self, state: ClusterState, gpu: int) -> tuple[float, ...]:
        return (gpu,)


@mypyc_attr(allow_interpreted_subclasses=True)  # fgd, plugins and test doubles subclass it
class BestFit(Placer):
    description: ClassVar[str] = "pack: the node with the fewest free GPUs that fit, the fullest GPUs first"
    node_local: ClassVar[bool] = True

    def choose_node(self, state: ClusterState, counts: list[int], gpus: int) -> int:
        best = min(((k, n) for n, k in enumerate(counts) if k >= gpus), default=None)
        return -1 if best is None else best[1]

    def node_key(self, state: ClusterState, node: int, fitting: int) -> tuple[float, ...]:
        return (fitting, node)

    def gpu_key(self, state: ClusterState, gpu: int) -> tuple[float, ...]:
        return (state.gpu_free_gb[gpu], gpu)

    score_width: ClassVar[int] = 2

    def need_score(self, state: ClusterState, node: int, fitting: int, need: Need) -> tuple[float, ...]:
        return (fitting, free_share_on(state, node))

    def need_node_key(self, state: ClusterState, node: int, fitting: int, need: Need) -> tuple[float, ...]:
        return (fitting, free_share_on(state, node), node)

    def need_gpu_key(self, state: ClusterState, gpu: int, need: Need) -> tuple[float, ...]:
        fs = state.gpu_free_share
        return (0.0 if fs is None else fs[gpu], state.gpu_free_gb[gpu], gpu)


@mypyc_attr(allow_interpreted_subclasses=True)  # fgd, plugins and test doubles subclass it
class Spread(Placer):
    description: ClassVar[str] = "the node with the most free GPUs, the emptiest GPUs first"
    node_local: ClassVar[bool] = True

    def choose_node(self, state: ClusterState, counts: list[int], gpus: int) -> int:
        most = max(counts)
        return counts.index(most) if most >= gpus else -1

    def node_key(self, state: ClusterState, node: int, fitting: int) -> tuple[float, ...]:
        return (-fitting, -state.node_idle[node], node)

    def gpu_key(self, state: ClusterState, gpu: int) -> tuple[float, ...]:
        return (state.gpu_njobs[gpu], -state.gpu_free_gb[gpu], gpu)

    score_width: ClassVar[int] = 2

    def need_score(self, state: ClusterState, node: int, fitting: int, need: Need) -> tuple[float, ...]:
        return (-fitting, -free_share_on(state, node))

    def need_node_key(self, state: ClusterState, node: int, fitting: int, need: Need) -> tuple[float, ...]:
        return (-fitting, -free_share_on(state, node), node)

    def need_gpu_key(self, state: ClusterState, gpu: int, need: Need) -> tuple[float, ...]:
        fs = state.gpu_free_share
        return (state.gpu_njobs[gpu], -(1.0 if fs is None else fs[gpu]), -state.gpu_free_gb[gpu], gpu)


def free_share_on(state: ClusterState, node: int) -> float:
    """The free GPU compute on `node`, in GPUs (its idle GPUs without sharing)."""
    fs = state.gpu_free_share
    if fs is None:
        return float(state.node_idle[node])
    return sum(fs[g] for g in state.node_gpus[node])


_PLACERS: dict[str, type[Placer]] = {}


def register_placer(cls: type[Placer]) -> type[Placer]:
    """Add a placer class to the registry under its `name` (usable as a decorator)."""
    return register_in(_PLACERS, cls)


# Configurable's `name`, set on the classes: in the body of a compiled class it would be a field of
# each instance, which the registry cannot read off the class
_NAMES: dict[type[Placer], str] = {FirstFit: "first-fit", BestFit: "best-fit", Spread: "spread"}
for _cls, _name in _NAMES.items():
    _cls.name = _name
    register_placer(_cls)
_PLACERS["pack"] = BestFit


# placers in modules of their own, registered when first asked for (no import cycle with this module)
_BUILTIN_MODULES = ("gpuplan.core.fgd",)


def _load_builtins() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def placer_names() -> list[str]:
    _load_builtins()
    return list(_PLACERS)


def placer_classes() -> dict[str, type[Placer]]:
    """The registered placer classes by name, aliases included (a copy: register with `register_placer`)."""
    _load_builtins()
    return dict(_PLACERS)


def get_placer(spec: str, **overrides: object) -> Placer:
    """A new placer from its spec: a name, then its parameters if it takes any.

    Raises:
        UnknownNameError: an unknown name; SpecError: an unknown parameter or a bad value (each
            message lists the valid ones).
    """
    _load_builtins()
    placer: Placer = build("placer", _PLACERS, spec, **overrides)
    return placer

"""Fair-share: waiting jobs ranked by their user's decayed GPU-time, then by a second policy.

A user's usage is the GPU-seconds their jobs held, each second weighted by 2^(-age / half-life): a
GPU-second used one half-life ago counts one half. It is a live quantity: a finished (or preempted)
run is charged when it ends, and a running job counts for the GPU-time it held up to now, so the
usage at `t` is the same whether a job ended at `t` or still runs. The integral of a run of `g` GPUs
from `s` to `t`, seen at `t`, is `g * h / ln 2 * (1 - 2^(-(t - s) / h))`.

The queue (`FairQueue`, a drop-in for the Scheduler's sorted list of static keys) keeps one sorted
list per user, ordered by the second policy's static key. Users are ranked by their usage as of the
last `rerank(now)` (the Scheduler calls it at the start of every pass); users with equal usage (two
users who never ran, say) form one group whose jobs interleave in the second policy's order. A
re-rank costs O(R + U log U) for R running jobs and U users with waiting jobs, never a re-key of the
waiting jobs: iteration walks the groups in order (a k-way merge inside a group of k users).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Iterator

from sortedcontainers import SortedList

from gpuplan.core.params import Param, build
from gpuplan.core.policy import Policy, policy_classes, policy_names, register_policy
from gpuplan.model import Job

__all__ = ["DEFAULT_HALF_LIFE_S", "FairQueue", "FairShare", "UsageLedger", "decayed_run_gpu_s"]

DEFAULT_HALF_LIFE_S = 7 * 86400.0
_LN2 = math.log(2.0)
_REBASE_HALF_LIVES = 20.0  # re-anchor running sums before 2^(age/h) loses precision


def decayed_run_gpu_s(gpus: int, start_s: float, end_s: float, half_life_s: float) -> float:
    """Decayed GPU-seconds, seen at `end_s`, of a run of `gpus` GPUs from `start_s` to `end_s`."""
    if end_s <= start_s:
        return 0.0
    if half_life_s == math.inf:
        return gpus * (end_s - start_s)
    return gpus * half_life_s / _LN2 * -math.expm1(-(end_s - start_s) * _LN2 / half_life_s)


class UsageLedger:
    """Decayed GPU-seconds per user: what ended runs were charged, plus the running jobs up to now.

    Running jobs of a user are kept as two sums (their GPUs and sum of gpus * 2^((start - t0) / h)),
    so a user's usage costs O(1) whatever the number of their running jobs.
    """

    def __init__(self, half_life_s: float = DEFAULT_HALF_LIFE_S) -> None:
        if not half_life_s > 0:
            raise ValueError(f"fair-share half-life must be > 0 seconds, got {half_life_s}")
        self.half_life_s = half_life_s
        self._charged: dict[str, tuple[float, float]] = {}  # user -> (decayed GPU-s, as of t)
        self._runs: dict[int, tuple[str, int, float]] = {}  # jid -> (user, gpus, start_s)
        self._gpus: dict[str, int] = {}
        self._weight: dict[str, float] = {}
        self._t0: float | None = None

    def _decay(self, dt: float) -> float:
        return 1.0 if self.half_life_s == math.inf else 2.0 ** (-dt / self.half_life_s)

    def charge(self, user: str, gpu_s: float, at_s: float) -> None:
        """Add `gpu_s` decayed GPU-seconds (as seen at `at_s`) to a user's record."""
        value, t = self._charged.get(user, (0.0, at_s))
        if at_s >= t:
            self._charged[user] = (value * self._decay(at_s - t) + gpu_s, at_s)
        else:  # a charge dated before the record: decay it to the record's time instead
            self._charged[user] = (value + gpu_s * self._decay(t - at_s), t)

    def start(self, jid: int, user: str, gpus: int, start_s: float) -> None:
        """A job of `user` runs on `gpus` GPUs since `start_s`."""
        if self._t0 is None:
            self._t0 = start_s
        self._runs[jid] = (user, gpus, start_s)
        self._gpus[user] = self._gpus.get(user, 0) + gpus
        self._weight[user] = self._weight.get(user, 0.0) + gpus / self._decay(start_s - self._t0)

    def stop(self, jid: int, end_s: float) -> None:
        """A running job ended (or was preempted) at `end_s`: charge its run to its user."""
        run = self._runs.pop(jid, None)
        if run is None:
            return
        user, gpus, start_s = run
        self._gpus[user] -= gpus
        if self._gpus[user] == 0:
            del self._gpus[user], self._weight[user]  # no float residue once nothing runs
        else:
            assert self._t0 is not None
            self._weight[user] -= gpus / self._decay(start_s - self._t0)
        self.charge(user, decayed_run_gpu_s(gpus, start_s, end_s, self.half_life_s), end_s)

    def usage(self, user: str, now: float) -> float:
        """A user's decayed GPU-seconds at `now`: charged runs plus running jobs up to now."""
        value, t = self._charged.get(user, (0.0, now))
        total = value * self._decay(now - t) if now >= t else value
        g = self._gpus.get(user)
        if g:
            assert self._t0 is not None
            if self.half_life_s == math.inf:
                total += sum(gp * max(now - s, 0.0) for u, gp, s in self._runs.values() if u == user)
            else:
                running = g - self._weight[user] * self._decay(now - self._t0)
                total += max(running, 0.0) * self.half_life_s / _LN2
        return total

    def rebase(self, now: float) -> None:
        """Re-anchor the running sums at `now` (keeps 2^(age / h) small over long runs)."""
        if self._t0 is None or self.half_life_s == math.inf:
            return
        if (now - self._t0) / self.half_life_s < _REBASE_HALF_LIVES:
            return
        self._t0 = now
        self._weight = {}
        for user, gpus, start_s in self._runs.values():
            self._weight[user] = self._weight.get(user, 0.0) + gpus / self._decay(start_s - now)

    def snapshot(self, now: float) -> dict[str, float]:
        """Every known user's usage at `now` (decayed GPU-seconds): what a restarted clock restores."""
        users = set(self._charged) | set(self._gpus)
        return {u: self.usage(u, now) for u in sorted(users)}

    def charged_snapshot(self, now: float) -> dict[str, float]:
        """The charged part only (running jobs left out: a restarted agent re-adopts those)."""
        return {u: v * self._decay(now - t) for u, (v, t) in sorted(self._charged.items())}


@register_policy
class FairShare(Policy):
    """Least decayed GPU-time first (the user's), then the second policy's order.

    Args:
        half_life_s: the usage half-life (default 7 days; `inf`: no decay).
        then: the policy that orders a user's own jobs (and tied users' jobs); default fifo.
    """

    name = "fairshare"
    description = "fair-share: the user with the least decayed GPU-time first (half-life 7 days), then fifo"
    usage_ranked = True
    params = (
        Param("half_life", "half_life_s", "duration", "usage half-life"),
        Param(
            "then", "then", "name", "the static policy that orders a user's own jobs", choices=policy_names
        ),
    )

    def __init__(self, half_life_s: float = DEFAULT_HALF_LIFE_S, then: Policy | str = "fifo") -> None:
        self.half_life_s = float(half_life_s)
        if not self.half_life_s > 0:
            raise ValueError(f"fairshare half-life must be > 0 s, got {half_life_s}")
        self.then: Policy = build("policy", policy_classes(), then) if isinstance(then, str) else then
        if self.then.preemptive or self.then.usage_ranked:
            raise ValueError(f"fairshare then={self.then.name}: the second policy must be a static one")
        self.needs_duration = self.then.needs_duration

    def key(self, job: Job, seq: int, oracle: bool) -> tuple[float, ...]:
        return self.then.key(job, seq, oracle)


class FairQueue:
    """The waiting queue under fair-share: per-user sorted lists, users in usage order.

    Entries are the Scheduler's `(*key, jid, slot)` tuples (add/remove/len/iter as its SortedList).
    """

    def __init__(self, ledger: UsageLedger) -> None:
        self.ledger = ledger
        self._by_user: dict[str, SortedList] = {}
        self._n = 0
        self._groups: list[list[str]] = []
        self._rank: dict[str, float] = {}
        self._t_rank = -math.inf
        self._dirty = False

    def __len__(self) -> int:
        return self._n

    def copy_with(self, ledger: UsageLedger, remap: Callable[[tuple], tuple]) -> FairQueue:  # type: ignore[type-arg]
        """A copy over `ledger` whose entries are `remap(entry)` (a forked Scheduler's, core/forecast.py)."""
        new = FairQueue(ledger)
        new._by_user = {u: SortedList(map(remap, q)) for u, q in self._by_user.items()}
        new._n, new._groups = self._n, [list(g) for g in self._groups]
        new._rank, new._t_rank, new._dirty = dict(self._rank), self._t_rank, self._dirty
        return new

    def add(self, entry: tuple) -> None:  # type: ignore[type-arg]
        user = entry[-1].job.user
        q = self._by_user.get(user)
        if q is None:
            q = self._by_user[user] = SortedList()
            self._dirty = True  # a user who had no waiting job: place them at the next look
        q.add(entry)
        self._n += 1

    def remove(self, entry: tuple) -> None:  # type: ignore[type-arg]
        user = entry[-1].job.user
        q = self._by_user[user]
        q.remove(entry)
        self._n -= 1
        if not q:
            del self._by_user[user]
            self._dirty = True

    def usage_rank(self) -> dict[str, float]:
        """Each user with waiting jobs and their usage as of the last rank."""
        if self._dirty:
            self._rerank(self._t_rank if self._t_rank > -math.inf else 0.0)
        return dict(self._rank)

    def rerank(self, now: float) -> bool:
        """Rank the users by their usage at `now`; True when the order of waiting jobs changed."""
        self._t_rank = now
        return self._rerank(now)

    def _rerank(self, now: float) -> bool:
        self.ledger.rebase(now)
        usage = {u: self.ledger.usage(u, now) for u in self._by_user}
        groups: list[list[str]] = []
        last = None
        for u in sorted(usage, key=lambda u: (usage[u], u)):
            if groups and usage[u] == last:
                groups[-1].append(u)
            else:
                groups.append([u])
            last = usage[u]
        changed = self._dirty or groups != self._groups
        self._groups, self._rank, self._dirty = groups, usage, False
        return changed

    def __iter__(self) -> Iterator[tuple]:  # type: ignore[type-arg]
        if self._dirty:
            self._rerank(self._t_rank if self._t_rank > -math.inf else 0.0)
        return itertools.chain.from_iterable(self._group_entries())  # C-level per entry

    def _group_entries(self) -> Iterator[Iterable[tuple]]:  # type: ignore[type-arg]
        """Per group of users (equal usage), its entries in order: one list, or a merge of several."""
        for group in list(self._groups):
            lists = [self._by_user[u] for u in group if u in self._by_user]
            yield lists[0] if len(lists) == 1 else heapq.merge(*lists)

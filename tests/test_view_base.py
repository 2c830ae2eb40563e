"""`SchedulerView` is a base class of `Scheduler` (core/view.py): the compiled backfill modes call its
members natively. Every member the base declares must be the scheduler's own (the base's raise)."""

from __future__ import annotations

from gpuplan.cluster import load_cluster
from gpuplan.core.scheduler import Scheduler
from gpuplan.core.view import SchedulerView


def _members() -> list[str]:
    return [n for n in vars(SchedulerView) if not n.startswith("_")]


def test_the_scheduler_overrides_every_member_of_the_view() -> None:
    assert issubclass(Scheduler, SchedulerView)
    assert {"state", "start", "waiting", "identity"} <= set(_members())
    inherited = [n for n in _members() if vars(Scheduler).get(n) is None]
    assert inherited == [], f"Scheduler inherits the base's raising members: {inherited}"


def test_each_member_of_a_scheduler_answers_and_a_fork_is_another_view() -> None:
    s = Scheduler(load_cluster("8xA100-80GB"))
    for name in ("state", "placer", "identity", "waiting_count", "version", "plain_order"):
        getattr(s, name)  # a base member would raise NotImplementedError
    assert list(s.waiting()) == [] and list(s.running()) == []
    fork = s.fork()
    assert isinstance(fork, SchedulerView)
    assert fork.identity is not s.identity and s.identity is s.identity

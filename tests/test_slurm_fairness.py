"""Who gains and who loses (slurm/fairness.py): per user and account, from the planner's expected starts."""

from __future__ import annotations

from gpuplan.slurm.fairness import fairness_lines, fairness_table
from gpuplan.slurm.parse import NodeInfo, QueueJob
from gpuplan.slurm.planner import LiveState, plan_queue

NOW = 1_000_000.0


def _job(jid: str, user: str, account: str, limit_min: int, waited_s: float) -> QueueJob:
    return QueueJob(jid, f"j{jid}", user, "gpu", "PENDING", 60.0 * limit_min, 0.0, 1, 8, 100, 0, "Priority",
                    NOW - waited_s, None, "", account=account)  # fmt: skip


def test_fairness_table_matches_the_plans_own_means_and_puts_losers_first() -> None:
    # alice's long jobs come first in Slurm's order (older); sjf runs bob's short ones first
    jobs = [_job("1", "alice", "physics", 30, 300), _job("2", "alice", "physics", 30, 290),
            _job("3", "bob", "bio", 1, 10), _job("4", "bob", "bio", 2, 5), _job("5", "carol", "bio", 3, 1)]  # fmt: skip
    state = LiveState(
        [NodeInfo("node1", "idle", 8, 0, ("gpu",))], jobs, NOW, {"SchedulerType": "sched/builtin"}
    )
    plan = plan_queue(state, policy="sjf")
    assert plan.order[:2] == ["3", "4"]
    table = fairness_table(plan, jobs)
    users = {r["name"]: r for r in table["by_user"]}
    assert table["by_user"][0]["name"] == "alice"  # the one who loses most, first
    assert users["alice"]["change_s"] > 0 > users["bob"]["change_s"]
    assert users["alice"]["jobs"] == 2 and users["bob"]["jobs"] == 2 and users["carol"]["jobs"] == 1
    # weighted by jobs, the groups' means are the plan's own mean waits, for both orders
    for key, outcome in (("slurm_mean_wait_s", plan.slurm), ("plan_mean_wait_s", plan.planned)):
        for by in ("by_user", "by_account"):
            total = sum(r["jobs"] * r[key] for r in table[by])
            assert abs(total / len(jobs) - outcome.mean_wait_s) < 1e-6, (key, by)
    accounts = {r["name"]: r["jobs"] for r in table["by_account"]}
    assert accounts == {"physics": 2, "bio": 3}
    text = "\n".join(fairness_lines(table))
    assert "by user" in text and "by account" in text and "alice" in text and "+" in text


def test_a_job_that_never_starts_makes_its_groups_mean_never() -> None:
    jobs = [_job("1", "alice", "a", 5, 10), _job("2", "bob", "b", 5, 5)]
    jobs[0].time_limit_s = None  # endless: whatever comes after it never starts
    state = LiveState(
        [NodeInfo("node1", "idle", 8, 0, ("gpu",))], jobs, NOW, {"SchedulerType": "sched/builtin"}
    )
    plan = plan_queue(state, policy="fifo")
    table = fairness_table(plan, jobs)
    rows = {r["name"]: r for r in table["by_user"]}
    assert rows["bob"]["plan_mean_wait_s"] is None and rows["bob"]["change_s"] is None
    assert table["by_user"][-1]["name"] == "bob"  # no change known: last
    assert "never" in "\n".join(fairness_lines(table))

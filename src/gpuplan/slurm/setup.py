"""Whether an order set with `scontrol update` can take effect, from `scontrol show config`.

Facts (Slurm 22.05, ../shared/slurm/NOTES.md section 7): sched/builtin + priority/basic runs jobs by
job id and silently ignores Priority= and Nice=; sched/builtin + priority/multifactor follows them
strictly; sched/backfill follows them but starts lower jobs into holes when their time limit allows.
SiteFactor (the default mode) is a term of priority/multifactor's sum: it needs that plugin.
"""

from __future__ import annotations

__all__ = ["setup_warnings"]


def setup_warnings(config: dict[str, str], mode: str = "priority") -> list[str]:
    """Clear warnings (empty: the order will take effect as planned)."""
    sched = config.get("SchedulerType", "")
    prio = config.get("PriorityType", "")
    out: list[str] = []
    if sched == "sched/builtin" and prio == "priority/basic":
        out.append(
            "the order cannot take effect: SchedulerType=sched/builtin with PriorityType=priority/basic runs "
            "jobs strictly by job id and ignores `scontrol update Priority=`/`Nice=`; set "
            "PriorityType=priority/multifactor (all PriorityWeight*=0 keeps every other job at priority 1) "
            "or SchedulerType=sched/backfill in slurm.conf, then `scontrol reconfigure`"
        )
    elif sched == "sched/backfill":
        out.append(
            "SchedulerType=sched/backfill: Slurm follows the order but may start a later job early when its "
            "--time ends before the first waiting job's expected start (the plan simulates that); use "
            "sched/builtin with priority/multifactor for a strict order"
        )
    if sched and sched not in ("sched/builtin", "sched/backfill"):
        out.append(f"SchedulerType={sched} is unknown to gpuplan: the order may not take effect")
    if prio == "priority/multifactor" and mode == "priority" and _nonzero_weights(config):
        out.append(
            "priority/multifactor with non-zero weights: --mode priority freezes the jobs it sets (Slurm stops "
            "computing their priority: age, job size and fair-share no longer move them, and other jobs' "
            "priorities keep growing and may overtake them) until `gpuplan slurm reset` (hold + release); "
            "the default --mode site-factor keeps every factor live"
        )
    if mode == "site-factor" and prio and prio != "priority/multifactor":
        out.append(
            f"--mode site-factor needs PriorityType=priority/multifactor (the SiteFactor is part of its sum; "
            f"this cluster has {prio}): use --mode priority"
        )
    if mode == "nice" and prio == "priority/basic":
        out.append(
            "--mode nice needs PriorityType=priority/multifactor (priority/basic ignores Nice=); use --mode priority"
        )
    return out


def _nonzero_weights(config: dict[str, str]) -> bool:
    for key in ("PriorityWeightAge", "PriorityWeightFairshare", "PriorityWeightJobSize", "PriorityWeightPartition",
                "PriorityWeightQOS", "PriorityWeightAssoc"):  # fmt: skip
        value = config.get(key, "0").strip()
        if value not in ("", "0", "(null)"):
            return True
    return False

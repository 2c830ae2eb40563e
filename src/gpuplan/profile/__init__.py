"""Audit of a job history: counts, distributions, the profile matrix, the article's classes, the top
users and queues, what the cluster achieved, and a what-if replay (docs/audit.md).

Pure functions over `list[Job]` and an optional `ClusterSpec`; no I/O.
"""

from __future__ import annotations

from gpuplan.profile.achieved import Achieved, IdleSplit, Timeline, achieved
from gpuplan.profile.audit import Audit, audit_jobs, censored_jobs
from gpuplan.profile.classes import (
    ARTICLE_UNKNOWN,
    DURATION_CLASSES,
    GPU_CLASSES,
    MEMORY_CLASSES,
    QUEUE_KEYS,
    ClassShare,
    MemoryBasis,
    ProfileMatrix,
    Ranking,
    article_shares,
    duration_class,
    gpu_class,
    memory_basis,
    memory_class,
    profile_matrix,
    queue_of,
    top_queues,
    top_users,
)
from gpuplan.profile.stats import (
    STATE_KEYS,
    UNKNOWN_STATE,
    Distribution,
    Histogram,
    distribution,
    gpu_hours,
    histogram,
    meta_seconds,
    state_counts,
    state_of,
)
from gpuplan.profile.whatif import BACKFILL, POLICY_ORDER, WhatIf, what_if

__all__ = [
    "ARTICLE_UNKNOWN",
    "BACKFILL",
    "DURATION_CLASSES",
    "GPU_CLASSES",
    "MEMORY_CLASSES",
    "POLICY_ORDER",
    "QUEUE_KEYS",
    "STATE_KEYS",
    "UNKNOWN_STATE",
    "Achieved",
    "Audit",
    "ClassShare",
    "Distribution",
    "Histogram",
    "IdleSplit",
    "MemoryBasis",
    "ProfileMatrix",
    "Ranking",
    "Timeline",
    "WhatIf",
    "achieved",
    "article_shares",
    "audit_jobs",
    "censored_jobs",
    "distribution",
    "duration_class",
    "gpu_class",
    "gpu_hours",
    "histogram",
    "memory_basis",
    "memory_class",
    "meta_seconds",
    "profile_matrix",
    "queue_of",
    "state_counts",
    "state_of",
    "top_queues",
    "top_users",
    "what_if",
]

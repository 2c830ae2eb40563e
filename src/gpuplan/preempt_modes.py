"""How a job may be preempted, read off its `meta` (`Job.preempt_mode`, `Job.checkpointable`): the one
rule, compiled (gpuplan/compiled.py), so a preemptive clock reads it per job without an interpreted call;
model.py's properties call it too. Imports nothing of gpuplan (model.py imports it)."""

from __future__ import annotations

from typing import Any, Final

__all__ = ["DEFAULT_PREEMPT_MODE", "PREEMPT_MODES", "checkpointable_of", "preempt_mode_of"]

PREEMPT_MODES: Final = ("suspend", "checkpoint", "requeue", "never")
DEFAULT_PREEMPT_MODE: Final = "checkpoint"


def preempt_mode_of(meta: dict[str, Any] | None) -> str:
    """`Job.preempt_mode` of a job whose meta is `meta`: `meta["preempt"]` when it names a mode, else
    checkpoint (requeue when `meta["checkpointable"]` is false)."""
    if not meta:
        return DEFAULT_PREEMPT_MODE
    mode = meta.get("preempt")
    if mode in PREEMPT_MODES:
        return str(mode)
    return DEFAULT_PREEMPT_MODE if meta.get("checkpointable", True) is not False else "requeue"


def checkpointable_of(meta: dict[str, Any] | None) -> bool:
    """`Job.checkpointable` of a job whose meta is `meta`: a preempted run resumes from a checkpoint
    unless `meta["checkpointable"]` is false or it is requeued."""
    if not meta:
        return True
    return meta.get("checkpointable", True) is not False and preempt_mode_of(meta) != "requeue"

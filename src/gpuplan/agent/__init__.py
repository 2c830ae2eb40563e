"""The local agent: runs shell-command jobs on this node's GPUs with the core Scheduler (docs/agent.md).

Modules: `paths` (the GPUPLAN_HOME layout, the token), `gpus` (NVML and the fake device set: the only
module that imports pynvml), `store` (the SQLite WAL store and its read functions), `launcher` (process
groups), `protocol` (the Unix-socket protocol), `daemon` (the loop). Importing this package imports none
of them.
"""

__all__: list[str] = []

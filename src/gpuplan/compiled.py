"""Which modules of gpuplan are compiled, and whether this process runs them compiled.

The scheduling core's hot modules (`COMPILED_MODULES`) are compiled with mypyc from the same source
when gpuplan is installed (setup.py; `GPUPLAN_NO_COMPILE=1` at install time skips it). The source stays
the one implementation: a compiled module is that file turned into C, and every module works
interpreted too. At run time the source is used instead of the compiled modules when
`GPUPLAN_PURE=1` is set, or when a compiled module is older than its source file (an edit since the
last build: rebuild with `make venv`); then all of them are used as source, since compiled modules
rely on each other's compiled classes (docs/install.md, "The compiled core").

This module imports nothing of gpuplan: setup.py reads `COMPILED_MODULES` from it at build time.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec
from importlib.util import spec_from_file_location
from pathlib import Path
from types import ModuleType

__all__ = ["COMPILED_MODULES", "compiled_modules", "install_source_finder", "source_reason"]

COMPILED_MODULES = (
    "gpuplan.preempt_modes",
    "gpuplan.core.sortedseq",
    "gpuplan.core.state",
    "gpuplan.core.view",
    "gpuplan.core.shapes",
    "gpuplan.core.booking",
    "gpuplan.core.placement",
    "gpuplan.core.backfill",
    "gpuplan.core.scheduler",
    "gpuplan.core.clock",
    "gpuplan.core.forecast",
    "gpuplan.sim.steps",
    "gpuplan.sim.engine",
    "gpuplan.core.preemptive",
    "gpuplan.core.rankseq",
    "gpuplan.core.dueheap",
    "gpuplan.core.ranks",
    "gpuplan.core.victims",
    "gpuplan.core.preemption",
    "gpuplan.sim.preempt",
    "gpuplan.core.profile",
    "gpuplan.core.count_plan",
    "gpuplan.core.gpu_profile",
)
"""The modules setup.py compiles (the simulator's and the forecast's hot path: every clock's pass,
the placers' and backfill modes' built-ins among them)."""

LIBRARY = "gpuplan_core__mypyc"
"""The shared library the compiled modules load (setup.py's group_name plus mypyc's suffix), beside
the gpuplan package: a copy of the package without it runs the source."""

_ROOT = Path(__file__).resolve().parent.parent  # the directory that holds the gpuplan package


def _files(name: str) -> tuple[Path, list[Path]]:
    base = _ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py"), [base.with_name(base.name + s) for s in EXTENSION_SUFFIXES]


def source_reason() -> str | None:
    """Why this process runs the source of the compiled modules (None: it runs what was built)."""
    if os.environ.get("GPUPLAN_PURE", "") not in ("", "0"):
        return "GPUPLAN_PURE is set"
    any_built = False
    for name in COMPILED_MODULES:
        source, exts = _files(name)
        built = [e for e in exts if e.exists()]
        any_built = any_built or bool(built)
        if built and source.exists() and source.stat().st_mtime > max(e.stat().st_mtime for e in built):
            return f"{source.name} is newer than its compiled module (rebuild: make venv)"
    if any_built and not any(_ROOT.joinpath(LIBRARY + s).exists() for s in EXTENSION_SUFFIXES):
        return f"the compiled core's library {LIBRARY} is not beside the package (rebuild: make venv)"
    return None


class _SourceFinder:
    """Finds the compiled modules' source files, ahead of the import system's extension loader."""

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in COMPILED_MODULES:
            return None
        source, _ = _files(fullname)
        return spec_from_file_location(fullname, source) if source.exists() else None


def install_source_finder() -> str | None:
    """Make imports of the compiled modules load their source when `source_reason` says so (gpuplan's
    __init__ calls it first); returns the reason, or None."""
    reason = source_reason()
    if reason is not None and not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())  # type: ignore[arg-type]
    return reason


def compiled_modules() -> dict[str, bool]:
    """Each module of `COMPILED_MODULES`, imported, and whether it runs compiled in this process."""
    import importlib

    out = {}
    for name in COMPILED_MODULES:
        module = importlib.import_module(name)
        out[name] = not str(getattr(module, "__file__", "")).endswith(".py")
    return out

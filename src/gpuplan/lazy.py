"""A module imported on first use: heavy libraries (numpy) stay out of the start-up of commands that
never touch them (`gpuplan --help`, `gpuplan policies` answer in well under 0.3 s)."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = ["lazy_module"]


class _LazyModule(ModuleType):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        module = self.__dict__.get("_module")
        if module is None:
            module = importlib.import_module(self.__name__)
            self.__dict__.update(module.__dict__)  # later reads are plain attribute lookups
            self.__dict__["_module"] = module
        return getattr(module, attr)


def lazy_module(name: str) -> Any:
    """A stand-in for `import name` that imports it at the first attribute read.

    Use it as `np = lazy_module("numpy")` under `if not TYPE_CHECKING:` (type checkers see the real
    import); after the first read, attributes are read as from the module itself."""
    return _LazyModule(name)

"""gpuplan's build (everything else is in pyproject.toml): the scheduling core's hot modules
(gpuplan/compiled.py's COMPILED_MODULES) compiled with mypyc from the same source, so the simulator
and the forecast run as C. GPUPLAN_NO_COMPILE=1 at build time installs the plain Python source only
(docs/install.md, "The compiled core")."""

from __future__ import annotations

import os
import runpy

from setuptools import setup


def _ext_modules() -> list[object]:
    if os.environ.get("GPUPLAN_NO_COMPILE", "") not in ("", "0"):
        return []
    from mypyc.build import mypycify

    names = runpy.run_path(os.path.join("src", "gpuplan", "compiled.py"))["COMPILED_MODULES"]
    paths = [os.path.join("src", *name.split(".")) + ".py" for name in names]
    # pip builds in an isolated env without the runtime dependencies (numpy...): their types are Any
    # there, and errors in modules the compiled ones import are `make lint`'s business, not the build's
    return mypycify(["--ignore-missing-imports", "--follow-imports=silent", *paths], opt_level="3", group_name="gpuplan_core")


setup(ext_modules=_ext_modules())

"""gpuplan's build (everything else is in pyproject.toml): the scheduling core's hot modules
(gpuplan/compiled.py's COMPILED_MODULES) compiled with mypyc from the same source, so the simulator
and the forecast run as C. GPUPLAN_NO_COMPILE=1 at build time installs the plain Python source only
(docs/install.md, "The compiled core")."""

from __future__ import annotations

import os
import runpy
import sys

from setuptools import setup


def _ext_modules() -> list[object]:
    if os.environ.get("GPUPLAN_NO_COMPILE", "") not in ("", "0"):
        return []
    from mypyc.build import mypycify

    names = runpy.run_path(os.path.join("src", "gpuplan", "compiled.py"))["COMPILED_MODULES"]
    paths = [os.path.join("src", *name.split(".")) + ".py" for name in names]
    # pip builds in an isolated env without the runtime dependencies (numpy...): their types are Any
    # there, and errors in modules the compiled ones import are `make lint`'s business, not the build's
    # one group (one library, gpuplan_core__mypyc) built as a separate compilation: then mypyc does not
    # assume it saw every subclass of a compiled class. With whole-program assumptions it checks a value
    # typed by a compiled Python class (the seams Placer and Backfill and their built-ins, which are
    # `native_class=False`) against the subclasses it compiled (`Py_TYPE(x) == A || ...`), refusing
    # fgd's placer, a plugin's or a test double ("gpuplan.core.placement.Placer object expected");
    # `allow_interpreted_subclasses` is ignored on a Python class, so no class-level mark lifts it
    group = [(paths, "gpuplan_core")]
    args = ["--ignore-missing-imports", "--follow-imports=silent", *paths]
    exts = mypycify(args, opt_level="3", separate=group)
    if sys.platform.startswith("linux"):  # (GCC or Clang, ELF)
        # a shared library built with -fPIC calls its own global functions through the PLT, may not
        # inline them (another library could interpose them) and calls libpython through the PLT too:
        # the compiled core's functions call each other a great deal (about 5 % of a simulation)
        for ext in exts:
            ext.extra_compile_args = [*ext.extra_compile_args, "-fno-semantic-interposition", "-fno-plt"]
    return exts


setup(ext_modules=_ext_modules())

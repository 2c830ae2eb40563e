"""`gpuplan --help` and `gpuplan policies` stay quick: they import no numpy, pyarrow, ortools or Dask
(bench/run.py `startup` times them; a unit test checks what they import, not seconds)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("numpy", "pyarrow", "ortools", "distributed", "dask", "sklearn", "plotly", "fastapi")


def _imported_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_help_and_policies_import_nothing_heavy() -> None:
    code = (
        "from typer.testing import CliRunner\nfrom gpuplan.cli import app\n"
        "r = CliRunner()\nassert r.invoke(app, ['--help']).exit_code == 0\n"
        "assert r.invoke(app, ['policies']).exit_code == 0\nassert r.invoke(app, ['policies', '--json']).exit_code == 0"
    )
    assert _imported_after(code) == set()


def test_the_lazy_module_imports_on_first_use() -> None:
    code = "from gpuplan.core import fragmentation\nfragmentation.np.zeros(1)"
    assert "numpy" in _imported_after(code)
    assert _imported_after("from gpuplan.core import fragmentation") == set()


def test_a_progress_bar_imports_rich_only_when_it_is_drawn() -> None:
    probe = (
        "import sys\nfrom gpuplan.progress import LazyProgress\n"
        "with LazyProgress(10, 'quiet', enabled=False) as p:\n    p.set(5)\n"
        "before = 'rich.progress' in sys.modules\n"
        "with LazyProgress(10, 'drawn', delay_s=0.0) as p:\n    p.set(5)\n    drawn = p._bar is not None\n"
        "print(before, drawn, 'rich.progress' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "True"]

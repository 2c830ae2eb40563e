"""Seams a newcomer can see: no module imports another module's private names or private modules, and
no import cycle among gpuplan's modules (module-level, function-level and TYPE_CHECKING imports alike).

The private-name rule is the one the before-stop hook counts (../shared/hooks/before-stop): `from M
import _x` from any other module, and an import of a private module (`_name` in its dotted path) from
outside the package that holds it.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Crossings that another helper's open work removes, each with its owner; the lead empties this list
# at the end. No other exception: a new crossing fails the test, and so does an entry that is gone.
ALLOWED_CROSSINGS: set[str] = set()


def _modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module under `root` (a package is its __init__)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _target(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _imports(module: str, path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, names) of every import in a file, wherever it stands."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            out.append((node.lineno, _target(module, path, node), [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name, []) for a in node.names)
    return out


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_crossings(root: Path) -> list[str]:
    """Every import of another module's underscore name, and of a private module from outside its
    package, as "file: what from where" (file relative to `root`)."""
    top = {m.split(".")[0] for m in _modules(root)}
    bad = []
    for module, path in _modules(root).items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        where = path.relative_to(root).as_posix()
        for _line, target, names in _imports(module, path):
            parts = target.split(".")
            if parts[0] not in top:
                continue
            cut = next((i for i, p in enumerate(parts) if _is_private(p)), None)
            if cut is not None and ".".join(parts[:cut]) != package:
                bad.append(f"{where}: private module {target}")
            bad += [f"{where}: {n} from {target}" for n in names if _is_private(n)]
    return bad


def _graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules it imports (a `from pkg import sub` names the submodule, not pkg)."""
    mods = _modules(root)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        for _line, target, names in _imports(module, path):
            hits = [f"{target}.{n}" if f"{target}.{n}" in mods else target for n in names] or [target]
            graph[module] |= {h for h in hits if h in mods and h != module}
    return graph


def import_cycles(root: Path) -> list[list[str]]:
    """One cycle (as a path a -> ... -> a) per strongly connected group of modules that import each other."""
    graph = _graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; gpuplan's import depth is far below the recursion limit
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_in(graph, set(g)) for g in groups]


def _cycle_in(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest cycle through the group's first module, by breadth-first search inside the group."""
    start = min(group)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & group):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    return sorted(group)  # unreachable: a strongly connected group has a cycle through each member


def test_no_module_imports_another_modules_private_names() -> None:
    found = private_crossings(SRC)
    stale = ALLOWED_CROSSINGS - set(found)
    assert not stale, f"allowed crossings that are gone: remove them from ALLOWED_CROSSINGS: {sorted(stale)}"
    new = [c for c in found if c not in ALLOWED_CROSSINGS]
    assert not new, (
        f"{len(new)} import(s) of another module's private name or private module: make the name public "
        f"where it is shared, or move it home: {new}"
    )


def test_no_import_cycle_among_gpuplan_modules() -> None:
    cycles = import_cycles(SRC)
    assert not cycles, "import cycles (move the shared piece where both can import it): " + "; ".join(
        " -> ".join(c) for c in cycles
    )


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checks_catch_planted_crossings_and_cycles(tmp_path: Path) -> None:
    """The checkers on a small planted package: each rule fires where it should and only there."""
    root = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a/__init__.py": "",
            "pkg/a/_impl.py": "X = 1\n_y = 2\n",
            "pkg/a/user.py": "from pkg.a._impl import X\n",  # a package's own private module: fine
            "pkg/a/user2.py": "from ._impl import _y\n",  # an underscore name, even inside the package
            "pkg/b.py": "def f():\n    from pkg.a._impl import X\n",  # another package's private module
            "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import d\n",
            "pkg/d.py": "def g():\n    from pkg.e import h\n",
            "pkg/e.py": "import pkg.c\nh = 1\n",
            "pkg/f.py": "from pkg import a\nfrom pkg.a import user\n",  # no cycle: a package, a submodule
        },
    )
    assert sorted(private_crossings(root)) == [
        "pkg/a/user2.py: _y from pkg.a._impl",
        "pkg/b.py: private module pkg.a._impl",
    ]
    assert import_cycles(root) == [["pkg.c", "pkg.d", "pkg.e", "pkg.c"]]

"""Docs drift: every command and option of `gpuplan --help` is documented, and every documented flag exists.

Both directions are checked against the Click command tree Typer builds, so a new command, a renamed
option or a stale README synopsis fails here with the exact command, option and file to fix.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer.main

from gpuplan.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_HELP = {"--help"}
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_SPAN = re.compile(r"`([^`\n]+)`")
_INVOCATION = re.compile(r"gpuplan((?:\s+[a-z][a-z0-9-]*)+)")
_SEPARATORS = re.compile(r"&&|\|\||[|;]")
_FLAG = re.compile(r"(?<![\w-])--[a-zA-Z][\w-]*")


def _tree() -> dict[str, Any]:
    """'simulate' -> its Click command, 'predict eval' -> ..., for every (sub)command (groups have `.commands`)."""
    root = typer.main.get_command(app)
    out: dict[str, Any] = {}

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        if path:
            out[" ".join(path)] = cmd
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                if not sub.hidden:
                    walk(sub, (*path, name))

    walk(root, ())
    return out


def _options(cmd: Any) -> set[str]:
    """Every long option name of `cmd`, including the off switch of `--x/--no-x` pairs."""
    names: set[str] = set()
    for p in cmd.params:
        if p.param_type_name == "option" and not p.hidden:
            names |= {n for n in (*p.opts, *p.secondary_opts) if n.startswith("--")}
    return names


def _docs() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in DOC_FILES}


def _snippets(text: str) -> Iterator[str]:
    """Code the docs show: each line of a fenced block, and each inline `code span` (also inside blocks)."""
    for block in _FENCE.findall(text):
        for line in block.splitlines()[1:-1]:
            yield line
            yield from _SPAN.findall(line)
    yield from _SPAN.findall(_FENCE.sub("", text))


def _invocations(snippet: str, tree: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(command path, or the unknown first word, the flags given, the command text) per `gpuplan ...`
    command in a snippet; only commands the snippet starts (after a `$ ` prompt, `&&`, `|` or `;`)."""
    for part in _SEPARATORS.split(snippet):
        shown = part.split("#")[0].strip().removeprefix("$ ").strip()
        m = _INVOCATION.match(shown)
        if m is None:
            continue
        words = m[1].split()
        path = next(
            (" ".join(words[:k]) for k in range(len(words), 0, -1) if " ".join(words[:k]) in tree), ""
        )
        yield path or words[0], " ".join(_FLAG.findall(shown)), shown


def _undocumented(tree: dict[str, Any], docs: dict[str, str]) -> list[str]:
    """One line per command absent from every doc, or option absent from the docs naming its command."""
    missing: list[str] = []
    for path, cmd in sorted(tree.items()):
        where = [name for name, text in docs.items() if f"gpuplan {path}" in text]
        if not where:
            missing.append(f"command `gpuplan {path}` appears in no doc: add it to README.md's command table")
            continue
        for opt in sorted(_options(cmd) - _HELP):
            if not any(re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", docs[w]) for w in where):
                missing.append(
                    f"option `gpuplan {path} {opt}` appears in none of the docs that mention "
                    f"`gpuplan {path}` ({', '.join(where)}): document it there"
                )
    return missing


def _stale(tree: dict[str, Any], docs: dict[str, str]) -> tuple[int, list[str]]:
    """(commands checked, one line per documented command or flag that does not exist)."""
    wrong: list[str] = []
    checked = 0
    for name, text in docs.items():
        for snippet in _snippets(text):
            for path, flags, shown in _invocations(snippet, tree):
                checked += 1
                if path not in tree:
                    wrong.append(
                        f"{name}: `{shown}`: no command `gpuplan {path}` (commands: {', '.join(sorted(tree))})"
                    )
                    continue
                valid = _options(tree[path]) | _HELP
                wrong += [
                    f"{name}: `{shown}`: `gpuplan {path}` has no option {flag} (it has: {', '.join(sorted(valid))})"
                    for flag in flags.split()
                    if flag not in valid
                ]
    return checked, wrong


def test_every_command_and_option_is_documented() -> None:
    missing = _undocumented(_tree(), _docs())
    assert not missing, "undocumented in README.md/docs:\n  " + "\n  ".join(missing)


def test_every_documented_flag_exists() -> None:
    checked, wrong = _stale(_tree(), _docs())
    assert checked >= 20, f"only {checked} `gpuplan ...` commands found in the docs: is the parser broken?"
    assert not wrong, "docs name flags or commands that do not exist:\n  " + "\n  ".join(wrong)


def test_the_checker_names_the_missing_option_and_the_stale_flag() -> None:
    """On a made-up doc, both checks name the exact command, option and file."""
    tree = {k: v for k, v in _tree().items() if k in ("clusters", "policies")}
    docs = {
        "README.md": "`gpuplan clusters [--json]`",
        "docs/x.md": "```\n$ gpuplan policies --jsn\ngpuplan agent run\n```\n",
    }
    assert _undocumented(tree, docs) == [
        "option `gpuplan policies --json` appears in none of the docs that mention `gpuplan policies` "
        "(docs/x.md): document it there"
    ]
    checked, wrong = _stale(tree, docs)
    assert checked == 3
    assert wrong[0] == (
        "docs/x.md: `gpuplan policies --jsn`: `gpuplan policies` has no option --jsn (it has: --help, --json)"
    )
    assert wrong[1].startswith("docs/x.md: `gpuplan agent run`: no command `gpuplan agent`")
    del docs["README.md"]
    assert (
        _undocumented(tree, docs)[0]
        == "command `gpuplan clusters` appears in no doc: add it to README.md's command table"
    )


def test_the_parser_finds_commands_flags_and_snippets() -> None:
    tree = _tree()
    found = list(_invocations("gpuplan simulate t.csv --policy all --no-such-flag", tree))
    assert found == [
        ("simulate", "--policy --no-such-flag", "gpuplan simulate t.csv --policy all --no-such-flag")
    ]
    assert "--no-such-flag" not in _options(tree["simulate"])
    assert "--policy" in _options(tree["simulate"])
    nested = list(_invocations("gpuplan predict eval H --chunks 5", tree))
    assert nested[0][0] == "predict eval"
    assert list(_snippets("a `gpuplan audit X --json` b\n```\ngpuplan plan T --out p.json\n```\n")) == [
        "gpuplan plan T --out p.json",
        "gpuplan audit X --json",
    ]

"""The rules `promtool check metrics` applies (client_golang's promlint), written out so every run of
the suite checks the real /metrics output even where promtool is not installed, plus gpuplan's own
rule of units in names. A plain module (test files import it by this name).

DCGM_FI_* series are the documented exception: they keep dcgm-exporter's names and labels (`UUID`,
`modelName`, `Hostname`), which promtool reports as camelCase (exit 3); only those may.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["DCGM_LABELS", "lint_problems", "promtool_problems"]

DCGM_LABELS = {"gpu", "UUID", "modelName", "Hostname"}
_SNAKE = re.compile(r"^[a-z_][a-z0-9_]*$")
_CAMEL = re.compile(r"[a-z][A-Z]")  # promlint's camelCase test
_BASE_UNITS = ("amperes", "bytes", "celsius", "grams", "joules", "kelvin", "meters", "metres", "seconds", "volts")  # fmt: skip
_NON_BASE = {"minutes": "seconds", "hours": "seconds", "days": "seconds", "weeks": "seconds", "kelvins": "kelvin",
             "fahrenheit": "celsius", "rankine": "celsius", "inches": "meters", "yards": "meters",
             "miles": "meters", "bits": "bytes", "calories": "joules", "pounds": "grams", "ounces": "grams"}  # fmt: skip
_PREFIXES = ("pico", "nano", "micro", "milli", "centi", "deci", "deca", "hecto", "kilo", "kibi", "mega",
             "mibi", "giga", "gibi", "tera", "tebi", "peta", "pebi")  # fmt: skip
_ABBREVIATIONS = {"s", "ms", "us", "ns", "sec", "b", "kb", "mb", "gb", "tb", "pb", "m", "h", "d"}
# gpuplan's rule: a quantity says its unit as the last word (MiB as DCGM reports memory; % as DCGM)
_UNIT_OF_WORD = {"memory": ("mib", "bytes"), "util": ("percent", "ratio"), "wait": ("seconds",),
                 "duration": ("seconds",), "time": ("seconds",), "power": ("watts",), "temp": ("celsius",)}  # fmt: skip


def lint_problems(text: str) -> list[str]:
    """Every rule broken by the exposition `text`, one line each ("" names none)."""
    problems: list[str] = []
    seen: set[str] = set()
    for fam in text_string_to_metric_families(text):
        name = fam.name + ("_total" if fam.type == "counter" else "")
        if name in seen:
            problems.append(f"{name}: metric family exposed twice")
        seen.add(name)
        problems += [f"{name}: {p}" for p in _family_problems(name, fam.type, fam.documentation, fam.samples)]
    return problems


def _family_problems(name: str, kind: str, doc: str, samples: list) -> list[str]:  # type: ignore[type-arg]
    out = []
    if not doc.strip():
        out.append("no help text")
    if kind == "unknown":
        out.append("no TYPE line")
    if kind == "counter" and not name.endswith("_total"):
        out.append("counter metrics should have '_total' suffix")
    if kind != "counter" and name.endswith("_total"):
        out.append("non-counter metrics should not have '_total' suffix")
    if ":" in name:
        out.append("metric names should not contain ':' (recording rules only)")
    labels = {k for s in samples for k in s.labels}
    if kind != "histogram" and "le" in labels:
        out.append("non-histogram metrics should not have 'le' label")
    if kind != "summary" and "quantile" in labels:
        out.append("non-summary metrics should not have 'quantile' label")
    if name.startswith("DCGM_FI_"):  # dcgm-exporter's names, kept on purpose (module docstring)
        if labels - DCGM_LABELS:
            out.append(f"labels {sorted(labels - DCGM_LABELS)} are not dcgm-exporter's")
        return out
    out += _name_problems(name)
    out += [f"label {k!r} should be snake_case" for k in sorted(labels) if not _SNAKE.match(k)]
    return out


def _name_problems(name: str) -> list[str]:
    out = []
    if not _SNAKE.match(name) or _CAMEL.search(name):
        out.append("metric names should be written in 'snake_case' not 'camelCase'")
    words = name.split("_")
    if _ABBREVIATIONS & set(words):
        out.append(f"metric names should not contain abbreviated units {sorted(_ABBREVIATIONS & set(words))}")
    for unit in _BASE_UNITS:
        out += [f"use base unit {unit!r} instead of {p + unit!r}" for p in _PREFIXES if p + unit in name]
    out += [f"use base unit {base!r} instead of {w!r}" for w, base in _NON_BASE.items() if w in words]
    for word, units in _UNIT_OF_WORD.items():
        if word in words and words[-1] not in units and not name.endswith(("_bucket", "_count", "_sum")):
            out.append(f"a {word} series should end in its unit ({' or '.join(units)})")
    return out


def promtool_problems(text: str) -> list[str] | None:
    """`promtool check metrics`'s complaints on `text`; None where promtool is not installed (a
    failure under CI=true, where .ci/run installs Debian's prometheus package)."""
    exe = shutil.which("promtool")
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing under CI=true (.ci/run installs Debian's prometheus package)")
        return None
    proc = subprocess.run([exe, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert (proc.returncode == 0) == (not lines), (proc.returncode, lines)
    return lines

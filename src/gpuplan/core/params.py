"""Parameters of registered seams: `NAME[:KEY=VALUE[,KEY=VALUE...]]` specs, parsed once, typed, checked.

A policy, backfill mode or placer class declares what it takes in `params` (one `Param` each: the key
written in a spec, the constructor keyword it becomes, its kind and what it means); the constructor's
own default is the parameter's default. `build` turns a spec such as `las:quantum=60`,
`tiresias:threshold=1h/10h,promote=4` or `conservative:depth=100` into that constructor call; an
unknown name, an unknown key, a key given twice or a bad value is a `SpecError` that lists what is
valid. An object's `spec` is the canonical text of what it was built with (the parameters that differ
from their defaults), so `build(kind, classes, obj.spec)` makes the same object again.

Kinds (a unit suffix is s, m, h or d; a bare number is seconds):
  duration   seconds > 0 (`90`, `15m`, `7d`)
  gpu_time   GPU-seconds > 0 (`60`, `2h` = 7200 GPU-seconds)
  gpu_times  one or more GPU-times, ascending, separated by `/` (`1h/10h`)
  number     a number >= 0
  count      a whole number >= 1
  name       one of `choices()` (e.g. a static policy's name)
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from gpuplan.errors import GpuplanError, UnknownNameError

__all__ = [
    "KINDS",
    "Configurable",
    "Param",
    "SpecError",
    "build",
    "param_default",
    "params_help",
    "parse_spec",
    "register_in",
    "spec_class",
    "split_specs",
]

_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([smhd]?)\s*$")

KINDS: dict[str, str] = {
    "duration": "seconds > 0, or with a unit: 90s, 15m, 2h, 7d",
    "gpu_time": "GPU-seconds > 0, or with a unit: 60, 15m, 2h",
    "gpu_times": "GPU-times > 0, ascending, separated by '/': 1h/10h",
    "number": "a number >= 0",
    "count": "a whole number >= 1",
    "name": "a name",
}


class SpecError(GpuplanError):
    """A seam spec that cannot be built: unknown parameter, parameter given twice, or a bad value."""


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter a seam class takes.

    Attributes:
        key: what a spec writes (`quantum` in `las:quantum=60`).
        arg: the constructor keyword it becomes, with its unit (`quantum_gpu_s`); the object keeps the
            value under the same attribute name (how `spec` reads it back).
        kind: one of `KINDS`.
        doc: what it means, one short line.
        choices: for kind `name`: the valid names, asked when a spec is parsed.
    """

    key: str
    arg: str
    kind: str
    doc: str
    choices: Callable[[], list[str]] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"parameter {self.key!r}: unknown kind {self.kind!r}; kinds: {', '.join(KINDS)}")

    def parse(self, text: str) -> object:
        """The typed value of `text`. Raises ValueError saying what is expected."""
        if self.kind in ("duration", "gpu_time"):
            return _quantity(text)
        if self.kind == "gpu_times":
            values = tuple(_quantity(t) for t in text.split("/"))
            if list(values) != sorted(set(values)):
                raise ValueError("the values must be ascending and distinct")
            return values
        if self.kind == "count":
            if not re.fullmatch(r"\s*[0-9]+\s*", text) or int(text) < 1:
                raise ValueError("")
            return int(text)
        if self.kind == "number":
            value = float(text)
            if not math.isfinite(value) or value < 0:
                raise ValueError("")
            return value
        return self._name(text.strip())

    def check(self, value: object) -> object:
        """`value` (already typed, e.g. from a CLI option) checked as `parse` checks text."""
        if self.kind == "gpu_times":
            values = (value,) if isinstance(value, int | float) else value
            return self.parse("/".join(_num(float(v)) for v in values))  # type: ignore[attr-defined]
        if self.kind == "name":
            return self._name(str(value))
        return self.parse(_num(value) if isinstance(value, float) else str(value))

    def expected(self) -> str:
        if self.kind == "name" and self.choices is not None:
            return "one of " + ", ".join(self.choices())
        return KINDS[self.kind]

    def format(self, value: object) -> str:
        """The spec text of a typed value (parses back to the same value)."""
        if self.kind in ("duration", "gpu_time"):
            return _format_quantity(float(value))  # type: ignore[arg-type]
        if self.kind == "gpu_times":
            return "/".join(_format_quantity(float(v)) for v in value)  # type: ignore[attr-defined]
        if self.kind == "number":
            return _num(float(value))  # type: ignore[arg-type]
        return str(value)

    def _name(self, text: str) -> str:
        if self.choices is not None and text not in self.choices():
            raise ValueError("")
        return text


def _quantity(text: str) -> float:
    m = _QUANTITY.match(text)
    if m is None:
        raise ValueError("")
    value = float(m.group(1)) * _UNITS_S[m.group(2) or "s"]
    if not math.isfinite(value) or value <= 0:
        raise ValueError("")
    return value


def _format_quantity(value: float) -> str:
    for unit in ("d", "h"):
        n = value / _UNITS_S[unit]
        if n >= 1 and n == int(n):
            return f"{int(n)}{unit}"
    return _num(value)


def _num(value: float) -> str:
    """The shortest text that reads back as `value` (`60`, `0.1`)."""
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


class Configurable:
    """What a registered seam class shares: its `name`, its `params` and the `spec` it was built with."""

    name: str = ""
    params: ClassVar[tuple[Param, ...]] = ()

    @property
    def spec(self) -> str:
        """`name`, then the parameters that differ from their defaults: `las:quantum=60`."""
        parts = []
        for p in type(self).params:
            value = getattr(self, p.arg)
            if isinstance(value, Configurable):  # a policy given by its spec (fairshare's `then`)
                value = value.spec
            if value != param_default(type(self), p):
                parts.append(f"{p.key}={p.format(value)}")
        return f"{self.name}:{','.join(parts)}" if parts else self.name


_C = TypeVar("_C", bound=Configurable)


def register_in(registry: dict[str, type[_C]], cls: type[_C]) -> type[_C]:
    """Add a seam class to its registry under its `name` (what each seam's `register_*` does; here, in
    an interpreted module, because a compiled module may not read an instance field off a class)."""
    registry[cls.name] = cls
    return cls


def param_default(cls: type, p: Param) -> object:
    """The default of a parameter: its constructor's (the nearest class in the MRO whose constructor
    takes it, so a subclass with a constructor of its own keeps its base's parameters)."""
    default: Any = None
    for k in cls.__mro__:
        if "__init__" not in vars(k):
            continue
        try:
            parameters = inspect.signature(k).parameters
        except ValueError:  # a compiled constructor (mypyc) shows no signature: the value it sets
            default = getattr(k(), p.arg)
            break
        if p.arg in parameters:
            default = parameters[p.arg].default
            break
    return tuple(default) if p.kind == "gpu_times" else default


def params_help(cls: type[Configurable]) -> list[dict[str, Any]]:
    """Each parameter of a class: key, kind, what it expects, default (as spec text) and meaning."""
    return [
        {
            "key": p.key,
            "kind": p.kind,
            "expected": p.expected(),
            "default": p.format(param_default(cls, p)),
            "description": p.doc,
        }
        for p in cls.params
    ]


def _valid(kind: str, cls: type[Configurable]) -> str:
    if not cls.params:
        return f"{kind} {cls.name!r} takes no parameters"
    listed = "; ".join(
        f"{p.key} ({p.expected()}; default {p.format(param_default(cls, p))})" for p in cls.params
    )
    return f"parameters of {kind} {cls.name!r}: {listed}"


def parse_spec(spec: str) -> tuple[str, list[tuple[str, str]]]:
    """`NAME[:KEY=VALUE,...]` -> (name, [(key, raw value), ...]), in the order written.

    Raises:
        SpecError: a parameter without `=`, or an empty key.
    """
    name, _, rest = spec.partition(":")
    pairs = []
    for item in rest.split(",") if rest.strip() else []:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise SpecError(f"{spec!r}: {item.strip()!r} is not KEY=VALUE (write NAME:KEY=VALUE,KEY=VALUE)")
        pairs.append((key.strip(), value.strip()))
    return name.strip(), pairs


def spec_class(kind: str, classes: Mapping[str, type[Any]], spec: str) -> type[Any]:
    """The registered class a spec names. Raises UnknownNameError listing the registered names."""
    name = parse_spec(spec)[0]
    try:
        return classes[name]
    except KeyError:
        raise UnknownNameError(kind, name, list(classes)) from None


def build(kind: str, classes: Mapping[str, type[Any]], spec: str, **overrides: object) -> Any:
    """The object a spec describes: its class called with its typed, checked parameters.

    `overrides` are typed values by key (a CLI option that maps to a parameter, e.g. `--quantum-gpu-s`
    to las's `quantum`), checked like the spec's own.

    Raises:
        UnknownNameError: no class of that name (the message lists them).
        SpecError: an unknown parameter, one given twice (also in the spec and as an override), or a
            bad value; the message lists the class's parameters with what each expects.
    """
    cls = spec_class(kind, classes, spec)
    by_key = {p.key: p for p in cls.params}
    kwargs: dict[str, object] = {}
    given = [(k, v, True) for k, v in parse_spec(spec)[1]] + [(k, v, False) for k, v in overrides.items()]
    for key, raw, from_text in given:
        p = by_key.get(key)
        if p is None:
            raise SpecError(f"{kind} {spec!r}: unknown parameter {key!r}; {_valid(kind, cls)}")
        if p.arg in kwargs:
            twice = "is given twice" if from_text else "is set both in the spec and by an option"
            raise SpecError(f"{kind} {spec!r}: parameter {key!r} {twice}")
        try:
            kwargs[p.arg] = p.parse(raw) if from_text else p.check(raw)  # type: ignore[arg-type]
        except (ValueError, TypeError) as e:
            why = f" ({e})" if str(e) else ""
            raise SpecError(
                f"{kind} {spec!r}: {key}={raw!s} is not valid{why}: expected {p.expected()}"
            ) from None
    return cls(**kwargs)


def split_specs(text: str) -> list[str]:
    """A comma-separated list of specs: `las:quantum=60,tiresias,fifo` -> 3 specs. An item `KEY=VALUE`
    (no `:` before its `=`) continues the spec before it: `fairshare:half_life=7d,then=sjf` is one."""
    specs: list[str] = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        eq, colon = item.find("="), item.find(":")
        if specs and eq >= 0 and (colon < 0 or colon > eq):
            specs[-1] += "," + item
        else:
            specs.append(item)
    return specs

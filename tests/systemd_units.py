"""The systemd units in contrib/systemd, parsed as systemd reads them (keys case-sensitive)."""

from __future__ import annotations

import configparser
from pathlib import Path

UNITS = Path(__file__).resolve().parents[1] / "contrib" / "systemd"


def service_section(name: str) -> configparser.SectionProxy:
    """The [Service] section of unit `name`, after checking it has [Unit], [Service] and [Install]."""
    cfg = configparser.ConfigParser(strict=False, interpolation=None)
    cfg.optionxform = str  # type: ignore[assignment,method-assign]
    cfg.read_string((UNITS / name).read_text())
    assert {"Unit", "Service", "Install"} <= set(cfg.sections()), name
    return cfg["Service"]

"""Fixtures shared by every test directory: the session browser of tests/browser_support.py (one
headless Chromium for tests/web and tests/slurm alike)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from browser_support import artifacts, base_url, browser_type_launch_args, watch

__all__ = ["artifacts", "base_url", "browser_type_launch_args", "watch"]

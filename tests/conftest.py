"""Fixtures shared by every test directory: the session browser of tests/browser_support.py (one
headless Chromium for tests/web and tests/slurm alike), and a GPU lock fallback folder of the test
run's own (agent/gpulock.py), so agents of the tests never take the machine's /tmp locks."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from browser_support import artifacts, base_url, browser_type_launch_args, watch

__all__ = ["artifacts", "base_url", "browser_type_launch_args", "watch"]


_LOCK_FALLBACK: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("GPUPLAN_LOCK_FALLBACK_DIR"):
        folder = tempfile.mkdtemp(prefix="gpuplan-test-locks-")
        os.chmod(folder, 0o1777)  # as /tmp: the throw-away users' agents take their locks there too
        os.environ["GPUPLAN_LOCK_FALLBACK_DIR"] = folder
        _LOCK_FALLBACK.append(folder)


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _LOCK_FALLBACK:
        shutil.rmtree(folder, ignore_errors=True)

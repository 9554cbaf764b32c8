"""The habits are checked, not hoped for: ruff (lint, import order, every noqa still needed) and mypy
(every type: ignore still needed) pass on the whole tree with the configuration in pyproject.toml."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from conftest import skip_or_fail

ROOT = Path(__file__).resolve().parents[1]


def _tool(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        skip_or_fail(f"{module} is not installed: pip install '.[test]'")


def test_ruff_is_clean() -> None:
    _tool("ruff")
    p = subprocess.run([sys.executable, "-m", "ruff", "check", "ssptk", "tests", "benchmarks"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


def test_mypy_is_clean(tmp_path: Path) -> None:
    _tool("mypy")
    p = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr

"""Lint and types in the suite (issue 53): `ruff check tuitrain` and `mypy` (its files and settings:
pyproject.toml's [tool.ruff] and [tool.mypy]) must find nothing; skipped where they are not installed.

mypy keeps its cache in ~/.cache/tuitrain/mypy (pyproject's [tool.mypy] cache_dir), shared by every clone:
about 35 CPU seconds the first time on a machine (22 of them torch's own modules), a few after that."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing_in_the_package():
    pytest.importorskip("ruff")
    done = _run("ruff", "check", "--no-fix", "--output-format", "concise", "tuitrain")
    assert done.returncode == 0, f"ruff check tuitrain:\n{done.stdout}{done.stderr}"


def test_the_tree_is_formatted():
    pytest.importorskip("ruff")
    done = _run("ruff", "format", "--check", "tuitrain", "tests", "benchmarks", "demo", "docs", ".ci")
    assert done.returncode == 0, f"ruff format --check (run `ruff format` to fix):\n{done.stdout}{done.stderr}"


def test_mypy_finds_nothing_in_the_package():
    pytest.importorskip("mypy")
    done = _run("mypy", "--no-error-summary", "--no-pretty")
    assert done.returncode == 0, f"mypy (files: pyproject.toml's [tool.mypy]):\n{done.stdout}{done.stderr}"

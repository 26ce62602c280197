"""The core never imports the dashboard: importing it must not load textual (nor, for --help, torch); and
`import tuitrain` with its entry points loads no framework (Lightning, transformers)."""

import subprocess
import sys
from pathlib import Path

import pytest


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


@pytest.fixture(scope="module")
def entry_points() -> set[str]:
    """The modules a fresh Python holds after importing tuitrain's entry points: the package, its Learner and
    Monitor, the CLI, the runner, the sinks, the config. One process for the checks below (a fresh Python
    that imports torch costs ~3 CPU s); each check holds for any part of these imports as it does for all."""
    return _modules_after(
        "import tuitrain, tuitrain.cli, tuitrain.core.learner, tuitrain.run.monitor, tuitrain.run.runner, "
        "tuitrain.sinks, tuitrain.config\nfrom tuitrain import Learner, Monitor"
    )


def test_core_sinks_runner_import_without_textual(entry_points):
    assert "torch" in entry_points and "tuitrain.core.learner" in entry_points  # the learner really was imported
    assert not any(m == "textual" or m.startswith("textual.") for m in entry_points)


def test_tuitrain_never_imports_a_framework(entry_points):
    """`import tuitrain` (and its Monitor, Learner and CLI) loads neither Lightning nor transformers:
    only `tuitrain.integrations.*`, which the user imports, does."""
    assert "tuitrain.run.monitor" in entry_points and "tuitrain.cli" in entry_points
    frameworks = ("lightning", "pytorch_lightning", "transformers", "accelerate")
    assert sorted(m for m in frameworks if m in entry_points) == []


def test_help_imports_neither_torch_nor_textual():
    mods = _modules_after(
        "import sys\nsys.argv=['tuitrain','--help']\nimport tuitrain.cli\n"
        "try:\n    tuitrain.cli.main(['--help'])\nexcept SystemExit:\n    pass"
    )
    assert "tuitrain.cli" in mods
    assert "torch" not in mods and "textual" not in mods


def test_the_cancel_exceptions_are_one_set_wherever_they_are_imported_from():
    import tuitrain
    from tuitrain.core import state

    for name in ("CancelStep", "CancelEpoch", "CancelFitting"):
        assert getattr(tuitrain, name) is getattr(state, name)


def test_every_package_of_the_source_tree_is_in_the_wheel():
    """pyproject's [tool.setuptools] packages lists each folder of tuitrain/ with an __init__.py: one left
    out installs from a wheel without its modules (tuitrain.core.rules was, and `import tuitrain` failed)."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(root).parts) for p in (root / "tuitrain").rglob("__init__.py")}
    assert found - listed == set(), f"packages missing from pyproject.toml's [tool.setuptools]: {found - listed}"

"""The core never imports the dashboard: importing it must not load textual (nor, for --help, torch)."""

import subprocess
import sys
from pathlib import Path


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def test_core_sinks_runner_import_without_textual():
    mods = _modules_after(
        "import tuitrain, tuitrain.core.learner, tuitrain.run.runner, tuitrain.sinks, tuitrain.config"
    )
    assert "torch" in mods  # the learner really was imported
    assert not any(m == "textual" or m.startswith("textual.") for m in mods)


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

"""Importing the dashboard package (as the CLI does before it knows it needs a screen) and its
data side must not load textual; only `tuitrain.dashboard.app` does."""

import subprocess
import sys


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def test_dashboard_package_and_data_side_do_not_import_textual():
    mods = _modules_after(
        "import tuitrain.dashboard, tuitrain.dashboard.state.model, tuitrain.dashboard.state.bridge, "
        "tuitrain.sources.run_files, tuitrain.dashboard.state.series, tuitrain.run.directories, "
        "tuitrain.core.devices"
    )
    assert "tuitrain.dashboard.state.model" in mods
    assert not any(m == "textual" or m.startswith("textual.") for m in mods)
    assert "torch" not in mods


def test_the_app_module_does_import_textual():
    assert "textual" in _modules_after("import tuitrain.dashboard.app")

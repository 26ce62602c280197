"""The README's picture is of today's dashboard (issue 51: it showed an older one). docs/make_picture.py
draws it from a recorded run of the demo with the clock stopped, so the same dashboard draws the same
picture byte for byte; a change to what the dashboard shows fails here until the picture is made again."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def maker():
    spec = importlib.util.spec_from_file_location("make_picture", ROOT / "docs" / "make_picture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_shows_the_picture_todays_dashboard_draws_from_its_recording():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"!\[[^\]]+\]\(docs/dashboard\.svg\)", readme)
    kept = (ROOT / "docs" / "dashboard.svg").read_text(encoding="utf-8")
    drawn = maker().draw()
    assert drawn == kept, (
        "docs/dashboard.svg is not what today's dashboard draws: make it again with "
        "`python docs/make_picture.py` and look at it before committing"
    )


def test_the_picture_is_the_demo_training_in_its_own_folder():
    text = (ROOT / "docs" / "dashboard.svg").read_text(encoding="utf-8")
    assert re.search(r"runs/spirals/\d{8}-\d{6}", text) and "[live]" in text and "/tmp" not in text
    assert len(text.encode()) < 80_000

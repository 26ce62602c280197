"""What the README tells a newcomer is so (issue 51): the install line for a CPU-only machine, a demo that
lasts long enough to try the keys, and what `dashboard="auto"` does in a notebook."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_install_lines_say_which_torch_is_for_a_cpu_only_machine_and_which_for_cuda():
    block = README[README.index("## Train your own model") : README.index("A module with your model")]
    lines = [line for line in block.splitlines() if line.startswith("pip install torch")]
    cpu = [line for line in lines if "--index-url https://download.pytorch.org/whl/cpu" in line]
    cuda = [line for line in lines if "--index-url" not in line]
    assert len(cpu) == 1 and "CPU only" in cpu[0], lines  # PyPI's Linux torch is the CUDA build: GBs
    assert len(cuda) == 1 and "CUDA" in cuda[0], lines


def test_the_demo_the_readme_names_has_the_set_that_makes_it_last_long_enough_to_try_the_keys():
    epochs = tomllib.loads((ROOT / "demo" / "spirals.toml").read_text())["train"]["epochs"]
    found = re.search(
        r"tuitrain run demo/spirals\.toml --set train\.epochs=(\d+)`[^`]*`p`[^`]*`c`[^`]*`q`", README.replace("\n", " ")
    )
    assert found, "the README names no longer run of the demo"
    assert int(found.group(1)) >= 10 * epochs  # the default ends in seconds on a laptop


def test_the_readme_says_what_dashboard_auto_does_in_a_notebook():
    flat = " ".join(README.split())
    said = flat[flat.index('`dashboard="auto"` shows') :][:400]
    assert "not in a notebook" not in said and "in a Jupyter notebook it draws the dashboard" in said, said

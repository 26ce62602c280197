"""What the README tells a newcomer is so (issue 51): the install line for a CPU-only machine, a demo that
lasts long enough to try the keys, and what `dashboard="auto"` does in a notebook."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_install_lines_say_which_torch_is_for_a_cpu_only_machine_and_which_for_cuda():
    block = README[README.index("## Install") : README.index("## The one command")]
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


def test_the_readme_is_short_and_says_in_its_first_screen_that_other_tools_logs_open_too():
    """Issue 53: a README for users of at most 400 lines; issue 54: its first screen names the one line
    for the logs people already have."""
    assert len(README.splitlines()) <= 400
    first_screen = " ".join(README[: README.index("![")].replace("**", "").split())  # above the picture
    line = (
        "Already have TensorBoard, Lightning, MLflow, trackio or W&B logs? "
        "`pip install tuitrain && tuitrain watch path/to/logs`"
    )
    assert line in first_screen, first_screen


def test_every_command_of_the_cli_is_in_the_readmes_list_and_every_page_it_links_to_is_there():
    from tuitrain.cli import _parser

    commands = README[README.index("## Commands") :]
    commands = commands[: commands.index("\n## ")]
    sub = next(a for a in _parser()._actions if a.dest == "command")
    for name in sub.choices:
        assert f"\ntuitrain {name} " in commands, name
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to {target}, which is not there"


def test_the_signature_docs_api_gives_for_fit_is_the_real_one():
    """A newcomer called `fit(train=..., valid=...)` as docs/api.md named them: TypeError."""
    import inspect

    from tuitrain import Learner

    doc = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    said = re.search(r"`fit\(([^`]*)\)`", doc).group(1)
    names = [p.split("=")[0].strip() for p in said.split(",") if p.strip() not in ("*", "")]
    real = inspect.signature(Learner.fit).parameters
    assert names and all(n in real for n in names), (names, list(real))
    for n in names:  # keyword-only where the docs put them after the *
        assert (real[n].kind is inspect.Parameter.KEYWORD_ONLY) == (said.index(n) > said.find("*") >= 0), n

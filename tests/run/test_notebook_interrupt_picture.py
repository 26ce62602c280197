"""The picture a notebook keeps after the kernel's interrupt is the run's end (issue 51). JupyterLab and
jupyter_client send the interrupt (SIGINT) to the kernel's whole process group: the drawing process, a child
of the kernel, got it too and quit without drawing the last picture, so the cell kept `[live]`,
`State running`, steps before the end, without the stop's checkpoint."""

import json
import os
import signal
import time

import pytest

pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")
pytest.importorskip("jupyter_client")

from test_notebook import LONG, Kernel, next_step, training, words  # noqa: E402  (tests/run, on sys.path)
from test_notebook_bundle import picture_svg  # noqa: E402


def test_an_interrupt_sent_to_the_kernels_process_group_leaves_the_runs_end_in_the_picture(tmp_path):
    kernel = Kernel(tmp_path)
    run = tmp_path / "runs" / "long"
    try:
        kernel.execute(LONG.format(pause=0, wait="", fit="fit", every=10))
        training(run, steps=20)
        kernel.read(
            until=lambda: any(
                "State running" in words(picture_svg(d[-1]))
                for d in kernel.displays.values()
                if "<img" in d[-1].get("text/html", "") or "image/svg+xml" in d[-1]
            )
        )
        os.killpg(os.getpgid(kernel.km.provisioner.pid), signal.SIGINT)  # as JupyterLab's stop button does
        kernel.read()
    finally:
        kernel.close()
    assert kernel.said.strip() == "status interrupted stopped", kernel.said
    last = json.loads((run / "run.json").read_text())
    assert last["status"] == "interrupted"
    [updates] = kernel.displays.values()
    shown = words(picture_svg(updates[-1]))
    assert "[interrupted]" in shown and "[live]" not in shown, shown[:300]
    assert "State interrupted" in shown and "State running" not in shown, shown[:1500]
    assert f"{last['step']:,}" in shown  # the stop's step, not one some steps before it
    index = json.loads((run / "checkpoint" / "index.json").read_text())
    assert index[-1].get("requested_by") == "stop" and "⚑" in shown  # the stop's checkpoint is listed


def test_a_second_interrupt_to_the_group_leaves_the_runs_end_in_the_picture_too(tmp_path):
    """The second interrupt ends the run at once (reason killed): the picture still shows its end."""
    kernel = Kernel(tmp_path)
    run = tmp_path / "runs" / "long"
    try:
        kernel.execute(LONG.format(pause=1.5, wait="", fit="fit", every=1))
        training(run, steps=2)
        kernel.read(
            until=lambda: any(
                "State running" in words(picture_svg(d[-1]))
                for d in kernel.displays.values()
                if "<img" in d[-1].get("text/html", "") or "image/svg+xml" in d[-1]
            )
        )
        next_step(run)  # both interrupts early in a step of 1.5 s
        group = os.getpgid(kernel.km.provisioner.pid)
        os.killpg(group, signal.SIGINT)
        time.sleep(0.1)
        os.killpg(group, signal.SIGINT)
        kernel.read(timeout=60)
    finally:
        kernel.close()
    assert kernel.said.strip() == "status interrupted killed", kernel.said
    last = json.loads((run / "run.json").read_text())
    [updates] = kernel.displays.values()
    shown = words(picture_svg(updates[-1]))
    assert last["status"] == "interrupted" and "[interrupted]" in shown and "State running" not in shown, shown[:1500]

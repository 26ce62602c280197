"""The dashboard in a Jupyter notebook, run as Jupyter runs it: a real ipykernel, driven by nbclient (and
jupyter_client for the interrupt). One updating display per run whose last picture (SVG) holds the
charts and the final state; the saved notebook keeps it; the kernel's interrupt stops gracefully."""

import html
import json
import re
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

SETUP = """import torch
from torch import nn
from torch.utils.data import TensorDataset
from tuitrain import Learner, Monitor
g = torch.Generator().manual_seed(0)
x = torch.randn(2000, 2, generator=g); y = (x[:, 0] * x[:, 1] > 0).long()
model = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 2))"""

FIT = """result = Learner(model, torch.optim.AdamW(model.parameters(), lr=3e-3), loss_fn=nn.CrossEntropyLoss(),
                  train_metrics=["loss", "accuracy"], valid_metrics=["loss", "accuracy"], epochs=3, batch_size=32,
                  seed=0, run_dir="runs/fit").fit(TensorDataset(x[:1600], y[:1600]), TensorDataset(x[1600:], y[1600:]))
print("fit", result.status)"""

MONITOR = """import time
with Monitor(experiment="mine", run_dir="runs/mon", max_steps=40) as mon:
    for step in range(1, 41):
        mon.log(step, loss=1.0 / step, grad_norm=0.5)
        print("a line of mine")
        time.sleep(0.02)
print("monitor done")"""


def words(svg: str) -> str:
    """The text a picture shows."""
    return html.unescape(" ".join(re.findall(r"<text[^>]*>([^<]*)</text>", svg))).replace("\xa0", " ")


def test_fit_and_a_monitor_loop_each_show_one_picture_that_stays_in_the_saved_notebook(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(code) for code in (SETUP, FIT, MONITOR)]
    nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    saved = tmp_path / "run.ipynb"
    nbformat.write(nb, saved)
    reopened = nbformat.read(saved, as_version=4)  # no kernel from here on
    for cell, run, said in ((reopened.cells[1], "fit", "fit completed"), (reopened.cells[2], "mon", "monitor done")):
        pictures = [o for o in cell.outputs if o.output_type == "display_data"]
        assert len(pictures) == 1, cell.outputs  # one display, updated in place
        svg = pictures[0]["data"]["image/svg+xml"]  # the last picture, not the "starting" line
        shown = words(svg)
        assert "loss" in shown and "progress" in shown and "completed" in shown, shown[:400]
        streams = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        assert streams.strip() == said  # no progress lines: the picture says it
        assert json.loads((tmp_path / "runs" / run / "run.json").read_text())["status"] == "completed"
    fit = words(reopened.cells[1].outputs[0]["data"]["image/svg+xml"])
    assert "accuracy" in fit and "Epoch 3/3" in fit
    mon = words(reopened.cells[2].outputs[0]["data"]["image/svg+xml"])
    assert "grad_norm" in mon and "Step  40 / 40" in mon and "a line of mine" in mon  # prints: the output panel


def test_interrupting_the_kernel_stops_the_run_gracefully_with_a_checkpoint(tmp_path):
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        msg_id = kc.execute(SETUP + """
result = Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn=nn.CrossEntropyLoss(), epochs=10**5,
                 batch_size=8, run_dir="runs/long").fit(TensorDataset(x, y))
print("status", result.status)""")
        run = tmp_path / "runs" / "long"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # training, with steps logged
            try:
                if json.loads((run / "run.json").read_text()).get("status") == "running" and \
                        (run / "events.jsonl").stat().st_size > 20_000:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        km.interrupt_kernel()
        kinds, said = [], ""
        while True:
            msg = kc.get_iopub_msg(timeout=120)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kinds.append(msg["msg_type"])
            said += msg["content"].get("text", "") if msg["msg_type"] == "stream" else ""
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert "error" not in kinds  # no traceback wall: the cell ends as the run does
    assert said.strip() == "status interrupted"
    assert kinds.count("display_data") == 1 and "update_display_data" in kinds
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    index = json.loads((run / "checkpoint" / "index.json").read_text())
    last = index[-1]  # the stop's checkpoint (a state the epoch's end had saved already is marked the stop's)
    assert last.get("requested_by") == "stop" and (run / "checkpoint" / last["file"]).exists(), last

"""The dashboard in a Jupyter notebook, run as Jupyter runs it: a real ipykernel, driven by nbclient (and
jupyter_client for the interrupt). One updating display per run whose last picture (SVG) holds the
charts and the final state; the saved notebook keeps it; the kernel's interrupt stops gracefully."""

import base64
import html
import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
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


def kernel_env() -> dict[str, str]:
    """The kernel's environment: torch on one thread, as every other process the suite starts trains
    (tests/conftest.py's cli_env, a pytest-xdist worker's set_num_threads(1)). Two threads of tiny steps on
    two busy cores spin-wait: 1000 steps of the MLP below took 16 CPU s there, 3 on one thread."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def picture(data: dict) -> str:
    """The SVG a display shows: an `<img>` of it as a data URL in `text/html` (drawn untrusted too)."""
    found = re.search(r'<img src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', data.get("text/html", ""))
    return base64.b64decode(found.group(1)).decode("utf-8") if found else ""


def words(svg: str) -> str:
    """The text a picture shows."""
    return html.unescape(" ".join(re.findall(r"<text[^>]*>([^<]*)</text>", svg))).replace("\xa0", " ")


def test_fit_and_a_monitor_loop_each_show_one_picture_that_stays_in_the_saved_notebook(tmp_path, shared_kernel):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(code) for code in (SETUP, FIT, MONITOR)]
    with shared_kernel.inside(tmp_path) as kernel:
        client = nbclient.NotebookClient(
            nb, timeout=240, kernel_name="python3", km=kernel.km, resources={"metadata": {"path": str(tmp_path)}}
        )
        try:
            client.execute()
        finally:
            if client.kc is not None:
                client.kc.stop_channels()
    saved = tmp_path / "run.ipynb"
    nbformat.write(nb, saved)
    reopened = nbformat.read(saved, as_version=4)  # no kernel from here on
    for cell, run, said in ((reopened.cells[1], "fit", "fit completed"), (reopened.cells[2], "mon", "monitor done")):
        pictures = [o for o in cell.outputs if o.output_type == "display_data"]
        assert len(pictures) == 1, cell.outputs  # one display, updated in place
        svg = picture(pictures[0]["data"])  # the last picture, not the "starting" line
        shown = words(svg)
        assert "loss" in shown and "progress" in shown and "completed" in shown, shown[:400]
        streams = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        assert streams.strip() == said  # no progress lines: the picture says it
        assert json.loads((tmp_path / "runs" / run / "run.json").read_text())["status"] == "completed"
    fit = words(picture(reopened.cells[1].outputs[0]["data"]))
    assert "accuracy" in fit and "Epoch 3/3" in fit
    mon = words(picture(reopened.cells[2].outputs[0]["data"]))
    assert "grad_norm" in mon and "Step  40 / 40" in mon and "a line of mine" in mon  # prints: the output panel


LONG = (
    SETUP
    + """
import time
def slow_loss(out, y):  # `pause` seconds a step
    time.sleep(pause)
    return nn.functional.cross_entropy(out, y)
pause = {pause}
result = {wait}Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn=slow_loss, epochs=10**5,
                 batch_size=8, log_every_n_steps={every}, run_dir="runs/long").{fit}(TensorDataset(x, y))
print("status", result.status, result.reason)"""
)


def training(run: Path, steps: int = 100) -> None:
    """Wait until the run has logged `steps` steps."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if (run / "events.jsonl").read_text().count('"MetricsLogged"') >= steps:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"{run} did not start training")


def next_step(run: Path) -> None:
    """Wait for the run's next step to be logged: the one after it has just begun."""
    seen = (run / "events.jsonl").read_text().count('"MetricsLogged"')
    deadline = time.monotonic() + 60
    while (run / "events.jsonl").read_text().count('"MetricsLogged"') == seen:
        assert time.monotonic() < deadline, f"{run}: no step logged in 60 s"
        time.sleep(0.01)


class Kernel:
    """A real ipykernel, its iopub messages for the cell being run, and the widgets' buttons it shows: a new
    kernel started in `cwd`, or a client of its own to the running kernel of `km` (SharedKernel)."""

    def __init__(self, cwd: Path | None = None, km=None) -> None:
        from jupyter_client.manager import start_new_kernel

        self.owned = km is None  # close() ends the kernel
        if km is None:
            self.km, self.kc = start_new_kernel(kernel_name="python3", cwd=str(cwd), env=kernel_env())
        else:
            self.km, self.kc = km, km.client()
            self.kc.start_channels()
            self.kc.wait_for_ready(timeout=60)
        self.msg_id = None
        self.kinds: list[str] = []
        self.said = ""
        self.buttons: dict[str, str] = {}  # description -> comm id
        self.displays: dict[str, list] = {}  # display id -> the data it was shown with, update by update
        self.idle = False

    def execute(self, code: str) -> None:
        """Run `code` as a new cell: what is read from here on is its messages."""
        self.msg_id = self.kc.execute(code)
        self.kinds, self.said, self.buttons, self.displays, self.idle = [], "", {}, {}, False

    def run(self, code: str, timeout: float = 120) -> None:
        """Run `code` to its end; AssertionError on an error."""
        self.execute(code)
        self.read(timeout=timeout)
        assert "error" not in self.kinds, self.said

    def read(self, until=lambda: False, timeout: float = 120) -> None:
        """Take in the cell's messages until `until()` or the cell ends."""
        deadline = time.monotonic() + timeout
        while not self.idle and not until():
            assert time.monotonic() < deadline, (self.kinds, self.said)
            try:
                msg = self.kc.get_iopub_msg(timeout=0.5)
            except Exception:  # queue.Empty
                continue
            if msg["parent_header"].get("msg_id") != self.msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            self.kinds.append(kind)
            if kind == "stream":
                self.said += content["text"]
            elif kind == "error":
                self.said += f"{content['ename']}: {content['evalue']}"
            elif kind == "comm_open" and content["data"]["state"].get("_model_name") == "ButtonModel":
                self.buttons[content["data"]["state"]["description"]] = content["comm_id"]
            elif kind in ("display_data", "update_display_data"):
                self.displays.setdefault(content["transient"]["display_id"], []).append(content["data"])
            elif kind == "status" and content["execution_state"] == "idle":
                self.idle = True

    def click(self, button: str) -> None:
        """What a browser sends when the button is clicked."""
        data = {"method": "custom", "content": {"event": "click"}}
        self.kc.shell_channel.send(self.kc.session.msg("comm_msg", {"comm_id": self.buttons[button], "data": data}))

    def close(self) -> None:
        self.kc.stop_channels()
        if self.owned:
            self.km.shutdown_kernel(now=True)


class SharedKernel:
    """One kernel for the tests that neither interrupt it nor end it, started on first use: each test runs
    in a folder of its own (the kernel's working directory while it runs) and a fresh namespace, with a
    client of its own (nbclient's leaves the clients it did not make deaf), and leaves the kernel as it found
    it. A kernel and torch's import in it cost ~6 CPU s. The tests of the kernel's interrupt have kernels of
    their own: one that was interrupted before is not what they test."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.km = None

    def run(self, code: str, timeout: float = 120) -> None:
        kernel = Kernel(km=self.km)
        try:
            kernel.run(code, timeout)
        finally:
            kernel.close()

    @contextmanager
    def inside(self, folder: Path) -> Iterator[Kernel]:
        if self.km is None:
            first = Kernel(self.home)
            first.kc.stop_channels()
            self.km = first.km
        self.run(f"%reset -f\nimport os\nos.chdir({str(folder)!r})")
        kernel = Kernel(km=self.km)
        try:
            yield kernel
        finally:
            kernel.close()
            try:
                assert kernel.msg_id is None or kernel.idle  # else its cell still runs: the test failed
                self.run(f"import os\nos.chdir({str(self.home)!r})\n%reset -f", timeout=30)
            except Exception:  # (a cell still running, or no answer) the next test gets a kernel of its own
                self.close()

    def close(self) -> None:
        if self.km is not None:
            self.km.shutdown_kernel(now=True)
            self.km = None


@pytest.fixture(scope="module")
def shared_kernel(tmp_path_factory) -> Iterator[SharedKernel]:
    kernels = SharedKernel(tmp_path_factory.mktemp("kernel"))
    yield kernels
    kernels.close()


def test_interrupting_the_kernel_stops_the_run_gracefully_with_a_checkpoint(tmp_path):
    kernel = Kernel(tmp_path)
    try:
        kernel.execute(LONG.format(pause=0, wait="", fit="fit", every=10))
        run = tmp_path / "runs" / "long"
        training(run, steps=55)  # past two epochs' checkpoints (500 steps): the stop's is listed after them
        kernel.km.interrupt_kernel()
        kernel.read()
    finally:
        kernel.close()
    kinds, said = kernel.kinds, kernel.said
    assert "error" not in kinds  # no traceback wall: the cell ends as the run does
    assert said.strip() == "status interrupted stopped"
    assert kinds.count("display_data") == 1 and "update_display_data" in kinds
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    index = json.loads((run / "checkpoint" / "index.json").read_text())
    last = index[-1]  # the stop's checkpoint (a state the epoch's end had saved already is marked the stop's)
    assert last.get("requested_by") == "stop" and (run / "checkpoint" / last["file"]).exists(), last


@pytest.mark.parametrize("fit", ["fit", "fit_async"])
def test_a_second_interrupt_ends_the_run_at_once(tmp_path, fit):
    """The first interrupt asks for a graceful stop at the step's end; a second, within the same slow step
    (1.5 s, long beside the test's polling and a busy machine's delays), ends the run there: the cell ends
    quietly, the run says interrupted (reason killed)."""
    kernel = Kernel(tmp_path)
    try:
        kernel.execute(LONG.format(pause=1.5, wait="await " if fit == "fit_async" else "", fit=fit, every=1))
        run = tmp_path / "runs" / "long"
        training(run, steps=1)  # step 1 (torch's first, the slowest) is over
        next_step(run)  # both interrupts early in a step of 1.5 s
        kernel.km.interrupt_kernel()
        time.sleep(0.1)
        kernel.km.interrupt_kernel()
        kernel.read(timeout=60)
    finally:
        kernel.close()
    assert "error" not in kernel.kinds, kernel.said
    assert kernel.said.strip() == "status interrupted killed"
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"


def test_the_buttons_under_an_awaited_fit_stop_pause_and_checkpoint_the_run(tmp_path, shared_kernel):
    pytest.importorskip("ipywidgets")
    run = tmp_path / "runs" / "long"
    with shared_kernel.inside(tmp_path) as kernel:
        kernel.execute(LONG.format(pause=0.002, wait="await ", fit="fit_async", every=10))
        training(run, steps=30)  # past the first epoch's end (250 steps) and its checkpoint
        kernel.read(until=lambda: len(kernel.buttons) == 3)
        assert set(kernel.buttons) == {"Stop", "Pause", "Checkpoint"}

        def events(kind: str) -> list[dict]:
            return [
                e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e.get("event") == kind
            ]

        def wait_for(check) -> None:
            deadline = time.monotonic() + 60
            while not check():
                assert time.monotonic() < deadline
                kernel.read(until=lambda: True, timeout=5)  # the kernel's messages go on meanwhile
                time.sleep(0.2)

        kernel.click("Checkpoint")
        wait_for(lambda: any(e.get("requested") == "notebook" for e in events("CheckpointSaved")))
        kernel.click("Pause")
        wait_for(lambda: events("RunPaused"))
        kernel.click("Pause")  # now "Resume"
        wait_for(lambda: events("RunResumed"))
        kernel.click("Stop")
        kernel.read(timeout=60)
        kinds, said, displays = kernel.kinds, kernel.said, kernel.displays  # this cell's (the kernel runs on)
    assert "error" not in kinds and said.strip() == "status interrupted stopped"
    index = json.loads((run / "checkpoint" / "index.json").read_text())
    assert [c["requested_by"] for c in index if c.get("requested_by")] == ["notebook", "stop"]
    pictures = [d for d in displays.values() if picture(d[-1])]
    buttons = [d for d in displays.values() if "application/vnd.jupyter.widget-view+json" in d[0]]
    assert len(pictures) == 1 and "Epoch" in words(picture(pictures[0][-1]))
    assert len(buttons) == 1 and buttons[0][-1].get("text/html") == ""  # gone once the run ended


LIGHTNING = """import importlib.util, lightning.pytorch as L, torch
from torch.utils.data import DataLoader, TensorDataset
from tuitrain.integrations.lightning import TuitrainCallback
spec = importlib.util.spec_from_file_location("fit", {script!r})
fit = importlib.util.module_from_spec(spec); spec.loader.exec_module(fit)
g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(64, 4, generator=g), torch.randint(0, 3, (64,), generator=g))
trainer = L.Trainer(max_epochs=3, callbacks=[TuitrainCallback(experiment="light", run_dir="runs/light")], logger=False,
                    enable_checkpointing=False, enable_model_summary=False, accelerator="cpu", log_every_n_steps=1)
trainer.fit(fit.module_class(L)(), DataLoader(data, batch_size=8), DataLoader(data, batch_size=8))"""

TRANSFORMERS = """import sys; sys.path.insert(0, {root!r})
from pathlib import Path
from tests.integrations.transformers_scripts.tiny_gpt2 import trainer_for
from tuitrain.integrations.transformers import TuitrainCallback
trainer_for(Path("hf"), [TuitrainCallback(run_dir="runs/hf")], max_steps=20, save_steps=10, eval_steps=10).train()"""


def test_lightning_and_the_hf_trainer_show_the_picture_and_no_bars_of_their_own(tmp_path):
    """Their progress bars (Lightning's rich bar in a widget that swallows the prints, the Trainer's HTML
    table, a save's "Writing model shards" bars) would sit under the picture, each its own output."""
    pytest.importorskip("lightning.pytorch")
    pytest.importorskip("transformers")
    root = Path(__file__).resolve().parents[2]
    nb = nbformat.v4.new_notebook()
    script = str(root / "tests" / "integrations" / "lightning_scripts" / "fit.py")
    nb.cells = [
        nbformat.v4.new_code_cell(LIGHTNING.format(script=script)),
        nbformat.v4.new_code_cell(TRANSFORMERS.format(root=str(root))),
    ]
    nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute(env=kernel_env())
    for cell, run, chart in ((nb.cells[0], "light", "training step 23"), (nb.cells[1], "hf", "grad_norm")):
        shown = [o for o in cell.outputs if o.output_type == "display_data"]
        assert len(shown) == 1 and sorted(shown[0]["data"]) == ["text/html", "text/plain"], [
            list(o["data"]) for o in shown
        ]
        drawn = words(picture(shown[0]["data"]))
        assert chart in drawn and "completed" in drawn, drawn[:400]
        assert json.loads((tmp_path / "runs" / run / "run.json").read_text())["status"] == "completed"
        prints = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        assert "training step" not in prints  # what the module prints: in the picture's output panel

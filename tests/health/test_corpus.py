"""The spike rules at their defaults on runs of the health corpus (benchmarks/bench_health_corpus.py runs
all of it): a healthy run whose minibatch losses are heavy-tailed raises no alert, a corrupt batch is
caught at its step and at no step before, and a rollback on it happens once and the run completes."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import read_events
from tuitrain.run.runner import prepare_run

PROJECT = Path(__file__).resolve().parents[2] / "benchmarks" / "corpusproj.py"
FAULT = 1200  # the step of the bad batch (batch 1199 of one epoch, shuffle off)

CONFIG = """
[experiment]
name = "{name}"
dir = "runs"
seed = 0
[model]
target = "corpusproj:MLP"
inputs = {inputs}
outputs = {outputs}
[data]
target = "corpusproj:{data}"
batch_size = 16
shuffle = false
n = 32000
{fault}
[loss]
target = "{loss}"
[optimizer]
{optimizer}
[train]
epochs = 1
[metrics]
train = ["loss", "grad_norm"]
valid = ["loss"]
[log]
every_n_steps = 1
[checkpoint]
every_n_epochs = 0
every_n_steps = 100
"""


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    shutil.copy(PROJECT, tmp_path / "corpusproj.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("TUITRAIN_ALERTS_WEBHOOK", raising=False)
    monkeypatch.delenv("TUITRAIN_ALERTS_COMMAND", raising=False)

    def run(kind: str, fault: str = "", *sets: str):
        cls = kind == "classify"
        text = CONFIG.format(
            name=kind,
            inputs=16 if cls else 8,
            outputs=4 if cls else 1,
            data="blobs" if cls else "regression",
            fault=fault,
            loss="torch.nn:CrossEntropyLoss" if cls else "torch.nn:MSELoss",
            optimizer='target = "torch.optim:Adam"\nlr = 1e-3' if cls else 'target = "torch.optim:SGD"\nlr = 0.02',
        )
        path = tmp_path / f"{kind}.toml"
        path.write_text(text)
        r = prepare_run(path, list(sets))
        code = r.execute()
        events = read_events(r.run_dir)
        return code, Path(r.run_dir), [e for e in events if e["event"] == "AlertRaised"], events

    yield run
    sys.modules.pop("corpusproj", None)


def test_a_healthy_classifier_near_convergence_raises_no_alert(corpus):
    """Batches of 16 at ~97% accuracy: a batch with one wrong item has hundreds of times the median loss
    (the rule before the corpus raised 16 alerts on this run)."""
    code, _, alerts, events = corpus("classify")
    assert code == 0
    assert alerts == []
    losses = [
        e["metrics"]["loss"]
        for e in events
        if e["event"] == "MetricsLogged" and e["split"] == "train" and e["scope"] == "step"
    ]
    tail = sorted(losses[-500:])
    assert tail[-1] > 50 * tail[len(tail) // 2]  # the heavy tail the rule must live with is there


def test_a_batch_scaled_x10_is_caught_at_its_step_and_at_no_step_before(corpus):
    # the run stops 100 steps after the fault: every step before it and the fault's own are judged as in the whole
    # epoch (the same steps, the same losses), and the whole epoch raised nothing after the fault's step either
    code, _, alerts, _ = corpus(
        "regression", f"scale_batch = {FAULT - 1}\nscale = 10.0", f"train.max_steps={FAULT + 100}"
    )
    assert code == 0
    assert alerts and min(a["step"] for a in alerts) == FAULT, [(a["rule"], a["step"]) for a in alerts]
    at_fault = [a for a in alerts if a["step"] == FAULT]
    assert {a["rule"] for a in at_fault} == {"loss_spike", "grad_spike"}
    assert all(a["episode"] == 1 for a in at_fault)


def test_rollback_on_one_bad_batch_rolls_back_once_and_completes(corpus):
    code, run_dir, alerts, events = corpus(
        "regression", f"scale_batch = {FAULT - 1}\nscale = 300.0", "watch.loss_spike=rollback"
    )
    assert code == 0
    back = [e for e in events if e["event"] == "RolledBack"]
    assert [(b["from_step"], b["to_step"]) for b in back] == [(FAULT, 1100)]
    assert [(a["rule"], a["step"], a["action"]) for a in alerts] == [("loss_spike", FAULT, "rollback")]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"

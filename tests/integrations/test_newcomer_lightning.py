"""A defect a newcomer found in the Lightning callback: `self.log("train_loss", on_step=True, on_epoch=True)`
(Lightning's `train_loss_step` and `train_loss_epoch`) was charted as a `loss_epoch` of its own, while
tuitrain's reader of Lightning's CSV logs reads the two as the step and epoch scope of `loss`. One real fit
(a tiny MLP on random tensors, 2 epochs of 8 steps), with Lightning's CSVLogger beside tuitrain's callback."""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("lightning") is None:
    pytest.skip("Lightning is not installed (the test extra)", allow_module_level=True)

from tests.conftest import read_events  # noqa: E402
from tests.integrations.test_lightning import STEPS_PER_EPOCH, lit  # noqa: E402


def _csv_names(save_dir) -> set[tuple[str, str, str]]:
    """(split, scope, name) of every series tuitrain's Lightning CSV reader reads from the fit's log."""
    from tuitrain.core.events import MetricsLogged
    from tuitrain.sources import lightning_csv
    from tuitrain.sources.polled import ForeignBlock, drain

    (ref,) = lightning_csv.find_runs(save_dir)
    names: set[tuple[str, str, str]] = set()
    for e in drain(lightning_csv.open_source(ref, live=False)):
        if isinstance(e, ForeignBlock):
            names.update(e.series)
        elif isinstance(e, MetricsLogged):
            names.update((e.split, e.scope, name) for name in e.metrics)
    return names


def test_a_value_logged_on_steps_and_epochs_is_one_name_with_a_step_and_an_epoch_scope(tmp_path):
    it = lit()
    cb = it.TuitrainCallback(dashboard=False, run_dir=tmp_path / "run")
    t = it.L.Trainer(
        max_epochs=2,
        log_every_n_steps=2,
        callbacks=[cb],
        logger=it.L.loggers.CSVLogger(tmp_path / "csv"),
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        accelerator="cpu",
    )
    t.fit(it.fit_script.module_class(it.L, on_epoch_too=True)(), *it.fit_script.loaders())

    logged = [e for e in read_events(tmp_path / "run") if e["event"] == "MetricsLogged" and e["split"] == "train"]
    ours = {("train", e["scope"], name) for e in logged for name in e["metrics"]}
    assert ("train", "epoch", "loss") in ours and not any(name.startswith("loss_") for _, _, name in ours), ours
    # named as tuitrain reads the same fit's CSV log (the learning rate is the callback's own; the reader
    # takes the valid `acc/val` for a train metric of that name, which is no concern here)
    theirs = {k for k in _csv_names(tmp_path / "csv") if k[0] == "train" and k[2] != "acc/val"}
    assert (
        ours - {("train", "step", "lr")}
        == theirs
        == {("train", "step", "loss"), ("train", "epoch", "loss"), ("train", "step", "acc")}
    )
    epochs = [(e["epoch"], e["step"], e["metrics"]) for e in logged if e["scope"] == "epoch"]
    assert [(epoch, step, set(m)) for epoch, step, m in epochs] == [
        (1, STEPS_PER_EPOCH, {"loss"}),
        (2, 2 * STEPS_PER_EPOCH, {"loss"}),
    ]
    assert epochs[-1][2]["loss"] == pytest.approx(float(t.callback_metrics["train_loss_epoch"]))
    steps = [e["step"] for e in logged if e["scope"] == "step" and "loss" in e["metrics"]]
    assert steps == list(range(2, 2 * STEPS_PER_EPOCH + 1, 2))  # the step values alone, one a logged step
    # each epoch's value after the steps of its epoch, as the run's files have them
    order = [(e["scope"], e["step"]) for e in logged if "loss" in e["metrics"]]
    assert order.index(("epoch", STEPS_PER_EPOCH)) == order.index(("step", STEPS_PER_EPOCH)) + 1

"""`[checkpoint] init_from` (weights only, strict, key renames) and a torchmetrics metric by target."""

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from tuitrain.core.checkpoint import CheckpointError, load_weights
from tuitrain.core.learner import CoreLearner
from tuitrain.core.metrics import TorchMetric


def test_init_from_renames_keys_and_checks_strictly(tmp_path):
    torch.manual_seed(0)
    src = nn.Sequential(nn.Linear(3, 4))
    wrapped = {f"module.{k}": v for k, v in src.state_dict().items()}  # as saved from a DDP model
    path = tmp_path / "w.pt"
    torch.save(wrapped, path)
    dst = nn.Sequential(nn.Linear(3, 4))
    with pytest.raises(RuntimeError, match="Missing key"):
        load_weights(dst, path)  # strict, no renames: the keys do not match
    missing, unexpected = load_weights(dst, path, revise_keys=[["^module\\.", ""]])
    assert missing == [] and unexpected == []
    assert torch.equal(dst[0].weight, src[0].weight)
    bigger = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    missing, _ = load_weights(bigger, path, strict=False, revise_keys=[["^module\\.", ""]])
    assert missing == ["1.weight", "1.bias"]


def test_init_from_refuses_a_pickle_that_runs_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "evil.pt"
    torch.save({"x": Evil()}, path)
    with pytest.raises(CheckpointError, match="weights_only"):
        load_weights(nn.Linear(1, 1), path)


def test_torchmetrics_metric_matches_hand_computation():
    tm = pytest.importorskip("torchmetrics")
    torch.manual_seed(0)
    x, y = torch.randn(30, 4), torch.randint(0, 3, (30,))
    model = nn.Linear(4, 3)
    f1 = TorchMetric(tm.classification.MulticlassF1Score(num_classes=3, average="macro"), "f1")
    events = []
    learner = CoreLearner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        loss_fn=nn.CrossEntropyLoss(),
        device="cpu",
        batch_size=7,
        shuffle=False,
        train_metrics=["loss", f1],
        callbacks=[lambda e, s: events.append(e)],
    )
    assert learner.fit(TensorDataset(x, y)).exit_code == 0
    with torch.no_grad():
        want = tm.functional.classification.multiclass_f1_score(model(x), y, num_classes=3, average="macro")
    got = [e for e in events if e.name == "PhaseCompleted"][0].metrics["f1"]
    assert got == pytest.approx(float(want))

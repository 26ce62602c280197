"""The core Learner's settings come as sections or the common flat keywords, alike; a subclass's own
backward, optimizer step or state is still the one the loop calls."""

import pytest
import torch
from torch import nn

from tuitrain.core.learner import CoreLearner
from tuitrain.core.sections import Data, Log, Train


def _data(n=32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return torch.utils.data.TensorDataset(x, (x.sum(1) > 0).long())


def _learner(cls=CoreLearner, **kw):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    return cls(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.CrossEntropyLoss(),
        epochs=1,
        batch_size=8,
        device="cpu",
        **kw,
    )


def test_sections_and_the_flat_keywords_train_the_same_run():
    """The settings grouped as the TOML groups them, or the common flat keywords: the same run, bit for
    bit; a keyword that is no longer flat says which section takes it."""
    a = _learner(clip_grad_norm=1.0, log_every_n_steps=2)
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    b = CoreLearner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.CrossEntropyLoss(),
        train=Train(epochs=1, clip_grad_norm=1.0, device="cpu"),
        data=Data(batch_size=8),
        log=Log(every_n_steps=2),
    )
    ra, rb = a.fit(_data()), b.fit(_data())
    assert ra.status == rb.status == "completed"
    assert ra.summary == rb.summary
    for pa, pb in zip(a.raw_model.parameters(), b.raw_model.parameters()):
        assert torch.equal(pa, pb)
    with pytest.raises(TypeError, match=r"max_time.*train=Train\(max_time=\.\.\.\)"):
        _learner(max_time=5)
    with pytest.raises(ValueError, match="train.grad_accumulation must be a whole number of 1 or more"):
        Train(grad_accumulation=0)


def test_a_subclass_s_own_backward_and_optimizer_step_are_the_ones_the_loop_calls():
    calls = {"backward": 0, "optimizer_step": 0}

    class Mine(CoreLearner):
        def backward(self, loss):
            calls["backward"] += 1
            super().backward(loss)

        def optimizer_step(self):
            calls["optimizer_step"] += 1
            return super().optimizer_step()

    learner = _learner(Mine)
    result = learner.fit(_data())
    assert result.status == "completed"
    assert learner.state.step == 4
    assert calls == {"backward": 4, "optimizer_step": 4}
    # the plain Learner takes the fast path: neither is called through the learner
    plain = _learner()
    autocast, backward, step = plain.step_calls()
    assert autocast is None and backward is torch.Tensor.backward and step is None


def test_a_rollback_loads_through_the_learner_s_own_load_state_dict(tmp_path):
    """The guard rolls back with the Learner's load_state_dict: a subclass that saves state of its own
    gets it back on a rollback as on a resume."""
    from tuitrain.core import checkpoint as ckpt

    loaded = []

    class Mine(CoreLearner):
        def state_dict(self):
            return {**super().state_dict(), "mine": self.state.step}

        def load_state_dict(self, data):
            loaded.append(data["mine"])
            super().load_state_dict(data)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(640, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    x[30 * 8 : 31 * 8] *= 300.0  # batch 30 (step 31): a loss far above the 16 before it
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    learner = Mine(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        loss_fn=nn.MSELoss(),
        epochs=1,
        batch_size=8,
        shuffle=False,
        device="cpu",
        watch={"loss_spike": "rollback", "spike_window": 32},
        checkpoint=ckpt.Checkpointer(tmp_path / "checkpoint", every_n_steps=10),
    )
    result = learner.fit(torch.utils.data.TensorDataset(x, y))
    assert result.status == "completed", result.error
    assert learner.health.rollbacks == 1 and learner.state.skip_batches == [[1, 30]]
    assert loaded == [30]  # the step-30 checkpoint, the newest before the spike, read by the subclass

"""The Learner is one class that owns its collaborators (precision, optimization, checkpoints, the health
guard); none of them holds the Learner, and a subclass's own backward or optimizer step is still the one
the loop calls."""

import inspect

import torch
from torch import nn

from tuitrain.core.learner import Learner
from tuitrain.core.learner_checkpoint import Checkpoints
from tuitrain.core.learner_health import HealthGuard
from tuitrain.core.optimization import Optimization, Precision


def _data(n=32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return torch.utils.data.TensorDataset(x, (x.sum(1) > 0).long())


def _learner(cls=Learner, **kw):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    return cls(model, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn=nn.CrossEntropyLoss(), epochs=1,
               batch_size=8, device="cpu", **kw)


def _holds(value, target, depth=0) -> bool:
    """`value` is `target`, a method bound to it, or a container/closure that reaches it."""
    if value is target or getattr(value, "__self__", None) is target:
        return True
    if depth > 2:
        return False
    if isinstance(value, dict):
        return any(_holds(v, target, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple, set)):
        return any(_holds(v, target, depth + 1) for v in value)
    closure = getattr(value, "__closure__", None) or ()
    return any(_holds(c.cell_contents, target, depth + 1) for c in closure)


def test_the_learner_has_no_mixins_and_its_collaborators_do_not_hold_it():
    assert Learner.__bases__ == (object,)
    learner = _learner(clip_grad_norm=1.0)
    parts = {"amp": Precision, "optimization": Optimization, "checkpoints": Checkpoints, "guard": HealthGuard}
    for name, cls in parts.items():
        part = getattr(learner, name)
        assert type(part) is cls
        held = [attr for attr, value in vars(part).items() if _holds(value, learner)]
        assert not held, f"learner.{name} holds the Learner through {held}"
    # each is built from what it works on: no parameter takes the learner
    for cls in parts.values():
        assert "learner" not in inspect.signature(cls).parameters


def test_a_subclass_s_own_backward_and_optimizer_step_are_the_ones_the_loop_calls():
    calls = {"backward": 0, "optimizer_step": 0}

    class Mine(Learner):
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
    autocast, backward, step = plain.loop_parts()
    assert autocast is None and backward is torch.Tensor.backward and step is None


def test_a_rollback_loads_through_the_learner_s_own_load_state_dict(tmp_path):
    """The guard rolls back with the Learner's load_state_dict: a subclass that saves state of its own
    gets it back on a rollback as on a resume."""
    from tuitrain.core import checkpoint as ckpt

    loaded = []

    class Mine(Learner):
        def state_dict(self):
            return {**super().state_dict(), "mine": self.state.step}

        def load_state_dict(self, data):
            loaded.append(data["mine"])
            super().load_state_dict(data)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(640, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    x[30 * 8:31 * 8] *= 300.0  # batch 30 (step 31): a loss far above the 16 before it
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    learner = Mine(model, torch.optim.SGD(model.parameters(), lr=0.01), loss_fn=nn.MSELoss(), epochs=1,
                   batch_size=8, shuffle=False, device="cpu", watch={"loss_spike": "rollback", "spike_window": 32},
                   checkpointer=ckpt.Checkpointer(tmp_path / "checkpoint", every_n_steps=10))
    result = learner.fit(torch.utils.data.TensorDataset(x, y))
    assert result.status == "completed", result.error
    assert learner.health.rollbacks == 1 and learner.state.skip_batches == [[1, 30]]
    assert loaded == [30]  # the step-30 checkpoint, the newest before the spike, read by the subclass

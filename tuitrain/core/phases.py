"""Phases: what one batch does (`step`), and nothing more; the loop that runs them is loop.py.

A phase has a `name`, the metric `split` it reports under, `training` (whether schedulers, clipping and
accumulation apply) and `step(learner, batch) -> StepOutput`. A user's own phase overrides `step`:
a `TrainPhase` subclass changes the forward and loss (tuitrain still does the backward and the optimizer
step); a `CustomTrainPhase` subclass does its own backward and optimizer steps with `learner.backward`
and `learner.step_optimizer(name)` (GANs, several models); a `ValidPhase` subclass computes its metrics.
A step may return a dict: "loss" plus named values that metrics of those names log. `pair_step` is the
default step of an (inputs, targets) batch, the one copy every loop uses.
Cancelling is done with the typed exceptions below. Must not import textual.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch

from .batches import batch_size_of, mapping_step, tokens_of
from .metrics import StepOutput


class PhaseLearner(Protocol):
    """What a phase's own code reads of the learner it is given (a `CoreLearner`, learner.py, which
    imports this module: a type import back would be an import circle). A user's step may use all of it."""

    @property
    def model(self) -> Any: ...  # the model the phases call now (DDP's wrapper while training)

    @property
    def raw_model(self) -> torch.nn.Module: ...

    @property
    def loss_fn(self) -> Any: ...  # None: no loss function


def pair_step(
    model: Callable[[Any], Any], loss_fn: Callable[[Any, Any], Any], batch: Any
) -> tuple[Any, Any, Any] | None:
    """The default step of an (inputs, targets) batch: (loss, output, target); None for another shape."""
    if (type(batch) is tuple or type(batch) is list) and len(batch) == 2:
        inputs, target = batch
        output = model(inputs)
        return loss_fn(output, target), output, target
    return None


class Phase:
    name = "phase"
    split = "train"
    training = True

    def step(self, learner: PhaseLearner, batch: Any) -> StepOutput:
        """One batch: the model's own train_step/valid_step, or (inputs, targets) with the loss target."""
        model = learner.model
        own = self.own_step(learner)
        if own is not None:
            return StepOutput.of(own(batch))
        if isinstance(batch, Mapping):  # Hugging Face style: model(**batch) returns its own loss
            return mapping_step(model, batch, learner.loss_fn)
        if not isinstance(batch, (list, tuple)) or len(batch) != 2:
            raise TypeError(
                "the default step expects batches of (inputs, targets) or mappings of model "
                "arguments; give the model train_step/valid_step methods for other batch shapes"
            )
        if learner.loss_fn is None:
            raise ValueError("no loss function: set [loss] target or give the model a train_step")
        pair = pair_step(model, learner.loss_fn, batch)
        assert pair is not None  # an (inputs, targets) batch, as checked above
        return StepOutput(*pair)

    def plain_parts(self, learner: PhaseLearner) -> tuple[Callable[[Any], Any], Callable[[Any, Any], Any]] | None:
        """(model, loss function) when batches take the default (inputs, targets) step; else None."""
        if type(self).step is not Phase.step or self.own_step(learner) is not None or learner.loss_fn is None:
            return None
        return learner.model, learner.loss_fn

    def own_step(self, learner: PhaseLearner) -> Callable[[Any], Any] | None:
        # looked up once per model: nn.Module.__getattr__ raising for a missing name costs microseconds
        raw = learner.raw_model
        cached = self.__dict__.get("_own")
        if cached is None or cached[0] is not raw:
            cached = (raw, getattr(raw, "train_step" if self.training else "valid_step", None))
            self._own = cached
        return cached[1]

    def items_of(self, out: StepOutput, batch: Any) -> int:
        if out.items:
            return out.items
        if isinstance(out.target, torch.Tensor) and out.target.dim():
            return out.target.numel() if self.count_tokens else out.target.shape[0]
        if self.count_tokens:
            return tokens_of(batch)
        return batch_size_of(batch)

    #: throughput counts tokens (a target's elements) instead of samples (set by the Learner)
    count_tokens = False
    #: the step does its own backward and optimizer steps (a training phase's)
    manual_optimization = False


class TrainPhase(Phase):
    name = "train"
    split = "train"
    training = True
    #: the step does its own backward and optimizer steps; one batch is one training step
    manual_optimization = False


class CustomTrainPhase(TrainPhase):
    """A training phase whose `step` runs the optimization itself, for several models or optimizers::

        class GANPhase(CustomTrainPhase):
            def step(self, learner, batch):
                learner.zero_grad()
                d_loss = ...  # with learner.models["discriminator"], learner.models["generator"]
                learner.backward(d_loss)
                learner.step_optimizer("discriminator")  # clipping, scaler, zero_grad, its scheduler
                ...
                return {"loss": g_loss + d_loss, "g_loss": g_loss, "d_loss": d_loss}

    Each batch is one training step (counted, logged, checkpointed and resumable like any other);
    train.grad_accumulation does not apply. Return a loss tensor, a dict or a StepOutput.
    """

    manual_optimization = True

    def step(self, learner: PhaseLearner, batch: Any) -> StepOutput:
        raise NotImplementedError("a CustomTrainPhase defines step(learner, batch)")


class ValidPhase(Phase):
    name = "valid"
    split = "valid"
    training = False

"""`Strategy`: how a Learner trains across processes, as one small protocol with three peers.

`Strategy` itself is one process (every hook does nothing); `DDPStrategy` (ddp.py) and `FSDPStrategy`
(fsdp.py) are the others. The Learner is one class: it calls these hooks where a rank's training
differs, and knows nothing else of ranks. The hooks:

- `prepare_model(model)`: before the optimizer is built (FSDP shards the parameters in place);
- `bind(learner)`: once the Learner is built (DDP wraps the model; metrics are summed over ranks);
- `interrupter(inbox, stage)`: the loop's control flags (across ranks, agreed: agreement.py);
- `loaders(learner, train, valid)`: this rank's share of the data;
- `before_micro_batch(learner)`: gradients synchronized only on the micro-batch that steps;
- `save_checkpoint(learner, reason)`: True when it wrote (or, on a rank that does not write, joined)
  the checkpoint itself; False lets the Learner write its one file;
- `extra_state(learner, d)` / `check_resume(data)` / `after_load(learner, data)`: what a checkpoint
  holds beyond one process's state, and restoring it;
- `save_model(learner)`: True when it wrote model.pt itself.
`writes`: this process writes the run's files (rank 0); `solo_boundaries`: the loop may visit a step
boundary on its own (in one process; ranks enter boundaries together).
Must not import textual, nor torch.distributed (one process never loads it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from collections.abc import Callable

if TYPE_CHECKING:
    import torch

    from ..control import Interrupter
    from ..data import ResumableLoader

#: the hooks' `learner` is a CoreLearner (learner.py), typed Any: learner.py imports this module, and a
#: type import back would be the import circle tests/test_layers.py forbids
Learner = Any
Loaders = tuple["ResumableLoader | None", "ResumableLoader | None"]


class Strategy:
    """One process: the Learner's defaults (see the module docstring)."""

    name = "single"
    rank = 0
    world_size = 1
    device: Any = None  # the device this strategy trains on (None: the Learner's own choice)
    writes = True
    solo_boundaries = True

    def prepare_model(self, model: torch.nn.Module) -> None:
        pass

    def bind(self, learner: Learner) -> None:
        pass

    def interrupter(self, inbox: Interrupter, stage: Callable[[], str]) -> Interrupter:
        return inbox

    def loaders(self, learner: Learner, train: ResumableLoader | None, valid: ResumableLoader | None) -> Loaders:
        return train, valid

    def before_micro_batch(self, learner: Learner) -> None:
        pass

    def save_checkpoint(self, learner: Learner, reason: str) -> bool:
        return False

    def extra_state(self, learner: Learner, d: dict[str, Any]) -> dict[str, Any]:
        return d

    def check_resume(self, data: dict[str, Any]) -> None:
        pass

    def after_load(self, learner: Learner, data: dict[str, Any]) -> None:
        pass

    def save_model(self, learner: Learner) -> bool:
        return False

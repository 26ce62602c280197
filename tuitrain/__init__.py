"""tuitrain: a PyTorch training loop you can watch.

The public API. Attributes load lazily so that `tuitrain --help` does not import torch; this package
never imports textual (the dashboard lives in tuitrain.dashboard and is imported only to open one).

The layers, each importing only those above it in this list (tests/test_layers.py keeps it true):
  core/       the training engine: CoreLearner, the loop, lifecycle, sections, phases, events, control,
              checkpoints, metrics, strategies/
  sinks/      what consumes the event stream: run-directory files, the headless console, TensorBoard
  dashboard/  the Textual app, fed by the same events (live, or from a run's events.jsonl)
  config/     TOML -> a checked Config: schema, loading and --set, targets, validation
  run/        a run from a config or a script: build, run directory, launch and supervise ranks
  cli.py      the `tuitrain` command
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Learner": "tuitrain.run.learner",
    "Monitor": "tuitrain.run.monitor",
    "FitResult": "tuitrain.core.learner",
    "TrainState": "tuitrain.core.learner",
    "TrainPhase": "tuitrain.core.phases",
    "CustomTrainPhase": "tuitrain.core.phases",
    "ValidPhase": "tuitrain.core.phases",
    "Phase": "tuitrain.core.phases",
    "CancelStep": "tuitrain.core.state",
    "CancelEpoch": "tuitrain.core.state",
    "CancelFitting": "tuitrain.core.state",
    "StepOutput": "tuitrain.core.state",
    "Experiment": "tuitrain.core.sections",
    "Train": "tuitrain.core.sections",
    "Data": "tuitrain.core.sections",
    "Metrics": "tuitrain.core.sections",
    "Log": "tuitrain.core.sections",
    "Checkpointing": "tuitrain.core.sections",
    "Watch": "tuitrain.core.health",
    "Metric": "tuitrain.core.metrics",
    "Interrupter": "tuitrain.core.control",
    "Checkpointer": "tuitrain.core.checkpoint",
    "load_checkpoint": "tuitrain.core.checkpoint",
    "EarlyStopping": "tuitrain.core.early_stopping",
    "CallbackBase": "tuitrain.core.callbacks",
    "load_config": "tuitrain.config",
    "ConfigError": "tuitrain.config",
    "prepare_run": "tuitrain.run.runner",
    "events": "tuitrain.core.events",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tuitrain' has no attribute {name!r}")
    mod = importlib.import_module(module)
    value = mod if name == "events" else getattr(mod, name)
    globals()[name] = value
    return value

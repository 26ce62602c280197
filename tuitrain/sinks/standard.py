"""The sinks every run directory gets: events.jsonl, metric files, experiment.log and run.json."""

from __future__ import annotations

import os
from pathlib import Path

from tuitrain.core.callbacks import Callback
from tuitrain.sinks.experiment_log import ExperimentLog
from tuitrain.sinks.jsonl import JsonlWriter
from tuitrain.sinks.metric_files import MetricFileLogger
from tuitrain.sinks.run_status import RunStatusWriter


def standard_sinks(run_dir: str | os.PathLike[str], tensorboard: bool = False) -> list[Callback]:
    run_dir = Path(run_dir)
    sinks: list[Callback] = [
        JsonlWriter(run_dir, background=False),
        MetricFileLogger(run_dir),
        ExperimentLog(run_dir),
        RunStatusWriter(run_dir),
    ]
    if tensorboard:
        from tuitrain.sinks.tensorboard import TensorBoardSink

        sinks.append(TensorBoardSink(run_dir))
    return sinks

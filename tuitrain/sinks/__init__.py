"""Sinks: everything that consumes the event stream and writes it somewhere (files, the headless
console, TensorBoard). Each is a callable `(event, state) -> None` with `close()`.

Must not import textual; torch only lazily (TensorBoardSink's constructor).
"""

from tuitrain.sinks.console import HeadlessConsole
from tuitrain.sinks.experiment_log import ExperimentLog
from tuitrain.sinks.jsonl import JsonlWriter
from tuitrain.sinks.metric_files import MetricFileLogger
from tuitrain.sinks.run_status import RunStatusWriter, is_live, live_status, read_run
from tuitrain.sinks.summary import format_duration, format_summary_table, format_value
from tuitrain.sinks.tensorboard import TensorBoardSink

__all__ = [
    "ExperimentLog",
    "HeadlessConsole",
    "JsonlWriter",
    "MetricFileLogger",
    "RunStatusWriter",
    "TensorBoardSink",
    "format_duration",
    "format_summary_table",
    "format_value",
    "is_live",
    "live_status",
    "read_run",
]

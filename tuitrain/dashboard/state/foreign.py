"""A run read from another tool's log (issue 54): which tool wrote it, and the words that say only what
such a log tells. tuitrain does not know whether another tool's training completed, only that its log
ends (MLflow's and W&B's logs record the run's end: theirs is said as theirs); and such a log has no
device samples or checkpoints of tuitrain's.

`RunStarted.loop` names the loop that wrote a run: "" tuitrain's own, "monitor", "lightning",
"transformers"; a reader of another tool's logs puts its tool there (`FOREIGN_LOOPS`). Must not import
textual.
"""

from __future__ import annotations

#: RunStarted.loop of a run read from another tool's log -> its reader's TOOL (tuitrain/sources/registry.py).
#: The Lightning CSVLogger reader's loop is "lightning_csv": its TOOL, "lightning", is the Lightning
#: integration's loop (a live run of tuitrain's own Lightning callback)
FOREIGN_LOOPS = {
    "tensorboard": "tensorboard",
    "lightning_csv": "lightning",
    "mlflow": "mlflow",
    "trackio": "trackio",
    "wandb": "wandb",
}
#: tools whose log records how the run ended (MLflow's FINISHED, W&B's exit record)
ENDS_RECORDED = frozenset({"mlflow", "wandb"})
#: a foreign run's state once its reader read its log to the end, the writer gone
LOG_ENDED = "log ended"
#: its state while its reader reads a log whose writer has stopped (not "live")
READING = "reading log"


def tool_of_loop(loop: str) -> str:
    """The tool whose log a run was read from ("" for a run of tuitrain's own loops)."""
    return FOREIGN_LOOPS.get(loop, "")


def tool_of_source(source) -> str:
    """The tool of a source's run, from its `ref` (refs.py's `RunRef`), before its first event; ""
    for tuitrain's own runs and sources without a ref."""
    tool = getattr(getattr(source, "ref", None), "tool", "")
    return tool if isinstance(tool, str) and tool != "tuitrain" else ""


def tool_label(tool: str) -> str:
    """The tool's name in lines ("TensorBoard"), as the registry says it."""
    from tuitrain.sources.registry import label

    return label(tool)


def final_of(tool: str, status: str) -> str:
    """A run's state word once its RunFinished came: a foreign log that ends without saying how the run
    ended is LOG_ENDED, never "completed"."""
    status = status or "completed"
    if tool and status == "completed" and tool not in ENDS_RECORDED:
        return LOG_ENDED
    return status


def absent_line(tool: str) -> str:
    """The line of a panel whose content a foreign log never has (devices, checkpoints), under the
    panel's title: "not in TensorBoard logs", short enough for the panel at 80x24."""
    return f"not in {tool_label(tool)} logs"


__all__ = [
    "ENDS_RECORDED",
    "FOREIGN_LOOPS",
    "LOG_ENDED",
    "READING",
    "absent_line",
    "final_of",
    "tool_label",
    "tool_of_loop",
    "tool_of_source",
]

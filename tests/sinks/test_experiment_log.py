import re
import time

from sink_run import T0, feed, run_events
from tuitrain.core.events import (
    CheckpointFailed,
    ControlReceived,
    OutputPrinted,
    RunFailed,
    RunPaused,
    RunResumed,
)
from tuitrain.sinks.experiment_log import ExperimentLog
from tuitrain.sinks.summary import format_summary_table

STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} "


def messages(path):
    """The log's entries without timestamps; continuation lines keep their indent."""
    return [re.sub("^" + STAMP, "", line) for line in path.read_text().splitlines()]


def test_a_completed_run_reads_well(tmp_path):
    log = ExperimentLog(tmp_path)
    feed(log, run_events(tmp_path))
    log.close()
    text = (tmp_path / "experiment.log").read_text()
    first = text.splitlines()[0]
    assert first.startswith(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(T0)) + ".000 INFO  run started")
    m = messages(tmp_path / "experiment.log")
    assert f"INFO  run started: experiment 'spirals' in {tmp_path} (pid " in m[0]
    assert m[2] == 'INFO  env: python=3.11.4, torch=2.13.0, devices=["cpu"]'
    assert (
        "INFO  epoch 2/2 done in 0:00:20 at step 8: train/loss 0.3021 · train/accuracy 0.9453 · "
        "valid/loss 0.3000 · valid/accuracy 0.8000"
    ) in m
    assert "INFO  [stdout] epoch 1 says hi" in m and "INFO  [stdout] second line" in m
    assert (
        "INFO  checkpoint saved: checkpoint/epoch-2.pt (2.0 KB, epoch 2, step 8, epoch, best; "
        "stall 0.010s, write 0.250s)"
    ) in m
    assert "INFO  checkpoint deleted: checkpoint/epoch-0.pt" in m
    end = m.index("INFO  run completed (epochs) at epoch 2, step 8 after 0:00:45, exit code 0")
    assert m[end + 1] == "INFO  best checkpoint: checkpoint/epoch-2.pt (valid/loss 0.3000)"
    assert m[end + 2] == "INFO  summary:"
    table = format_summary_table(run_events(tmp_path)[-1].summary).splitlines()
    assert m[end + 3 :] == ["    " + line for line in table]


def test_failure_control_and_append(tmp_path):
    log = ExperimentLog(tmp_path)
    log(ControlReceived(command="stop", source="signal", detail="SIGTERM"))
    log(RunPaused(epoch=1, step=3))
    log(RunResumed(epoch=1, step=3, paused_for=75.0))
    log(CheckpointFailed(epoch=1, step=3, error="OSError: disk full", reason="request"))
    log.close()
    log = ExperimentLog(tmp_path)  # a second process appends
    log(OutputPrinted(text="careful", stream="stderr"))
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad shape\n'
    log(RunFailed(error="ValueError: bad shape", traceback=tb, epoch=1, step=3, duration=5.0))
    log.close()
    assert messages(tmp_path / "experiment.log") == [
        "INFO  control: stop from signal (SIGTERM)",
        "INFO  paused at epoch 1, step 3",
        "INFO  resumed at epoch 1, step 3 after 0:01:15",
        "WARN  checkpoint failed at epoch 1, step 3 (request): OSError: disk full",
        "WARN  [stderr] careful",
        "ERROR run failed at epoch 1, step 3 after 0:00:05, exit code 1: ValueError: bad shape",
        "ERROR traceback:",
        "    Traceback (most recent call last):",
        '      File "x.py", line 1',
        "    ValueError: bad shape",
    ]


def test_each_entry_is_on_disk_before_close(tmp_path):
    log = ExperimentLog(tmp_path)
    log(OutputPrinted(text="one"))
    assert (tmp_path / "experiment.log").read_text().endswith("INFO  [stdout] one\n")
    log.close()

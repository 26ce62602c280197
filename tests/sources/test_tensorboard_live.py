"""A TensorBoard run still being written: followed, each flushed value handed on within 2 s; not live
once its writer process is gone."""

from __future__ import annotations

import textwrap
import threading
import time
from pathlib import Path

from tests.conftest import cli_env, python_popen
from tuitrain.core.events import RunFinished, RunStarted
from tuitrain.sources import tensorboard as tb
from tuitrain.sources.run_files import MetricsBlock

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from torch.utils.tensorboard import SummaryWriter

    folder, signals = sys.argv[1], Path(sys.argv[2])
    w = SummaryWriter(folder, flush_secs=3600)
    for i in range(1, 4):
        w.add_scalar("loss", float(i), i)
        w.add_text("note", f"text {i}", i)
        w.flush()
        (signals / "flushing").write_text(repr(time.time()))  # then renamed: the test never reads it half-written
        (signals / "flushing").replace(signals / f"flushed-{i}")
        while not (signals / f"go-{i}").exists():
            time.sleep(0.02)
    w.close()
    """
)


def _wait(predicate, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_a_summarywriter_run_followed_live(tmp_path):
    folder, signals = tmp_path / "run", tmp_path / "signals"
    signals.mkdir()
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    # the writer imports torch: started from the suite's fork server (conftest.python_popen)
    proc = python_popen([script, folder, signals], tmp_path, cli_env())
    try:
        assert _wait(lambda: (signals / "flushed-1").exists(), 120), "the writer never flushed"
        (ref,) = tb.find_runs(folder)
        assert tb.is_live(ref)  # its process holds the file open for writing
        events: list = []
        lock = threading.Lock()

        def emit(e, s=None):
            with lock:
                events.append(e)

        def values() -> list[float]:
            with lock:
                blocks = [e for e in events if isinstance(e, MetricsBlock)]
            return [v for b in blocks for v in b.series.get(("train", "step", "loss"), ((), []))[1]]

        source = tb.open_source(ref)
        assert source.live
        source.open(emit)
        worker = threading.Thread(target=source.work, daemon=True)
        worker.start()
        try:
            for i in range(1, 4):
                assert _wait(lambda i=i: (signals / f"flushed-{i}").exists(), 60)
                flushed = float((signals / f"flushed-{i}").read_text())
                assert _wait(lambda i=i: len(values()) >= i, 5), f"value {i} never came"
                lag = time.time() - flushed
                assert lag < 2.0, f"value {i} came {lag:.2f} s after its flush"
                assert values() == [float(k) for k in range(1, i + 1)]
                (signals / f"go-{i}").write_text("")
            assert proc.wait(60) == 0
            assert _wait(lambda: not source.live, 5), "still called live after its writer ended"
            assert _wait(lambda: any(isinstance(e, RunFinished) for e in list(events)), 2)
            assert not tb.is_live(ref)
            assert isinstance(events[0], RunStarted) and source.problems == []
            texts = [e.text for e in events if getattr(e, "kind", "") == "text"]
            assert texts == ["text 1", "text 2", "text 3"]
        finally:
            source.close()
            worker.join(5)
    finally:
        proc.kill()
        proc.wait()


def test_a_file_not_written_here_is_live_while_it_changes(tmp_path):
    import os
    import socket

    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path))
    w.add_scalar("loss", 1.0, 1)
    w.close()
    (path,) = tmp_path.glob("events.out.tfevents.*")
    host = socket.gethostname()
    assert f".{host}." in path.name
    (ref,) = tb.find_runs(tmp_path)
    assert tb.is_live(ref)  # its writer's process (this one) runs, and wrote just now
    old = time.time() - tb.LIVE_SECONDS - 5
    os.utime(path, (old, old))
    assert not tb.is_live(ref)  # it runs, but has not written for longer than a writer's flushes take
    os.utime(path)
    moved = path.rename(path.with_name(path.name.replace(f".{host}.", ".another-machine.")))
    assert tb.is_live(ref)  # changed just now, by a machine we cannot see into (a shared disk)
    os.utime(moved, (old, old))
    assert not tb.is_live(ref)


def test_a_new_file_of_the_folder_is_read(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path), filename_suffix=".a")
    w.add_scalar("loss", 1.0, 1)
    w.close()
    (ref,) = tb.find_runs(tmp_path)
    events: list = []
    source = tb.open_source(ref, live=True)
    source.open(lambda e, s=None: events.append(e))
    source.read_to_end()
    time.sleep(1.1)  # the second session's file named a second later
    w = SummaryWriter(str(tmp_path), filename_suffix=".b")
    w.add_scalar("loss", 2.0, 2)
    w.close()
    assert source.read_to_end()
    got = [v for e in events if isinstance(e, MetricsBlock) for v in e.series[("train", "step", "loss")][1]]
    assert got == [1.0, 2.0]
    assert Path(ref.path) == tmp_path

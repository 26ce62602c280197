"""tuitrain's own run directories as a reader module (tuitrain/sources/own_runs.py): the runs a path is or
holds, nested folders too, an experiment folder's newest first; a run's source and whether it is live. The
run folders are written by the run's own sinks (`JsonlWriter`, `RunStatusWriter`: write_trial)."""

from __future__ import annotations

import threading
import time

from tests.dashboard.test_sweep_watch import write_trial
from tuitrain.core.events import RunStarted
from tuitrain.sources import own_runs, registry
from tuitrain.sources.run_files import FileSource, MetricsBlock


def test_runs_at_or_under_a_path_newest_first_their_own_folders_not_searched(tmp_path):
    a = tmp_path / "runs" / "exp-a"
    old = write_trial(a, 1, lr=0.1, hidden=8, valid=[0.5], end="completed")
    new = write_trial(a, 2, lr=0.01, hidden=8, valid=[0.6], end="completed")
    other = write_trial(tmp_path / "runs" / "exp-b" / "deeper", 3, lr=0.2, hidden=8, valid=[0.4], end="completed")
    (old / "checkpoint" / "nested-looking").mkdir(parents=True)
    (old / "checkpoint" / "nested-looking" / "run.json").write_text("{}")  # inside a run: not a run
    lost = tmp_path / "runs" / "exp-a" / "trial-0000"  # a run whose run.json was lost: its checkpoint folder
    (lost / "checkpoint").mkdir(parents=True)

    assert [r.path for r in own_runs.find_runs(a)] == [new, old, lost]  # an experiment folder: newest name first
    found = own_runs.find_runs(tmp_path / "runs")
    assert [r.path for r in found] == [new, old, lost, other]
    assert [r.name for r in found] == [
        "exp-a/trial-0002",
        "exp-a/trial-0001",
        "exp-a/trial-0000",
        "exp-b/deeper/trial-0003",
    ]
    assert all(r.tool == own_runs.TOOL == "tuitrain" for r in found)
    assert [r.path for r in own_runs.find_runs(new)] == [new]  # a run itself
    assert own_runs.find_runs(tmp_path / "nothing") == [] and own_runs.find_runs(new / "events.jsonl") == []


def test_a_run_opens_as_the_file_source_live_while_its_process_runs(tmp_path):
    done = write_trial(tmp_path, 1, lr=0.1, hidden=8, valid=[0.5, 0.7], end="completed")
    going = write_trial(tmp_path, 2, lr=0.1, hidden=8, valid=[0.5], end=None)  # run.json's pid: this process
    assert not own_runs.is_live(own_runs.find_runs(done)[0])
    assert own_runs.is_live(own_runs.find_runs(going)[0])
    source = registry.open_source(own_runs.find_runs(going)[0])
    assert isinstance(source, FileSource) and source.live and source.run_dir == going
    got: list = []
    source.open(lambda e, s=None: got.append(e))
    worker = threading.Thread(target=source.work, daemon=True)
    worker.start()
    for _ in range(200):
        if source.caught_up:
            break
        time.sleep(0.02)
    source.close()
    worker.join(5)
    assert isinstance(got[0], RunStarted)
    valid = [
        float(y)
        for e in got
        if isinstance(e, MetricsBlock)
        for (split, _, name), (_, ys) in e.series.items()
        if split == "valid" and name == "accuracy"
        for y in ys
    ]
    assert valid == [0.5]

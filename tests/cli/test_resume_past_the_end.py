"""A resume whose checkpoint is already past the config's `train.epochs` or `train.max_steps` is refused
before anything is written: exit 2, one line naming the checkpoint's epoch and step, the config's limit
and the `--set` that continues it (issue 51: it said "training completed: all N epochs done", exit 0, and
wrote a checkpoint named with the config's epochs at the old step). Exactly at the end (a completed run
resumed as it was) the run ends at once, completed: tests/dashboard/test_resumed_history.py shows it."""

from __future__ import annotations

import sys

import pytest

from tuitrain.cli import main


def snapshot(run_dir):
    return {p.relative_to(run_dir): (p.stat().st_size, p.stat().st_mtime_ns) for p in run_dir.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def stopped(make_tiny):
    """A run of 6 epochs (7 steps each) that ended at max_steps 10, in epoch 2 (trained in this process, as
    `tuitrain run` trains it: the tests resume it through the CLI)."""
    from tuitrain.run.runner import prepare_run

    tiny = make_tiny("past")
    try:
        assert prepare_run(tiny.config, ["train.epochs=6", "train.max_steps=10"], headless=True).execute() == 0
    finally:
        sys.modules.pop("tinyproj", None)
    (run,) = tiny.run_dirs()
    return tiny, run


def refused(tiny, run, capsys, monkeypatch, *sets):
    monkeypatch.chdir(tiny.root)
    before = snapshot(run)
    args = ["run", str(tiny.config), "--headless", "--resume", "latest"]
    for s in sets:
        args += ["--set", s]
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert "Traceback" not in out + err and "completed" not in out + err
    assert len(err.strip().splitlines()) == 1, err
    assert snapshot(run) == before  # nothing written: no checkpoint, no events, run.json as it was
    assert tiny.run_dirs() == [run]
    return err


def test_past_the_configs_epochs_is_refused_with_the_set_that_continues(stopped, capsys, monkeypatch, forget_tinyproj):
    tiny, run = stopped
    err = refused(tiny, run, capsys, monkeypatch, "train.epochs=1", "train.max_steps=0")
    assert "epoch 2, step 10" in err and "train.epochs = 1" in err
    assert "--set train.epochs=6" in err  # the epochs it was started with


def test_past_the_configs_max_steps_is_refused(stopped, capsys, monkeypatch, forget_tinyproj):
    tiny, run = stopped
    err = refused(tiny, run, capsys, monkeypatch, "train.epochs=6", "train.max_steps=8")
    assert "step 10" in err and "train.max_steps = 8" in err and "--set train.max_steps=" in err


def test_a_finished_run_resumed_as_it_was_ends_at_once_and_names_no_epoch_it_did_not_train(
    make_tiny, capsys, monkeypatch, forget_tinyproj
):
    tiny = make_tiny("done")
    monkeypatch.chdir(tiny.root)
    assert main(["run", str(tiny.config), "--headless"]) == 0, capsys.readouterr()  # 3 epochs, completed
    (run,) = tiny.run_dirs()
    assert main(["run", str(tiny.config), "--headless", "--resume", "latest"]) == 0, capsys.readouterr()
    names = sorted(p.name for p in (run / "checkpoint").glob("*.pt"))
    assert names and all(n.startswith("epoch-0003-step-00000021") or "-0003-" not in n for n in names), names
    assert not [n for n in names if n.startswith("epoch-0004")]


def test_a_resume_with_epochs_left_still_runs(stopped, capsys, monkeypatch, forget_tinyproj):
    tiny, run = stopped
    r = tiny.cli("run", tiny.config, "--resume", "latest", "--set", "train.epochs=3")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "resumed from" in r.stdout

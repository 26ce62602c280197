"""A resume whose checkpoint the config's model or optimizer cannot load is refused before anything is
written: exit 2, one line naming the checkpoint and the first parameter that differs with both shapes (or
the optimizer's parameter groups), and the run directory byte for byte as it was (newcomer defects: it
failed in training with a raw "size mismatch" traceback, after run.json had become "failed, step 0" and
config.toml had been rewritten). `--resume RUN_DIR` and `--resume latest` treat one checkpoint alike."""

from __future__ import annotations

import sys

import pytest

from tuitrain.cli import main


def files(folder):
    """Every file's bytes and every folder (as None) under `folder`."""
    return {p.relative_to(folder): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def runs(make_tiny):
    """An interrupted run (stopped at its first step), then a completed one of 1 epoch (7 steps): trained in
    this process, as `tuitrain run` trains them; the tests resume them through the CLI."""
    from tuitrain.run.runner import prepare_run

    tiny = make_tiny("fit")
    try:
        stopped = prepare_run(tiny.config, ["train.epochs=2"], headless=True)
        stopped.interrupter.request_stop("api")
        assert stopped.execute() == 130
        (interrupted,) = tiny.run_dirs()
        assert prepare_run(tiny.config, ["train.epochs=1"], headless=True).execute() == 0
    finally:
        sys.modules.pop("tinyproj", None)
    (done,) = [p for p in tiny.run_dirs() if p != interrupted]
    return tiny, interrupted, done


def resume(tiny, spec, *sets, run_dir=None):
    args = ["run", str(tiny.config), "--headless", "--resume", str(spec)]
    args += ["--run-dir", str(run_dir)] if run_dir else []
    for s in sets:
        args += ["--set", s]
    return main(args)


def refused(tiny, capsys, spec, *sets, run_dir=None):
    """`--resume spec` with `sets`: exit 2, one line on stderr, no run directory touched or added."""
    before = {run: files(run) for run in tiny.run_dirs()}
    code = resume(tiny, spec, *sets, run_dir=run_dir)
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert "Traceback" not in out + err and "size mismatch" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert {run: files(run) for run in tiny.run_dirs()} == before  # run.json, config.toml, events, checkpoints
    return err.strip()


def test_a_model_that_does_not_fit_the_checkpoint_is_refused_and_nothing_changes(
    runs, capsys, monkeypatch, forget_tinyproj
):
    tiny, interrupted, done = runs
    monkeypatch.chdir(tiny.root)
    cases = [
        (done, done),  # a completed run, by its folder
        ("latest", done),
        (next((done / "checkpoint").glob("*.pt")), done),  # a checkpoint file
        (interrupted, interrupted),  # an interrupted run
    ]
    for spec, run in cases:
        err = refused(tiny, capsys, spec, "model.hidden=8")
        assert "net.0.weight is [16, 4] in the checkpoint and [8, 4] in this config's model" in err, err
        assert str(run / "checkpoint" / "epoch-") in err and ".pt does not fit this config" in err, err
        assert str(run / "config.toml") in err, err
    # `--resume auto` continues the unfinished run placed in --run-dir: refused alike
    err = refused(tiny, capsys, "auto", "model.hidden=8", run_dir=interrupted)
    assert err.startswith("tuitrain: error: --resume auto: ") and str(interrupted) in err, err
    assert "net.0.weight is [16, 4]" in err, err


def test_a_model_the_meta_device_cannot_build_is_refused_once_built_and_nothing_changes(
    runs, capsys, monkeypatch, forget_tinyproj
):
    """Where the check before the run cannot build the model (on the meta device), the run checks the model it
    built, before training: refused alike, the run directory as it was (config.toml put back)."""
    import tuitrain.run.runner as runner

    tiny, _, done = runs
    monkeypatch.chdir(tiny.root)
    monkeypatch.setattr(runner, "resume_mismatch", lambda cfg, data: None)
    # what the model prints as it is built goes to the run's events and log: cut back with the rest
    (tiny.root / "loud.py").write_text(
        "import tinyproj\n\ndef Net(**kw):\n    print('building')\n    return tinyproj.Net(**kw)\n"
    )
    try:
        err = refused(tiny, capsys, "latest", "model.hidden=8", "model.target=loud:Net")
    finally:
        sys.modules.pop("loud", None)
    assert "--resume latest: " in err and "net.0.weight is [16, 4] in the checkpoint and [8, 4]" in err, err


def test_an_optimizer_whose_parameter_groups_differ_is_refused(runs, capsys, monkeypatch, forget_tinyproj):
    tiny, _, done = runs
    monkeypatch.chdir(tiny.root)
    err = refused(tiny, capsys, done, 'optimizer.no_decay=["bias"]')
    assert "its optimizer has 1 parameter group, this config's has 2" in err, err


def test_past_the_end_a_run_s_folder_is_refused_as_latest_is(runs, capsys, monkeypatch, forget_tinyproj):
    tiny, _, done = runs
    monkeypatch.chdir(tiny.root)
    by_path = refused(tiny, capsys, done, "train.max_steps=5")
    by_latest = refused(tiny, capsys, "latest", "train.max_steps=5")
    assert "nothing is left to train" in by_path
    assert by_path.replace(f"--resume {done}:", "--resume latest:") == by_latest


def test_at_the_end_a_run_s_folder_ends_at_once_as_latest_does(runs, capsys, monkeypatch, forget_tinyproj):
    """A completed run resumed with its own config: by its folder as by `latest`, it ends at once, completed
    (tests/cli/test_resume_past_the_end.py), and writes no checkpoint. Last here: it adds a session to the run."""
    tiny, _, done = runs
    monkeypatch.chdir(tiny.root)
    checkpoints = sorted((done / "checkpoint").glob("*.pt"))
    for spec in (done, "latest"):
        assert resume(tiny, spec, "train.epochs=1") == 0, capsys.readouterr()
        out = capsys.readouterr().out
        assert "training completed: all 1 epochs done" in out and "epoch 1 · step 7" in out, out
        assert sorted((done / "checkpoint").glob("*.pt")) == checkpoints


def test_in_a_run_a_checkpoint_that_does_not_fit_fails_with_one_line_naming_what_differs():
    """Where no check before the run could tell (the Python API; a model the meta device cannot build), the
    load says in one line what differs, not torch's list of every size mismatch."""
    import torch
    from torch import nn

    from tuitrain.core.learner import CoreLearner

    def learner(out, groups=1):
        model = nn.Linear(4, out)
        params = [{"params": [model.weight]}, {"params": [model.bias]}] if groups == 2 else model.parameters()
        return CoreLearner(model, torch.optim.SGD(params, lr=0.1), loss_fn=nn.CrossEntropyLoss(), device="cpu")

    saved = learner(2).state_dict()
    with pytest.raises(ValueError, match=r"fit this run: weight is \[2, 4\] in the checkpoint and \[3, 4\] in this "):
        learner(3).load_state_dict(saved)
    with pytest.raises(ValueError, match="its optimizer has 1 parameter group, this run's has 2"):
        learner(2, groups=2).load_state_dict(saved)

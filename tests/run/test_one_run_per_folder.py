"""One run per folder: a run directory named by `Learner(run_dir=)`, `Monitor(run_dir=)` or `--run-dir`
that holds a run already is not appended to; the new run goes to `DIR-2` (`-3` ...), and a resume
continues a run in its own folder."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

import tuitrain
from tests.conftest import read_events
from tuitrain.cli import main


def _data(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long())


def _learner(run_dir, epochs=2):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    return tuitrain.Learner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.CrossEntropyLoss(),
        batch_size=16,
        epochs=epochs,
        log_every_n_steps=1,
        run_dir=run_dir,
    )


def _starts(run_dir: Path) -> list[dict]:
    return [e for e in read_events(run_dir) if e["event"] == "RunStarted"]


def _steps(log: Path) -> list[int]:
    return [int(line.split()[0]) for line in log.read_text().splitlines()]


def test_claim_run_dir_picks_the_next_free_sibling(tmp_path):
    from tuitrain.run.directories import claim_run_dir, claimed_runs

    d = tmp_path / "exp"
    assert claim_run_dir(d) == d  # missing: itself
    d.mkdir()
    (d / "notes.txt").write_text("not a run")
    assert claim_run_dir(d) == d  # no run in it (`tuitrain run` refuses a folder that is not empty)
    (d / "run.json").write_text("{}")
    assert claim_run_dir(d) == tmp_path / "exp-2"
    (tmp_path / "exp-2").mkdir()
    assert claim_run_dir(d) == tmp_path / "exp-2"  # empty: free
    (tmp_path / "exp-2" / "events.jsonl").write_text("")
    (tmp_path / "exp-3").mkdir()
    (tmp_path / "exp-3" / "x").write_text("")
    assert claim_run_dir(d) == tmp_path / "exp-4"  # taken by something else: passed over
    (tmp_path / "exp-10").mkdir()
    (tmp_path / "exp-10" / "run.json").write_text("{}")
    assert claimed_runs(d) == [d, tmp_path / "exp-2", tmp_path / "exp-10"]


def test_a_learner_fitted_twice_on_one_run_dir_makes_two_runs(tmp_path):
    """The README's snippet run twice: two runs, each with one RunStarted and its own loss.log lines;
    a resume continues the first in its folder."""
    first_dir = tmp_path / "api-demo"
    first = _learner(first_dir)
    assert first.fit(_data(), _data(seed=1), dashboard=False).status == "completed"
    before = (first_dir / "events.jsonl").read_text()
    second = _learner(first_dir)
    assert second.fit(_data(), _data(seed=1), dashboard=False).status == "completed"
    second_dir = tmp_path / "api-demo-2"
    assert second.run_dir == second_dir
    assert (first_dir / "events.jsonl").read_text() == before  # the first run is left as it was
    for run in (first_dir, second_dir):
        (started,) = _starts(run)
        assert Path(started["run_dir"]) == run and started["experiment"] == "api-demo"
        assert _steps(run / "train" / "epoch-1" / "loss.log") == [1, 2, 3, 4]
        assert (run / "model.pt").is_file()
        index = json.loads((run / "checkpoint" / "index.json").read_text())
        assert [e["step"] for e in index] == [4, 8] and all((run / "checkpoint" / e["file"]).is_file() for e in index)
    assert "api-demo holds a run already: this run goes to" in (second_dir / "experiment.log").read_text()
    assert not list(tmp_path.glob("api-demo-3"))

    resumed = _learner(first_dir, epochs=3)
    index = json.loads((first_dir / "checkpoint" / "index.json").read_text())
    assert (
        resumed.fit(_data(), _data(seed=1), resume=first_dir / "checkpoint" / index[-1]["file"], dashboard=False).status
        == "completed"
    )
    assert resumed.run_dir == first_dir and len(_starts(first_dir)) == 2
    assert _steps(first_dir / "train" / "epoch-3" / "loss.log") == [9, 10, 11, 12]
    assert not list(tmp_path.glob("api-demo-3"))


def test_the_same_learner_fitted_again_continues_its_own_run(tmp_path):
    learner = _learner(tmp_path / "run")
    learner.fit(_data(), dashboard=False)
    learner.epochs = 3
    learner.fit(_data(), dashboard=False)
    assert learner.run_dir == tmp_path / "run" and not (tmp_path / "run-2").exists()
    assert [e["start_step"] for e in _starts(tmp_path / "run")] == [0, 8]  # its state goes on: no steps again


def _monitor_run(run_dir, steps=5) -> Path:
    with tuitrain.Monitor(run_dir=run_dir, dashboard=False) as mon:
        for step in range(1, steps + 1):
            mon.log(step, loss=float(step))
    return mon.run_dir


def test_a_monitor_on_a_run_dir_that_holds_a_run_makes_a_new_one(tmp_path):
    first = _monitor_run(tmp_path / "r")
    second = _monitor_run(tmp_path / "r", steps=3)
    assert (first, second) == (tmp_path / "r", tmp_path / "r-2")
    for run, steps in ((first, 5), (second, 3)):
        (started,) = _starts(run)
        assert started["experiment"] == "r"
        logged = [e["step"] for e in read_events(run) if e["event"] == "MetricsLogged"]
        assert logged == list(range(1, steps + 1))
    assert "this run goes to" in (second / "experiment.log").read_text()


def test_run_dir_on_the_command_line_that_holds_a_run_makes_a_new_one(tiny, capsys, monkeypatch, forget_tinyproj):
    monkeypatch.chdir(tiny.root)
    run_dir = tiny.root / "mine"
    argv = ["run", str(tiny.config), "--headless", "--run-dir", str(run_dir), "--set", "train.epochs=1"]
    assert main(argv) == 0
    assert main(argv) == 0
    out, _ = capsys.readouterr()
    second = tiny.root / "mine-2"
    assert f"{run_dir} holds a run already: this run goes to {second}" in out
    for run in (run_dir, second):
        (started,) = _starts(run)
        assert Path(started["run_dir"]) == run
        assert _steps(run / "train" / "epoch-1" / "loss.log") == list(range(1, 8))
    assert not tiny.runs.exists()  # nothing under the experiment's own folder

    # --resume auto --run-dir DIR: the newest run placed there, when it did not complete; else a new one
    info = json.loads((second / "run.json").read_text())
    (second / "run.json").write_text(json.dumps({**info, "status": "interrupted"}))
    assert main(argv[:-2] + ["--set", "train.epochs=2", "--resume", "auto"]) == 0
    assert len(_starts(second)) == 2 and len(_starts(run_dir)) == 1
    assert not (tiny.root / "mine-3").exists()
    assert main(argv + ["--resume", "auto"]) == 0
    assert len(_starts(tiny.root / "mine-3")) == 1

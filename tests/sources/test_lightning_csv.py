"""Lightning's CSVLogger runs read back (tuitrain/sources/lightning_csv.py): a real log written by a tiny
LightningModule on CPU, compared cell by cell with the csv module's reading; a file growing and
rewritten by Lightning's own writer followed live; a cut or damaged file; hostile names."""

from __future__ import annotations

import csv
import importlib.util
import os
import threading
import time
from pathlib import Path

import pytest

from tuitrain.core.events import MetricsLogged, RunStarted, RunFinished
from tuitrain.sources import lightning_csv
from tuitrain.sources.polled import ForeignBlock, drain, split_name

if importlib.util.find_spec("lightning") is None:  # (imported by the fixture, not at collection: ~5 s)
    pytest.skip("Lightning is not installed (the test extra)", allow_module_level=True)


def tiny_module():
    """A tiny LightningModule class (Lightning imported here, by the one fixture that trains it)."""
    import lightning.pytorch as pl
    import torch

    class Tiny(pl.LightningModule):
        def __init__(self, lr: float = 0.05, hidden: int = 8) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))

        def training_step(self, batch, _):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            self.log("lr", self.hparams.lr)
            return loss

        def validation_step(self, batch, _):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))
            self.log("val/mae", (self.net(x) - y).abs().mean())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    return Tiny


@pytest.fixture(scope="module")
def logged(tmp_path_factory) -> Path:
    """A real CSVLogger log: 3 epochs of 4 batches, validation each epoch."""
    import lightning.pytorch as pl
    import torch

    root = tmp_path_factory.mktemp("lightning")
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    trainer = pl.Trainer(
        max_epochs=3,
        logger=pl.loggers.CSVLogger(root, name="lightning_logs"),
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
    )
    trainer.fit(tiny_module()(), loader, loader)
    return root


def _series(events) -> dict:
    out: dict = {}
    for e in events:
        if isinstance(e, ForeignBlock):
            for key, (xs, ys) in e.series.items():
                got = out.setdefault(key, ([], []))
                got[0].extend(xs.tolist())
                got[1].extend(ys.tolist())
        elif isinstance(e, MetricsLogged):
            for name, v in e.metrics.items():
                got = out.setdefault((e.split, e.scope, name), ([], []))
                got[0].append(float(e.step))
                got[1].append(v)
    return out


def _expected(csv_path: Path) -> dict:
    """What the csv module reads: each column's non-empty cells as (step, value), under our key."""
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    out: dict = {}
    for name in rows[0]:
        if name in ("step", "epoch"):
            continue
        base, scope = name, ""
        for suffix in ("_step", "_epoch"):
            if name.endswith(suffix):
                base, scope = name[: -len(suffix)], suffix[1:]
        split, short = split_name(base)
        key = (split, scope or ("epoch" if split == "valid" else "step"), short)
        cells = [(float(r["step"]), float(r[name])) for r in rows if r[name] != ""]
        out[key] = (sorted(s for s, _ in cells), [v for _, v in sorted(cells, key=lambda c: c[0])])
    return out


def test_a_real_log_reads_as_the_csv_module_reads_it(logged):
    refs = lightning_csv.find_runs(logged)
    assert [r.name for r in refs] == ["lightning_logs/version_0"]
    ref = refs[0]
    assert lightning_csv.find_runs(ref.path / "metrics.csv")[0].path == ref.path  # the file itself
    assert lightning_csv.find_runs(logged / "nothing") == []
    source = lightning_csv.open_source(ref, live=False)
    events = drain(source)
    assert source.problems == []
    started = events[0]
    assert isinstance(started, RunStarted)
    assert started.config == {"lr": 0.05, "hidden": 8}  # hparams.yaml
    got = _series(events)
    expected = _expected(ref.path / "metrics.csv")
    assert set(got) == set(expected)
    assert ("train", "step", "loss") in got and ("train", "epoch", "loss") in got  # train_loss_step / _epoch
    assert ("valid", "epoch", "loss") in got and ("valid", "epoch", "mae") in got  # val_loss, val/mae
    for key, (xs, ys) in expected.items():
        assert got[key][0] == xs, key
        assert got[key][1] == pytest.approx(ys, rel=0, abs=0), key
    assert len(got[("train", "step", "loss")][0]) == 12  # 3 epochs of 4 steps, each logged
    assert len(got[("valid", "epoch", "loss")][0]) == 3
    block = next(e for e in events if isinstance(e, ForeignBlock))
    assert block.epoch == 3  # Lightning's epoch 2, counted from 1
    exported = block.events()  # `e` export: the same values as MetricsLogged events
    assert _series(exported) == {k: (list(v[0]), list(v[1])) for k, v in _series([block]).items()}
    assert all(e.to_json() for e in exported)


def test_live_the_writer_appending_and_rewriting_its_header(tmp_path):
    """Lightning's own writer: new rows appended, then a new name (the file rewritten with a new
    header): each new value read within 2 s, none twice."""
    from lightning.fabric.loggers.csv_logs import _ExperimentWriter

    run = tmp_path / "lightning_logs" / "version_0"
    writer = _ExperimentWriter(str(run))
    writer.log_metrics({"train_loss": 1.0, "epoch": 0}, step=0)
    writer.save()
    (ref,) = lightning_csv.find_runs(tmp_path)
    assert lightning_csv.is_live(ref)
    source = lightning_csv.open_source(ref)
    assert source.live
    source.recheck_live = 0.05  # (5 s by default)
    seen: list = []
    source.open(lambda e, s=None: seen.append(e))
    thread = threading.Thread(target=source.work, daemon=True)
    thread.start()
    try:

        def wait_for(key, step) -> float:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 5:
                series = _series(list(seen))
                if key in series and step in series[key][0]:
                    return time.monotonic() - t0
                time.sleep(0.02)
            raise AssertionError(f"{key} at step {step} never came: {_series(list(seen))}")

        wait_for(("train", "step", "loss"), 0.0)
        writer.log_metrics({"train_loss": 0.5, "epoch": 0}, step=1)
        writer.save()
        assert wait_for(("train", "step", "loss"), 1.0) < 2.0
        writer.log_metrics({"train_loss": 0.25, "val_loss": 0.75, "epoch": 0}, step=2)
        writer.save()  # a new name: Lightning rewrites the file under a new header
        assert wait_for(("valid", "epoch", "loss"), 2.0) < 2.0
        writer.log_metrics({"train_loss": 0.125, "epoch": 1}, step=3)
        writer.save()
        assert wait_for(("train", "step", "loss"), 3.0) < 2.0
        assert not any(isinstance(e, RunFinished) for e in seen)
        # the writer gone quiet (its file last written 2 minutes ago): the log's end is said, not live for good
        old = time.time() - 120
        os.utime(run / lightning_csv.METRICS, (old, old))
        t0 = time.monotonic()
        while not any(isinstance(e, RunFinished) for e in seen) and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        assert not source.live and [e.step for e in seen if isinstance(e, RunFinished)] == [3]
    finally:
        source.close()
        thread.join(timeout=5)
    xs, ys = _series(seen)[("train", "step", "loss")]
    assert xs == [0.0, 1.0, 2.0, 3.0] and ys == [1.0, 0.5, 0.25, 0.125]  # none read twice
    assert source.problems == []


def test_a_cut_file_gives_its_good_part_and_one_line(logged, tmp_path):
    (ref,) = lightning_csv.find_runs(logged)
    raw = (ref.path / "metrics.csv").read_bytes()
    run = tmp_path / "version_0"
    run.mkdir()
    lines = raw.splitlines(keepends=True)
    cut_at = len(raw) - len(lines[-1]) // 2  # the last line cut in its middle
    (run / "metrics.csv").write_bytes(raw[:cut_at])
    source = lightning_csv.open_source(lightning_csv.find_runs(run)[0], live=False)
    events = drain(source)
    assert len(source.problems) == 1 and "cut last line" in source.problems[0], source.problems
    assert "metrics.csv" in source.problems[0]
    whole = _series(drain(lightning_csv.open_source(ref, live=False)))
    got = _series(events)
    rows = sum(len(v[0]) for v in whole.values()) - sum(len(v[0]) for v in got.values())
    assert 1 <= rows <= len(lines[-1].split(b",")), rows  # the cut row's cells only are missing

    # a row with a field too many in the middle, and a cell that is not a number
    damaged = lines[:3] + [lines[3].rstrip(b"\r\n") + b",9\r\n"] + lines[4:6] + [b"x" + lines[6]] + lines[7:]
    (run / "metrics.csv").write_bytes(b"".join(damaged))
    source = lightning_csv.open_source(lightning_csv.find_runs(run)[0], live=False)
    drain(source)
    assert source.problems == ["%s: 2 damaged rows skipped (the first at line 4)" % (run / "metrics.csv")]


def test_hostile_names_and_an_empty_or_strange_file(tmp_path):
    from lightning.fabric.loggers.csv_logs import _ExperimentWriter

    hostile = "\x1b[31mred\x1b]0;title\x07" + "n" * 300
    writer = _ExperimentWriter(str(tmp_path / "a" / "version_0"))
    writer.log_metrics({hostile: 1.5, "val_" + hostile: 2.5, 'quoted,"name"\nline': 3.0}, step=0)
    writer.save()
    (ref,) = lightning_csv.find_runs(tmp_path / "a")
    source = lightning_csv.open_source(ref, live=False)
    got = _series(drain(source))
    assert source.problems == []
    assert got[("train", "step", hostile)] == ([0.0], [1.5])
    assert got[("valid", "epoch", hostile)] == ([0.0], [2.5])
    assert got[("train", "step", 'quoted,"name"\nline')] == ([0.0], [3.0])

    (tmp_path / "b" / "version_0").mkdir(parents=True)
    (tmp_path / "b" / "version_0" / "metrics.csv").write_bytes(b"")  # created, nothing written yet
    (tmp_path / "b" / "version_0" / "hparams.yaml").write_text("lr: [unclosed\n")
    (ref,) = lightning_csv.find_runs(tmp_path / "b")
    source = lightning_csv.open_source(ref, live=False)
    events = drain(source)
    assert [type(e) for e in events] == [RunStarted, RunFinished]  # its writer gone: the log ends there
    assert len(source.problems) == 1 and "hparams.yaml: not YAML" in source.problems[0]
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "metrics.csv").write_text("a,b\n1,2\n")  # no step column: another tool's CSV
    assert lightning_csv.find_runs(tmp_path / "c") == []
    assert [r.name for r in lightning_csv.find_runs(tmp_path)] == ["a/version_0", "b/version_0"]

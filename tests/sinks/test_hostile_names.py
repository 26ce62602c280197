"""Names and prints of the user's code in the run directory (issue 28): any metric name keeps all
its values on disk, in a file of its own inside the run directory, mapped in metric_names.json;
experiment.log and the console lines hold no escape sequence and one line per \\r bar."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import torch

from tests.conftest import read_events
from tuitrain import Monitor
from tuitrain.core.events import MetricsLogged, OutputPrinted, RunStarted
from tuitrain.sinks.console import HeadlessConsole
from tuitrain.sinks.experiment_log import ExperimentLog
from tuitrain.sinks.metric_files import NAMES_FILE, MetricFileLogger, parse_line, safe_stem

HOSTILE = [
    "a\x1b[2Jb",
    "n" * 300,
    "grad/layer.0/norm",
    "../x",
    "..",
    ".",
    "",
    "a b",
    "a_b",
    "Loss",
    "loss",
    "x.epoch",
    "\x1b]0;pwned\x07",
    "\\",
    "损失",
    "nul\x00byte",
    "/etc/passwd",
    "~",
    "a~b",
]
ESC = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def files_of(run_dir: Path) -> dict[str, Path]:
    names = json.loads((run_dir / NAMES_FILE).read_text())["metrics"]
    return {name: run_dir / "train" / "epoch-1" / f"{stem}.log" for name, stem in names.items()}


def test_any_metric_name_keeps_its_values_in_a_file_of_its_own(tmp_path):
    sink = MetricFileLogger(tmp_path)
    for step in (1, 2):
        sink(
            MetricsLogged(split="train", epoch=1, step=step, metrics={n: i + step / 10 for i, n in enumerate(HOSTILE)})
        )
    sink(MetricsLogged(split="train", epoch=1, step=2, metrics={"x": 7.0}, scope="epoch"))  # x.epoch.log
    sink.close()
    files = files_of(tmp_path)
    assert set(files) == set(HOSTILE) | {"x"}
    assert len({p.name.casefold() for p in files.values()}) == len(files)  # never two names on one file
    for i, name in enumerate(HOSTILE):
        path = files[name]
        assert path.resolve().parent == (tmp_path / "train" / "epoch-1").resolve()
        assert len(path.name.encode()) <= 255 and not ESC.search(path.name)
        assert [parse_line(line) for line in path.read_text().splitlines()] == [(1, i + 0.1), (2, i + 0.2)], name
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert len(written) == len(HOSTILE) + 2  # the files above, x.epoch.log and metric_names.json: nothing elsewhere
    assert files["Loss"].name == "Loss.log" and files["loss"].name != "loss.log"  # first come; macOS: one file


def test_plain_names_keep_their_files_and_a_resume_keeps_the_mapping(tmp_path):
    sink = MetricFileLogger(tmp_path)
    sink(MetricsLogged(split="train", epoch=1, step=1, metrics={"loss": 1.0, "top1": 0.5}))
    sink.close()
    assert not (tmp_path / NAMES_FILE).exists()  # a run of plain names: the layout of before
    sink = MetricFileLogger(tmp_path)
    sink(MetricsLogged(split="train", epoch=1, step=1, metrics={"loss": 1.0, "Loss": 2.0}))
    sink.close()
    again = MetricFileLogger(tmp_path)  # resumed: 'Loss' keeps its file, whatever comes first now
    again(MetricsLogged(split="train", epoch=1, step=2, metrics={"Loss": 3.0, "loss": 4.0}))
    again.close()
    stem = json.loads((tmp_path / NAMES_FILE).read_text())["metrics"]["Loss"]
    assert (tmp_path / "train/epoch-1" / f"{stem}.log").read_text() == "1 2.0\n2 3.0\n"
    assert (tmp_path / "train/epoch-1/loss.log").read_text() == "1 1.0\n1 1.0\n2 4.0\n"


def test_safe_stem_is_a_file_name():
    for name in HOSTILE:
        stem = safe_stem(name)
        assert stem and "/" not in stem and "\\" not in stem and stem not in (".", "..")
        assert not stem.startswith(".") and len(stem) <= 255 - len(".epoch.log")
    assert safe_stem("loss") == "loss" and safe_stem("a b") != safe_stem("a_b")


def test_experiment_log_and_console_show_names_and_prints_never_obey_them(tmp_path):
    log = ExperimentLog(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    console = HeadlessConsole(stream=out, err=err)
    events = [
        RunStarted(
            run_dir=str(tmp_path),
            experiment="exp\x1b]0;pwned\x07",
            epochs=1,
            max_steps=0,
            steps_per_epoch=0,
            batch_size=1,
        ),
        OutputPrinted(text="preparing 3/30", stream="stderr", partial=True),
        OutputPrinted(text="preparing 29/30", stream="stderr", partial=True),
        OutputPrinted(text="preparing 26/30\rpreparing 30/30", stream="stderr"),
        OutputPrinted(text="a\x1b[2Jb [bold]as typed[/]\x1b[31m"),
    ]
    for e in events:
        log(e)
        console(e)
    log.close()
    text = (tmp_path / "experiment.log").read_text()
    for shown in (text, out.getvalue(), err.getvalue()):
        assert not ESC.search(shown.replace("\n", "")), repr(shown)
    assert "pwned" not in out.getvalue()  # experiment.log names the experiment by its repr: '\x1b]0;pwned\x07'
    assert text.count("preparing") == 1 and "preparing 30/30" in text  # one line per bar: its end
    assert err.getvalue() == "preparing 30/30\n"
    assert "ab [bold]as typed[/]" in text and "ab [bold]as typed[/]" in out.getvalue()


def test_a_monitor_run_with_hostile_names_and_prints_completes_with_every_value_on_disk(tmp_path, capsys):
    names = ["a\x1b[2Jb", "n" * 300, "grad/layer.0/norm", "../x", "Loss", "loss"]
    with Monitor(run_dir=tmp_path / "r", dashboard="auto") as mon:  # no terminal: console lines, prints captured
        for step in range(1, 6):
            mon.log(step, **{n: torch.tensor(step + i / 10) for i, n in enumerate(names)})
            print(f"\x1b]0;title\x07\rpreparing {step}/5", end="", flush=True)
        print()
    run_dir = tmp_path / "r"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    logged = [e for e in read_events(run_dir) if e["event"] == "MetricsLogged"]
    assert set(logged[-1]["metrics"]) == set(names)  # events.jsonl keeps every name as given
    stems = json.loads((run_dir / NAMES_FILE).read_text())["metrics"]
    assert set(stems) >= set(names)
    epoch_dirs = list((run_dir / "train").iterdir())
    for i, name in enumerate(names):
        lines = [line for d in epoch_dirs for line in (d / f"{stems[name]}.log").read_text().splitlines()]
        assert [parse_line(line) for line in lines] == [(s, pytest.approx(s + i / 10)) for s in range(1, 6)]
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.log").exists()  # '../x' stayed inside
    log = (run_dir / "experiment.log").read_text()
    assert "preparing 5/5" in log and log.count("preparing") == 1 and "title" not in log
    out = capsys.readouterr().out
    assert "preparing 5/5" in out and not ESC.search(out.replace("\n", ""))

from sink_run import LOSSES, VALID, feed, run_events
from tuitrain.core.events import EpochCompleted, MetricsLogged
from tuitrain.sinks.metric_files import MetricFileLogger, metric_filename, parse_line


def test_burn_layout_and_exact_lines(tmp_path):
    sink = MetricFileLogger(tmp_path)
    feed(sink, run_events(tmp_path))
    sink.close()
    assert (tmp_path / "train/epoch-1/loss.log").read_text() == "1 2.5\n2 1.25\n3 0.30000000000000004\n4 1e-07\n"
    assert (tmp_path / "train/epoch-2/accuracy.log").read_text() == "5 0.875\n6 0.9375\n7 1.0\n8 0.96875\n"
    lines = (tmp_path / "train/epoch-2/loss.log").read_text().splitlines()
    assert [parse_line(line) for line in lines] == [(5 + i, v) for i, v in enumerate(LOSSES[2])]
    assert (tmp_path / "train/epoch-1/loss.epoch.log").read_text() == f"4 {sum(LOSSES[1]) / 4!r}\n"
    assert (tmp_path / "valid/epoch-2/loss.log").read_text() == "8 0.30000000000000004\n"  # SPEC's layout
    assert parse_line((tmp_path / "valid/epoch-1/accuracy.log").read_text()) == (4, VALID[1]["accuracy"])
    assert not (tmp_path / "valid/epoch-1/accuracy.epoch.log").exists()
    assert (tmp_path / "valid/epoch-1/loss.log").read_text().count("\n") == 1  # one validation, one line
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.log"))
    assert len(files) == 2 * (4 + 2)  # per epoch: train loss/accuracy step+epoch, valid loss/accuracy epoch


def test_previous_epoch_files_are_closed_and_a_resume_appends(tmp_path):
    sink = MetricFileLogger(tmp_path)
    sink(MetricsLogged(split="train", epoch=1, step=1, metrics={"loss": 1.0}))
    assert len(sink._files) == 1
    sink(MetricsLogged(split="train", epoch=2, step=2, metrics={"loss": 0.5}))
    assert list(sink._files) == [("train", 2, "loss.log")]
    sink(EpochCompleted(epoch=2, epochs=2, step=2, metrics={}, duration=1.0))
    assert sink._files == {}
    sink.close()
    again = MetricFileLogger(tmp_path)  # the resumed run repeats step 2
    again(MetricsLogged(split="train", epoch=2, step=2, metrics={"loss": 0.25}))
    again.close()
    assert (tmp_path / "train/epoch-2/loss.log").read_text() == "2 0.5\n2 0.25\n"


def test_flushes_by_time_and_odd_values_and_names(tmp_path):
    now = [0.0]
    sink = MetricFileLogger(tmp_path, flush_interval=1.0, clock=lambda: now[0])
    sink(MetricsLogged(split="train", epoch=1, step=1, metrics={"top-1 acc": float("nan"), "n": 3, "tag": "a b"}))
    path = tmp_path / "train/epoch-1" / metric_filename("top-1 acc")
    assert path.name.startswith("top-1_acc~") and path.name.endswith(".log")  # a space: hashed
    assert path.read_text() == ""  # buffered
    now[0] = 1.5
    sink(MetricsLogged(split="train", epoch=1, step=2, metrics={"n": 4}))
    assert path.read_text() == "1 nan\n"
    assert (tmp_path / "train/epoch-1/n.log").read_text() == "1 3\n2 4\n"
    assert (tmp_path / "train/epoch-1/tag.log").read_text() == '1 "a b"\n'
    assert metric_filename("../x", "epoch").startswith("_x~")  # no separator, no dot-dot
    sink.close()

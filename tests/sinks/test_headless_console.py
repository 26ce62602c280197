import io

from sink_run import SUMMARY, run_events
from tuitrain.core.events import (
    AlertRaised,
    CheckpointFailed,
    ControlReceived,
    EpochStarted,
    MetricsLogged,
    OutputPrinted,
    PhaseStarted,
    RunFailed,
    RunPaused,
    RunResumed,
    RunStarted,
    StepCompleted,
    StepStarted,
)
from tuitrain.sinks.console import HeadlessConsole, plain
from tuitrain.sinks.summary import format_summary_table


def console(interval=1.0):
    now = [0.0]
    out, err = io.StringIO(), io.StringIO()
    return HeadlessConsole(out, err, interval=interval, clock=lambda: now[0]), now, out, err


def test_a_run_prints_throttled_progress_epoch_lines_and_the_summary(tmp_path):
    c, now, out, err = console(interval=5.0)
    for e in run_events(tmp_path):
        now[0] = e.time  # the fake clock follows the events, one second apart
        c(e)
    lines = out.getvalue().splitlines()
    assert lines[:8] == [
        f"run {tmp_path} · experiment spirals · 2 epochs × 4 steps",
        "epoch 1/2 · step 1/4 · loss 2.5000 · accuracy 0.2500 · 0.33 it/s · ETA 0:00:21",
        "epoch 1/2 · step 3/4 · loss 0.3000 · accuracy 0.7500 · 0.33 it/s · ETA 0:00:15",
        "epoch 1 says hi",
        "second line",
        "epoch 1/2 done in 0:00:20 · train/loss 1.0125 · train/accuracy 0.5938 · valid/loss 0.7000 · "
        "valid/accuracy 0.6000",
        "checkpoint saved: checkpoint/epoch-1.pt (epoch 1, step 4)",
        "epoch 2/2 · step 1/4 · loss 0.5000 · accuracy 0.8750 · 0.33 it/s · ETA 0:00:09",
    ]
    assert "checkpoint saved: checkpoint/epoch-2.pt (epoch 2, step 8) · best" in lines
    end = lines.index("training completed: all 2 epochs done")
    table = format_summary_table(SUMMARY).splitlines()
    assert lines[end + 1 : end + 1 + len(table)] == table
    assert "| valid | loss     |    0.3000 |     2 | 0.7000 |     1 |" in table
    assert lines[end + 1 + len(table) :] == [
        "status completed · exit code 0 · epoch 2 · step 8 · duration 0:00:45",
        f"best checkpoint: {tmp_path}/checkpoint/epoch-2.pt (valid/loss 0.3000)",  # absolute (issue 51)
    ]
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()
    assert err.getvalue() == ""


def start(c, max_steps=0, steps_per_epoch=100):
    c(
        RunStarted(
            run_dir="runs/x/1",
            experiment="x",
            epochs=3,
            max_steps=max_steps,
            steps_per_epoch=steps_per_epoch,
            batch_size=8,
            time=0.0,
        )
    )
    c(EpochStarted(epoch=1, epochs=3, step=0, time=0.0))
    c(PhaseStarted(phase="train", split="train", epoch=1, step=0, batches=steps_per_epoch, time=0.0))


def step(c, s, t):
    c(StepStarted(phase="train", epoch=1, step=s, batch=s - 1, time=t))
    c(StepCompleted(phase="train", epoch=1, step=s, batch=s - 1, items=8, time=t))


def test_at_most_one_progress_line_per_interval():
    c, now, out, _ = console(interval=1.0)
    start(c)
    for s in range(1, 51):  # 50 steps within 0.49 s of the fake clock
        now[0] = s * 0.01
        step(c, s, t=s * 0.01)
    progress = [line for line in out.getvalue().splitlines() if line.startswith("epoch 1/3 · step")]
    assert progress == ["epoch 1/3 · step 1/100 · 100 it/s · ETA 0:00:03"]
    now[0] = 1.2
    step(c, 51, t=1.2)  # its StepStarted prints the state after step 50
    c(MetricsLogged(split="train", epoch=1, step=51, metrics={"loss": 0.1 + 0.2}, batch=51, batches=100, time=1.2))
    now[0] = 1.3
    step(c, 52, t=1.3)  # within the interval of the line just printed
    now[0] = 2.3
    c(StepStarted(phase="train", epoch=1, step=53, batch=52, time=2.3))
    progress = [line for line in out.getvalue().splitlines() if line.startswith("epoch 1/3 · step")]
    assert progress[1:] == [
        "epoch 1/3 · step 50/100 · 100 it/s · ETA 0:00:02",
        "epoch 1/3 · step 52/100 · loss 0.3000 · 40.0 it/s · ETA 0:00:06",
    ]


def test_a_loop_without_phases_names_each_metrics_split():
    """Lightning and Monitor log at step scope with no PhaseStarted: a valid metric is "valid/loss" on the
    progress line, as on the epoch line, never a bare "loss" that reads as training's."""
    c, now, out, _ = console(interval=0.0)
    c(RunStarted(run_dir="r", experiment="x", epochs=3, max_steps=24, steps_per_epoch=0, batch_size=8, time=0.0))
    c(MetricsLogged(split="valid", epoch=1, step=8, metrics={"loss": 0.8374}, time=1.0))
    c(MetricsLogged(split="train", epoch=2, step=9, metrics={"loss": 0.5, "lr": 0.1}, time=2.0))
    c(MetricsLogged(split="", epoch=2, step=10, metrics={"throughput": 40.0}, time=3.0))
    c(MetricsLogged(split="test", epoch=2, step=11, metrics={"throughput": 50.0}, time=4.0))
    assert out.getvalue().splitlines()[1:] == [
        "epoch 1/3 · step 8/24 · valid/loss 0.8374",
        "epoch 2/3 · step 9/24 · loss 0.5000 · lr 0.1000",
        "epoch 2/3 · step 10/24 · throughput 40.0 samples/s",
        "epoch 2/3 · step 11/24 · test/throughput 50.0 samples/s",
    ]


def test_an_alert_line_holds_its_title_and_a_loop_without_epochs_says_none():
    """`mon.alert("my alert", text=...)`: the title is on the headless line as on the dashboard and in
    experiment.log (it was dropped); a Monitor loop without epochs is not "0 epochs"."""
    c, now, out, err = console()
    c(RunStarted(run_dir="r", experiment="gpt", epochs=0, max_steps=100, steps_per_epoch=0, batch_size=8))
    c(RunStarted(run_dir="s", experiment="one", epochs=1, max_steps=0, steps_per_epoch=5, batch_size=8))
    assert out.getvalue().splitlines()[:2] == [
        "run r · experiment gpt · max_steps 100",
        "run s · experiment one · 1 epoch × 5 steps",
    ]
    for title, text, level in [("my alert", "something odd", "warning"), ("just a title", "just a title", "info")]:
        c(AlertRaised(rule="user", level=level, title=title, text=text, step=3))
    assert err.getvalue().splitlines() == ["ALERT warning [user] my alert: something odd"]
    assert out.getvalue().splitlines()[-1] == "info [user] just a title"


def test_max_steps_shows_global_progress():
    c, now, out, _ = console()
    start(c, max_steps=150)
    step(c, 1, t=0.5)
    step(c, 2, t=1.0)
    assert out.getvalue().splitlines()[-1] == "epoch 1/3 · step 1/150 · 2.00 it/s · ETA 0:01:14"
    c(RunStarted(run_dir="r", experiment="x", epochs=3, max_steps=0, steps_per_epoch=0, batch_size=8))
    assert c.eta() is None  # an unknown epoch length gives no ETA


def test_output_control_pause_and_failure_lines():
    c, now, out, err = console()
    start(c)
    c(OutputPrinted(text="\x1b[1mbold\x1b[0m\n 10%\r 50%\r100%", stream="stdout"))
    c(OutputPrinted(text="a warning", stream="stderr"))
    c(ControlReceived(command="stop", source="signal", detail="SIGINT"))
    c(RunPaused(epoch=1, step=3))
    c(RunResumed(epoch=1, step=3, paused_for=3.0))
    c(CheckpointFailed(epoch=1, step=3, error="OSError: disk full", reason="request"))
    c(RunFailed(error="ValueError: bad shape", traceback="Traceback ...", epoch=1, step=3))
    assert out.getvalue().splitlines()[1:] == [
        "bold",
        "100%",
        "stop requested (signal: SIGINT)",
        "paused at epoch 1, step 3",
        "resumed after 0:00:03",
    ]
    assert err.getvalue().splitlines() == [
        "a warning",
        "warning: checkpoint failed at epoch 1, step 3: OSError: disk full",
        "error: ValueError: bad shape (epoch 1, step 3); traceback in runs/x/1/experiment.log",
    ]


def test_plain_text():
    assert plain("a\r\nb") == "a\nb"
    assert plain("\x1b]0;title\x07x\x1b[31;1my") == "xy"
    assert plain("done\r") == "done"


def test_samples_are_a_short_line_or_a_texts_first_lines_and_histograms_a_line_for_new_names():
    from tuitrain.core.events import HistogramLogged, MediaLogged

    c, _, out, err = console()
    start(c)
    c(MediaLogged(key="samples", step=500, kind="image", path="media/samples/500.png", width=270, height=270))
    text = "def f(x):\n\x1b[2J    return x\n" + "y" * 200 + "\n" + "\n".join(f"line {i}" for i in range(10)) + "\n\n"
    c(MediaLogged(key="sample", step=500, kind="text", path="media/sample/500.txt", text=text))
    c(MediaLogged(key="note\x1b]0;title\x07", step=3, kind="text", path="", text=" \n"))
    for step_ in (100, 200):
        for key in ("grads/fc1", "grads/fc2", "weights/fc1"):
            c(HistogramLogged(key=key, step=step_, low=-1.0, high=1.0, counts=[1, 2]))
        step(c, step_, t=0.5)
    c(HistogramLogged(key="weights/head", step=300, low=-1.0, high=1.0, counts=[1, 2]))
    c.close()  # says the names still waiting
    lines = [line for line in out.getvalue().splitlines() if not line.startswith(("run ", "epoch "))]
    assert lines == [
        "samples: image 270x270 at step 500 → media/samples/500.png",
        "sample: text at step 500 → media/sample/500.txt",
        "  | def f(x):",
        "  |     return x",
        "  | " + "y" * 119 + "…",
        "  | line 0",
        "  | line 1",
        "  | line 2",
        "  | line 3",
        "  | line 4",
        "  | … 5 more lines",
        "note: text at step 3 (empty)",
        "histograms from step 100: grads/fc1, grads/fc2, weights/fc1",
        "histograms from step 300: weights/head",
    ]
    assert "\x1b" not in out.getvalue() and err.getvalue() == ""

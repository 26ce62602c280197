"""The dashboard's data side, without a screen: series decimation, the state folded from events,
the bridge between threads, and following events.jsonl."""

from __future__ import annotations

import threading

from tests.conftest import wait_for
from tuitrain.core.events import (
    CheckpointStarted,
    ControlReceived,
    MetricsLogged,
    PhaseCompleted,
    PhaseStarted,
    RunPaused,
    RunResumed,
    RunStarted,
    StepCompleted,
    StepStarted,
)
from tuitrain.dashboard.state.bridge import EventBridge
from tuitrain.dashboard.state.model import DashboardState
from tuitrain.dashboard.state.series import Series
from tuitrain.sources.run_files import FileSource, MetricsBlock

from .fixtures import T0, recorded_run, write_jsonl


# --- Series ----------------------------------------------------------------------------------


def test_a_spike_survives_a_million_points_in_bounded_memory():
    s = Series(capacity=512, recent=100)
    for step in range(1, 1_000_001):
        s.append(step, 1000.0 if step == 777_777 else 1.0 / step**0.5)
    xs, ys = s.points()
    assert s.stored() <= 2 * 512 + 100 + 2
    assert len(xs) <= 2 * 512 + 1
    assert max(ys) == 1000.0 and xs[ys.index(1000.0)] == 777_777
    assert xs[0] == 1 and ys[0] == 1.0  # the first point is kept
    assert (xs[-1], ys[-1]) == (1_000_000, 1.0 / 1_000_000**0.5)  # the newest is exact
    assert min(ys) == s.min and xs == sorted(xs)


def test_recent_window_is_the_exact_tail_and_non_finite_values_are_skipped():
    s = Series(capacity=16, recent=50)
    for step in range(1, 201):
        s.append(step, float("nan") if step == 150 else step * 2.0)
    xs, ys = s.points(window=30)
    assert xs == [float(x) for x in range(171, 201)] and ys == [x * 2.0 for x in xs]
    assert s.skipped == 1 and s.count == 199
    full_x, _ = s.points()
    assert len(full_x) < 2 * 16 + 2 and full_x[-1] == 200


# --- DashboardState ---------------------------------------------------------------------------


def folded(**kw) -> DashboardState:
    st = DashboardState(clock=lambda: T0 + 100)
    st.apply(recorded_run(**kw))
    return st


def test_state_collects_metrics_epochs_and_checkpoints():
    st = folded(epochs=3, steps_per_epoch=20, total_epochs=5, end="running")
    # the fixture's device samples are charted too, after the metrics
    assert st.metric_names == [
        "loss",
        "accuracy",
        "lr",
        "device/cpu",
        "device/memory",
        "device/rss_mib",
        "device/gpu0_util",
        "device/gpu0_memory",
    ]
    assert st.metric_series("loss", "train").count == 60
    assert st.metric_series("loss", "valid").count == 3  # epoch aggregates
    assert st.epoch_steps == [20, 40, 60]
    assert [c["file"] for c in st.checkpoints] == ["checkpoint/epoch-3.pt", "checkpoint/epoch-2.pt"]
    assert st.best_file == "checkpoint/epoch-2.pt"
    assert st.checkpoints[0]["value"] == 1.5  # valid/loss picked from the checkpoint's metrics
    assert (st.epoch, st.step, st.total_steps) == (3, 60, 100)
    assert st.devices[0].gpus[0]["name"] == "Fake A100"
    assert st.status == "running" and not st.ended
    assert [t for _, t, _ in st.take_lines()] == [f"epoch {e}: training done" for e in (1, 2, 3)]
    assert st.take_lines() == []


def test_rates_and_eta_leave_validation_time_out():
    st = folded(epochs=3, steps_per_epoch=20, total_epochs=5, end="running")
    items, steps = st.rates()
    assert steps == 2.0  # a step every 0.5 s in the fixture; validation gaps are not counted
    assert items == 64.0  # batch size 32
    # 40 steps at 2/s, plus validations of epochs 4 and 5 at 2 s each
    assert st.eta() == 40 / 2.0 + 2 * 2.0


def test_live_step_events_drive_progress_and_rates():
    st = DashboardState(clock=lambda: T0)
    st.apply(recorded_run(epochs=1, steps_per_epoch=10, step_events=True, end="running")[:3])
    assert st.rates() == (None, None)  # warm-up
    for i in range(10):
        st.apply(
            [
                StepStarted(phase="train", epoch=1, step=i + 1, batch=i, time=T0 + i),
                StepCompleted(phase="train", epoch=1, step=i + 1, batch=i, items=16, time=T0 + i + 0.25),
            ]
        )
    assert (st.step, st.batch) == (10, 10)
    assert st.rates() == (16.0, 1.0)


def test_status_follows_pause_checkpoint_stop_and_end():
    st = folded(epochs=1, end="running")
    st.apply([CheckpointStarted(epoch=1, step=20, reason="request")])
    assert st.status == "checkpointing"
    st.apply([RunPaused(epoch=1, step=20)])
    assert st.status == "paused" and st.paused
    st.apply([RunResumed(epoch=1, step=20, paused_for=3.0)])
    assert st.status == "checkpointing"
    st.apply([ControlReceived(command="stop", source="dashboard", detail="quit")])
    assert st.status == "stopping"
    assert st.take_lines()[-1] == ("tuitrain", "[tuitrain] stop requested (dashboard: quit)", False)
    assert folded(epochs=1, end="interrupted").status == "interrupted"
    failed = folded(epochs=1, end="failed")
    assert failed.status == "failed" and failed.failed.error.startswith("ValueError")
    done = folded(epochs=2, end="completed")
    assert done.status == "completed" and done.eta() == 0.0


def test_non_numeric_metric_values_are_ignored():
    st = DashboardState()
    st.apply([MetricsLogged(split="train", epoch=1, step=1, metrics={"loss": 1.0, "note": "hi", "flag": True})])
    assert st.metric_names == ["loss"]


# --- EventBridge ------------------------------------------------------------------------------


def test_bridge_coalesces_step_events_keeping_order_and_items():
    b = EventBridge()
    for i in range(768):
        b(StepStarted(phase="train", epoch=1, step=i + 1, batch=i), None)
        b(StepCompleted(phase="train", epoch=1, step=i + 1, batch=i + 1, items=2), None)
    b(MetricsLogged(split="train", epoch=1, step=768, metrics={"loss": 1.0}), None)
    b(StepStarted(phase="train", epoch=1, step=769, batch=768), None)
    out = b.drain()
    # one StepCompleted for 768 steps, carrying all their items, before the event that followed them
    assert [type(e).__name__ for e in out] == ["StepCompleted", "MetricsLogged", "StepStarted"]
    assert out[0].step == 768 and out[0].items == 2 * 768
    assert out[2].step == 769  # the step under way
    assert b.dropped_steps == 2 * 767 and b.received == 2 * 768 + 2
    assert b.drain() == [] and not b.pending()


def test_bridge_takes_events_from_many_threads():
    b = EventBridge()

    def produce(k):
        for i in range(2000):
            b(MetricsLogged(split="train", epoch=k, step=i, metrics={}), None)

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(4)]
    got = []
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        got += b.drain()
    got += b.drain()
    assert len(got) == 8000
    for k in range(4):
        assert [e.step for e in got if e.epoch == k] == list(range(2000))


# --- FileSource -------------------------------------------------------------------------------


def collect(got: list):
    """A FileSource's emit that keeps the events, a MetricsBlock's as the events it stands for."""
    return lambda e, s: got.extend(e.events()) if isinstance(e, MetricsBlock) else got.append(e)


def test_file_source_follows_a_growing_file_with_a_partial_last_line(tmp_path):
    events = recorded_run(epochs=1, steps_per_epoch=5, end="completed")
    persisted = [e for e in events if e.persistent]
    head, tail = persisted[:6], persisted[6:]
    half = tail[0].to_json()
    path = write_jsonl(tmp_path / "events.jsonl", head, partial_tail=half[:20])
    src = FileSource(tmp_path, poll=0.02)
    got = []
    src.open(collect(got))
    worker = threading.Thread(target=src.work, daemon=True)  # a failed wait leaves no process behind
    worker.start()
    wait_for(lambda: src.caught_up, timeout=10, what="the source to read to the end of the file")
    assert got == head  # the half-written line is not read yet
    with open(path, "a") as f:
        f.write(half[20:] + "\n")
        f.write("this is not json\n")
        for e in tail[1:]:
            f.write(e.to_json() + "\n")
    wait_for(lambda: len(got) >= len(persisted), timeout=10, what="the rest of the file")
    src.close()
    worker.join(2)
    assert not worker.is_alive()
    assert got == persisted
    assert src.bad_lines == 1


class CountedWaits(threading.Event):
    """A FileSource's stop event that counts the source's waits between polls."""

    def __init__(self):
        super().__init__()
        self.waits = 0

    def wait(self, timeout=None):
        self.waits += 1
        return super().wait(timeout)


def test_file_source_waits_for_the_file_to_appear(tmp_path):
    src = FileSource(tmp_path, poll=0.02)
    src._stop = waits = CountedWaits()
    got = []
    src.open(collect(got))
    worker = threading.Thread(target=src.work, daemon=True)  # a failed wait leaves no process behind
    worker.start()
    wait_for(lambda: waits.waits >= 2, timeout=10, what="two polls of a folder with no events.jsonl")
    assert worker.is_alive() and got == []
    write_jsonl(tmp_path / "events.jsonl", recorded_run(epochs=1, steps_per_epoch=2)[:2])
    wait_for(lambda: len(got) >= 2, timeout=10, what="the file's events")
    src.close()
    worker.join(2)
    assert [e.name for e in got] == ["RunStarted", "EpochStarted"]


def test_rate_of_the_last_phase_stands_until_the_next_one_is_measured():
    st = folded(epochs=2, steps_per_epoch=20, total_epochs=5, end="running")
    before = st.rates()
    assert before == (64.0, 2.0)
    st.apply(
        recorded_run(epochs=3, steps_per_epoch=20, total_epochs=5, end="running")[
            len(recorded_run(epochs=2, steps_per_epoch=20, total_epochs=5, end="running")) :
        ][:4]
    )  # epoch 3: start, 1 step
    assert st.rates() == before  # one step of a new stretch: the rate of the steps before it stands


def test_bridge_drains_in_bounded_batches_keeping_order():
    b = EventBridge()
    for i in range(10):
        b(MetricsLogged(split="train", epoch=1, step=i, metrics={}), None)
    for i in range(3):
        b(StepCompleted(phase="train", epoch=1, step=100 + i, batch=i, items=1), None)
    got = []
    while b.pending():
        chunk = b.drain(4)
        assert 0 < len(chunk) <= 4
        got += chunk
    assert [e.step for e in got] == list(range(10)) + [102]  # step events coalesced
    assert got[-1].items == 3


def test_file_source_waits_while_the_screen_is_behind(tmp_path):
    events = [e for e in recorded_run(epochs=3, steps_per_epoch=400) if e.persistent]
    write_jsonl(tmp_path / "events.jsonl", events)
    src = FileSource(tmp_path, poll=0.02, chunk=4096)
    behind = [True]
    asked = []  # what len(got) was each time the source asked how far behind the screen is

    def backlog():
        asked.append(len(got))
        return 10**9 if behind[0] else 0

    src.backlog = backlog
    got = []
    src.open(collect(got))
    worker = threading.Thread(target=src.work, daemon=True)  # a failed wait leaves no process behind
    worker.start()
    wait_for(lambda: len(asked) >= 5, timeout=10, what="the source to ask about the backlog again and again")
    held = len(got)
    assert 0 < held < len(events)  # one chunk read, then it waits
    assert set(asked) == {held}  # and reads nothing more while the screen is behind
    behind[0] = False
    wait_for(lambda: len(got) >= len(events), timeout=10, what="the rest once the screen caught up")
    src.close()
    worker.join(2)
    assert got == events


def test_plot_thinning_is_bounded_and_keeps_a_spike():
    from tuitrain.dashboard.charts.metric_plot import thin

    xs = list(range(100_000))
    ys = [1.0] * 100_000
    ys[54_321] = 50.0
    ys[77_777] = -3.0
    tx, ty = thin(xs, ys, 100)
    assert len(tx) <= 200 and tx == sorted(tx)
    assert 50.0 in ty and -3.0 in ty and tx[ty.index(50.0)] == 54_321
    assert thin(xs[:150], ys[:150], 100) == (xs[:150], ys[:150])  # few points: untouched


def test_env_line_shows_versions_device_and_commit():
    from tuitrain.dashboard.panels.devices_panel import env_line

    env = {"torch": "2.13.0", "python": "3.11.7", "device": "cpu", "git_commit": "1a2b3c4d5e6f", "git_dirty": True}
    assert env_line(env) == "torch 2.13.0 · py 3.11.7 · cpu · git 1a2b3c4*"
    assert env_line({"torch": "2.13.0", "device": "cuda"}) == "torch 2.13.0 · cuda"


def test_short_epochs_still_give_a_rate_and_their_gaps_are_left_out():
    """Epochs of two sampled steps each (a fast model, or sampled step events): every epoch starts a
    new stretch; the rate adds up the stretches and leaves out the validation gaps between them."""
    st = DashboardState()
    st.apply([RunStarted(run_dir="r", experiment="x", epochs=10, max_steps=0, steps_per_epoch=2, batch_size=4)])
    t, step = 100.0, 0
    for epoch in range(1, 6):
        st.apply([PhaseStarted(phase="train", split="train", epoch=epoch, step=step, batches=2)])
        for _ in range(2):
            step += 1
            t += 0.5  # a step every 0.5 s while training
            st.apply([StepCompleted(phase="train", epoch=epoch, step=step, batch=step, items=4, time=t)])
        t += 30.0  # a long validation that is not training
    items_per_s, steps_per_s = st.rates()
    assert steps_per_s == 2.0 and items_per_s == 8.0


def test_a_completed_phase_reads_as_done_where_its_batches_were_not_logged():
    """`tuitrain watch` of a finished run: the files hold no valid batch by batch, so the progress
    panel read "Phase valid 0/25" for a validation long done."""
    st = DashboardState()
    st.apply([PhaseStarted(phase="valid", split="valid", epoch=3, step=300, batches=25)])
    assert (st.batch, st.batches) == (0, 25)
    st.apply([PhaseCompleted(phase="valid", split="valid", epoch=3, step=300, metrics={}, duration=0.5, items=800)])
    assert (st.batch, st.batches) == (25, 25)

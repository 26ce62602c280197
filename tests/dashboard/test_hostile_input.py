"""The dashboard against what a run's names, prints and files may hold (issue 28): the first row
still shows the run, nothing written to the terminal sets its title or clears it, a \\r bar is one
line that updates, and a damaged events.jsonl is shown as far as it goes with one notice."""

from __future__ import annotations

import json
import re
import threading

from hypothesis import given, settings, strategies as st

from tuitrain.core.events import (
    CheckpointSaved,
    DevicesSampled,
    EpochCompleted,
    MetricsLogged,
    OutputPrinted,
    PhaseStarted,
    RunFailed,
    RunFinished,
    RunStarted,
    parse_line,
)
from tuitrain.dashboard.app import DashboardApp
from tuitrain.dashboard.state.model import DashboardState
from tuitrain.sources.run_files import FileSource, ReplaySource
from tuitrain.dashboard.charts.chart_grid import ChartGrid
from tuitrain.dashboard.panels.devices_panel import env_line
from tuitrain.dashboard.panels.output_log import OutputLog
from tuitrain.dashboard.screens.result_screen import result_body, result_title

from .fixtures import T0, recorded_run, write_jsonl
from .test_app import SIZE, sync, until

HOSTILE_NAME = "a\x1b[2Jb"
OSC_TITLE = "\x1b]0;pwned\x07"
# what a terminal would obey in Textual's output, other than its own CSI sequences
OBEYED = re.compile(r"\x1b(?!\[[0-?]*[ -/]*[@-~])|[\x00-\x09\x0b-\x1a\x1c-\x1f\x7f-\x9f]")


def hostile_run() -> list:
    ev = [
        RunStarted(
            run_dir="runs/x/1",
            experiment="spirals" + OSC_TITLE,
            epochs=2,
            max_steps=0,
            steps_per_epoch=5,
            batch_size=4,
            config={"checkpoint": {"monitor": f"valid/{HOSTILE_NAME}"}},
            time=T0,
        ),
        PhaseStarted(phase="train" + OSC_TITLE, split="train", epoch=1, step=0, batches=5, time=T0),
    ]
    for step in range(1, 6):
        ev.append(
            MetricsLogged(
                split="train",
                epoch=1,
                step=step,
                batch=step,
                batches=5,
                metrics={HOSTILE_NAME: 1.0 / step, "n" * 300: float(step), "[red]x[/": 1.0},
                time=T0 + step,
            )
        )
    ev.append(OutputPrinted(text=f"{OSC_TITLE}hello\x1b[2J", time=T0 + 6))
    ev.append(
        CheckpointSaved(
            file="checkpoint/" + HOSTILE_NAME + ".pt",
            epoch=1,
            step=5,
            metrics={},
            bytes=10,
            best=True,
            reason="epoch",
            stall=0.0,
            write=0.0,
            time=T0 + 6,
        )
    )
    return ev


def screen_output(app) -> str:
    """What Textual would write to the terminal for the whole screen now."""
    return app.screen._compositor.render_full_update().render_segments(app.console)


@sync
async def test_the_first_row_survives_hostile_names_and_prints():
    source = ReplaySource(hostile_run())
    app = DashboardApp(source, None, clock=lambda: T0 + 10)
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(OutputLog)
        await until(pilot, lambda: log.count >= 1 and app.state.step == 5)
        for i in range(1, 6):  # a bar redrawn with \r, each state drained on its own
            source.push(OutputPrinted(text=f"{OSC_TITLE}preparing {i}/5", stream="stderr", partial=True))
            await until(pilot, lambda: any(f"preparing {i}/5" in s.text for s in log.lines))
            if i == 3:  # a print of another stream goes above the bar, which stays the last line
                source.push(OutputPrinted(text="between", stream="stdout"))
                await until(pilot, lambda: any("between" in s.text for s in log.lines))
                assert "preparing 3/5" in log.lines[-1].text
        source.push(OutputPrinted(text="preparing 5/5\x1b[2J", stream="stderr"))
        await pilot.pause(0.3)
        strips = app.screen._compositor.render_strips()
        assert strips[0].text.startswith(" spirals  runs/x/1"), strips[0].text  # the first row shows the run
        output = screen_output(app)
        assert not OBEYED.search(output), repr(OBEYED.search(output))  # no OSC (title), no 2J, no control
        assert "pwned" not in output
        text = "\n".join(s.text for s in strips)
        assert "ab" in text and "[red]x[/" in text  # the names shown, markup as typed
        assert "…" in text  # the 300-character name shortened in the middle
        charts = list(app.query_one(ChartGrid).charts.values())
        assert len(charts) == 3 and all(not OBEYED.search(c.title_text) for c in charts), [c.title_text for c in charts]
        assert all(len(c.title_text) < 120 for c in charts)
        assert [s.text.strip() for s in log.lines].count("preparing 5/5") == 1  # one line, updated in place
        assert not any("preparing" in s.text and "5/5" not in s.text for s in log.lines)
        texts = [s.text.strip() for s in log.lines]
        assert texts.index("between") < texts.index("preparing 5/5")


@sync
async def test_watching_a_damaged_events_file_shows_what_it_can_with_one_notice(tmp_path):
    path = write_jsonl(tmp_path / "events.jsonl", recorded_run(epochs=2, end="completed"))
    good = path.read_bytes().splitlines(keepends=True)
    bad = [
        b'{"event":"MetricsLogged","split":"train","epoch":1,"step":"7","metrics":{"loss":1}}\n',
        b'{"event":"MetricsLogged","split":"train","epoch":1,"step":7,"metrics":[1]}\n',
        b'{"event":7}\n',
        b"\xff\xfe\x00garbage\n",
        b"[" * 100_000 + b"\n",
        b'{"event":"OutputPrinted","text":"' + b"x" * (5 << 20) + b'"}\n',
        b"not json\n",
    ]
    path.write_bytes(b"".join(good[:10] + bad + good[10:]))
    (tmp_path / "run.json").write_text("{ not json")
    app = DashboardApp(FileSource(tmp_path, poll=0.02), None, watch=True, notice="finished run", clock=lambda: T0)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.state.ended, timeout=60)
        await pilot.pause(0.2)
        assert app.state.step == 40  # every good line shown
        assert app.source.bad_lines == len(bad)
        notice = str(app.query_one("#notice").render())
        assert notice.startswith(f"{len(bad)} damaged lines of events.jsonl skipped"), notice
        assert app.is_running


def test_the_file_reader_drops_an_endless_line_and_goes_on(tmp_path):
    ok = MetricsLogged(split="train", epoch=1, step=1, metrics={"loss": 1.0}, time=T0).to_json().encode()
    (tmp_path / "events.jsonl").write_bytes(ok + b"\n" + b"y" * (9 << 20) + b"\n" + ok + b"\n")
    source = FileSource(tmp_path, poll=0.01)
    seen = []
    source.open(lambda e, s=None: seen.append(e))
    thread = threading.Thread(target=source.work)
    thread.start()
    for _ in range(500):
        if source.caught_up:
            break
        threading.Event().wait(0.01)
    source.close()
    thread.join()
    assert len(seen) == 2 and source.bad_lines == 1


EXAMPLES = [e.to_dict() for e in hostile_run()] + [
    EpochCompleted(epoch=1, epochs=2, step=5, metrics={"train/loss": 1.0}, duration=1.0).to_dict(),
    DevicesSampled(
        cpu=1.0,
        cpu_per_core=[1.0],
        memory=1.0,
        memory_used=1,
        memory_total=2,
        rss=1,
        gpus=[{"index": 0, "util": 5.0, "mem_used": 1, "mem_total": 2, "temp": 40.0}],
    ).to_dict(),
    RunFinished(
        status="completed",
        exit_code=0,
        epoch=1,
        step=5,
        reason="epochs",
        duration=1.0,
        summary={"train/loss": {"min": 1.0, "last": 1.0}},
        best={"file": "f", "value": 1.0},
    ).to_dict(),
    RunFailed(error="E", traceback="T", epoch=1, step=1, summary={"train/x": {"last": 1.0}}).to_dict(),
]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(range(len(EXAMPLES))),
            st.dictionaries(
                st.sampled_from(
                    [
                        "metrics",
                        "config",
                        "env",
                        "gpus",
                        "summary",
                        "best",
                        "step",
                        "epoch",
                        "file",
                        "text",
                        "phase",
                        "status",
                        "batches",
                        "batch",
                        "stream",
                        "monitor",
                    ]
                ),
                JSON,
                max_size=3,
            ),
        ),
        max_size=6,
    )
)
def test_any_event_the_parser_lets_through_folds_and_formats(changes):
    state = DashboardState(clock=lambda: T0)
    for i, fields in changes:
        event = parse_line(json.dumps({**EXAMPLES[i], **fields}))
        if event is None:
            continue
        state.apply([event])
        if isinstance(event, RunStarted):
            env_line(event.env)
        for name in state.metric_names:
            state.best_valid(name)
        state.eta()
    result_title(state)
    result_body(state, 0)  # the property: no exception on the way

"""No key breaks the dashboard (issue 50): every screen and dialog takes any keys, in any order, at any
speed, at any size from 40x12 to 250x80 and through resizes, without an exception.

Keys are delivered as a terminal delivers them (keyfuzz.py `burst`: several in one read, all queued before
the app handles the first): that is what found `q` `n` `n`, `?` `a` `b` and `/` Enter Enter popping the
dashboard off the screen stack. The default run plays a fixed seed (1,200 keys and more); the slow set plays
random seeds for TUITRAIN_FUZZ_SECONDS (600 by default; 1800 for the issue's half hour), shrinks what fails
and prints the shrunk round to be kept below as a regression test.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

import pytest

from tuitrain.dashboard.app import DashboardApp
from tuitrain.dashboard.entry import compare_app, sweep_app
from tuitrain.dashboard.live import LiveApp, LiveRun
from tuitrain.sources.run_files import FileSource
from tuitrain.dashboard.charts.chart_grid import ChartGrid
from tuitrain.dashboard.screens.confirm_screen import ConfirmScreen
from tuitrain.dashboard.screens.filter_screen import FilterScreen
from tuitrain.dashboard.screens.help_screen import HelpScreen
from tuitrain.dashboard.screens.result_screen import ResultScreen

from .fixtures import T0, recorded_run, write_jsonl
from .keyfuzz import Outcome, Scenario, burst, paste, play, round_of, shrink
from .test_app import SIZE, FakeRun, sync, until
from .test_media import app_of, with_media
from .test_sweep_watch import write_sweep, write_trial


def _charts(app: DashboardApp) -> bool:
    try:
        return bool(app.query_one(ChartGrid).charts)
    except Exception:
        return False


def _live(end: str):
    def make(folder: Path) -> DashboardApp:
        run = FakeRun(recorded_run(epochs=2, total_epochs=5, end=end), wait_for_stop=end == "running")
        run.run_dir = str(folder)
        live = LiveRun(run)
        app = LiveApp(live, None, clock=lambda: T0 + 60, hard_exit=lambda app: app.exit(130))
        app.fuzz_run = run
        return app

    def cleanup(app) -> None:
        app.fuzz_run.interrupter.request_stop("test")  # its thread never outlives the round
        app.live.thread.join(10) if app.live.thread.ident else None

    ready = (
        (lambda app: app.state.step == 40) if end == "running" else (lambda app: isinstance(app.screen, ResultScreen))
    )
    return make, ready, cleanup


def _watched(folder: Path) -> DashboardApp:
    write_jsonl(folder / "run" / "events.jsonl", recorded_run(epochs=3, end="completed"))
    return DashboardApp(
        FileSource(folder / "run", poll=0.02),
        None,
        watch=True,
        clock=lambda: T0 + 60,
        notice="finished run: keys that steer are off",
    )


def _watched_live(folder: Path) -> DashboardApp:
    """`tuitrain watch RUN_DIR` of a live run in another process (here: run.json's pid is this one), steered
    through its control folder: c, p and q-y drop command files there."""
    from tuitrain.core.control import FileControl

    run_dir = write_trial(folder, 0, 0.01, 32, [0.6, 0.7], None)
    return DashboardApp(
        FileSource(run_dir, live=True, poll=0.02), FileControl(run_dir), None, watch=True, clock=lambda: T0 + 60
    )


def _compared(folder: Path) -> DashboardApp:
    runs = []
    for name, end in (("a", "completed"), ("b", "interrupted")):
        write_jsonl(folder / name / "events.jsonl", recorded_run(epochs=2, end=end))
        runs.append(folder / name)
    return compare_app(runs, None)


def _sweep(folder: Path) -> DashboardApp:
    sweep_dir = folder / "sweep"
    write_sweep(sweep_dir)
    write_trial(sweep_dir, 0, 0.01, 32, [0.6, 0.8, 0.9], "completed")
    write_trial(sweep_dir, 1, 0.001, 64, [0.5, 0.55], "pruned")
    return sweep_app(sweep_dir, None)


def _media(folder: Path) -> DashboardApp:
    app = app_of(with_media(folder), folder)
    app.hard_exit = lambda app: app.exit(130)  # a second Ctrl+C ends the process (os._exit): the test's
    return app


SCENARIOS = {
    "live": Scenario("live", *_live("running")),
    "summary": Scenario("summary", *_live("completed")),
    "watch": Scenario("watch", _watched, lambda app: isinstance(app.screen, ResultScreen)),
    "watch-live": Scenario("watch-live", _watched_live, _charts),
    "compare": Scenario("compare", _compared, _charts),
    "sweep": Scenario("sweep", _sweep, _charts),
    "media": Scenario("media", _media, lambda app: app.state.step > 0),
}


@pytest.fixture
def here(tmp_path, monkeypatch):
    """Each round in a fresh folder, the working directory too (`e` exports into the run's folder)."""
    monkeypatch.chdir(tmp_path)
    count = iter(range(10**6))

    def folder() -> Path:
        f = tmp_path / f"round-{next(count)}"
        f.mkdir()
        return f

    return folder


def report(name: str, actions: list[tuple], outcome: Outcome) -> str:
    import traceback

    errors = "; ".join(f"{type(e).__name__}: {e}" for e in outcome.errors)
    where = "".join(traceback.format_exception(outcome.errors[0])[-12:]) if outcome.errors else ""
    return f"{name}: {errors}\n  round: {actions!r}\n{where}"


# --- the fixed seed, in the default run ------------------------------------------------------


def test_fuzz_fixed_seed_thousands_of_keys_break_nothing(here):
    """A round of each opening, ~200 keys in bursts, sizes 40x12 to 250x80 (about 50 s on 2 cores: the time
    is Textual's rendering, which a test of the real screen pays)."""
    rng = random.Random(50)
    failures, keys, screens = [], 0, set()
    for _ in range(1):
        for name, scenario in SCENARIOS.items():
            actions = round_of(rng, 200, resizes=0.04, bursts=[2, 2, 3, 4, 6, 8])  # a resize costs ~0.5 s of CPU
            outcome = asyncio.run(play(scenario, here(), actions))
            keys += outcome.keys
            screens |= outcome.screens
            if outcome.failed:
                failures.append(report(name, actions, outcome))
    assert not failures, "\n".join(failures)
    assert keys >= 1400
    # the dialogs were opened, and closed under queued keys
    assert {"ConfirmScreen", "HelpScreen", "FilterScreen", "DashboardScreen"} <= screens, screens


@pytest.mark.slow
def test_fuzz_random_seeds_for_a_while(here):
    """Random seeds for TUITRAIN_FUZZ_SECONDS; a failure is shrunk and printed as a regression round."""
    seconds = float(os.environ.get("TUITRAIN_FUZZ_SECONDS", "600"))
    seed = int(os.environ.get("TUITRAIN_FUZZ_SEED", str(int(time.time()))))
    rng = random.Random(seed)
    end = time.monotonic() + seconds
    rounds = keys = 0
    sizes: set = set()
    screens: set = set()
    while time.monotonic() < end:
        name = rng.choice(sorted(SCENARIOS))
        actions = round_of(rng, rng.randint(30, 150))
        outcome = asyncio.run(play(SCENARIOS[name], here(), actions))
        rounds += 1
        keys += outcome.keys
        screens |= outcome.screens
        sizes |= {a[1] for a in actions if a[0] == "resize"}
        if outcome.failed:
            small = shrink(SCENARIOS[name], here, actions)
            pytest.fail(f"seed {seed}, round {rounds}, shrunk:\n" + report(name, small, outcome))
    print(f"fuzz: seed {seed}: {rounds} rounds, {keys} keys, {len(sizes)} sizes, screens {sorted(screens)}")


# --- regressions: the rounds that failed, shrunk -----------------------------------------------


@pytest.mark.parametrize(
    "name,actions",
    [
        ("live", [("resize", (120, 40)), ("keys", ["q"]), ("keys", ["n", "n"])]),  # the dialog dismissed twice
        ("live", [("resize", (120, 40)), ("keys", ["question_mark"]), ("keys", ["a", "b"])]),  # help, twice
        ("compare", [("resize", (120, 40)), ("keys", ["slash"]), ("keys", ["enter", "enter"])]),  # the filter
        ("summary", [("resize", (120, 40)), ("keys", ["escape"]), ("keys", ["question_mark"]), ("keys", ["d", "p"])]),
        ("watch", [("resize", (80, 24)), ("keys", ["escape", "question_mark", "d", "p", "escape", "escape"])]),
        ("sweep", [("resize", (80, 24)), ("keys", ["P", "P", "P", "escape", "q"])]),
    ],
)
def test_keys_queued_behind_a_closing_dialog_break_nothing(here, name, actions):
    outcome = asyncio.run(play(SCENARIOS[name], here(), actions))
    assert not outcome.failed, report(name, actions, outcome)
    assert not outcome.ended  # none of these keys leaves


def test_a_key_read_with_the_q_that_leaves_a_finished_runs_dashboard_breaks_nothing(here):
    """Found by the cheaper fixed-seed round (issue 53): a key read with the q that leaves reached Textual's
    bindings once the screen stack was empty (ScreenStackError 'No screens on stack'); the app drops it."""
    actions = [("resize", (120, 40)), ("keys", ["escape", "q", "z"])]  # the summary closed, q leaves, z queued
    outcome = asyncio.run(play(SCENARIOS["summary"], here(), actions))
    assert not outcome.failed, report("summary", actions, outcome)


# --- one sensible thing each ------------------------------------------------------------------


@sync
async def test_q_y_y_asks_for_one_stop_and_c_held_down_for_one_checkpoint(tmp_path):
    run = FakeRun(recorded_run(epochs=1, total_epochs=5, end="running"), wait_for_stop=True)
    run.run_dir = str(tmp_path)
    live = LiveRun(run)
    app = LiveApp(live, None, clock=lambda: T0 + 60)
    presses = iter(range(10**6))
    app.pace_clock = lambda: next(presses) / 30  # each c read 1/30 s after the last, however busy the machine
    asked: list[str] = []
    checkpoint, stop = run.interrupter.request_checkpoint, run.interrupter.request_stop
    run.interrupter.request_checkpoint = lambda source="api": (asked.append("checkpoint"), checkpoint(source))
    run.interrupter.request_stop = lambda source="api", detail="": (
        asked.append(f"stop by {source}"),
        stop(source, detail),
    )
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.state.step == 20)
            for _ in range(10):  # c held down: key repeat, 30 keys a second
                await burst(app, ["c"] * 3)
                await asyncio.sleep(0.1)
            await pilot.pause()
            assert asked.count("checkpoint") == 1, asked
            # keys read before the dialog is up do not answer it: a paste holding "qy" stops nothing
            await burst(app, ["q", "y", "y"])
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.pause(0.2)
            assert "stop by dashboard" not in asked and isinstance(app.screen, ConfirmScreen)
            await burst(app, ["y", "y", "y"])  # the answer, typed twice over
            await until(pilot, lambda: not app.is_running)
    finally:
        run.interrupter.request_stop("test")
        live.thread.join(10)
    assert asked.count("stop by dashboard") == 1, asked
    assert app.return_value == 130


@sync
async def test_keys_typed_with_the_one_that_opens_a_dialog_are_the_dialogs(tmp_path):
    """Type-ahead: `q` `n` read together cancel the question they asked (the `n` used to be dropped: the
    question stayed, and the user's next `q` answered it, seeming lost); `/loss` read together puts
    `loss` in the filter. A `y` read with the `q` stops nothing (test above)."""
    run = FakeRun(recorded_run(epochs=1, total_epochs=5, end="running"), wait_for_stop=True)
    run.run_dir = str(tmp_path)
    live = LiveRun(run)
    app = LiveApp(live, None, clock=lambda: T0 + 60)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.state.step == 20)
            await burst(app, ["q", "n", "n"])  # the second n reaches the closing dialog, or the dashboard
            # (held until the dialog has been drawn once: a busy machine takes a while)
            await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
            assert app.is_running
            await burst(app, ["q"])  # not lost: it asks again
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await burst(app, ["escape"])
            await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
            await burst(app, ["slash", "l", "o", "s", "s"])
            await until(pilot, lambda: isinstance(app.screen, FilterScreen))
            await until(pilot, lambda: app.screen.query_one("#filter-input").value == "loss")
            await burst(app, ["enter"])
            await until(pilot, lambda: not isinstance(app.screen, FilterScreen))
            assert app.query_one(ChartGrid).filter_text == "loss"
            assert not run.interrupter.stop_requested and app.is_running
    finally:
        run.interrupter.request_stop("test")
        live.thread.join(10)


@sync
async def test_a_paste_of_2000_characters_into_the_filter(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = _watched(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))
        # Esc, then / once the summary is gone: a key read with the Esc reaches the closing summary or the
        # dashboard, as the app's and the summary's queues happen to be served (the suite once saw the first)
        await burst(app, ["escape"])
        await until(pilot, lambda: not isinstance(app.screen, ResultScreen))
        await burst(app, ["slash"])
        await until(pilot, lambda: isinstance(app.screen, FilterScreen))
        await burst(app, paste("loss|acc" * 250))  # one read
        await pilot.pause()
        value = app.screen.query_one("#filter-input").value
        assert value.startswith("loss|acc") and len(value) == 2000
        await burst(app, ["enter", "enter", "question_mark", "x", "y"])
        await pilot.pause()
        assert not isinstance(app.screen, (FilterScreen, HelpScreen, ConfirmScreen))
        assert app.is_running


@sync
async def test_ctrl_z_suspends_where_the_terminal_can_or_says_why_not(tmp_path):
    """Under a driver that cannot suspend (a browser, a test) Ctrl+Z says so rather than doing nothing."""
    app = _watched(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))
        await pilot.press("escape", "ctrl+z")
        await pilot.pause()
        notes = [n.message for n in app._notifications]
        assert any("Ctrl+Z" in n for n in notes), notes
        assert app.is_running


def test_q_and_y_read_together_on_the_summary_leave_once_without_a_note(tmp_path):
    """`q` `y` in one read on a finished run's summary: both are bound to leaving; each left again, and the
    exit messages piled up: Textual printed "NOTE: 1 of 2 errors shown" under the summary (found by the slow
    fuzz)."""
    messages = []

    async def body():
        app = _watched(tmp_path)
        leave_with = app.exit

        def exit(result=None, return_code=0, message=None):
            messages.append(message)
            leave_with(result, return_code, message)

        app.exit = exit
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: isinstance(app.screen, ResultScreen))
            await burst(app, ["q", "y", "q"])
            await until(pilot, lambda: not app.is_running)

    asyncio.run(body())
    assert len([m for m in messages if m is not None]) == 1, messages

"""Keys as a terminal delivers them, for the key fuzz tests (test_key_fuzz.py).

A terminal hands the app what one read returned: several keys at once when the user types fast, holds a
key down, pastes, or the app is busy. Pilot's `press` sends one key and waits until the app is idle, which
never queues a key behind a closing dialog; `burst` posts every key of a read before the app handles the
first, as the driver's input thread does.

A round is a list of actions, replayed the same way every time: ("keys", [names]) one read,
("resize", (w, h)), ("wait", seconds). `Scenario`s open the dashboard the ways a user meets it: a live
run (`tuitrain run`), its summary once it ended, a finished run watched from its files (`tuitrain
watch`), two runs compared, a sweep's folder, a run with samples and heatmaps. `shrink` cuts a failing
round down to the actions and keys that still make it fail.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable

from textual import events

from tuitrain.dashboard.app import DashboardApp

#: key name -> the character a terminal sends for it (None: an escape sequence, no character)
CHARACTERS = {
    "space": " ",
    "question_mark": "?",
    "slash": "/",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
    "enter": "\r",
    "escape": "\x1b",
    "tab": "\t",
    "backspace": "\x7f",
    "ctrl+c": "\x03",
    "ctrl+z": "\x1a",
    "ctrl+q": "\x11",
    "full_stop": ".",
    "minus": "-",
    "equals_sign": "=",
    "asterisk": "*",
    "shift+tab": None,
    "up": None,
    "down": None,
    "left": None,
    "right": None,
    "pageup": None,
    "pagedown": None,
    "home": None,
    "end": None,
}

#: the dashboard's keys and the dialogs', weighted toward those that open and close screens
KEYS = (
    ["q"] * 2
    + ["y"] * 3
    + ["n"] * 3
    + ["question_mark"] * 4
    + ["slash"] * 3
    + ["enter"] * 6
    + ["escape"] * 6
    + ["d"] * 3
    + ["R"] * 3
    + ["P"] * 3
    + ["r"] * 3
    + ["c"] * 3
    + ["p"] * 2
    + [
        "i",
        "l",
        "s",
        "x",
        "w",
        "tab",
        "shift+tab",
        "up",
        "down",
        "left",
        "right",
        "pageup",
        "pagedown",
        "home",
        "end",
        "space",
        "left_square_bracket",
        "right_square_bracket",
        "o",
        "a",
        "v",
        "backspace",
        "b",
        "z",
        "1",
        "full_stop",
        "asterisk",
        "minus",
        "equals_sign",
        "k",
        "m",
        "l",
        "A",
    ]
)
#: keys that end a round when they mean it (a stop, a leave): rarer, so that rounds last
RARE = ["ctrl+c", "ctrl+z", "e", "ctrl+q"]
SIZES = [(40, 12), (60, 20), (80, 24), (100, 30), (120, 40), (160, 50), (200, 60), (250, 80)]


def key_event(name: str) -> events.Key:
    char = CHARACTERS[name] if name in CHARACTERS else (name if len(name) == 1 else None)
    return events.Key(name, char)


async def burst(app: DashboardApp, keys: list[str]) -> None:
    """One read of the terminal: every key queued on the app before it handles the first."""
    for name in keys:
        app.post_message(key_event(name))
    await asyncio.sleep(0)


#: how many keys a read holds: mostly short
BURSTS = [1, 1, 2, 2, 3, 4, 6, 8]


def round_of(
    rng: random.Random, length: int, resizes: float = 0.08, waits: float = 0.08, bursts: list[int] = BURSTS
) -> list[tuple]:
    """A random round: bursts of 1-8 keys (mostly short), a resize now and then (a share `resizes` of the
    actions), pauses (`waits`)."""
    actions: list[tuple] = [("resize", rng.choice(SIZES))]
    keys = 0
    while keys < length:
        roll = rng.random()
        if roll < resizes:
            actions.append(("resize", rng.choice(SIZES)))
        elif roll < resizes + waits:
            actions.append(("wait", rng.choice([0.05, 0.2])))
        else:
            n = rng.choice(bursts)
            burst_keys = [rng.choice(RARE) if rng.random() < 0.015 else rng.choice(KEYS) for _ in range(n)]
            actions.append(("keys", burst_keys))
            keys += n
    return actions


def paste(text: str) -> list[str]:
    """An unbracketed paste: its characters as keys, in one read."""
    names = {v: k for k, v in CHARACTERS.items() if v is not None and len(v) == 1}
    return [names.get(ch, ch) for ch in text]


@dataclass
class Outcome:
    errors: list[BaseException] = field(default_factory=list)
    keys: int = 0
    screens: set[str] = field(default_factory=set)
    ended: bool = False  # the app left during the round (a stop, a leave): fine

    @property
    def failed(self) -> bool:
        return bool(self.errors)


@dataclass
class Scenario:
    """How the dashboard was opened: `make(folder)` builds the app (and whatever its source reads);
    `ready(app)`: filled as a user first sees it; `cleanup(app)` ends what the app left running."""

    name: str
    make: Callable[[Path], DashboardApp]
    ready: Callable[[DashboardApp], bool] = lambda app: app.state.step > 0
    cleanup: Callable[[DashboardApp], None] = lambda app: None


def _watch_errors(app: DashboardApp, errors: list[BaseException]) -> None:
    """Every exception that reaches Textual's funnel, whichever app class handles it after."""
    handle = app._handle_exception

    def record(error: Exception) -> None:
        errors.append(error)
        handle(error)

    app._handle_exception = record  # type: ignore[method-assign]


async def play(scenario: Scenario, folder: Path, actions: list[tuple]) -> Outcome:
    """One round: the app opened, the actions played, every exception it raised collected. An app that
    leaves on the way (`q` on an ended run, `q` `y`, Ctrl+C) is opened again for the actions left."""
    out = Outcome()
    size = next((a[1] for a in actions if a[0] == "resize"), (120, 40))
    left = list(actions)
    opened = 0
    while left and not out.errors and opened < 20:
        opened += 1
        sub = folder / f"open-{opened}"
        sub.mkdir()
        left, size = await _play_once(scenario, sub, left, size, out)
    return out


async def _play_once(
    scenario: Scenario, folder: Path, actions: list[tuple], size: tuple[int, int], out: Outcome
) -> tuple[list[tuple], tuple[int, int]]:
    """The actions on one opening of the app, until it leaves: (the actions left, the size)."""
    app = scenario.make(folder)
    _watch_errors(app, out.errors)
    left = list(actions)
    try:
        async with app.run_test(size=size) as pilot:
            for _ in range(400):  # filled, as the user first sees it
                if scenario.ready(app) or not app.is_running:
                    break
                await pilot.pause(0.02)
            played = 0
            while left and app.is_running:
                kind, arg = left.pop(0)
                played += 1
                if kind == "keys":
                    await burst(app, arg)
                    out.keys += len(arg)
                elif kind == "resize":
                    size = arg
                    await pilot.resize_terminal(*arg)
                else:
                    await asyncio.sleep(arg)
                if app.is_running:  # keys pile up as a busy app's do; now and then the app catches up
                    await (pilot.pause() if played % 4 == 0 else asyncio.sleep(0.01))
                stack = app.screen_stack  # (empty while the app is leaving: `app.screen` would raise then)
                if app.is_running and stack:
                    out.screens.add(type(stack[-1]).__name__)
                    if type(stack[0]).__name__ != "DashboardScreen":
                        out.errors.append(AssertionError(f"the screen stack lost the dashboard: {stack}"))
                        break
            if app.is_running:
                await pilot.pause()
            else:
                out.ended = True
    except Exception as e:  # run_test re-raises what the app failed with
        if not any(e is err for err in out.errors):
            out.errors.append(e)
    finally:
        scenario.cleanup(app)
    return left, size


def shrink(
    scenario: Scenario,
    folder_of: Callable[[], Path],
    actions: list[tuple],
    fails: Callable[[Outcome], bool] = lambda o: o.failed,
    budget: int = 60,
) -> list[tuple]:
    """The shortest round found that still fails: whole actions dropped, then single keys of the bursts."""

    def still_fails(candidate: list[tuple]) -> bool:
        return fails(asyncio.run(play(scenario, folder_of(), candidate)))

    tries = 0
    current = list(actions)
    chunk = max(1, len(current) // 2)
    while chunk >= 1 and tries < budget:
        i, changed = 1, False  # the first action (the size) stays
        while i < len(current) and tries < budget:
            candidate = current[:i] + current[i + chunk :]
            tries += 1
            if still_fails(candidate):
                current, changed = candidate, True
            else:
                i += chunk
        if not changed:
            chunk //= 2
    for i, (kind, arg) in enumerate(list(current)):  # then the keys of each burst
        if kind != "keys":
            continue
        keys = list(arg)
        j = 0
        while j < len(keys) and len(keys) > 1 and tries < budget:
            candidate_keys = keys[:j] + keys[j + 1 :]
            tries += 1
            if still_fails(current[:i] + [("keys", candidate_keys)] + current[i + 1 :]):
                keys = candidate_keys
            else:
                j += 1
        current[i] = ("keys", keys)
    return current

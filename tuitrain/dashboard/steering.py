"""`SteeredApp`: the keys that steer the run shown and what they do, the base of `DashboardApp` (app.py):
c a checkpoint, p pause and resume, q a stop asked first (`ConfirmScreen`), Ctrl+C a graceful stop
then, pressed again, the process's end (a watched run in another process: Ctrl+C leaves the viewer),
Ctrl+Z suspends. They act through the app's `controller` (the run's `Interrupter`, or `FileControl`
for a run in another process) and never call into the training loop; once there is nothing to steer
(the run ended, or a read-only view) they leave the footer and say so.

This module must not import the run layer: the dashboard imports only `tuitrain.core`, `tuitrain.sinks`,
`tuitrain.sources` and `tuitrain.dashboard`.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from textual import events
from textual.app import App
from textual.screen import ModalScreen

from tuitrain.core.control import Controller
from tuitrain.dashboard.screens.confirm_screen import ConfirmScreen, stop_says
from tuitrain.dashboard.screens.modal import Modal

if TYPE_CHECKING:
    from tuitrain.dashboard.screens.screen import DashboardScreen
    from tuitrain.dashboard.state.feed import Feed
    from tuitrain.dashboard.state.model import DashboardState
    from tuitrain.sources.run_files import Source


def restore_terminal_and_exit(app: App) -> None:
    """Second Ctrl+C: leave the alternate screen, give the terminal back, end the process now.
    `App.suspend` (public) stops the driver's application mode and flushes the restore sequences
    still queued in its writer thread; where it cannot (no terminal of its own), the process ends all
    the same."""
    try:
        with app.suspend():
            os._exit(130)
    finally:
        os._exit(130)


_READ_FOR = "tuitrain_read_for"  # the screen on top when a key was read (set on the key, for `_held_for_dialog`)


class SteeredApp(App[int]):
    """The steering keys' actions over what `DashboardApp` holds: the run's `state`, its `controller`
    (None: read-only), whether it is `watching` a run in another process (`owned`: the one that started
    this viewer) and how its leaving goes (`leave`)."""

    #: seconds within which another `c` is the same request (the key held down: one checkpoint, one notice)
    CHECKPOINT_REPEAT = 1.0

    # what the app sets in its __init__
    state: DashboardState
    controller: Controller | None
    source: Source
    feed: Feed
    dashboard: DashboardScreen | None
    watching: bool
    owned: bool
    worker_done: bool
    interrupts: int
    leave_when_done: bool
    pace_clock: Callable[[], float]
    hard_exit: Callable[[App], None]
    _last_c: float

    def leave(self) -> None:
        raise NotImplementedError

    @property
    def training_over(self) -> bool:
        """Nothing left to steer: the run ended (live: its thread returned)."""
        return self.worker_done if not self.watching else self.state.ended

    @property
    def steerable(self) -> bool:
        """The keys c and p act on the run: a live run that has not ended, and not a read-only view."""
        return self.controller is not None and not self.training_over

    def _stops_the_run(self) -> bool:
        """Ctrl+C stops the run (a run this process started), rather than leaving the viewer."""
        return self.steerable and (self.owned or not self.watching)

    async def on_event(self, event: events.Event) -> None:
        # a key read together with the one that left (`Esc q z` in one read on a summary): once the app's
        # screens are gone it has nowhere to go, and Textual's bindings would ask for a screen that is not
        # there (ScreenStackError). check_action comes too late for it
        if isinstance(event, events.InputEvent) and not self.screen_stack:
            return
        if isinstance(event, events.Key) and self._held_for_dialog(event):
            return
        await super().on_event(event)

    def _held_for_dialog(self, event: events.Key) -> bool:
        """Type-ahead (`Modal`): a key read before the dialog on top was up waits for it, and goes to it.
        Textual sends a key read from the terminal to the screen on top when it is read; the keys read
        with `q` reach the dashboard screen, come back up to the app once the dialog is pushed, and find
        only the dialog's bindings (a `n` for the stop dialog was dropped: the dialog stayed, and the
        next key answered it). Ctrl+C is never held: it stops the run from anywhere."""
        top = self.screen
        if not event.is_forwarded:  # read from the terminal now: for the screen on top
            if isinstance(top, Modal) and not top.ready and not top.closing and event.key != "ctrl+c":
                top.hold(event, typed_ahead=False)
                return True
            setattr(event, _READ_FOR, top)
            return False
        # on its way back up to the app's bindings: read for a screen a dialog has since covered
        read_for = getattr(event, _READ_FOR, top)
        if read_for is top or not isinstance(top, Modal) or top.closing or read_for not in self.screen_stack:
            return False
        event.stop()
        top.hold(event, typed_ahead=True)
        return True

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Keys that steer leave the footer (and do nothing) once there is nothing to steer."""
        if action == "checkpoint":
            return self.steerable
        if action in ("pause", "resume"):  # one of the two in the footer, as the run is
            return self.steerable and bool(self.state.paused) == (action == "resume")
        if action == "interrupt":
            return self._stops_the_run()
        if action == "leave_viewer":
            return not self._stops_the_run()
        return True

    def steering_changed(self) -> None:
        """The run can no longer be steered (ended, or read-only): buttons and footer follow."""
        if self.dashboard is not None:
            self.dashboard.controls.set_enabled(self.steerable)
        self.refresh_bindings()

    def action_leave_viewer(self) -> None:
        self.leave()

    def _steer(self, what: str) -> Controller | None:
        """The controller to act through; None (and said) when there is nothing to steer."""
        if self.controller is None or self.training_over:
            self.notify(
                "nothing to steer: " + ("the run has ended" if self.training_over else "read-only"),
                severity="warning",
                timeout=3,
            )
            return None
        return self.controller

    def action_checkpoint(self) -> None:
        now, last = self.pace_clock(), self._last_c
        self._last_c = now
        if now - last < self.CHECKPOINT_REPEAT:  # held down, or typed twice: the request already made
            return
        controller = self._steer("checkpoint")
        if controller is not None:
            controller.request_checkpoint("dashboard")
            self.notify("checkpoint requested", timeout=2)

    def action_resume(self) -> None:
        self.action_pause()

    def action_suspend(self) -> None:
        """Ctrl+Z: the process suspended as a terminal job is (training stops with it); `fg` brings the
        screen back. Where there is no job control (a browser, Windows) the notice says so."""
        if self.is_headless:  # a test's screen: there is no terminal job to suspend
            self.notify("Ctrl+Z: no terminal to suspend in", severity="warning", timeout=4)
        elif self.is_web or not hasattr(signal, "SIGTSTP"):
            self.notify(
                "Ctrl+Z: a browser's screen cannot be suspended; q leaves (a live run asks first)",
                severity="warning",
                timeout=4,
            )
        else:
            self.action_suspend_process()

    def action_pause(self) -> None:
        controller = self._steer("pause")
        if controller is not None:
            controller.toggle_pause("dashboard")
            self.notify("resume requested" if self.state.paused else "pause requested", timeout=2)

    def action_quit_request(self) -> None:
        if self.controller is None or self.training_over:
            self.leave()
            return
        self.push_screen(
            ConfirmScreen(
                "Stop training and leave?", offer_leave=self.watching and not self.owned, stop=self._stop_says()[0]
            ),
            self._confirmed,
        )

    def _stop_says(self) -> tuple[str, str]:
        """What `y` does to this run (its loop's kind), and the notice once it is asked for."""
        run_dir = self.state.run_dir or str(getattr(self.source, "run_dir", "") or "")
        return stop_says(self.state.loop, bool(run_dir))

    def _confirmed(self, answer: str | None) -> None:
        if answer == "leave":
            self.leave()
        elif answer == "stop":
            if self.training_over or self.controller is None:
                self.leave()
                return
            self.controller.request_stop("dashboard", "quit")
            if self.watching and not self.owned:
                self.leave()  # the run in the other process stops on its own
            else:
                self.leave_when_done = True
                self.feed.refresh_progress()
                self.notify(self._stop_says()[1], timeout=5)

    def action_interrupt(self) -> None:
        if self.training_over or self.controller is None or (self.watching and not self.owned):
            self.leave()  # watching another's run: Ctrl+C leaves the viewer, the run goes on
            return
        self.interrupts += 1
        if self.interrupts > 1:
            self.hard_exit(self)
            return
        self.controller.request_stop("dashboard", "ctrl+c")
        self.leave_when_done = True
        if isinstance(self.screen, ModalScreen):
            self.screen.dismiss()
        self.feed.refresh_progress()
        self.notify("stopping gracefully; Ctrl+C again ends the process", severity="warning", timeout=5)


__all__ = ["SteeredApp", "restore_terminal_and_exit"]

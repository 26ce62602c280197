"""A `Monitor`'s thread: what `Monitor.log` appended read off the loop's thread (a tensor's `.item()`
there), said as `MetricsLogged`, added to the run's summary and judged by the `[watch]` rules, about
every `FLUSH_INTERVAL` seconds and whenever the loop needs it said first (an alert, a checkpoint, a
pause, the end). Must not import textual.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tuitrain.core.events import Event, MetricsLogged
from tuitrain.core.health import Health
from tuitrain.core.lifecycle import Lifecycle
from tuitrain.core.verdicts import judge_own_loop, number_of

FLUSH_INTERVAL = 0.2  # seconds between the thread's passes over what `log` appended


class Pump:
    """`add` appends (the loop's side: a lock and a list); `flush` reads, says and judges what was added,
    then says the control requests taken (`life.report`) and calls `after` (a single process settles
    its control folder there). `start(each)` runs the thread, `each()` after every pass; `close` ends it."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, str, dict, float, int]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = False
        self._thread: threading.Thread | None = None
        #: the last value of every metric, by split ("train" -> {"loss": 0.3})
        self.last: dict[str, dict[str, float]] = {}
        self.emit: Callable[[Event], None] = lambda event: None
        self.life: Lifecycle | None = None
        self.health: Health | None = None
        self.stop: Callable[[str], None] = lambda title: None
        self.after: Callable[[], None] = lambda: None

    def add(self, step: int, split: str, values: dict, epoch: int) -> None:
        with self._lock:
            self._pending.append((step, split, values, time.time(), epoch))

    def metrics(self) -> dict[str, float]:
        """The last values as a checkpoint's index lists them ("train/loss")."""
        return {f"{split}/{k}": v for split, values in self.last.items() for k, v in values.items()}

    def flush(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
        life = self.life
        for step, split, values, t, epoch in batch:
            metrics = {}
            for name, value in values.items():
                try:
                    metrics[name] = number_of(value)
                except (TypeError, ValueError, RuntimeError):
                    continue  # not a number: left out rather than stopping the run
            self.last.setdefault(split, {}).update(metrics)
            if life is not None:
                for name, v in metrics.items():
                    # no epochs in a loop of one's own: the summary table leaves its Epoch columns out
                    life.summary.add(f"{split}/{name}", v)
            self.emit(MetricsLogged(split=split, epoch=epoch, step=step, metrics=metrics, time=t))
            if split == "train" and self.health is not None:
                judge_own_loop(self.health, metrics, step, epoch, self.emit, self.stop)
        if life is not None:
            life.report()
        self.after()

    def start(self, each: Callable[[], None]) -> None:
        def run() -> None:
            while not self._closing:
                self._wake.wait(FLUSH_INTERVAL)
                self.flush()
                if not self._closing:
                    each()

        self._thread = threading.Thread(target=run, name="tuitrain-monitor", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """The thread ended (its last pass done); what is left is the caller's `flush` to say."""
        self._closing = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

"""The one place where the ranks of a distributed run decide the same thing at the same call.

Stop, pause and checkpoint requests (and, next, preemption and health actions) reach one process: a
signal to one rank, `tuitrain stop` read by rank 0, a key in rank 0's dashboard. Acting on one alone
hangs or crashes the others in their next collective. So every decision goes through `Agreement`: each
rank puts in its flags, and every rank gets the element-wise maximum back (a request raised on any rank
counts everywhere). The exchange is a small all-reduce of ints over a CPU (gloo) group, never a device
sync.

`SyncedInterrupter` is the control flags built on it, for any loop that reads them on every rank at the
same points (the Learner's steps, `Monitor.stop_requested`, the Lightning and Hugging Face callbacks):
its exchanges are amortized (one every ~50 ms of the loop, started asynchronously and read one exchange
later), and a pause waits in short blocking exchanges, never inside one collective that could time out.
Must not import textual, nor anything of tuitrain outside `tuitrain.core`.
"""

from __future__ import annotations

import datetime
import os
import time
from typing import Any
from collections.abc import Callable

import torch
import torch.distributed as dist

from ..control import Interrupter

DEFAULT_TIMEOUT = 60.0  # seconds a collective may wait for a peer before failing


def dist_timeout() -> datetime.timedelta:
    return datetime.timedelta(seconds=float(os.environ.get("TUITRAIN_DIST_TIMEOUT", DEFAULT_TIMEOUT)))


def control_group() -> Any:
    """A CPU group for the small exchanges: the default group when it is gloo already, else a new gloo
    group (a collective call: every rank must make it, in the same order)."""
    if dist.get_backend() == "gloo":
        return None
    return dist.new_group(backend="gloo", timeout=dist_timeout())


class Agreement:
    """Every rank's flags in, their element-wise maximum out on every rank (`width` ints).

    `now(flags)` blocks until all ranks have put theirs in; `start(flags)` begins the exchange and
    `finish()` waits for it, so the exchange can overlap the loop's work in between."""

    def __init__(self, group: Any = None, width: int = 5) -> None:
        self.group = group
        self.width = width
        self._bufs = [torch.zeros(width, dtype=torch.int64) for _ in range(2)]  # CPU tensors
        self._next = 0
        self._work = None
        self._buf: torch.Tensor | None = None

    def _load(self, flags: list[int]) -> torch.Tensor:
        buf = self._bufs[self._next]
        self._next ^= 1
        buf.copy_(torch.tensor([int(f) for f in flags], dtype=torch.int64))
        return buf

    def now(self, flags: list[int]) -> list[int]:
        buf = self._load(flags)
        dist.all_reduce(buf, op=dist.ReduceOp.MAX, group=self.group)
        return buf.tolist()

    def start(self, flags: list[int]) -> None:
        buf = self._load(flags)
        self._work = dist.all_reduce(buf, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
        self._buf = buf

    @property
    def in_flight(self) -> bool:
        return self._work is not None

    def finish(self) -> list[int] | None:
        """The result of the exchange `start` began (None when none is in flight)."""
        if self._work is None:
            return None
        self._work.wait()
        self._work = None
        return self._buf.tolist()


class SyncedInterrupter(Interrupter):
    """Control flags that every rank agrees on: [stop, checkpoint, paused, logged, ticks until the next
    exchange, the rank that asked to stop + 1, preempted], each rank's `inbox` requests combined by
    `Agreement`. `preempted`: the stop is a preemption (SIGUSR1/2 on any rank): every rank's
    `stop_reason` says "preempted", so rank 0 ends the run as one and requeues the job.

    `pending` is the tick, read by the loop on every rank at the same points (once per optimizer step,
    once per `Monitor.stop_requested`). At an exchange tick it applies the flags of the exchange begun at
    the previous one and begins the next without waiting for it; a request therefore takes effect one
    exchange later, at the same tick on every rank. Rank 0 spaces exchanges about `interval` seconds apart
    (from the measured time between ticks), or every `every` ticks when that is given. While `stage()` is
    not "train" (validation, where ranks may run different batch counts) `pending` is False without a
    collective. `sync()` is the blocking form (at boundaries and while paused). Requests reach the loop
    only through these exchanges.
    """

    MAX_EVERY = 1000

    def __init__(
        self,
        rank: int,
        group: Any,
        inbox: Interrupter | None = None,
        stage: Callable[[], str] = lambda: "train",
        every: int = 0,
        interval: float = 0.05,
    ) -> None:
        super().__init__()
        self.rank = rank
        self.inbox = inbox if inbox is not None else Interrupter()
        self._stage = stage
        self.every = max(0, every)  # 0: from the time between ticks
        self.interval = interval
        self._countdown = 1
        self._reads = 0
        self._last_fill: tuple[float, int] | None = None  # rank 0: (time, reads) at the last exchange
        self._agreement = Agreement(group, width=7)
        self._own_stop = False  # this rank's own inbox asked to stop (its source is `_source`)
        self._source = ""
        self._checkpoint_by = ""  # the source of this rank's own checkpoint request, until agreed

    @property
    def pending(self) -> bool:
        if self._stage() != "train":
            return False
        self._reads += 1
        self._countdown -= 1
        if self._countdown > 0:
            return False
        wanted = self._complete()
        self._agreement.start(self._fill())
        return wanted

    @pending.setter
    def pending(self, value: bool) -> None:  # the base class's own bookkeeping; the exchanges decide
        pass

    def sync(self) -> bool:
        """A blocking exchange; afterwards every rank holds the same flags."""
        self._complete()
        return self._apply(self._agreement.now(self._fill()))

    def _fill(self) -> list[int]:
        """This rank's requests since the last exchange (rank 0 also sets the spacing)."""
        every = 0
        if self.rank == 0:
            now = time.perf_counter()
            every = self.every
            if not every:
                every = 1
                if self._last_fill is not None and self._reads > self._last_fill[1]:
                    per_tick = (now - self._last_fill[0]) / (self._reads - self._last_fill[1])
                    every = max(1, min(self.MAX_EVERY, round(self.interval / max(per_tick, 1e-9))))
            self._last_fill = (now, self._reads)
        ib = self.inbox
        with ib._lock:
            stop = ib.stop_requested or bool(ib.failure)
            # who asked (rank + 1; the highest such rank wins), so that rank 0 can say where a stop came from
            vals = [
                int(stop),
                int(ib.checkpoint_requested),
                int(ib.paused),
                int(bool(ib._log)),
                every,
                self.rank + 1 if stop else 0,
                int(stop and ib.stop_reason == "preempted"),
            ]
            if stop:
                self._own_stop = True
                self._source = ib.stop_source or "failure"
            if ib.checkpoint_requested:
                self._checkpoint_by = self._checkpoint_by or ib.checkpoint_source
            ib.checkpoint_requested, ib.checkpoint_source = False, ""
            log, ib._log = ib._log, []
            ib._refresh()
        with self._lock:
            self._log.extend(log)
        return vals

    def _complete(self) -> bool:
        flags = self._agreement.finish()
        if flags is None:
            self._countdown = 1
            return False
        return self._apply(flags)

    def _apply(self, flags: list[int]) -> bool:
        stop, checkpoint, paused, logged, every, by, preempted = flags
        self._countdown = max(1, every)
        with self._lock:
            if stop and not self.stop_requested:
                self.stop_requested = True
                self.stop_source = self._source if self._own_stop else f"rank {by - 1}"
                if preempted and self.stop_reason == "stopped":  # an earlier stop keeps its reason
                    self.stop_reason = "preempted"
                if not self._own_stop:  # said in the run's events (rank 0 writes them)
                    self._log.append(("stop", self.stop_source, "requested on another rank"))
            if checkpoint:
                if not self.checkpoint_requested:  # who asked: known on the rank that did (rank 0)
                    self.checkpoint_source = self._checkpoint_by
                self.checkpoint_requested = True
                self._checkpoint_by = ""
            self.paused = bool(paused)
        return bool(stop or checkpoint or paused or logged)

    def wait_while_paused(self, timeout: float) -> bool:
        self.inbox.wait_while_paused(timeout)  # wakes early on a change of this rank's own requests
        self.sync()
        return not self.paused

    def close(self) -> None:
        """Wait for an exchange still in flight (every rank has begun it: it completes)."""
        self._agreement.finish()

"""`compared(state)`: the state of compared runs, for the views that ask `state.kind` first.

A view tells the kinds of state apart by `state.kind` ("run": `DashboardState`, model.py; "compare":
`CompareState`, compare.py; "sweep": `SweepState`, sweep.py) and then reads the compared runs'
attributes (`runs`, `shown_runs()` ...) through this, so the type checker knows them. A cast only:
it checks nothing at run time. Must not import textual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from tuitrain.dashboard.state.compare import CompareState
    from tuitrain.dashboard.state.model import DashboardState


def compared(state: DashboardState) -> CompareState:
    """`state` (whose `kind` is "compare" or "sweep") as the compared runs' state."""
    return cast("CompareState", state)


__all__ = ["compared"]

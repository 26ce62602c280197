"""The kinds of chart the grid shows, registered in one place: a kind says what it reads (`charts`: the
charts a state has of it, each a name and the metrics it shows), what draws it (`make`: its widget, a
`Chart`, which also says how it is inspected) and when the filter shows it (`shown`). `ChartGrid`
(chart_grid.py) asks every kind, in `order`, and knows no kind by name.

A kind is registered by the module of its widget (`register(ChartKind(...))` at its end): metric_plot.py
registers "lines" (the training metrics) and "devices" (the device history, shown when a filter names
it), histogram_plot.py "histograms", band_plot.py "band". `chart_kinds()` imports every module of this
package once, so a new kind is one new module here (and its test), and nothing else changes.

Must not import the run layer.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tuitrain.dashboard.charts.chart import Chart
    from tuitrain.dashboard.state.model import DashboardState

#: a chart's key in the grid: a metric's chart by its name (as the state names the metric), another
#: kind's by (kind, name): a histogram may have a metric's name
ChartKey = str | tuple[str, str]


def shown_unless_filtered(name: str, metrics: list[str], pattern: re.Pattern[str] | None) -> bool:
    """Shown without a filter, and under one that matches the chart's name or one of its metrics."""
    return pattern is None or any(pattern.search(m) for m in [*metrics, name])


def shown_by_filter(name: str, metrics: list[str], pattern: re.Pattern[str] | None) -> bool:
    """Shown only under a filter that matches the chart's name or one of its metrics (`/cpu`)."""
    return pattern is not None and shown_unless_filtered(name, metrics, pattern)


@dataclass(frozen=True)
class ChartKind:
    """One kind of chart. `charts(state)`: (chart name, its metrics) of each chart the state has of this
    kind, in the grid's order; `make(name, metrics)`: a new widget for one; `shown(name, metrics,
    pattern)`: shown under the filter's pattern (None: no filter). `made_hidden`: its charts are made
    (and kept up to date) while the filter hides them, ready the moment it shows them; else a chart
    is made when the filter shows it and removed when it hides it. `by_name`: its charts are keyed
    by their name alone (a metric's chart; see `ChartKey`)."""

    name: str
    order: int
    charts: Callable[[DashboardState], list[tuple[str, list[str]]]]
    make: Callable[[str, list[str]], Chart]
    shown: Callable[[str, list[str], re.Pattern[str] | None], bool] = shown_unless_filtered
    made_hidden: bool = True
    by_name: bool = False

    def key(self, name: str) -> ChartKey:
        return name if self.by_name else (self.name, name)


_KINDS: dict[str, ChartKind] = {}
_loaded = False


def register(kind: ChartKind) -> ChartKind:
    """Add a kind (a module's own, at import); a kind of the same name is replaced."""
    _KINDS[kind.name] = kind
    return kind


def chart_kinds() -> list[ChartKind]:
    """Every registered kind, in the grid's order; the package's modules imported once, so each
    registers its own."""
    global _loaded
    if not _loaded:
        _loaded = True
        package = importlib.import_module(__package__ or "tuitrain.dashboard.charts")
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{module.name}")
    return sorted(_KINDS.values(), key=lambda k: (k.order, k.name))


__all__ = ["ChartKey", "ChartKind", "chart_kinds", "register", "shown_by_filter", "shown_unless_filtered"]

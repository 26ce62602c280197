"""`DevicesPanel`: CPU (total and per core), memory, the run's resident memory, and each GPU; in
sizes of few cells ('3.0G/23.5G'), each row's figures those that fit its width, whole (80x24 too)."""

from __future__ import annotations

import math

from rich.table import Table
from rich.console import Group
from rich.text import Text
from textual.widgets import Static

from tuitrain.core.events import DevicesSampled
from tuitrain.core.text import safe_name, safe_text
from tuitrain.dashboard.fmt import format_rate, format_size

BLOCKS = " ▁▂▃▄▅▆▇█"
BAR_WIDTH = 10


def bar(percent: float | None, width: int = BAR_WIDTH) -> str:
    """A fixed-width text bar: deterministic, readable in any theme."""
    if percent is None:
        return "·" * width
    filled = round(max(0.0, min(percent, 100.0)) / 100 * width)
    return "█" * filled + "░" * (width - filled)


def cores(per_core: list, width: int | None = None) -> str:
    """One block per core, its height the core's load; more cores than `width`: one block per group of
    neighbouring cores, their mean."""
    loads = []
    for p in per_core:
        try:
            loads.append(max(0.0, min(float(p), 100.0)) if math.isfinite(float(p)) else 0.0)
        except (TypeError, ValueError):
            loads.append(0.0)
    if width is not None and len(loads) > width > 0:
        edges = [round(i * len(loads) / width) for i in range(width + 1)]
        loads = [sum(loads[a:b]) / (b - a) for a, b in zip(edges, edges[1:]) if b > a]
    return "".join(BLOCKS[round(p / 100 * (len(BLOCKS) - 1))] for p in loads)


def _pct(v: object) -> str:
    return f"{v:3.0f}%" if isinstance(v, (int, float)) else "  -%"


def env_line(env: dict, width: int | None = None) -> str:
    """'torch 2.13.0 · py 3.11.7 · cpu · git 1a2b3c4*' (* : uncommitted changes); in `width` cells, the
    python version leaves first, then the device, then the commit (whole parts, never a torn one)."""
    parts = [
        f"torch {env['torch']}" if env.get("torch") else "",
        f"py {env['python']}" if env.get("python") else "",
        str(env.get("device", "")),
    ]
    if env.get("git_commit"):
        parts.append(f"git {str(env['git_commit'])[:7]}{'*' if env.get('git_dirty') else ''}")
    parts = [safe_text(p, lines=False) for p in parts if p]
    line = " · ".join(parts)
    for drop in (1, 1, 1):  # py, then the device, then git (each time the second part of what is left)
        if width is None or len(line) <= width or len(parts) <= drop:
            break
        parts.pop(drop)
        line = " · ".join(parts)
    return line


def _within(parts: list[str], width: int | None) -> str:
    """`parts` joined by spaces, the last ones left out until the line fits `width` (the first stays)."""
    parts = [p for p in parts if p]
    while width is not None and len(parts) > 1 and len(" ".join(parts)) > width:
        parts.pop()
    return " ".join(parts)


def _number(d: dict, key: str) -> float | None:
    """A number of a GPU's sample; None when absent or not a number (a damaged events.jsonl)."""
    v = d.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def rank_text(sample: DevicesSampled) -> str:
    """'99% 1.2k/s 310M': a rank's own CPU (of one core), samples per second and memory."""
    if sample.items_per_s:
        rate = f"{format_rate(sample.items_per_s)}/s"
    elif sample.steps_per_s is not None:
        rate = f"{format_rate(sample.steps_per_s)} steps/s"
    else:
        rate = "-/s"
    return f"{_pct(sample.process_cpu)} {rate} {format_size(sample.rss)}"


class DevicesPanel(Static):
    """Shows the newest `DevicesSampled` of each rank: the machine once, then one row per rank
    (its CPU, throughput and memory) when there are several."""

    COMPONENT_CLASSES = {"devices-panel--label", "devices-panel--bar", "devices-panel--hot"}

    DEFAULT_CSS = """
    DevicesPanel { height: auto; }
    DevicesPanel > .devices-panel--label { text-style: dim; }
    DevicesPanel > .devices-panel--bar { color: green; }
    DevicesPanel > .devices-panel--hot { color: red; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__("no device samples yet", id=id, classes=classes)
        self.empty = "no device samples yet"  # the line while there is none (a foreign log's: it has none)
        self.sample: DevicesSampled | None = None
        self.gpus: list[dict] = []
        self._shown: tuple | None = None  # show()'s arguments, shown again at a new width
        self._rows = -1

    def _bar(self, percent: float | None) -> Text:
        hot = isinstance(percent, (int, float)) and percent >= 90
        style = self.get_component_rich_style("devices-panel--hot" if hot else "devices-panel--bar")
        return Text(bar(percent), style=style)

    def on_resize(self) -> None:
        if self._shown is not None:  # each row's figures are those that fit the width
            self.show(*self._shown)

    def say_empty(self, line: str) -> None:
        """The line while there is no device sample (`empty`), shown at once when there is none."""
        self.empty = line
        if self._shown is None:
            self.update(line)

    def show(self, samples: dict[int, DevicesSampled], env: dict | None = None) -> None:
        if not samples:
            return
        self._shown = (samples, env)
        rank0 = samples.get(0) or samples[min(samples)]
        self.sample = rank0
        # each rank reports its own GPUs; show every device once
        seen: dict[object, dict] = {}
        for rank in sorted(samples):
            for gpu in samples[rank].gpus:
                index = gpu.get("index", len(seen))
                seen.setdefault(index if isinstance(index, (int, str)) else repr(index), gpu)
        self.gpus = [seen[k] for k in sorted(seen, key=str)]
        label = self.get_component_rich_style("devices-panel--label")
        # the figures' room: the panel's width less the label and bar columns (None: not laid out yet)
        inner = self.content_size.width or None
        room = max(inner - 4 - 1 - BAR_WIDTH - 1, 4) if inner else None
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style=label, no_wrap=True, min_width=4)
        grid.add_column(no_wrap=True, min_width=BAR_WIDTH)
        grid.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
        per_core = cores(rank0.cpu_per_core, room - 5 if room else None)
        grid.add_row("CPU", self._bar(rank0.cpu), Text(_within([_pct(rank0.cpu), per_core], room)))
        used = f"{format_size(rank0.memory_used)}/{format_size(rank0.memory_total)}"
        grid.add_row("Mem", self._bar(rank0.memory), Text(_within([_pct(rank0.memory), used], room)))
        if len(samples) > 1:
            for rank in sorted(samples):
                r = samples[rank]
                grid.add_row(
                    f"r{rank}",
                    self._bar(None if r.process_cpu is None else min(r.process_cpu, 100.0)),
                    Text(rank_text(r)),
                )
        else:
            grid.add_row("RSS", Text(format_size(rank0.rss)), Text(""))
        for gpu in self.gpus:
            name = Text(safe_name(f"GPU{gpu.get('index', '?')}", 8))
            mem_used, mem_total = _number(gpu, "mem_used"), _number(gpu, "mem_total")
            mem_pct = 100 * mem_used / mem_total if mem_used is not None and mem_total else None
            util = _number(gpu, "util")
            extra = [_pct(util)]
            if mem_used is not None and mem_total:
                extra.append(f"{format_size(mem_used)}/{format_size(mem_total)}")
            if _number(gpu, "temp") is not None:
                extra.append(f"{_number(gpu, 'temp'):.0f}°C")
            if _number(gpu, "power") is not None:
                extra.append(f"{_number(gpu, 'power'):.0f}W")
            grid.add_row(name, self._bar(util), Text(_within(extra, room)))  # power, then temperature give way
            if mem_pct is not None:
                torch_mem = _number(gpu, "torch_allocated")
                note = f"torch {format_size(torch_mem)}" if torch_mem is not None else safe_name(gpu.get("name", ""))
                grid.add_row("", self._bar(mem_pct), Text(f"{_pct(mem_pct)} {note}"))
        rows = grid.row_count + bool(env)
        # a line of its own below the grid: a long one must not squeeze the grid's columns
        body = Group(grid, Text(env_line(env, inner), style=label, no_wrap=True, overflow="ellipsis")) if env else grid
        # a layout pass re-arranges the whole screen: only when this panel's height changes
        self.update(body, layout=rows != self._rows)
        self._rows = rows

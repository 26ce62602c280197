"""`DevicesPanel`: CPU (total and per core), memory, the run's resident memory, and each GPU."""

from __future__ import annotations

import math

from rich.table import Table
from rich.console import Group
from rich.text import Text
from textual.widgets import Static

from tuitrain.core.events import DevicesSampled
from tuitrain.core.text import safe_name, safe_text
from tuitrain.dashboard.fmt import format_bytes, format_rate

BLOCKS = " ▁▂▃▄▅▆▇█"
BAR_WIDTH = 10


def bar(percent: float | None, width: int = BAR_WIDTH) -> str:
    """A fixed-width text bar: deterministic, readable in any theme."""
    if percent is None:
        return "·" * width
    filled = round(max(0.0, min(percent, 100.0)) / 100 * width)
    return "█" * filled + "░" * (width - filled)


def cores(per_core: list) -> str:
    """One block per core, its height the core's load."""
    out = []
    for p in per_core:
        try:
            level = round(max(0.0, min(float(p), 100.0)) / 100 * (len(BLOCKS) - 1))
        except (TypeError, ValueError):
            level = 0
        out.append(BLOCKS[level])
    return "".join(out)


def _pct(v: object) -> str:
    return f"{v:3.0f}%" if isinstance(v, (int, float)) else "  -%"


def env_line(env: dict) -> str:
    """'torch 2.13.0 · py 3.11.7 · cpu · git 1a2b3c4*' (* : uncommitted changes)."""
    parts = [f"torch {env['torch']}" if env.get("torch") else "", f"py {env['python']}" if env.get("python") else "",
             str(env.get("device", ""))]
    if env.get("git_commit"):
        parts.append(f"git {str(env['git_commit'])[:7]}{'*' if env.get('git_dirty') else ''}")
    return safe_text(" · ".join(p for p in parts if p), lines=False)


def _number(d: dict, key: str) -> float | None:
    """A number of a GPU's sample; None when absent or not a number (a damaged events.jsonl)."""
    v = d.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def rank_text(sample: DevicesSampled) -> str:
    """'99% 1.2k/s 310.5 MB': a rank's own CPU (of one core), samples per second and memory."""
    if sample.items_per_s:
        rate = f"{format_rate(sample.items_per_s)}/s"
    elif sample.steps_per_s is not None:
        rate = f"{format_rate(sample.steps_per_s)} steps/s"
    else:
        rate = "-/s"
    return f"{_pct(sample.process_cpu)} {rate} {format_bytes(sample.rss)}"


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
        self.sample: DevicesSampled | None = None
        self.gpus: list[dict] = []
        self._rows = -1

    def _bar(self, percent: float | None) -> Text:
        hot = isinstance(percent, (int, float)) and percent >= 90
        style = self.get_component_rich_style("devices-panel--hot" if hot else "devices-panel--bar")
        return Text(bar(percent), style=style)

    def show(self, samples: dict[int, DevicesSampled], env: dict | None = None) -> None:
        if not samples:
            return
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
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style=label, no_wrap=True, min_width=4)
        grid.add_column(no_wrap=True, min_width=BAR_WIDTH)
        grid.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
        grid.add_row("CPU", self._bar(rank0.cpu), Text(f"{_pct(rank0.cpu)} {cores(rank0.cpu_per_core)}"))
        used = f"{format_bytes(rank0.memory_used)}/{format_bytes(rank0.memory_total)}"
        grid.add_row("Mem", self._bar(rank0.memory), Text(f"{_pct(rank0.memory)} {used}"))
        if len(samples) > 1:
            for rank in sorted(samples):
                r = samples[rank]
                grid.add_row(f"r{rank}", self._bar(None if r.process_cpu is None else min(r.process_cpu, 100.0)),
                             Text(rank_text(r)))
        else:
            grid.add_row("RSS", Text(format_bytes(rank0.rss)), Text(""))
        for gpu in self.gpus:
            name = Text(safe_name(f"GPU{gpu.get('index', '?')}", 8))
            mem_used, mem_total = _number(gpu, "mem_used"), _number(gpu, "mem_total")
            mem_pct = 100 * mem_used / mem_total if mem_used is not None and mem_total else None
            util = _number(gpu, "util")
            extra = [_pct(util)]
            if mem_used is not None and mem_total:
                extra.append(f"{format_bytes(mem_used)}/{format_bytes(mem_total)}")
            if _number(gpu, "temp") is not None:
                extra.append(f"{_number(gpu, 'temp'):.0f}°C")
            if _number(gpu, "power") is not None:
                extra.append(f"{_number(gpu, 'power'):.0f}W")
            grid.add_row(name, self._bar(util), Text(" ".join(extra)))
            if mem_pct is not None:
                torch_mem = _number(gpu, "torch_allocated")
                note = f"torch {format_bytes(torch_mem)}" if torch_mem is not None else safe_name(gpu.get("name", ""))
                grid.add_row("", self._bar(mem_pct), Text(f"{_pct(mem_pct)} {note}"))
        rows = grid.row_count + bool(env)
        # a line of its own below the grid: a long one must not squeeze the grid's columns
        body = Group(grid, Text(env_line(env), style=label, no_wrap=True, overflow="ellipsis")) if env else grid
        # a layout pass re-arranges the whole screen: only when this panel's height changes
        self.update(body, layout=rows != self._rows)
        self._rows = rows

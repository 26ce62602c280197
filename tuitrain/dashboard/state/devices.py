"""A device sample (`DevicesSampled`) as the values of the device history's series: the machine's CPU
and memory (%), the run's RSS (MiB), each GPU's utilization and memory (%), named `device/cpu`,
`device/gpu0_util`, ... (under DDP another rank's as `device/rank1/...`). `DashboardState` (model.py)
charts them after the metrics, hidden until a filter names them (`/cpu`). Must not import textual.
"""

from __future__ import annotations

from tuitrain.core.events import DevicesSampled

DEVICE_PREFIX = "device/"  # device samples charted over time: device/cpu, device/gpu0_util, ... (a `/cpu` filter)
MIB = 1 << 20


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def device_values(event: DevicesSampled) -> list[tuple[str, float]]:
    """(series name, value) of each figure the sample holds a number for, in a stable order."""
    prefix = DEVICE_PREFIX if not event.rank else f"{DEVICE_PREFIX}rank{event.rank}/"
    values: list[tuple[str, object]] = [
        ("cpu", event.cpu),
        ("memory", event.memory),
        ("rss_mib", event.rss / MIB if _is_number(event.rss) else None),
    ]
    for i, gpu in enumerate(event.gpus):
        index = gpu.get("index", i)
        index = index if isinstance(index, int) and not isinstance(index, bool) else i
        used, total = gpu.get("mem_used"), gpu.get("mem_total")
        memory = 100.0 * used / total if _is_number(used) and _is_number(total) and total > 0 else None
        values += [(f"gpu{index}_util", gpu.get("util")), (f"gpu{index}_memory", memory)]
    return [(prefix + name, value) for name, value in values if _is_number(value)]  # type: ignore[misc]


__all__ = ["DEVICE_PREFIX", "MIB", "device_values"]

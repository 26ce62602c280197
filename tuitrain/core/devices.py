"""Device utilization sampling: a daemon thread that emits `DevicesSampled` about once a second.

CPU, memory and resident memory come from psutil; GPUs from NVML (the nvidia-ml-py package,
imported as `pynvml`) when it imports and finds devices, plus PyTorch's allocator figure when
torch is already imported and CUDA is initialized. A missing NVML means no GPUs, never an error.
Must not import textual, and never imports torch itself.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any
from collections.abc import Callable

import psutil

from tuitrain.core.events import DevicesSampled, Event, RunFailed, RunFinished, RunStarted
from tuitrain.core.housekeeping import Housekeeping


class _Nvml:
    """Per-GPU readings through NVML; `handles` is empty when NVML is missing or finds nothing."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        self.names: list[str] = []
        self._nv: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nv = pynvml
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(h)
                self.handles.append(h)
                self.names.append(name.decode() if isinstance(name, bytes) else str(name))
        except Exception:  # no driver, no library, no devices: simply no GPUs
            self.handles = []

    def sample(self) -> list[dict[str, Any]]:
        nv = self._nv
        gpus = []
        for i, h in enumerate(self.handles):
            gpu: dict[str, Any] = {
                "index": i,
                "name": self.names[i],
                "util": None,
                "mem_used": None,
                "mem_total": None,
                "temp": None,
                "power": None,
                "torch_allocated": None,
            }
            # each reading may be unsupported on some boards; one missing value must not hide the rest
            try:
                gpu["util"] = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
            except Exception:
                pass
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                gpu["mem_used"], gpu["mem_total"] = int(mem.used), int(mem.total)
            except Exception:
                pass
            try:
                gpu["temp"] = float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
            except Exception:
                pass
            try:
                gpu["power"] = nv.nvmlDeviceGetPowerUsage(h) / 1000.0  # milliwatts -> watts
            except Exception:
                pass
            gpus.append(gpu)
        return gpus

    def close(self) -> None:
        if self._nv is not None:
            try:
                self._nv.nvmlShutdown()
            except Exception:
                pass
            self._nv = None


def _torch_allocated() -> dict[int, int]:
    """Bytes held by PyTorch's CUDA allocator per device, only if this process already uses CUDA."""
    torch = sys.modules.get("torch")  # never import torch just to sample
    if torch is None:
        return {}
    try:
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return {}
        return {i: int(torch.cuda.memory_allocated(i)) for i in range(torch.cuda.device_count())}
    except Exception:
        return {}


CHILDREN_EVERY = 10  # samples between scans for child processes (a scan reads every process's stat)


def _cpu_percents(last: list[Any] | None) -> tuple[float, list[float], list[Any]]:
    """(whole machine %, per core %, times to pass next time) from one read of /proc/stat: every
    file a sampling thread reads hands the GIL back and forth with the training thread."""
    now = psutil.cpu_times(percpu=True)
    if not last or len(last) != len(now):
        return 0.0, [0.0] * len(now), now
    per_core = []
    busy_all = total_all = 0.0
    for a, b in zip(last, now):
        total = sum(b) - sum(a)
        idle = (b.idle + getattr(b, "iowait", 0.0)) - (a.idle + getattr(a, "iowait", 0.0))
        busy = max(0.0, total - idle)
        per_core.append(100.0 * busy / total if total > 0 else 0.0)
        busy_all += busy
        total_all += total
    return (100.0 * busy_all / total_all if total_all > 0 else 0.0), per_core, now


def default_interval() -> float:
    """Seconds between samples: `TUITRAIN_DEVICES_INTERVAL`, else 1."""
    try:
        return max(0.05, float(os.environ.get("TUITRAIN_DEVICES_INTERVAL", "1")))
    except ValueError:
        return 1.0


class DeviceMonitor:
    """Samples devices on a daemon thread and calls `emit(DevicesSampled(...))` every `interval` s.

    `progress`, when given, returns this process's (optimizer steps, samples) so far: each sample
    then carries its rates since the previous one (a rank's own throughput in a distributed run).
    """

    def __init__(
        self,
        emit: Callable[[Event], None],
        interval: float | None = None,
        rank: int = 0,
        progress: Callable[[], tuple[int, int]] | None = None,
        housekeeping: Housekeeping | None = None,
    ) -> None:
        self.emit = emit
        self.interval = default_interval() if interval is None else interval
        self.rank = rank
        self.progress = progress
        self._last: tuple[float, int, int] | None = None
        self._cpu_times: list[Any] | None = None
        self._children: list[psutil.Process] = []
        self._samples = 0
        self._emitted = 0  # samples handed to `emit`
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: _Nvml | None = None
        self._proc = psutil.Process(os.getpid())
        self.housekeeping = housekeeping  # given: a chore of the run's (inline while the loop is quick)
        self._started = False

    def start(self) -> DeviceMonitor:
        if self._started:
            return self
        self._started = True
        self._prime()
        # no housekeeping given: one that starts the thread at once
        (self.housekeeping or Housekeeping()).add(self.interval, self._sample_once, self._start_thread)
        return self

    def _start_thread(self) -> None:
        if self._thread is not None or self._stop.is_set():
            return
        self._thread = threading.Thread(target=self._run, name="tuitrain-devices", daemon=True)
        self._thread.start()

    def start_on_run_started(self, event: Event, state: object = None) -> None:
        """A callback: starts sampling at RunStarted, so that the event stream opens with it; at the
        run's end, one sample if none was taken yet (a run shorter than `interval`: the learner closes
        its bus at its end, before this monitor is closed)."""
        if isinstance(event, RunStarted):  # start() is idempotent
            self.start()
        elif isinstance(event, (RunFinished, RunFailed)):
            self._sample_if_none()

    def _sample_if_none(self) -> None:
        """A run that ended before its first sample still shows its devices: one reading at its end
        (its CPU share over the whole run, measured since `start` primed it)."""
        if self._started and not self._emitted and not self._stop.is_set():
            self._sample_once()

    def sample(self) -> DevicesSampled:
        """One reading now (also usable without the thread)."""
        if self._nvml is None:
            self._nvml = _Nvml()
        vm = psutil.virtual_memory()
        gpus = self._nvml.sample()
        allocated = _torch_allocated()
        for gpu in gpus:
            gpu["torch_allocated"] = allocated.get(gpu["index"])
        steps_per_s = items_per_s = None
        if self.progress is not None:
            try:
                now, (steps, items) = time.monotonic(), self.progress()
                if self._last is not None and now > self._last[0]:
                    dt = now - self._last[0]
                    steps_per_s, items_per_s = (steps - self._last[1]) / dt, (items - self._last[2]) / dt
                self._last = (now, steps, items)
            except Exception:  # a reading of the learner's counters must never end training
                pass
        try:
            process_cpu: float | None = float(self._proc.cpu_percent(interval=None))
        except (psutil.Error, OSError):
            process_cpu = None
        cpu, per_core, self._cpu_times = _cpu_percents(self._cpu_times)
        return DevicesSampled(
            cpu=cpu,
            cpu_per_core=per_core,
            memory=float(vm.percent),
            memory_used=int(vm.total - vm.available),
            memory_total=int(vm.total),
            rss=self._rss(),
            gpus=gpus,
            rank=self.rank,
            process_cpu=process_cpu,
            steps_per_s=steps_per_s,
            items_per_s=items_per_s,
            time=time.time(),
        )

    def _rss(self) -> int:
        """This process and its children (data-loader workers), whose list is refreshed every
        CHILDREN_EVERY samples."""
        try:
            total: int = self._proc.memory_info().rss
        except (psutil.Error, OSError):
            return 0
        if self._samples % CHILDREN_EVERY == 0:
            try:
                self._children = self._proc.children(recursive=True)
            except (psutil.Error, OSError):
                self._children = []
        self._samples += 1
        for child in self._children:
            try:
                total += child.memory_info().rss
            except (psutil.Error, OSError):
                pass
        return total

    def _prime(self) -> None:
        try:
            # CPU percentages measure since the previous reading: prime them so the first sample is real
            self._cpu_times = psutil.cpu_times(percpu=True)
            self._proc.cpu_percent(interval=None)
        except Exception:
            pass

    def _sample_once(self) -> None:
        if self._stop.is_set():
            return
        try:
            self.emit(self.sample())
            self._emitted += 1
        except Exception:  # a failed sample or a failing sink must never end training
            pass

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample_once()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(2.0, 2 * self.interval))
            self._thread = None
        if self._started and not self._emitted:  # (see _sample_if_none) ended without a RunFinished
            try:
                self.emit(self.sample())
                self._emitted += 1
            except Exception:  # a closed bus, a failed reading: nothing to show, nothing to raise
                pass
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None

    def __enter__(self) -> DeviceMonitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

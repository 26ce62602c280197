"""DeviceMonitor: samples arrive on a thread, NVML is optional, failures never escape."""

from __future__ import annotations

import sys
import threading
import types

from tuitrain.core.devices import DeviceMonitor
from tuitrain.core.events import DevicesSampled


def test_sample_reads_cpu_memory_and_rss():
    mon = DeviceMonitor(lambda e: None)
    s = mon.sample()
    mon.close()
    assert isinstance(s, DevicesSampled)
    assert 0.0 <= s.cpu <= 100.0
    assert len(s.cpu_per_core) >= 1
    assert 0 < s.memory_used <= s.memory_total
    assert s.rss > 10_000_000  # this python process with torch-free imports is still > 10 MB
    assert s.rank == 0


def test_thread_emits_about_once_per_interval():
    got: list[DevicesSampled] = []
    done = threading.Event()

    def emit(e):
        got.append(e)
        if len(got) >= 2:
            done.set()

    mon = DeviceMonitor(emit, interval=0.05, rank=3).start()
    assert done.wait(60)
    mon.close()
    n = len(got)
    assert all(isinstance(e, DevicesSampled) and e.rank == 3 for e in got)
    # closed: no more samples
    threading.Event().wait(0.2)
    assert len(got) == n


def test_failing_emit_does_not_kill_the_thread():
    calls = []

    def emit(e):
        calls.append(e)
        raise RuntimeError("sink broke")

    mon = DeviceMonitor(emit, interval=0.02).start()
    threading.Event().wait(0.3)
    mon.close()
    assert len(calls) >= 3


def test_fake_nvml_reports_gpus(monkeypatch):
    nv = types.ModuleType("pynvml")
    nv.NVML_TEMPERATURE_GPU = 0
    nv.nvmlInit = lambda: None
    nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetCount = lambda: 2
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetName = lambda h: b"Fake GPU %d" % h
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=40 + h)
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=1 << 30, total=8 << 30)
    nv.nvmlDeviceGetTemperature = lambda h, kind: 60

    def power(h):
        raise RuntimeError("not supported")  # one missing reading must not hide the others

    nv.nvmlDeviceGetPowerUsage = power
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    mon = DeviceMonitor(lambda e: None)
    s = mon.sample()
    mon.close()
    assert [g["name"] for g in s.gpus] == ["Fake GPU 0", "Fake GPU 1"]
    assert s.gpus[1]["util"] == 41.0
    assert s.gpus[0]["mem_total"] == 8 << 30
    assert s.gpus[0]["power"] is None and s.gpus[0]["temp"] == 60.0


def test_broken_nvml_means_no_gpus(monkeypatch):
    nv = types.ModuleType("pynvml")

    def init():
        raise OSError("libnvidia-ml.so not found")

    nv.nvmlInit = init
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    mon = DeviceMonitor(lambda e: None)
    assert mon.sample().gpus == []
    mon.close()


def test_cpu_percents_come_from_one_reading_of_proc_stat_per_sample():
    from collections import namedtuple

    from tuitrain.core.devices import _cpu_percents

    T = namedtuple("T", "user system idle iowait")
    first = [T(100, 0, 100, 0), T(0, 0, 200, 0)]
    pct, per_core, kept = _cpu_percents(None)  # no previous reading: zeros, and this one kept
    assert len(per_core) == len(kept) and pct == 0.0
    second = [T(175, 0, 125, 0), T(10, 10, 270, 10)]  # core 0: 75 of 100 busy; core 1: 20 of 100
    import tuitrain.core.devices as devices

    real = devices.psutil.cpu_times
    devices.psutil.cpu_times = lambda percpu=True: second
    try:
        pct, per_core, kept = _cpu_percents(first)
    finally:
        devices.psutil.cpu_times = real
    assert per_core == [75.0, 20.0] and pct == 47.5 and kept is second

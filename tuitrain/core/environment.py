"""The machine a run trains on: the device asked for, resolved (`resolve_device`), and what RunStarted says
of the environment (`env_info`: Python, torch, the host, its CPU and GPUs). The Learner and Monitor both
say it; neither holds the other's."""

from __future__ import annotations

import os
import platform

import torch


def resolve_device(spec: str | torch.device = "auto") -> torch.device:
    """ "auto": CUDA, else MPS, else the CPU; a named device is checked to exist (RuntimeError, one line)."""
    if isinstance(spec, torch.device):
        return spec
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    dev = torch.device(spec)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {spec!r} requested but CUDA is not available")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise RuntimeError(f"device {spec!r} requested but only {torch.cuda.device_count()} CUDA device(s)")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError("device 'mps' requested but MPS is not available")
    return dev


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, else what `platform` says)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def env_info(device: torch.device) -> dict[str, object]:
    """RunStarted.env: the versions, the host, its CPUs and GPUs, and the device trained on."""
    info: dict[str, object] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "cpu": cpu_name(),
        "device": str(device),
        "cuda": torch.version.cuda if torch.cuda.is_available() else None,
    }
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info

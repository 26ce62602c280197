"""Freed memory kept in the process while training: a step's large blocks are not handed back to
the kernel and faulted in again page by page (glibc on Linux)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli_env, python_run
from tuitrain.core import heap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or heap._glibc() is None, reason="glibc's mallopt")

# a short fit, then page faults while 24 MB blocks are taken four at a time and freed, as a step's
# activations and gradients are. 96 MB freed at once is over the most glibc's defaults ever keep
# (their adaptive trim threshold stops at 64 MB), whatever the process did before; each block is under
# the 32 MB mmap threshold tuitrain sets.
PROBE = """
import os, resource, sys, torch
from torch.utils.data import TensorDataset
from tuitrain import Learner
from tuitrain.core import heap
Learner.keep_freed_memory = sys.argv[1] == "keep"
model = torch.nn.Linear(4, 2)
lr = Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn=torch.nn.CrossEntropyLoss(), device="cpu",
             batch_size=16)
assert lr.fit(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), dashboard=False).exit_code == 0
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    xs = [torch.ones(6 << 20) for _ in range(4)]  # 24 MB each, touched
    del xs
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, heap._kept)
"""


def faults(tmp_path: Path, mode: str, **glibc) -> tuple[int, bool]:
    """The probe's page faults and whether tuitrain kept freed memory. With glibc's own knobs (`glibc`: read by
    glibc as the process starts) a fresh `python`; without, a Python as the CLI's tests start it (the fork server's
    child, torch imported before it: ~5 CPU-s less), which keeps no knob either."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    if glibc:
        e = {k: v for k, v in os.environ.items() if k not in heap.USER_KNOBS}
        r = subprocess.run([sys.executable, probe, mode], env={**e, **glibc}, capture_output=True, text=True)
    else:
        e = {k: v for k, v in cli_env().items() if k not in heap.USER_KNOBS}
        r = python_run([probe, mode], tmp_path, e, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout.split()
    return int(out[0]), out[1] == "True"


def test_after_fit_freed_blocks_stay_in_the_process(tmp_path):
    n, kept = faults(tmp_path, "keep")
    assert kept and n < 50_000  # the first round's 24,576 pages, not each round's again


def test_without_it_each_block_comes_back_from_the_kernel(tmp_path):
    # glibc's default mmap threshold, pinned: left to itself glibc raises it after the first large
    # free, by how much depends on what the process freed before (a fresh clone's CI run saw 55,305
    # faults here once, another 6,921), and the baseline would be luck
    n, kept = faults(tmp_path, "off", MALLOC_MMAP_THRESHOLD_="131072")
    assert not kept and n > 4 * 24_576  # over and over again


def test_the_users_own_glibc_settings_are_left_alone(tmp_path):
    n, kept = faults(tmp_path, "keep", MALLOC_TRIM_THRESHOLD_="131072")
    assert not kept and n > 4 * 24_576  # over and over again

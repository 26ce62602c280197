"""Sharding and metric reduction without processes: each rank's slice of the epoch order, and the
MetricSet reduction hook that a distributed run installs."""

from __future__ import annotations

import pytest
import torch

from tuitrain.core.data import EpochSampler, build_loader
from tuitrain.core.metrics import MetricSet
from tuitrain.core.state import StepOutput


def _slices(n: int, world: int, mode: str, epoch: int = 3) -> list[list[int]]:
    out = []
    for rank in range(world):
        s = EpochSampler(n, shuffle=True, seed=11)
        s.shard(rank, world, mode)
        s.set_epoch(epoch)
        out.append(list(s))
    return out


def _full(n: int, epoch: int = 3) -> list[int]:
    s = EpochSampler(n, shuffle=True, seed=11)
    s.set_epoch(epoch)
    return list(s)


@pytest.mark.parametrize("n", [10, 11, 13])
def test_ranks_interleave_the_one_process_order(n):
    full = _full(n)
    pad = _slices(n, 3, "pad")
    assert len({len(r) for r in pad}) == 1  # every rank runs the same number of steps
    k = len(pad[0])
    merged = [pad[i % 3][i // 3] for i in range(3 * k)]
    assert merged[:n] == full and merged[n:] == full[: 3 * k - n]  # padded by wrapping around
    drop = _slices(n, 3, "drop")
    assert [len(r) for r in drop] == [n // 3] * 3 and sorted(sum(drop, [])) == sorted(full[: n // 3 * 3])
    uneven = _slices(n, 3, "uneven")
    assert sorted(sum(uneven, [])) == list(range(n))  # validation: every item exactly once


def test_resume_offset_is_per_rank():
    s = EpochSampler(20, shuffle=True, seed=1)
    s.shard(1, 2)
    s.set_epoch(2)
    whole = list(s)
    s.set_epoch(2, start=4)
    assert list(s) == whole[4:] and len(s) == 6


def test_order_is_unchanged_without_sharding():
    g = torch.Generator()
    g.manual_seed((11 * 1_000_003 + 3 * 7919) & 0x7FFF_FFFF_FFFF_FFFF)
    assert _full(13) == torch.randperm(13, generator=g).tolist()


def test_sharded_loader_counts_batches_per_rank():
    data = torch.utils.data.TensorDataset(torch.arange(100.0))
    loader = build_loader(data, batch_size=16, shuffle=True, seed=0)
    assert loader.batches_per_epoch() == 7
    loader.sampler.shard(0, 2)
    assert loader.batches_per_epoch() == 4


def test_reducer_sums_every_ratio_and_the_items_in_one_call():
    calls = []

    def two_identical_ranks(values):
        calls.append(list(values))
        return [2 * v for v in values]

    ms = MetricSet(["loss", "accuracy", "throughput"])
    ms.reducer = two_identical_ranks
    out = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    ms.update(StepOutput(loss=torch.tensor(0.5), output=out, target=torch.tensor([0, 0])), 2)
    ms.step_done()
    w = ms.read_window()
    assert len(calls) == 1 and calls[0] == [1.0, 2, 1.0, 2, 2]
    assert w["loss"] == pytest.approx(0.5) and w["accuracy"] == pytest.approx(0.5)
    assert ms.ctx.phase_items == 4  # throughput counts both ranks' items
    p = ms.read_phase()
    assert len(calls) == 2 and calls[1] == [0.0, 0, 0.0, 0, 0]  # a rank with nothing still takes part
    assert p["loss"] == pytest.approx(0.5) and p["accuracy"] == pytest.approx(0.5)

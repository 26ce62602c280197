"""TensorDataset batches fetched whole (one index_select per tensor) are the batches torch's own
item-by-item fetch and default_collate make: same samples, order, values, dtypes and strides."""

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tuitrain.core.data import EpochSampler, WholeBatches, build_loader


def reference_batches(ds, batch_size, seed, epoch, shuffle=True, skip=0, drop_last=False):
    """What torch's default fetch makes of the same order: item by item, then default_collate."""
    sampler = EpochSampler(len(ds), shuffle=shuffle, seed=seed)
    sampler.set_epoch(epoch, skip * batch_size)
    return list(DataLoader(ds, batch_size=batch_size, sampler=sampler, drop_last=drop_last))


def same(a, b):
    assert type(a) is type(b) is list and len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape and x.stride() == y.stride()
        assert torch.equal(x, y)


def datasets():
    g = torch.Generator().manual_seed(0)
    yield TensorDataset(torch.randn(103, 7, generator=g), torch.randint(0, 5, (103,), generator=g))
    yield TensorDataset(torch.arange(50.0))  # one tensor: batches are one-element lists
    yield TensorDataset(
        torch.randn(40, 3, 4, 4, generator=g),
        torch.randn(40, 2, generator=g),
        torch.randint(0, 2, (40,), generator=g, dtype=torch.uint8),
    )


@pytest.mark.parametrize("ds", list(datasets()), ids=["xy", "one", "images"])
@pytest.mark.parametrize("adopt", [False, True], ids=["dataset", "dataloader"])
def test_whole_batches_equal_item_by_item(ds, adopt):
    data = DataLoader(ds, batch_size=16, shuffle=True) if adopt else ds
    loader = build_loader(data, batch_size=16, shuffle=True, seed=3)
    assert isinstance(loader.loader.dataset, WholeBatches)
    for epoch in (1, 2):
        got = list(loader.epoch_iter(epoch))
        want = reference_batches(ds, 16, 3, epoch)
        assert len(got) == len(want) == -(-len(ds) // 16)  # the last batch is short
        for a, b in zip(got, want):
            same(a, b)
    # a resumed epoch starts at its batch, with the same batches from there on
    for a, b in zip(list(loader.epoch_iter(2, 3)), reference_batches(ds, 16, 3, 2, skip=3)):
        same(a, b)


def test_unshuffled_and_drop_last():
    ds = next(datasets())
    loader = build_loader(ds, batch_size=10, shuffle=False, drop_last=True)
    got = list(loader.epoch_iter(1))
    assert len(got) == 10
    for a, b in zip(got, reference_batches(ds, 10, 0, 1, shuffle=False, drop_last=True)):
        same(a, b)
    assert torch.equal(got[0][0], ds.tensors[0][:10])


def test_other_data_keeps_the_item_by_item_fetch():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(20, 6, generator=g), torch.randint(0, 3, (20,), generator=g)

    class Sub(TensorDataset):
        def __getitem__(self, i):
            return self.tensors[0][i] * 2, self.tensors[1][i]

    kept = [
        TensorDataset(x.t().contiguous().t(), y),  # not contiguous
        Sub(x, y),  # its own __getitem__
        TensorDataset(x.clone().requires_grad_(), y),  # a stacked batch's grad_fn would differ
        TensorDataset(torch.nn.Parameter(x.clone()), y),
    ]  # a Tensor subclass
    for ds in kept:
        loader = build_loader(ds, batch_size=4, shuffle=True)
        assert loader.loader.dataset is ds
    assert not isinstance(
        build_loader(TensorDataset(x, y), batch_size=4, shuffle=True, num_workers=1).loader.dataset, WholeBatches
    )
    own_collate = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True, collate_fn=lambda b: b)
    assert not isinstance(build_loader(own_collate, batch_size=4, shuffle=True).loader.dataset, WholeBatches)
    sub = build_loader(Sub(x, y), batch_size=4, shuffle=False)
    assert torch.equal(next(iter(sub.epoch_iter(1)))[0], x[:4] * 2)


def test_the_wrapper_is_still_the_users_tensor_dataset():
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(12, 2, generator=g), torch.arange(12))
    wrapped = build_loader(ds, batch_size=4, shuffle=False).loader.dataset
    assert isinstance(wrapped, TensorDataset) and wrapped.dataset is ds and len(wrapped) == 12
    assert wrapped.tensors is ds.tensors
    ds.tensors = (ds.tensors[0] * 0, ds.tensors[1])  # seen from then on, as torch's own fetch would
    assert torch.equal(wrapped.__getitems__([0, 1])[0], torch.zeros(2, 2))


def test_a_loader_with_its_own_batch_sampler_keeps_its_batches():
    """DataLoader(batch_sampler=...) has batch_size None: rebuilt on an EpochSampler it would lose its
    batching, so it is kept as it is (and still batched)."""
    from torch.utils.data import BatchSampler, RandomSampler

    ds = TensorDataset(torch.arange(12.0).view(6, 2), torch.arange(6))
    dl = DataLoader(ds, batch_sampler=BatchSampler(RandomSampler(ds), 4, False))
    loader = build_loader(dl, batch_size=4, shuffle=False)
    assert loader.loader is dl
    batches = list(loader.epoch_iter(1))
    assert [b[1].shape[0] for b in batches] == [4, 2]
    assert sorted(torch.cat([b[1] for b in batches]).tolist()) == list(range(6))

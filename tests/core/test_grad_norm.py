"""The gradients' norm the `[watch]` rules judge (GradNorm, bound once per epoch by the loops) is
`torch.nn.utils.get_total_norm`'s, bit for bit, whichever path it takes: on TUITRAIN_TEST_DEVICE (the CPU
by default; tests/conftest.py)."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from tuitrain.core.learner_health import TotalNorm


def _model(widths, dtype, frozen):
    layers = [nn.Linear(a, b) for a, b in zip(widths, widths[1:])]
    model = nn.Sequential(*layers).to(dtype)
    for i in frozen:
        if i < len(layers):
            layers[i].weight.requires_grad_(False)
    return model


@settings(max_examples=30, deadline=None)
@given(
    widths=st.lists(st.integers(1, 40), min_size=2, max_size=5),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    frozen=st.sets(st.integers(0, 3), max_size=2),
    scale=st.sampled_from([1e-30, 1.0, 1e20]),
    seed=st.integers(0, 2**16),
)
def test_the_norm_is_get_total_norm_s_bit_for_bit(test_device, widths, dtype, frozen, scale, seed):
    torch.manual_seed(seed)
    model = _model(widths, dtype, frozen).to(test_device)
    x = (torch.randn(3, widths[0], dtype=dtype) * scale).to(test_device)
    model(x).pow(2).sum().backward()
    norm = TotalNorm(model.parameters())
    assert norm.direct
    expected = float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None]))
    got = norm()
    assert got == expected or (got != got and expected != expected), (got, expected)


def test_mixed_dtypes_and_no_gradients_take_get_total_norm_itself(test_device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2).double()).to(test_device)
    norm = TotalNorm(model.parameters())
    assert not norm.direct and norm() is None  # no backward yet: no gradients
    h = model[0](torch.randn(5, 4).to(test_device))
    model[1](h.double()).sum().backward()
    grads = [p.grad for p in model.parameters()]
    assert norm() == float(torch.nn.utils.get_total_norm(grads))
    for p in model.parameters():
        p.grad = torch.full_like(p, float("nan")) if p.dim() == 1 else p.grad
    assert norm() != norm()  # a NaN gradient is a NaN norm, as the rules must see it

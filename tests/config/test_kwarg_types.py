"""The keyword arguments of a config's targets judged by their signatures' types, before anything is
built: `optimizer.lr = "abc"` is a ConfigError naming the file and the key, as `train.epochs = "abc"` is."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Literal

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tuitrain.config import ConfigError, check_kwargs, config_from_dict, load_config, validate

# what TOML can hold, besides numbers
NOT_NUMBERS = st.one_of(
    st.text(max_size=12),
    st.booleans(),
    st.lists(st.floats(allow_nan=False), max_size=3),
    st.dictionaries(st.text(min_size=1, max_size=4), st.integers(), max_size=2),
)
NUMBERS = st.one_of(st.integers(-(10**6), 10**6), st.floats(allow_nan=False, allow_infinity=False))


@settings(max_examples=60, deadline=None)
@given(value=NOT_NUMBERS)
def test_a_float_argument_of_another_type_is_a_config_error(value):
    """torch.optim.SGD's lr is `float | Tensor`: a string, a boolean, an array or a table is named."""
    with pytest.raises(ConfigError) as info:
        check_kwargs(
            torch.optim.SGD,
            {"lr": value},
            "optimizer",
            file="spirals.toml",
            positional=1,
            provided=("params",),
            target="torch.optim:SGD",
        )
    assert info.value.key == "optimizer.lr"
    assert str(info.value).startswith("spirals.toml: optimizer.lr: expected a number, got ")


@settings(max_examples=60, deadline=None)
@given(value=NUMBERS)
def test_any_number_fits_a_float_argument(value):
    check_kwargs(torch.optim.SGD, {"lr": value, "momentum": value}, "optimizer", positional=1, provided=("params",))


def test_the_message_names_the_value():
    with pytest.raises(ConfigError) as info:
        check_kwargs(torch.optim.SGD, {"lr": "abc"}, "optimizer", file="demo/spirals.toml", positional=1)
    assert str(info.value) == "demo/spirals.toml: optimizer.lr: expected a number, got 'abc'"


def test_unknown_argument_lists_the_accepted_ones():
    with pytest.raises(ConfigError) as info:
        check_kwargs(
            torch.optim.SGD,
            {"momentun": 0.1},
            "optimizer",
            positional=1,
            provided=("params",),
            target="torch.optim:SGD",
        )
    assert info.value.key == "optimizer.momentun"
    assert "(did you mean 'momentum'?)" in info.value.message
    assert "it takes lr, momentum, dampening, weight_decay, nesterov" in info.value.message


def literal(
    mode: Literal["min", "max"] = "min",
    pair: tuple[float, float] = (0.9, 0.99),
    sizes: list[int] | None = None,
    steps: int = 10,
    flag: bool = False,
    name: str = "x",
    table: dict | None = None,
):
    pass


class Mine:
    pass


def unannotated(lr=0.1, steps=3, shuffle=True, name="x", extra=None, thing: Mine = None, **more):
    pass


@pytest.mark.parametrize(
    "kwargs,key,message",
    [
        ({"mode": "mn"}, "literal.mode", "expected one of 'min', 'max', got 'mn' (did you mean 'min'?)"),
        ({"pair": [0.9]}, "literal.pair", "expected an array of 2 numbers, got an array of 1 item"),
        ({"pair": [0.9, "x"]}, "literal.pair", "expected an array of 2 numbers, got an array whose item [1] is 'x'"),
        ({"pair": 0.9}, "literal.pair", "expected an array of 2 numbers, got 0.9 (a float)"),
        (
            {"sizes": [1, 2.5]},
            "literal.sizes",
            "expected an array of integers, got an array whose item [1] is 2.5 (a float)",
        ),
        ({"steps": 2.5}, "literal.steps", "expected an integer, got 2.5 (a float)"),
        ({"steps": True}, "literal.steps", "expected an integer, got true (a boolean)"),
        ({"flag": 1}, "literal.flag", "expected true or false, got 1 (an integer)"),
        ({"name": 3}, "literal.name", "expected a string, got 3 (an integer)"),
        ({"table": [1]}, "literal.table", "expected a table, got an array"),
    ],
)
def test_annotations_say_what_fits(kwargs, key, message):
    with pytest.raises(ConfigError) as info:
        check_kwargs(literal, kwargs, "literal")
    assert (info.value.key, info.value.message) == (key, message)


def test_what_fits_an_annotation_passes():
    check_kwargs(
        literal,
        {"mode": "max", "pair": [0.5, 1], "sizes": [1, 2], "steps": 10.0, "flag": True, "name": "y", "table": {"a": 1}},
        "literal",
    )


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"lr": "abc"}, "expected a number, got 'abc'"),
        ({"steps": {"a": 1}}, "expected a number, got a table"),
        ({"shuffle": "yes"}, "expected true or false, got 'yes'"),
    ],
)
def test_unannotated_defaults_rule_out_strings(kwargs, message):
    with pytest.raises(ConfigError) as info:
        check_kwargs(unannotated, kwargs, "model")
    assert info.value.message == message


def test_what_a_signature_leaves_open_is_left_to_the_callable():
    # a default of None, a string default, a class of the user's, **kwargs: nothing said, nothing judged
    check_kwargs(
        unannotated,
        {"extra": "anything", "name": 3, "thing": "x", "other": "y", "lr": [0.1, 0.2], "shuffle": 0},
        "model",
    )
    # torch's LambdaLR names `Callable` only for type checkers: its annotations are judged one by one
    check_kwargs(
        torch.optim.lr_scheduler.LambdaLR, {"last_epoch": -1}, "scheduler", positional=1, provided=("lr_lambda",)
    )
    with pytest.raises(ConfigError, match="scheduler.last_epoch: expected an integer"):
        check_kwargs(
            torch.optim.lr_scheduler.LambdaLR, {"last_epoch": "end"}, "scheduler", positional=1, provided=("lr_lambda",)
        )


USER_MODULE = """
from __future__ import annotations

from torch import nn


class Net(nn.Module):
    def __init__(self, hidden: int = 8, dropout: float = 0.0, act: str = "relu"):
        super().__init__()
        self.lin = nn.Linear(2, hidden)


def datasets(n=100, noise=0.1):
    return [], None
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    mod = f"tt_types_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{mod}.py").write_text(USER_MODULE)
    yield tmp_path, mod
    sys.modules.pop(mod, None)


def _config(tmp_path: Path, mod: str, extra: str = "") -> Path:
    path = tmp_path / "run.toml"
    path.write_text(
        textwrap.dedent(f"""
        [model]
        target = "{mod}:Net"
        hidden = 8

        [data]
        target = "{mod}:datasets"

        [optimizer]
        name = "SGD"
        lr = 0.1
        """)
        + textwrap.dedent(extra)
    )
    return path


@pytest.mark.parametrize(
    "extra,overrides,where,key,message",
    [
        ("", ["optimizer.lr=abc"], "--set", "optimizer.lr", "expected a number, got 'abc'"),
        ("", ["model.hidden=wide"], "--set", "model.hidden", "expected an integer, got 'wide'"),
        ("", ["model.dropout=true"], "--set", "model.dropout", "expected a number, got true (a boolean)"),
        ("", ["data.noise=high"], "--set", "data.noise", "expected a number, got 'high'"),
        ("", ["loss.label_smoothing=[0.1]"], "--set", "loss.label_smoothing", "expected a number, got an array"),
        (
            "[scheduler]\nname = 'OneCycleLR'\nmax_lr = 0.1\nanneal_strategy = 'cosine'\n",
            [],
            "file",
            "scheduler.anneal_strategy",
            "expected one of 'cos', 'linear', got 'cosine' (did you mean 'cos'?)",
        ),
        (
            "[scheduler]\nchain = [{name = 'LinearLR', end = 5, start_factor = 'low'}]\n",
            [],
            "file",
            "scheduler.chain[0].start_factor",
            "expected a number, got 'low'",
        ),
        (
            "[metrics]\nvalid = ['loss', {target = 'torch.nn:Dropout', p = 'half', name = 'd'}]\n",
            [],
            "file",
            "metrics.valid[1].p",
            "expected a number, got 'half'",
        ),
    ],
)
def test_validate_judges_every_target_by_its_signature(project, extra, overrides, where, key, message):
    tmp_path, mod = project
    path = _config(tmp_path, mod, extra)
    cfg = load_config(path, overrides)
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    assert info.value.file == (str(path) if where == "file" else "--set")
    assert (info.value.key, info.value.message) == (key, message)


@settings(max_examples=40, deadline=None)
@given(value=st.one_of(st.text(min_size=1, max_size=8), st.booleans()))
def test_validate_rejects_any_wrong_type_for_lr(value):
    """Through validate, as `tuitrain run` checks a config: the user's module is not needed for this."""
    cfg = config_from_dict(
        {
            "model": {"target": "torch.nn:Linear", "in_features": 2, "out_features": 2},
            "data": {"target": "torch.utils.data:TensorDataset"},
            "optimizer": {"name": "AdamW", "lr": value},
        },
        source="cfg.toml",
    )
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    assert str(info.value).startswith("cfg.toml: optimizer.lr: expected a number, got ")

"""Tests of tuitrain.config: parsing, errors, --set overrides, target resolution, validate, themes."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from tuitrain.dashboard import themes
from tuitrain.config import (
    ConfigError,
    EarlyStoppingConfig,
    apply_override,
    check_kwargs,
    config_from_dict,
    load_config,
    metric_name,
    parse_value,
    resolve_target,
    validate,
)

MINIMAL = """
[model]
target = "mymodel:Net"

[data]
target = "mymodel:datasets"
"""

FULL = """
[experiment]
name = "spirals"
dir = "runs"
seed = 7

[model]
target = "spirals:SpiralNet"
hidden = 64
layers = [64, 32]

[data]
target = "spirals:datasets"
batch_size = 128
num_workers = 0
shuffle = false
noise = 0.25

[loss]
target = "torch.nn:CrossEntropyLoss"
label_smoothing = 0.1

[optimizer]
name = "AdamW"
lr = 3e-3
weight_decay = 0.01
betas = [0.9, 0.999]

[scheduler]
name = "OneCycleLR"
interval = "step"
max_lr = 3e-3

[train]
epochs = 20
max_steps = 0
grad_accumulation = 2
clip_grad_norm = 1.0
precision = "bf16-mixed"
device = "cuda:1"
strategy = "ddp"
devices = 2
validate_every = 1

[metrics]
train = ["loss", "accuracy", "lr", "throughput"]
valid = ["loss", "accuracy", "top3_accuracy",
         { target = "torchmetrics.classification:MulticlassF1Score", num_classes = 3, name = "f1" }]

[log]
every_n_steps = 5
tensorboard = true

[checkpoint]
every_n_epochs = 1
every_n_steps = 100
keep_last = 3
keep_best = 1
monitor = "valid/f1"
mode = "max"
init_from = "pretrained.pt"
strict = false
revise_keys = [["^module\\\\.", ""]]

[early_stopping]
monitor = "valid/loss"
mode = "min"
patience = 3
min_delta = 0.001

[dashboard]
theme = "light"
"""

MODEL_MODULE = """
class Net:
    def __init__(self, hidden=16, depth=2):
        self.hidden = hidden

def datasets(n=100, noise=0.1):
    return [], None

class Acc:
    def __init__(self, num_classes, average="micro"):
        pass

def make_opt(parameters, lr):
    return None
"""


@pytest.fixture(autouse=True)
def _isolated_imports(monkeypatch):
    """Targets put folders on sys.path and import user modules; undo both after each test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("tt_"):
            del sys.modules[name]


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def expect_error(path: Path, key: str, message: str, overrides=()) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    err = info.value
    assert err.file == str(path)
    assert err.key == key
    assert message in err.message
    assert str(err) == f"{path}: {key}: {err.message}"
    return err


# -- loading and defaults ----------------------------------------------------------------------


def test_minimal_config_gets_defaults_and_paths(tmp_path):
    path = write(tmp_path, "minimal.toml", MINIMAL)
    cfg = load_config(path)
    assert cfg.model.target == "mymodel:Net" and cfg.model.kwargs == {}
    assert cfg.train.epochs == 10 and cfg.train.precision == "32"
    assert cfg.optimizer.name == "AdamW" and cfg.optimizer.target == ""
    assert cfg.scheduler is None and cfg.early_stopping is None
    assert cfg.metrics.valid == ["loss", "accuracy"]
    assert cfg.path == path.resolve() and cfg.path.is_absolute()
    assert cfg.base_dir == tmp_path.resolve()


def test_full_config_parses_kwargs_into_target_tables(tmp_path):
    cfg = load_config(write(tmp_path, "full.toml", FULL))
    assert cfg.model.kwargs == {"hidden": 64, "layers": [64, 32]}
    assert cfg.data.batch_size == 128 and cfg.data.shuffle is False
    assert cfg.data.kwargs == {"noise": 0.25}
    assert cfg.optimizer.kwargs == {"lr": 3e-3, "weight_decay": 0.01, "betas": [0.9, 0.999]}
    assert cfg.scheduler.name == "OneCycleLR" and cfg.scheduler.kwargs == {"max_lr": 3e-3}
    assert cfg.early_stopping == EarlyStoppingConfig("valid/loss", "min", 3, 0.001)
    assert cfg.checkpoint.revise_keys == [["^module\\.", ""]]
    assert cfg.metrics.valid[3]["name"] == "f1"


def test_round_trip_through_toml(tmp_path):
    cfg = load_config(write(tmp_path, "full.toml", FULL))
    text = cfg.to_toml()
    assert tomllib.loads(text) == cfg.to_dict()
    again = config_from_dict(tomllib.loads(text), base_dir=cfg.base_dir)
    again.path = cfg.path
    assert again == cfg
    assert "path" not in cfg.to_dict() and "base_dir" not in cfg.to_dict()


def test_to_dict_leaves_out_absent_optional_tables(tmp_path):
    d = load_config(write(tmp_path, "c.toml", MINIMAL)).to_dict()
    assert "scheduler" not in d and "early_stopping" not in d
    assert d["model"] == {"target": "mymodel:Net"}
    d["train"]["epochs"] = 99  # to_dict is a copy: editing it leaves the config alone
    assert load_config(tmp_path / "c.toml").train.epochs == 10


def test_toml_writer_handles_awkward_values(tmp_path):
    cfg = load_config(write(tmp_path, "c.toml", MINIMAL))
    cfg.model.kwargs = {
        "quote": 'say "hi"\\ back\nslash\ttab \x01 é ✓',
        "tiny": 1e-300,
        "big": 1.5e300,
        "third": 1 / 3,
        "neg_zero": -0.0,
        "pos_inf": math.inf,
        "neg_inf": -math.inf,
        "nested": {"a": {"b": [1, 2]}, "empty": {}},
        "tables_in_list": [{"x": 1, "y": "z"}, {}],
        "odd key.with dots": True,
    }
    back = tomllib.loads(cfg.to_toml())
    assert back == cfg.to_dict()
    assert repr(back["model"]["third"]) == repr(1 / 3)
    cfg.model.kwargs = {"nan": math.nan}
    assert math.isnan(tomllib.loads(cfg.to_toml())["model"]["nan"])
    cfg.model.kwargs = {"nothing": None}
    with pytest.raises(TypeError, match="model.nothing"):
        cfg.to_toml()


def test_int_widens_to_float_and_precision_aliases(tmp_path):
    path = write(tmp_path, "c.toml", MINIMAL + "[train]\nclip_grad_norm = 1\nprecision = 'bf16'\n")
    cfg = load_config(path)
    assert cfg.train.clip_grad_norm == 1.0 and isinstance(cfg.train.clip_grad_norm, float)
    assert cfg.train.precision == "bf16-mixed"
    assert load_config(path, ["train.precision=32"]).train.precision == "32"
    assert load_config(path, ["train.precision=16"]).train.precision == "16-mixed"


def test_optimizer_target_replaces_default_name(tmp_path):
    cfg = load_config(write(tmp_path, "c.toml", MINIMAL + "[optimizer]\ntarget = 'm:opt'\n"))
    assert cfg.optimizer.name == "" and cfg.optimizer.target == "m:opt"


# -- bad configs -------------------------------------------------------------------------------

BAD = [
    ("[train]\nepochs = 'three'", "train.epochs", "expected an integer, got 'three'"),
    ("[train]\nepochs = 2.5", "train.epochs", "expected an integer, got 2.5"),
    ("[train]\nepoch = 3", "train.epoch", "unknown key (did you mean 'epochs'?)"),
    ("[trian]\nepochs = 3", "trian", "unknown table (did you mean 'train'?)"),
    ("seed = 3", "seed", "did you mean 'experiment.seed'?"),
    ("train = 3", "train", "expected a table"),
    ("[train]\nprecision = '64'", "train.precision", "'64'"),
    ("[train]\nepochs = -1", "train.epochs", "must be >= 0"),
    ("[train]\nepochs = 0", "train.epochs", "nothing would train"),
    ("[train]\ngrad_accumulation = true", "train.grad_accumulation", "got true (a boolean)"),
    ("[train]\ngrad_accumulation = 0", "train.grad_accumulation", "must be >= 1"),
    ("[train]\ndevice = 'gpu'", "train.device", "'cuda:N'"),
    ("[train]\nstrategy = 'dpp'", "train.strategy", "did you mean 'ddp'?"),
    ("[train]\nclip_grad_norm = -1.0", "train.clip_grad_norm", ">= 0"),
    ("[log]\ntensorboard = 'yes'", "log.tensorboard", "expected true or false"),
    ("[log]\nevery_n_steps = 0", "log.every_n_steps", "must be >= 1"),
    ("[checkpoint]\nkeep_last = -1", "checkpoint.keep_last", "must be >= 0"),
    ("[checkpoint]\nmode = 'mni'", "checkpoint.mode", "did you mean 'min'?"),
    ("[checkpoint]\nmonitor = 'loss'", "checkpoint.monitor", "valid/<metric>"),
    ("[checkpoint]\nmonitor = 'valid/f1'", "checkpoint.monitor", "'valid/f1' is not logged"),
    ("[checkpoint]\nrevise_keys = [['(', '']]", "checkpoint.revise_keys[0]", "bad regex"),
    ("[checkpoint]\nrevise_keys = ['a']", "checkpoint.revise_keys[0]", 'expected ["regex"'),
    ("[early_stopping]\npatience = -2", "early_stopping.patience", "must be >= 0"),
    ("[early_stopping]\nmin_delta = nan", "early_stopping.min_delta", "finite"),
    ("[early_stopping]\nmonitor = 'train/f1'", "early_stopping.monitor", "is not logged"),
    ("[scheduler]\ninterval = 'batch'", "scheduler.interval", "'step', 'epoch'"),
    ("[scheduler]\nmax_lr = 1.0", "scheduler.name", "required"),
    ("[optimizer]\nname = 'SGD'\ntarget = 'm:f'", "optimizer.target", "not both"),
    ("[optimizer]\nname = ''", "optimizer.name", "required"),
    ("[metrics]\ntrain = ['los']", "metrics.train[0]", "did you mean 'loss'?"),
    ("[metrics]\ntrain = ['loss', 3]", "metrics.train[1]", "expected a metric name or a table"),
    ("[metrics]\ntrain = [{ name = 'f1' }]", "metrics.train[0]", "needs target"),
    ("[metrics]\ntrain = ['loss', 'loss']", "metrics.train[1]", "appears twice"),
    ("[metrics]\ntrain = 'loss'", "metrics.train", "expected an array"),
    ("[experiment]\nname = 'a/b'", "experiment.name", "folder name"),
    ("[experiment]\nseed = -1", "experiment.seed", "must be >= 0"),
    ("[log]\nsamples = { target = 'm.f' }", "log.samples", "did you mean 'm:f'?"),
    ("[log]\nsamples = { target = 'm:f', every = 5 }", "log.samples", "unknown key 'every'"),
    ("[log]\nsamples = { every_n_steps = 5 }", "log.samples", "target is missing"),
    ("[log]\nsamples = { target = 'm:f', every_n_steps = 0 }", "log.samples", "1 or more"),
    ("[log]\nhistograms = ['weight']", "log.histograms", "did you mean 'weights'?"),
    ("[log]\nmedia_keep = -1", "log.media_keep", "must be >= 0"),
]


@pytest.mark.parametrize("extra,key,message", BAD, ids=[b[1] + ":" + b[2][:20] for b in BAD])
def test_bad_config_names_file_and_key(tmp_path, extra, key, message):
    # a table goes last (it may repeat [data]); a top-level key first, or it joins the last table
    text = MINIMAL + "\n" + extra + "\n" if extra.startswith("[") else extra + "\n" + MINIMAL
    path = write(tmp_path, "bad.toml", text)
    expect_error(path, key, message)


def test_bad_data_loader_settings(tmp_path):
    path = write(tmp_path, "c.toml", "[model]\ntarget = 'm:f'\n[data]\ntarget = 'm:d'\nbatch_size = 0\n")
    expect_error(path, "data.batch_size", "must be >= 1")
    path.write_text("[model]\ntarget = 'm:f'\n[data]\ntarget = 'm:d'\nshuffle = 'yes'\n")
    expect_error(path, "data.shuffle", "expected true or false")


def test_missing_targets_are_required(tmp_path):
    expect_error(write(tmp_path, "a.toml", "[data]\ntarget = 'm:d'\n"), "model.target", "required")
    expect_error(write(tmp_path, "b.toml", "[model]\ntarget = 'm:d'\n"), "data.target", "required")


def test_malformed_target_suggests_colon(tmp_path):
    path = write(tmp_path, "c.toml", "[model]\ntarget = 'spirals.SpiralNet'\n[data]\ntarget='m:d'\n")
    expect_error(path, "model.target", "did you mean 'spirals:SpiralNet'?")


def test_toml_syntax_error_has_line_number(tmp_path):
    path = write(tmp_path, "broken.toml", "[model]\ntarget = 'm:f'\nhidden = = 3\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.file == str(path) and info.value.key is None
    assert "invalid TOML" in str(info.value) and "line 3" in str(info.value)


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(ConfigError, match="no such file") as info:
        load_config(tmp_path / "nope.toml")
    assert info.value.file == str(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="folder"):
        load_config(tmp_path)


# -- --set overrides ---------------------------------------------------------------------------


def test_override_values_are_toml_or_bare_strings():
    assert parse_value("3") == 3 and parse_value("1e-3") == 1e-3
    assert parse_value("true") is True
    assert parse_value('["loss", "accuracy"]') == ["loss", "accuracy"]
    assert parse_value("ddp") == "ddp" and parse_value("") == ""
    assert parse_value("1\nx = 2") == "1\nx = 2"  # no second key smuggled in
    assert parse_value("2024-01-01") == "2024-01-01"


def test_overrides_apply_with_types(tmp_path):
    path = write(tmp_path, "c.toml", MINIMAL + "[train]\nepochs = 20\n")
    cfg = load_config(
        path,
        [
            "train.epochs=3",
            "optimizer.lr=1e-3",
            "train.strategy=ddp",
            'metrics.train=["loss"]',
            "model.hidden=32",
            "experiment.name=2024",
            "train.epochs=4",
        ],
    )
    assert cfg.train.epochs == 4  # the later --set wins
    assert cfg.optimizer.kwargs == {"lr": 1e-3}
    assert cfg.train.strategy == "ddp"
    assert cfg.metrics.train == ["loss"]
    assert cfg.model.kwargs == {"hidden": 32}
    assert cfg.experiment.name == "2024"  # a str key takes the text as written


def test_override_creates_optional_table_with_defaults(tmp_path):
    path = write(tmp_path, "c.toml", MINIMAL)
    cfg = load_config(path, ["early_stopping.patience=3", "scheduler.name=StepLR"])
    assert cfg.early_stopping == EarlyStoppingConfig(patience=3)
    assert cfg.scheduler.name == "StepLR" and cfg.scheduler.interval == "step"


def test_override_errors_name_set(tmp_path):
    path = write(tmp_path, "c.toml", MINIMAL)
    with pytest.raises(ConfigError) as info:
        load_config(path, ["train.epoch=3"])
    assert str(info.value) == "--set: train.epoch: unknown key (did you mean 'epochs'?)"
    with pytest.raises(ConfigError) as info:
        load_config(path, ["train.epochs=three"])
    assert str(info.value) == "--set: train.epochs: expected an integer, got 'three'"
    with pytest.raises(ConfigError) as info:
        load_config(path, ["train.epochs"])
    assert info.value.file == "--set" and "KEY=VALUE" in info.value.message
    with pytest.raises(ConfigError) as info:
        load_config(path, ["trian.epochs=3"])
    assert info.value.file == "--set" and "did you mean 'train'" in info.value.message
    # an error in the file itself still names the file, even with overrides given
    bad = write(tmp_path, "bad.toml", MINIMAL + "[train]\nepochs = 'x'\n")
    expect_error(bad, "train.epochs", "expected an integer", overrides=["train.devices=1"])


def test_apply_override_on_dict():
    d = {"train": {"epochs": 1}}
    apply_override(d, "train.epochs=5")
    apply_override(d, "model.kwargs.deep=1")
    assert d == {"train": {"epochs": 5}, "model": {"kwargs": {"deep": 1}}}
    with pytest.raises(ConfigError) as info:
        apply_override(d, "train.epochs.x=1")
    assert info.value.file == "--set" and "train.epochs is not a table" in str(info.value)
    with pytest.raises(ConfigError, match="--set"):
        apply_override(d, ".x=1")


def test_config_from_dict_does_not_mutate_input():
    d = {"model": {"target": "m:f"}, "data": {"target": "m:d"}}
    cfg = config_from_dict(d, overrides=["train.epochs=2"])
    assert cfg.train.epochs == 2 and "train" not in d
    assert cfg.path is None and cfg.base_dir == Path.cwd()


# -- target resolution -------------------------------------------------------------------------


def test_config_folder_shadows_cwd(tmp_path, monkeypatch):
    mod = f"tt_shadow_{tmp_path.name}"
    conf_dir, cwd = tmp_path / "conf", tmp_path / "cwd"
    conf_dir.mkdir(), cwd.mkdir()
    write(conf_dir, mod + ".py", "WHERE = 'config folder'\ndef f(): return WHERE\n")
    write(cwd, mod + ".py", "WHERE = 'cwd'\ndef f(): return WHERE\ndef only_cwd(): pass\n")
    monkeypatch.chdir(cwd)
    assert resolve_target(f"{mod}:f", conf_dir, "model.target")() == "config folder"


def test_cwd_used_when_config_folder_lacks_module(tmp_path, monkeypatch):
    mod = f"tt_cwd_{tmp_path.name}"
    conf_dir, cwd = tmp_path / "conf", tmp_path / "cwd"
    conf_dir.mkdir(), cwd.mkdir()
    write(cwd, mod + ".py", "def f(): return 'cwd'\n")
    monkeypatch.chdir(cwd)
    assert resolve_target(f"{mod}:f", conf_dir, "model.target")() == "cwd"
    assert resolve_target("json:loads", conf_dir, "model.target") is __import__("json").loads


def test_nested_attribute_and_errors(tmp_path):
    mod = f"tt_nested_{tmp_path.name}"
    write(
        tmp_path,
        mod + ".py",
        """
        class Net:
            @classmethod
            def small(cls):
                return "small"
        VALUE = 3
    """,
    )
    assert resolve_target(f"{mod}:Net.small", tmp_path, "model.target")() == "small"
    with pytest.raises(ConfigError) as info:
        resolve_target(f"{mod}:Nett", tmp_path, "model.target", file="c.toml")
    assert str(info.value).startswith("c.toml: model.target: ")
    assert "did you mean 'Net'?" in str(info.value)
    with pytest.raises(ConfigError, match="not callable"):
        resolve_target(f"{mod}:VALUE", tmp_path, "model.target")
    with pytest.raises(ConfigError, match='expected "module:callable"'):
        resolve_target("no_colon_here", tmp_path, "model.target")


def test_missing_module_says_where_it_looked(tmp_path):
    with pytest.raises(ConfigError) as info:
        resolve_target("tt_nowhere_xyz:f", tmp_path, "data.target")
    assert info.value.key == "data.target"
    assert "no module named 'tt_nowhere_xyz'" in info.value.message
    assert str(tmp_path.resolve()) in info.value.message


def test_failing_user_module_is_reported_as_import_failure(tmp_path):
    mod = f"tt_broken_{tmp_path.name}"
    write(tmp_path, mod + ".py", "import tt_missing_dependency_abc\n")
    with pytest.raises(ConfigError) as info:
        resolve_target(f"{mod}:f", tmp_path, "model.target")
    assert f"importing '{mod}' failed" in info.value.message
    assert "tt_missing_dependency_abc" in info.value.message
    write(tmp_path, f"{mod}2.py", "def f(:\n")
    with pytest.raises(ConfigError, match=rf"{mod}2.py:1"):
        resolve_target(f"{mod}2:f", tmp_path, "model.target")


# -- keyword argument checks -------------------------------------------------------------------


def spiral_net(hidden=64, depth=2):
    pass


def needs_classes(num_classes, *, average="micro"):
    pass


def takes_anything(a, **kwargs):
    pass


def test_unexpected_keyword_suggests_near_name():
    with pytest.raises(ConfigError) as info:
        check_kwargs(spiral_net, {"hidden_size": 3}, "model", file="spirals.toml", target="spirals:SpiralNet")
    assert str(info.value) == (
        "spirals.toml: model.hidden_size: unexpected keyword argument "
        "for spirals:SpiralNet (did you mean 'hidden'?); it takes hidden, depth"
    )


def test_required_and_provided_arguments():
    with pytest.raises(ConfigError) as info:
        check_kwargs(needs_classes, {}, "metrics.valid[0]")
    assert info.value.key == "metrics.valid[0].num_classes" and "missing" in info.value.message
    check_kwargs(needs_classes, {"num_classes": 3, "average": "macro"}, "m")
    check_kwargs(needs_classes, {}, "m", provided=("num_classes",))
    check_kwargs(takes_anything, {"whatever": 1}, "m", positional=1)
    with pytest.raises(ConfigError, match="passed by tuitrain"):
        check_kwargs(takes_anything, {"a": 1}, "optimizer", positional=1)
    check_kwargs(dict, {"anything": 1}, "m")  # no signature: not checked


# -- validate ----------------------------------------------------------------------------------


def good_config(tmp_path: Path, extra: str = "") -> Path:
    mod = f"tt_model_{tmp_path.name}"
    write(tmp_path, mod + ".py", MODEL_MODULE)
    write(tmp_path, "mine.tcss", "Screen { }\n")
    return write(
        tmp_path,
        "run.toml",
        f"""
[model]
target = "{mod}:Net"
hidden = 8

[data]
target = "{mod}:datasets"
n = 10

[optimizer]
lr = 0.01

[dashboard]
theme = "mine.tcss"
"""
        + textwrap.dedent(extra),
    )


def test_validate_accepts_minimal_good_config(tmp_path):
    validate(load_config(good_config(tmp_path)))


def test_validate_accepts_scheduler_metrics_and_custom_optimizer(tmp_path):
    mod = f"tt_model_{tmp_path.name}"
    path = good_config(
        tmp_path,
        f"""
        [scheduler]
        name = "OneCycleLR"
        max_lr = 0.1

        [metrics]
        valid = ["loss", {{ target = "{mod}:Acc", num_classes = 3, name = "acc3" }}]

        [checkpoint]
        monitor = "valid/acc3"
        mode = "max"
    """,
    )
    validate(load_config(path))
    validate(load_config(path, ["optimizer.name=", f"optimizer.target={mod}:make_opt"]))


VALIDATE_BAD = [
    (["model.hiden=3"], "model.hiden", "did you mean 'hidden'?"),
    (["data.size=3"], "data.size", "unexpected keyword argument"),
    (["optimizer.name=adamw"], "optimizer.name", "did you mean 'AdamW'?"),
    (["optimizer.lrr=0.1"], "optimizer.lrr", "did you mean 'lr'?"),
    (["scheduler.name=CosineAnealingLR"], "scheduler.name", "did you mean 'CosineAnnealingLR'?"),
    (["scheduler.name=StepLR"], "scheduler.step_size", "missing required argument"),
    (["loss.target=torch.nn:CrossEntropyLos"], "loss.target", "did you mean 'CrossEntropyLoss'?"),
    (["dashboard.theme=nope-theme"], "dashboard.theme", "unknown theme 'nope-theme'"),
    (["dashboard.theme=missing.tcss"], "dashboard.theme", "no such file"),
    (["checkpoint.init_from=missing.pt"], "checkpoint.init_from", "no such file"),
]


@pytest.mark.parametrize("overrides,key,message", VALIDATE_BAD, ids=[v[1] for v in VALIDATE_BAD])
def test_validate_rejects(tmp_path, overrides, key, message):
    cfg = load_config(good_config(tmp_path), overrides)
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    assert info.value.key == key and message in info.value.message
    assert info.value.file == "--set"  # every bad value here came from an override


def test_validate_names_the_file_for_file_errors(tmp_path):
    path = good_config(tmp_path, "\n[loss]\ntarget = 'torch.nn:MSELoss'\nreduce_it = 1\n")
    with pytest.raises(ConfigError) as info:
        validate(load_config(path))
    assert str(info.value).startswith(f"{path}: loss.reduce_it: unexpected keyword argument")


def test_validate_rechecks_values_set_in_code(tmp_path):
    cfg = load_config(good_config(tmp_path))
    cfg.train.precision = "64"
    with pytest.raises(ConfigError, match="train.precision"):
        validate(cfg)


def test_metric_names():
    assert metric_name("loss") == "loss"
    assert metric_name({"target": "tm:MulticlassF1Score"}) == "MulticlassF1Score"
    assert metric_name({"target": "tm:AUROC", "name": "auc"}) == "auc"


# -- themes ------------------------------------------------------------------------------------


def test_find_theme_by_name_and_path(tmp_path, monkeypatch):
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    write(shipped, "ocean.tcss", "")
    monkeypatch.setattr(themes, "theme_dirs", lambda: [shipped])
    assert themes.available_themes() == ["ocean"]
    assert themes.find_theme("ocean") == shipped / "ocean.tcss"
    assert themes.find_theme("desert") is None
    assert themes.find_theme("shipped/ocean") is None

    base, cwd = tmp_path / "base", tmp_path / "cwd"
    base.mkdir(), cwd.mkdir()
    write(base, "t.tcss", "")
    write(cwd, "t.tcss", "")
    write(cwd, "only.tcss", "")
    monkeypatch.chdir(cwd)
    assert themes.find_theme("t.tcss", base) == (base / "t.tcss").resolve()
    assert themes.find_theme("only.tcss", base) == (cwd / "only.tcss").resolve()
    assert themes.find_theme(str(base / "t.tcss")) == base / "t.tcss"
    assert themes.find_theme("absent.tcss", base) is None


def test_theme_dirs_include_checkout_themes_folder():
    checkout = Path(themes.__file__).resolve().parent.parent / "themes"
    assert (checkout in themes.theme_dirs()) == checkout.is_dir()


def test_config_imports_neither_torch_nor_textual():
    code = "import sys, tuitrain.config; print(sorted(m for m in ('torch', 'textual') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        check=True,
    )
    assert out.stdout.strip() == "[]"

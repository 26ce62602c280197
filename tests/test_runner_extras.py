"""Runner extras: auto_scale_lr, torch.compile, and the environment written to run.json."""

import json

import pytest
import torch

from tuitrain.config import ConfigError
from tuitrain.runner import auto_scale_lr, git_info, prepare_run


def test_auto_scale_lr_scales_linearly_and_says_so():
    kwargs = {"lr": 0.1}
    note = auto_scale_lr(torch.optim.SGD, kwargs, "optimizer", 32, 128)
    assert kwargs["lr"] == pytest.approx(0.4)
    assert "0.1 -> 0.4" in note and "base_batch_size 32" in note
    kwargs = {}
    auto_scale_lr(torch.optim.AdamW, kwargs, "optimizer.generator", 256, 64)  # the class's default lr
    assert kwargs["lr"] == pytest.approx(1e-3 / 4)


def test_git_info_of_a_repository_and_of_a_plain_folder(tmp_path):
    import subprocess

    assert git_info(tmp_path) == {}
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.txt").write_text("x")
    subprocess.run(["git", "-C", str(tmp_path), "add", "a.txt"], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"],
                   check=True)
    info = git_info(tmp_path)
    assert len(info["git_commit"]) == 40 and info["git_dirty"] is False
    (tmp_path / "a.txt").write_text("y")
    assert git_info(tmp_path)["git_dirty"] is True


def test_base_batch_size_reaches_the_optimizer_and_the_log(tiny, forget_tinyproj):
    run = prepare_run(tiny.config, ["train.epochs=1", "optimizer.base_batch_size=8", "optimizer.lr=0.01"])
    assert run.execute() == 0
    log = (run.run_dir / "experiment.log").read_text()
    bs = run.cfg.data.batch_size
    assert f"optimizer.lr 0.01 -> {0.01 * bs / 8:g}" in log
    env = json.loads((run.run_dir / "run.json").read_text())["env"]
    assert env["python"] and env["torch"] == torch.__version__ and "cpu" in env


def test_compile_trains_and_keeps_plain_state_dict_keys(tiny, forget_tinyproj):
    run = prepare_run(tiny.config, ["train.epochs=1", "train.compile=true"])
    assert run.execute() == 0
    keys = torch.load(run.run_dir / "model.pt", weights_only=True).keys()
    assert keys and not any("_orig_mod" in k for k in keys)
    assert "torch.compile" in (run.run_dir / "experiment.log").read_text()


def test_compile_where_unsupported_is_a_config_error(tiny, monkeypatch):
    monkeypatch.setattr(torch._dynamo, "is_dynamo_supported", lambda: False)
    with pytest.raises(ConfigError, match="train.compile"):
        prepare_run(tiny.config, ["train.compile=true"])
    assert not tiny.runs.exists()

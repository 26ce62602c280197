"""Runner extras: auto_scale_lr, torch.compile, and the environment written to run.json."""

import json

import pytest
import torch

from tuitrain.config import ConfigError
from tuitrain.run.build import auto_scale_lr, git_info
from tuitrain.run.runner import prepare_run


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
    subprocess.run(
        ["git", "-C", str(tmp_path), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"], check=True
    )
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


CHAIN = (
    'scheduler.chain=[{ name = "LinearLR", end = 4, start_factor = 0.25 }, { name = "CosineAnnealingLR", begin = 4 }]'
)


def _lrs(run_dir):
    lines = []
    for f in sorted(run_dir.glob("train/epoch-*/lr.log"), key=lambda p: int(p.parent.name.split("-")[1])):
        lines += [tuple(map(float, line.split())) for line in f.read_text().splitlines()]
    return {int(s): v for s, v in lines}


def test_scheduler_chain_warms_up_then_anneals(tiny, forget_tinyproj):
    run = prepare_run(
        tiny.config,
        [
            CHAIN,
            "optimizer.name=SGD",
            "optimizer.lr=1.0",
            "scheduler.interval=step",
            'metrics.train=["loss", "lr"]',
            "train.epochs=2",
        ],
    )
    assert run.execute() == 0
    lrs = _lrs(run.run_dir)
    total = max(lrs)
    assert [lrs[s] for s in (1, 2, 3, 4)] == pytest.approx([0.4375, 0.625, 0.8125, 1.0])  # linear warm-up
    assert lrs[total] == pytest.approx(0.0, abs=1e-9)  # cosine over the remaining steps
    assert all(lrs[s] > lrs[s + 1] for s in range(4, total))


def test_scheduler_chain_resumes_exactly(tiny, forget_tinyproj):
    from tuitrain.core.checkpoint import latest_checkpoint

    sets = [
        CHAIN,
        "optimizer.name=SGD",
        "optimizer.lr=1.0",
        "scheduler.interval=step",
        'metrics.train=["loss", "lr"]',
        "train.epochs=3",
        "checkpoint.every_n_steps=3",
    ]
    whole = prepare_run(tiny.config, sets, run_dir=str(tiny.root / "whole"))
    assert whole.execute() == 0
    part = prepare_run(tiny.config, sets, run_dir=str(tiny.root / "part"))
    part.subscribe(lambda e, s: part.interrupter.request_stop() if getattr(e, "step", 0) == 5 else None)
    assert part.execute() == 130
    resumed = prepare_run(tiny.config, sets, resume=str(latest_checkpoint(tiny.root / "part" / "checkpoint")))
    assert resumed.execute() == 0
    assert _lrs(tiny.root / "part") == _lrs(tiny.root / "whole")


@pytest.mark.parametrize(
    "chain,key",
    [
        ('[{ name = "LinearLR", begin = 2 }]', "chain[0].begin"),
        ('[{ name = "LinearLR", end = 4 }, { name = "CosineAnnealingLR", begin = 2 }]', "chain[1].begin"),
        ('["LinearLR"]', "chain[0]"),
        ('[{ name = "LinerLR" }]', "chain[0].name"),
        ('[{ name = "LinearLR", start_factr = 0.1 }]', "start_factr"),
    ],
)
def test_scheduler_chain_errors_name_the_window(tiny, chain, key):
    with pytest.raises(ConfigError) as err:
        prepare_run(tiny.config, [f"scheduler.chain={chain}"])
    assert key in str(err.value)
    assert not tiny.runs.exists()


@pytest.mark.parametrize("ddp", [False, True], ids=["one process", "ddp rank 0"])
def test_what_the_model_prints_while_it_is_built_reaches_experiment_log(tiny, ddp):
    (tiny.root / "tinyproj.py").write_text(
        (tiny.root / "tinyproj.py")
        .read_text()
        .replace(
            "        super().__init__()\n", "        super().__init__()\n        print('building the net now')\n", 1
        )
    )
    extra = ("--set", "train.strategy=ddp", "--set", "train.devices=2") if ddp else ()
    r = tiny.cli("run", tiny.config, "--headless", *extra)
    assert r.returncode == 0, r.stderr[-2000:]
    (run_dir,) = tiny.run_dirs()
    log = (run_dir / "experiment.log").read_text()
    assert "[stdout] building the net now" in log
    assert "building the net now" in r.stdout  # and the console, as the run's other output

"""`tuitrain lr-find`: the sweep, its suggestion and CSV, and that nothing of a run is kept."""

import csv
import hashlib
import math
import subprocess
import sys

import pytest
import torch

from tests.conftest import cli_env, tuitrain


def lr_find(tiny, *args, cwd=None):
    return tuitrain("lr-find", tiny.config, *args, cwd=cwd or tiny.root, timeout=300)


def rows(path):
    with open(path) as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def test_a_sweep_suggests_an_lr_writes_its_csv_and_keeps_no_run(tiny):
    out = lr_find(tiny, "--steps", "40", "--csv", "sweep.csv")
    assert out.returncode == 0, out.stderr
    sweep = rows(tiny.root / "sweep.csv")
    lrs = [r["lr"] for r in sweep]
    assert lrs[0] == pytest.approx(1e-7) and all(a < b for a, b in zip(lrs, lrs[1:]))
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["smoothed_loss"]) for r in sweep)
    line = next(l for l in out.stdout.splitlines() if l.startswith("suggested lr: "))
    suggested = float(line.split()[2])
    assert lrs[0] <= suggested <= lrs[-1]
    assert f"--set optimizer.lr={line.split()[2]}" in out.stdout
    assert "learning rate" in out.stdout and "\x1b[" not in out.stdout  # the plot, plain when piped
    assert not tiny.runs.exists()  # no run directory, not even the experiment folder


def test_a_divergent_sweep_stops_before_its_end(tiny):
    out = lr_find(tiny, "--steps", "60", "--max-lr", "1e6")
    assert out.returncode == 0, out.stderr
    sweep = rows(tiny.root / "lr-find-tiny.csv")  # the default name: lr-find-<experiment>.csv
    assert len(sweep) < 60 and sweep[-1]["lr"] < 1e6
    assert "diverged" in out.stdout or "became" in out.stdout


def test_the_weights_it_starts_from_are_not_changed(tiny):
    import importlib.util

    spec = importlib.util.spec_from_file_location("tinyproj_copy", tiny.root / "tinyproj.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    weights = tiny.root / "init.pt"
    torch.save(module.Net(hidden=16).state_dict(), weights)
    before = hashlib.sha256(weights.read_bytes()).hexdigest()
    out = lr_find(tiny, "--steps", "20", "--set", f"checkpoint.init_from={weights.as_posix()}")
    assert out.returncode == 0, out.stderr
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == before
    assert not tiny.runs.exists()


def fresh_lr_find(tiny, *args) -> subprocess.CompletedProcess:
    """`python -m tuitrain lr-find CONFIG ARGS` as a fresh process, for input refused before torch is imported: ~0.2
    CPU-s, where the fork server's child of a Python with torch costs ~1.3 (its exit walks the heap it inherited)."""
    return subprocess.run(
        [sys.executable, "-m", "tuitrain", "lr-find", str(tiny.config), *args],
        cwd=tiny.root,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    "args, says, before_torch",
    [
        (["--min-lr", "1", "--max-lr", "0.1"], "--min-lr", True),
        (["--steps", "3"], "--steps", True),
        (["--set", "train.epochz=3"], "train.epochz", True),
        (["--set", "train.strategy=ddp"], "train.strategy", False),
        (["--csv", "no/such/folder/x.csv"], "--csv", False),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tiny, args, says, before_torch):
    out = fresh_lr_find(tiny, *args) if before_torch else lr_find(tiny, *args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tuitrain: error: ") and says in lines[0]
    assert not list(tiny.root.glob("lr-find-*.csv")) and not tiny.runs.exists()


def test_an_error_in_the_users_code_is_exit_1(tiny):
    out = lr_find(tiny, "--steps", "20", "--set", "model.fail_at_step=5")
    assert out.returncode == 1
    assert "exploded on purpose" in out.stderr.strip().splitlines()[-1]
    assert not tiny.runs.exists()


# --- the advice names the key that sets the lr (issue 51: OneCycleLR's max_lr, not optimizer.lr) -------


def scheduled(tiny, table):
    tiny.config.write_text(tiny.config_text(table))
    from tuitrain.config import load_config

    return load_config(tiny.config)


@pytest.mark.parametrize(
    "table, says",
    [
        ('[scheduler]\nname = "OneCycleLR"\nmax_lr = 1e-2\n', "--set scheduler.max_lr=0.002 (OneCycleLR"),
        (
            '[scheduler]\ntarget = "torch.optim.lr_scheduler:OneCycleLR"\nmax_lr = 1e-2\n',
            "--set scheduler.max_lr=0.002",
        ),
        (
            '[scheduler]\nname = "CyclicLR"\nbase_lr = 1e-4\nmax_lr = 1e-2\n',
            "--set scheduler.max_lr=0.002 --set scheduler.base_lr=0.0002 (CyclicLR",
        ),
        ('[scheduler]\nname = "StepLR"\nstep_size = 5\n', "--set optimizer.lr=0.002"),
        ("", "--set optimizer.lr=0.002"),
        (
            '[scheduler]\nchain = [{name = "LinearLR", end = 3, start_factor = 0.1}, '
            '{name = "OneCycleLR", max_lr = 1e-2}]\n',
            "set scheduler.chain[1].max_lr=0.002 in",
        ),
    ],
)
def test_the_advice_names_the_key_that_sets_the_lr(tiny, table, says):
    from tuitrain.run.lr_find import advice

    line = advice("tiny.toml", scheduled(tiny, table), 0.002)
    assert line.startswith("use it: ") and says in line
    if "optimizer.lr" not in says:
        assert "optimizer.lr would change nothing" in line


def test_one_cycle_advice_on_the_command_line(tiny):
    tiny.config.write_text(tiny.config_text('[scheduler]\nname = "OneCycleLR"\nmax_lr = 1e-2\n'))
    out = lr_find(tiny, "--steps", "30", "--csv", "sweep.csv")
    assert out.returncode == 0, out.stderr
    line = next(l for l in out.stdout.splitlines() if l.startswith("suggested lr: "))
    assert f"--set scheduler.max_lr={line.split()[2]}" in out.stdout
    assert "--set optimizer.lr" not in out.stdout

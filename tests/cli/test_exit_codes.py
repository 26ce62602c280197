"""The CLI as a user sees it: exit codes 0, 1 and 2, what a run directory holds, short errors,
`ls` and `--help`. Every run is a real `python -m tuitrain` subprocess on the tiny project."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import tomllib

import pytest
import torch

from tests.conftest import cli_env
from tuitrain.cli import main

N_STEPS = 21  # 3 epochs x 7 steps (see conftest.TINY_CONFIG)


# --- a good run -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def good(make_tiny):
    """One completed run, shared by the tests that read its run directory."""
    tiny = make_tiny("good")
    r = tiny.cli("run", tiny.config, "--set", "model.hidden=12")
    dirs = tiny.run_dirs()
    return tiny, r, dirs


def test_good_run_exits_0_in_one_new_run_directory(good):
    tiny, r, dirs = good
    assert r.returncode == 0, r.stderr + r.stdout
    assert len(dirs) == 1
    assert re.fullmatch(r"\d{8}-\d{6}(-\d+)?", dirs[0].name), dirs[0].name
    assert "Traceback" not in r.stderr + r.stdout


def test_good_run_headless_output_is_plain(good):
    tiny, r, _ = good
    assert r.stdout.strip()
    assert "\r" not in r.stdout and "\x1b" not in r.stdout
    assert "completed" in r.stdout


def test_good_run_config_toml_is_the_resolved_config(good):
    _, _, (run,) = good
    cfg = tomllib.loads((run / "config.toml").read_text())
    assert cfg["model"]["hidden"] == 12  # the --set value
    assert cfg["train"]["epochs"] == 3
    assert cfg["train"]["max_steps"] == 0  # a default, written out


def test_good_run_json(good):
    _, _, (run,) = good
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "completed"
    assert info["exit_code"] == 0
    assert (info["epoch"], info["step"]) == (3, N_STEPS)
    assert info["started"] and info["ended"]
    assert info["env"]["torch"] == torch.__version__
    assert info["best"]["file"].startswith("checkpoint/")


def test_good_run_events_jsonl(good):
    tiny, _, (run,) = good
    lines = (run / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    for e in events:
        assert isinstance(e["event"], str) and e["event"]
        assert isinstance(e["time"], float) and e["time"] > 1.6e9
    names = [e["event"] for e in events]
    assert names.count("RunStarted") == 1 and names[-1] == "RunFinished"
    metrics = [e for e in events if e["event"] == "MetricsLogged"]
    assert metrics
    for e in metrics:
        assert e["split"] in ("train", "valid")
        assert isinstance(e["epoch"], int) and isinstance(e["step"], int) and e["step"] >= 1
        assert isinstance(e["metrics"], dict) and e["metrics"]
    train_steps = [e["step"] for e in metrics if e["split"] == "train" and e.get("scope", "step") == "step"]
    assert train_steps == list(range(1, N_STEPS + 1))
    assert all(math.isfinite(v) for v in tiny.step_losses(events).values())


def test_good_run_metric_files_match_the_event_stream(good):
    tiny, _, (run,) = good
    losses = tiny.step_losses(tiny.read_events(run))
    for epoch in (1, 2, 3):
        rows = (run / "train" / f"epoch-{epoch}" / "loss.log").read_text().splitlines()
        parsed = [(int(s), float(v)) for s, v in (row.split() for row in rows)]
        assert [s for s, _ in parsed] == list(range(7 * epoch - 6, 7 * epoch + 1))
        for step, value in parsed:
            assert value == losses[step]  # written so that it reads back exactly


def test_good_run_writes_valid_metric_files_and_events(good):
    tiny, _, (run,) = good
    assert (run / "valid" / "epoch-1").is_dir()
    assert list((run / "valid" / "epoch-1").glob("loss*.log"))
    events = tiny.read_events(run)
    assert any(e["event"] == "MetricsLogged" and e["split"] == "valid" for e in events)


def test_good_run_experiment_log(good):
    _, _, (run,) = good
    text = (run / "experiment.log").read_text()
    assert "run started" in text or "started" in text
    assert "completed" in text
    assert "Traceback" not in text


def test_good_run_names_its_run_directory(good):
    tiny, _, (run,) = good
    started = next(e for e in tiny.read_events(run) if e["event"] == "RunStarted")
    assert started["run_dir"] and run.name in started["run_dir"]


def test_good_run_checkpoint_index(good):
    _, _, (run,) = good
    folder = run / "checkpoint"
    index = json.loads((folder / "index.json").read_text())
    assert index
    for row in index:
        assert {"file", "epoch", "step", "metrics", "time", "bytes", "best"} <= set(row)
        assert (folder / row["file"]).stat().st_size == row["bytes"]
        torch.load(folder / row["file"], weights_only=True)
    assert sorted(p.name for p in folder.glob("*.pt")) == sorted(r["file"] for r in index)
    assert sum(r["best"] for r in index) == 1
    assert max(r["step"] for r in index) == N_STEPS
    assert not [p for p in folder.iterdir() if p.name.startswith(".tmp-")]


def test_good_run_model_pt_is_the_final_weights(good):
    _, _, (run,) = good
    weights = torch.load(run / "model.pt", weights_only=True)
    index = json.loads((run / "checkpoint" / "index.json").read_text())
    last = max(index, key=lambda r: r["step"])
    final = torch.load(run / "checkpoint" / last["file"], weights_only=True)["model"]
    assert set(weights) == set(final)
    for k in weights:
        assert torch.equal(weights[k], final[k]), k
    assert weights["net.0.weight"].shape == (12, 4)


def test_ls_lists_the_run(good):
    tiny, _, (run,) = good
    r = tiny.cli("ls", "runs")
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    assert len(lines) == 1
    assert f"tiny/{run.name}" in lines[0]
    assert "completed" in lines[0]
    assert str(N_STEPS) in lines[0]
    by_config = tiny.cli("ls", tiny.config)  # SPEC: `ls CONFIG.toml` lists that config's experiment folder
    assert by_config.returncode == 0 and by_config.stdout == r.stdout, by_config.stdout + by_config.stderr


def test_stop_on_a_finished_run_exits_1(good):
    tiny, _, (run,) = good
    for command in ("stop", "checkpoint"):
        r = tiny.cli(command, run)
        assert r.returncode == 1, r.stdout
        assert "not live" in r.stderr and "completed" in r.stderr
        assert "Traceback" not in r.stderr
    assert not list((run / "control").glob("*.cmd")) if (run / "control").exists() else True


def test_stop_on_a_folder_that_is_no_run_exits_2(tiny):
    r = tiny.cli("stop", tiny.root)
    assert r.returncode == 2
    assert "not a run directory" in r.stderr


# --- failures: exit 1 ---------------------------------------------------------------------------


def test_exception_in_user_code_exits_1(tiny):
    r = tiny.cli("run", tiny.config, "--set", "model.fail_at_step=3")
    assert r.returncode == 1, r.stderr + r.stdout
    (run,) = tiny.run_dirs()
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "failed" and info["exit_code"] == 1
    assert "exploded on purpose" in info["error"]
    log = (run / "experiment.log").read_text()
    assert "Traceback" in log and "tinyproj.py" in log and "exploded on purpose" in log
    # stderr: the error in short, no traceback
    assert "exploded on purpose" in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 3, r.stderr
    failed = [e for e in tiny.read_events(run) if e["event"] == "RunFailed"]
    assert len(failed) == 1 and "RuntimeError" in failed[0]["error"]
    assert "Traceback" in failed[0]["traceback"]


def test_nan_loss_exits_1_naming_the_step(tiny):
    r = tiny.cli("run", tiny.config, "--set", "model.nan_at_step=3")
    assert r.returncode == 1, r.stderr + r.stdout
    assert "nan" in r.stderr.lower()
    assert re.search(r"\bstep 3\b", r.stderr), r.stderr
    assert "Traceback" not in r.stderr
    (run,) = tiny.run_dirs()
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "failed" and info["exit_code"] == 1
    losses = tiny.step_losses(tiny.read_events(run))
    assert sorted(losses) == [1, 2]  # nothing logged for the non-finite step


# --- config and usage errors: exit 2, nothing written -------------------------------------------


def assert_usage_error(tiny, r, *words):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    for w in words:
        assert w in r.stderr, (w, r.stderr)
    assert len(r.stderr.strip().splitlines()) <= 2, r.stderr
    assert not tiny.runs.exists(), "a usage error must leave no run directory"


def test_bad_set_value_in_a_subprocess(tiny):
    r = tiny.cli("run", tiny.config, "--set", "train.epochs=three")
    assert_usage_error(tiny, r, "train.epochs")


def test_unknown_key_in_the_file_in_a_subprocess(tiny):
    cfg = tiny.write_config("bad.toml", tiny.config_text().replace("epochs = 3", "epochz = 3"))
    r = tiny.cli("run", cfg)
    assert_usage_error(tiny, r, "bad.toml", "epochz", "epochs")


CONFIG_ERRORS = {
    # name: (config text edit (old, new) or None, --set items, words expected on stderr)
    "unknown key": (("epochs = 3", "epochz = 3"), [], ["train.epochz", "did you mean 'epochs'"]),
    "wrong type": (("epochs = 3", 'epochs = "3"'), [], ["train.epochs"]),
    "misspelt table": (("[train]", "[trian]"), [], ["trian", "train"]),
    "unknown model kwarg": (("hidden = 16", "hiden = 16"), [], ["model.hiden", "hidden"]),
    "bad value": (('mode = "min"', 'mode = "lowest"'), [], ["checkpoint.mode"]),
    "set unknown key": (None, ["train.epochz=3"], ["train.epochz"]),
    "set wrong type": (None, ["train.epochs=1.5"], ["train.epochs"]),
    "set no value": (None, ["train.epochs"], ["train.epochs"]),
    "set unknown table": (None, ["trian.epochs=3"], ["trian"]),
    "set bad metric": (None, ['metrics.train=["loss", "acuracy"]'], ["acuracy"]),
    "device not on this machine": (None, ["train.device=cuda:99"], ["train.device", "cuda"]),
    "unknown theme": (None, [], ["--theme", "nope", "dark"]),
    # a target's keyword arguments, judged by its signature before anything is built
    "set wrong type for the optimizer": (
        None,
        ["optimizer.lr=abc"],
        ["--set: optimizer.lr: expected a number, got 'abc'"],
    ),
    "wrong type for the optimizer in the file": (
        ("lr = 1e-2", 'lr = "fast"'),
        [],
        ["cfg.toml: optimizer.lr: expected a number, got 'fast'"],
    ),
    "wrong type for the model": (("hidden = 16", 'hidden = "wide"'), [], ["cfg.toml: model.hidden", "'wide'"]),
    "wrong type for the loss": (None, ["loss.label_smoothing=true"], ["loss.label_smoothing", "a number"]),
    "unknown optimizer argument": (None, ["optimizer.momentum=0.9"], ["optimizer.momentum", "it takes lr, betas"]),
    "scheduler choice not in its Literal": (
        None,
        ["scheduler.name=OneCycleLR", "scheduler.max_lr=0.1", "scheduler.anneal_strategy=cosine"],
        ["scheduler.anneal_strategy", "'cos', 'linear'"],
    ),
    # what only the callable judges: built before training, a config error, the run directory removed
    "rejected by the optimizer": (None, ["optimizer.lr=-1"], ["optimizer", "Invalid learning rate"]),
    "rejected by the scheduler": (
        None,
        ["scheduler.name=OneCycleLR", "scheduler.max_lr=0.1", "scheduler.pct_start=2.0"],
        ["scheduler", "pct_start"],
    ),
}


@pytest.mark.parametrize("name", list(CONFIG_ERRORS))
def test_config_errors_exit_2_naming_the_key(tiny, capsys, monkeypatch, forget_tinyproj, name):
    """In process (fast): `main()` is what the console script runs."""
    edit, sets, words = CONFIG_ERRORS[name]
    text = tiny.config_text()
    if edit:
        assert edit[0] in text
        text = text.replace(edit[0], edit[1])
    cfg = tiny.write_config("cfg.toml", text)
    monkeypatch.chdir(tiny.root)
    argv = ["run", str(cfg), "--headless"] + [a for s in sets for a in ("--set", s)]
    if name == "unknown theme":
        argv += ["--theme", "nope"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    for w in words:
        assert w in err, (w, err)
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2, err
    assert not tiny.runs.exists()


def test_wrong_type_for_an_optimizer_argument_in_a_subprocess(tiny):
    r = tiny.cli("run", tiny.config, "--set", "optimizer.lr=abc")
    assert_usage_error(tiny, r, "optimizer.lr", "expected a number, got 'abc'")


def test_argument_rejected_when_built_in_a_subprocess(tiny):
    r = tiny.cli("run", tiny.config, "--set", "optimizer.betas=[0.9, 2.0]")
    assert_usage_error(tiny, r, "optimizer", "Invalid beta parameter")


def test_missing_config_file_exits_2(tiny):
    r = tiny.cli("run", tiny.root / "nope.toml")
    assert_usage_error(tiny, r, "nope.toml")


def test_resume_latest_without_any_run_exits_2(tiny):
    r = tiny.cli("run", tiny.config, "--resume", "latest")
    assert_usage_error(tiny, r, "--resume latest")


def test_resume_of_a_missing_path_exits_2(tiny, capsys, monkeypatch, forget_tinyproj):
    monkeypatch.chdir(tiny.root)
    code = main(["run", str(tiny.config), "--headless", "--resume", str(tiny.root / "no-such-run")])
    _, err = capsys.readouterr()
    assert code == 2 and "no-such-run" in err
    assert not tiny.runs.exists()


def test_run_dir_that_is_not_empty_exits_2(tiny, capsys, monkeypatch, forget_tinyproj):
    busy = tiny.root / "busy"
    busy.mkdir()
    (busy / "precious.txt").write_text("keep me")
    monkeypatch.chdir(tiny.root)
    code = main(["run", str(tiny.config), "--headless", "--run-dir", str(busy)])
    _, err = capsys.readouterr()
    assert code == 2 and "busy" in err
    assert sorted(p.name for p in busy.iterdir()) == ["precious.txt"]


def fresh_cli(tiny, *args) -> subprocess.CompletedProcess:
    """`python -m tuitrain ARGS` as a fresh process, for a command refused before torch is imported (argparse's
    errors, --help): ~0.2 CPU-s, where the fork server's child of a Python with torch costs ~1.3 (its exit walks
    the heap it inherited)."""
    return subprocess.run(
        [sys.executable, "-m", "tuitrain", *map(str, args)],
        cwd=tiny.root,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_unknown_command_line_option_exits_2(tiny):
    r = fresh_cli(tiny, "run", tiny.config, "--epochs", "3")
    assert r.returncode == 2
    assert "--epochs" in r.stderr
    assert not tiny.runs.exists()


# --- help and ls ------------------------------------------------------------------------------


def test_help_is_fast_and_imports_no_torch(tiny):
    code = (
        "import sys, runpy\n"
        "sys.argv = ['tuitrain', '--help']\n"
        "try:\n"
        "    runpy.run_module('tuitrain', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        "heavy = [m for m in ('torch', 'textual') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tiny.root)
    assert r.returncode == 0, r.stderr
    for command in ("run", "watch", "stop", "checkpoint", "ls"):
        assert command in r.stdout
    r = fresh_cli(tiny, "run", "--help")
    assert r.returncode == 0
    for option in ("--set", "--headless", "--resume", "--run-dir", "--theme"):
        assert option in r.stdout


def test_ls_with_no_runs(tiny):
    tiny.runs.mkdir()
    r = tiny.cli("ls", "runs")
    assert r.returncode == 0
    assert "no runs" in r.stdout


def test_ls_of_a_missing_folder_exits_2(tiny):
    r = tiny.cli("ls", "nowhere")
    assert r.returncode == 2 and "nowhere" in r.stderr
    r = tiny.cli("ls", "nowhere.toml")  # a config that is not there: said as for `run`
    assert r.returncode == 2 and "nowhere.toml: no such file" in r.stderr and not r.stdout
    r = tiny.cli("ls", tiny.config)  # a config whose experiment has no runs yet
    assert r.returncode == 0 and "no runs of" in r.stdout

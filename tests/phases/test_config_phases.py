"""[model.NAME]/[optimizer.NAME]/[scheduler.NAME] tables and [train] phase/valid_phase: parsing, round trip,
errors that name the key, and demo/gan.toml run (and resumed) through the real runner."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from tuitrain.config import ConfigError, load_config, validate

DEMO = Path(__file__).resolve().parents[2] / "demo"


@pytest.fixture(autouse=True)
def _isolated_imports(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.fixture
def project(tmp_path):
    shutil.copy(DEMO / "gan.py", tmp_path / "gan.py")
    return tmp_path


def gan_config(project: Path, edit=lambda text: text, name="gan.toml") -> Path:
    text = (DEMO / "gan.toml").read_text()
    path = project / name
    path.write_text(edit(text))
    return path


def error_of(path: Path, overrides=(), full=True) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        cfg = load_config(path, overrides)
        if full:
            validate(cfg)
    return info.value


def test_gan_config_parses_named_tables_and_round_trips(project):
    cfg = load_config(gan_config(project))
    validate(cfg)
    assert list(cfg.model.named) == ["generator", "discriminator"]
    assert cfg.model.named["generator"].kwargs == {"latent": 8, "hidden": 128, "depth": 3}
    assert cfg.optimizer.named["discriminator"].name == "Adam"
    assert cfg.optimizer.named["generator"].kwargs["betas"] == [0.5, 0.999]
    assert cfg.train.phase == "gan:GANPhase" and cfg.train.valid_phase == "gan:GANValidPhase"
    d = cfg.to_dict()
    assert d["model"]["generator"]["target"] == "gan:Generator"
    again = project / "again.toml"
    again.write_text(cfg.to_toml())
    assert load_config(again).to_dict() == d


def test_set_reaches_into_named_tables(project):
    cfg = load_config(gan_config(project), ["optimizer.generator.lr=5e-4", "model.discriminator.hidden=16"])
    assert cfg.optimizer.named["generator"].kwargs["lr"] == 5e-4
    assert cfg.model.named["discriminator"].kwargs["hidden"] == 16


@pytest.mark.parametrize(
    "old, new, key, message",
    [
        ('target = "gan:Generator"', "", "model.generator.target", "required"),
        ('target = "gan:Generator"', 'target = "gan.Generator"', "model.generator.target", "gan:Generator"),
        ("latent = 8", "latnt = 8", "model.generator.latnt", "did you mean 'latent'"),
        (
            '[optimizer.generator]\nname = "Adam"',
            '[optimizer.generator]\nname = "Adamm"',
            "optimizer.generator.name",
            "did you mean 'Adam'",
        ),
        (
            "[optimizer.discriminator]",
            "[optimizer.discriminatr]",
            "optimizer.discriminatr",
            "no model named 'discriminatr'",
        ),
        (
            "betas = [0.5, 0.999]\n\n[optimizer.discriminator]",
            "betas = [0.5, 0.999]\nmomentum = 0.9\n\n[optimizer.discriminator]",
            "optimizer.generator.momentum",
            "unexpected keyword argument",
        ),
        ('phase = "gan:GANPhase"', "", "train.phase", "several models"),
        ('phase = "gan:GANPhase"', 'phase = "gan:GANPhse"', "train.phase", "did you mean 'GANPhase'"),
        ('phase = "gan:GANPhase"', 'phase = "gan:Generator"', "train.phase", "not a Phase class"),
        ('phase = "gan:GANPhase"', 'phase = "gan:GANValidPhase"', "train.phase", "validation phase"),
        ('valid_phase = "gan:GANValidPhase"', 'valid_phase = "gan:GANPhase"', "train.valid_phase", "training phase"),
        ('valid_phase = "gan:GANValidPhase"', 'valid_phase = "GANValidPhase"', "train.valid_phase", "module:callable"),
        (
            'valid = ["loss", "mode_distance", "modes_covered"]',
            'valid = ["loss", "mode distance"]',
            "metrics.valid[1]",
            "needs a name like",
        ),
        (
            "[model.discriminator]",
            "[model]\nhidden = 3\n\n[model.discriminator]",
            "model.hidden",
            "every key of [model] must be a [model.NAME] table",
        ),
    ],
)
def test_errors_in_the_new_tables_name_the_key(project, old, new, key, message):
    path = gan_config(project, lambda t: t.replace(old, new, 1))
    err = error_of(path)
    assert err.key == key, str(err)
    assert message in err.message, str(err)
    assert str(err).startswith(f"{path}: {key}: ")


def test_a_scheduler_must_name_an_optimizer(project):
    path = gan_config(project, lambda t: t + '\n[scheduler.generatr]\nname = "StepLR"\nstep_size = 10\n')
    err = error_of(path)
    assert err.key == "scheduler.generatr" and err.message.startswith("no optimizer named 'generatr'")
    assert "did you mean 'generator'" in err.message


def test_a_named_scheduler_kwarg_is_checked(project):
    path = gan_config(project, lambda t: t + '\n[scheduler.generator]\nname = "StepLR"\nstep_sise = 10\n')
    assert error_of(path).key == "scheduler.generator.step_sise"


def test_unknown_metric_without_a_phase_of_ones_own_is_still_an_error(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        textwrap.dedent("""
        [model]
        target = "torch.nn:Linear"
        in_features = 2
        out_features = 2
        [data]
        target = "x:y"
        [metrics]
        train = ["loss", "acuracy"]
    """)
    )
    err = error_of(path, full=False)
    assert err.key == "metrics.train[1]" and "did you mean 'accuracy'" in err.message


def test_a_metric_the_step_cannot_return_is_said_before_anything_trains(tmp_path):
    """tuitrain's own step returns no named values: with a model class that has no train_step/valid_step,
    a name that is not built in ("acc", "f1") is refused up front; it used to fail the run at its first
    step (exit 1, a run directory), or after a whole epoch for a valid one."""
    (tmp_path / "stepvalue_models.py").write_text(
        textwrap.dedent("""
        import torch

        class Plain(torch.nn.Linear):
            pass

        class Own(torch.nn.Linear):
            def train_step(self, batch):
                return {"loss": self(batch[0]).sum(), "perplexity": 1.0}

        def build(**kw):
            return torch.nn.Linear(**kw)
        """)
    )

    def config(model: str, train: str, valid: str = '["loss"]') -> Path:
        path = tmp_path / "c.toml"
        path.write_text(
            f'[model]\ntarget = "stepvalue_models:{model}"\nin_features = 2\nout_features = 2\n[data]\ntarget = "stepvalue_models:build"\n'
            f'[loss]\ntarget = "torch.nn:MSELoss"\n[metrics]\ntrain = {train}\nvalid = {valid}\n'
        )
        return path

    err = error_of(config("Plain", '["loss", "acc"]'))
    assert err.key == "metrics.train[1]" and "did you mean 'accuracy'" in err.message and "train_step" in err.message
    err = error_of(config("Plain", '["loss"]', '["loss", "accuracy", "f1"]'))
    assert err.key == "metrics.valid[2]" and "Plain has no valid_step" in err.message
    for model, train in (("Own", '["loss", "perplexity"]'), ("build", '["loss", "perplexity"]')):
        validate(load_config(config(model, train)))  # a step of its own, or a model not known before it is built


def test_ddp_refuses_several_models(project):
    from tuitrain.run.launch import check_config

    cfg = load_config(gan_config(project), ["train.strategy=ddp", "train.devices=2"])
    with pytest.raises(ConfigError) as info:
        check_config(cfg)
    assert info.value.key == "train.strategy"


def events_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def test_gan_toml_runs_headless_and_resumes(project, monkeypatch):
    from tuitrain.run.runner import prepare_run

    monkeypatch.chdir(project)
    path = gan_config(project)
    small = [
        "data.n=2304",
        "train.epochs=3",
        "checkpoint.every_n_steps=5",
        "log.every_n_steps=2",
        "model.generator.hidden=32",
        "model.discriminator.hidden=32",
    ]
    run = prepare_run(path, small + ["train.max_steps=8"], run_dir=str(project / "run"))
    assert run.execute() == 0
    logged = [e for e in events_of(project / "run") if e["event"] == "MetricsLogged" and e["split"] == "train"]
    assert logged and {"g_loss", "d_loss"} <= set(logged[-1]["metrics"])
    ckpt_dir = project / "run" / "checkpoint"
    from tuitrain.core.checkpoint import latest_checkpoint, load_checkpoint

    data = load_checkpoint(latest_checkpoint(ckpt_dir))
    assert data["step"] == 8 and data["optimizer_names"] == ["generator", "discriminator"]
    resumed = prepare_run(path, small, resume=str(project / "run"))
    assert resumed.execute() == 0
    done = [e for e in events_of(project / "run") if e["event"] == "RunFinished"][-1]
    assert done["status"] == "completed" and done["step"] == 3 * 8
    assert "valid/mode_distance" in done["summary"]
    # the dashboard, fed the run's events.jsonl (as `tuitrain watch` is), plots both losses
    from tuitrain.core.events import parse_line
    from tuitrain.dashboard.state.model import DashboardState

    state = DashboardState()
    lines = (project / "run" / "events.jsonl").read_text().splitlines()
    state.apply([e for e in map(parse_line, lines) if e is not None])
    assert {"g_loss", "d_loss", "mode_distance"} <= set(state.metric_names)
    assert len(state.metric_series("g_loss", "train")) > 1

"""The demos' [log] samples functions (demo/charlm.py, gan.py, autoencoder.py): what each returns, their
configs check, and demo/autoencoder.toml run through the real runner for a few steps, its samples and
histograms reaching media/ and events.jsonl."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from tuitrain.config import load_config, validate
from tuitrain.core.png import read_png

DEMO = Path(__file__).resolve().parents[2] / "demo"


@pytest.fixture(autouse=True)
def _isolated_imports(monkeypatch):
    monkeypatch.setattr(sys, "path", [str(DEMO), *sys.path])


@pytest.mark.parametrize("name", ["charlm", "gan", "autoencoder"])
def test_each_demo_config_names_a_samples_function_that_checks(name):
    cfg = load_config(DEMO / f"{name}.toml")
    validate(cfg)  # resolves log.samples.target
    assert cfg.log.samples["target"] == f"{name}:{'sample' if name == 'charlm' else 'samples'}"
    assert cfg.log.samples_every > 0


def test_charlm_samples_are_text_from_a_fixed_prompt_and_seed():
    import charlm

    torch.manual_seed(0)
    model = charlm.CharTransformer(d_model=32, n_heads=2, n_layers=1, context=16).eval()
    text = charlm.sample(model, 100, n=40)
    assert isinstance(text, str) and text.startswith(charlm.SAMPLE_PROMPT) and len(text) == 44
    assert charlm.sample(model, 200, n=40) == text  # the same weights: the same sample


def test_gan_samples_are_a_picture_of_the_points_against_the_ring():
    import gan

    torch.manual_seed(0)
    models = torch.nn.ModuleDict({"generator": gan.Generator(hidden=16, depth=1), "discriminator": gan.Discriminator()})
    img = gan.samples(models.eval(), 100, n=256)
    assert img.shape == (3, 128, 128) and img.dtype == torch.uint8
    ring_only = gan.picture(torch.empty(0, 2))
    assert (ring_only > 0).any() and ring_only[0].max() < 100, "the ring is faint"
    on_mode = gan.picture(gan.ring_modes()[:1].repeat(4, 1))  # four points on the first mode (2, 0)
    assert on_mode[0, 64, 106] == 255 and on_mode[0, 64, 22] < 128, "a point is bright where it falls"


def test_autoencoder_samples_are_inputs_above_their_reconstructions():
    import autoencoder

    model = autoencoder.AutoEncoder(latent=4, width=4).eval()
    with torch.no_grad():  # as tuitrain calls it
        img = autoencoder.samples(model, 100, n=3)
    assert img.shape == (3, 33, 50) and 0 <= float(img.min()) and float(img.max()) <= 1
    inputs = autoencoder.shapes(3, seed=1_000_003)
    assert torch.equal(img[:, :16, 17:33], inputs[1])
    with torch.no_grad():
        assert torch.allclose(img[:, 17:, 17:33], model(inputs)[1].clamp(0, 1))


def test_autoencoder_toml_logs_its_samples_and_histograms(tmp_path, monkeypatch):
    from tuitrain.run.runner import prepare_run

    shutil.copy(DEMO / "autoencoder.py", tmp_path / "autoencoder.py")
    shutil.copy(DEMO / "autoencoder.toml", tmp_path / "autoencoder.toml")
    monkeypatch.chdir(tmp_path)
    small = [
        "data.n=320",
        "data.batch_size=32",
        "train.epochs=1",
        "train.max_steps=4",
        "model.width=4",
        "log.samples.every_n_steps=2",
        "log.histograms_every_n_steps=2",
        "checkpoint.every_n_epochs=0",
    ]
    run = prepare_run(tmp_path / "autoencoder.toml", small, run_dir=str(tmp_path / "run"))
    assert run.execute() == 0
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    media = [e for e in events if e["event"] == "MediaLogged"]
    assert [(e["key"], e["step"], e["kind"], e["path"]) for e in media] == [
        ("samples", 2, "image", "media/samples/2.png"),
        ("samples", 4, "image", "media/samples/4.png"),
    ]
    w, h, _ = read_png((tmp_path / "run" / "media" / "samples" / "4.png").read_bytes())
    assert (w, h) == (media[-1]["width"], media[-1]["height"]) == (135, 33)
    hists = {(e["key"], e["step"]) for e in events if e["event"] == "HistogramLogged"}
    assert hists == {
        (f"{kind}/{part}", step) for kind in ("weights", "grads") for part in ("encoder", "decoder") for step in (2, 4)
    }

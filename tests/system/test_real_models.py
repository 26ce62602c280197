"""What real models need (issue 19): an optimizer factory that takes the model (nanoGPT's
configure_optimizers), no_decay groups, step-based validation, EMA and max_time from the config,
mapping batches (model(**batch)), the values a train_step returns as metrics, grad_norm, data_wait,
tokens as throughput, and the bf16 note; bad input to each is exit 2 naming the key."""

import json
import math
import statistics
import os
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

import tuitrain
from tuitrain.core.sections import Metrics
from tuitrain.cli import main
from tuitrain.config import ConfigError, load_config
from tuitrain.core.callbacks import EventBus
from tuitrain.core.checkpoint import load_checkpoint, read_index
from tuitrain.core.events import MetricsLogged, OutputPrinted, StepCompleted
from tuitrain.run.runner import prepare_run

GPTPROJ = '''
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import TensorDataset


class TinyLM(nn.Module):
    """nanoGPT's shape in miniature: embeddings, a norm, a head; configure_optimizers as nanoGPT's."""

    def __init__(self, vocab=16, dim=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.fc = nn.Linear(dim, dim)
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, idx):
        return self.lm_head(self.ln_f(torch.relu(self.fc(self.wte(idx)))))

    def train_step(self, batch):
        x, y = batch
        loss = F.cross_entropy(self(x).flatten(0, 1), y.flatten())
        return {"loss": loss, "perplexity": loss.detach().exp(), "items": y.numel()}

    valid_step = train_step

    def configure_optimizers(self, weight_decay, learning_rate):
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        nodecay = [p for p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": nodecay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate)


def configure(model, lr=1e-2, weight_decay=0.1):
    return model.configure_optimizers(weight_decay, lr)


def no_optimizer(model, lr=1e-2, weight_decay=0.0):
    return None


def tokens(n=96, block=8, vocab=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(0, vocab, (n, block + 1), generator=g)
    x, y = data[:, :-1], data[:, 1:]
    return TensorDataset(x[:64], y[:64]), TensorDataset(x[64:], y[64:])
'''

CONFIG = """
[experiment]
name = "gpt"
dir = "{runs}"
seed = 0

[model]
target = "gptproj:TinyLM"

[data]
target = "gptproj:tokens"
batch_size = 8

[optimizer]
target = "gptproj:configure"
lr = 1e-2
weight_decay = 0.1

[train]
epochs = 2
validate_every_n_steps = 3
limit_valid_batches = 2
max_time = "1h"

[ema]
decay = 0.9

[metrics]
train = ["loss", "perplexity", "grad_norm", "throughput", "data_wait"]
valid = ["loss", "perplexity"]

[log]
every_n_steps = 2

[checkpoint]
monitor = "valid/perplexity"

[dashboard]
theme = "{theme}"
"""


@pytest.fixture
def gpt(tmp_path, monkeypatch):
    (tmp_path / "gptproj.py").write_text(GPTPROJ)
    (tmp_path / "empty.tcss").write_text("")
    config = tmp_path / "gpt.toml"
    config.write_text(CONFIG.format(runs=(tmp_path / "runs").as_posix(), theme=(tmp_path / "empty.tcss").as_posix()))
    monkeypatch.chdir(tmp_path)
    yield config
    sys.modules.pop("gptproj", None)


def _events(run_dir):
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def test_nanogpt_style_run_from_a_toml(gpt):
    run = prepare_run(gpt, [], headless=True)
    assert run.execute() == 0
    events = _events(run.run_dir)
    started = next(e for e in events if e["event"] == "RunStarted")
    steps_per_epoch = started["steps_per_epoch"]
    assert steps_per_epoch == 8
    # the factory got the model: nanoGPT's two groups, kept by the checkpoint
    last = read_index(run.run_dir / "checkpoint")[-1]
    ckpt = load_checkpoint(run.run_dir / "checkpoint" / last.file)
    groups = ckpt["optimizers"][0]["param_groups"]
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    assert "ema" in ckpt
    # validation every 3 steps on 2 batches, and at the end: steps 3, 6, 9, 12, 15, 16
    valid = [e for e in events if e["event"] == "PhaseCompleted" and e["split"] == "valid"]
    assert [e["step"] for e in valid] == [3, 6, 9, 12, 15, 16]
    assert all(e["items"] == 2 * 8 * 8 for e in valid)  # 2 batches of 8 sequences of 8 tokens
    # the values train_step returns are metrics; grad_norm and data_wait are measured on logged steps
    logged = [
        e["metrics"] for e in events if e["event"] == "MetricsLogged" and e["split"] == "train" and e["scope"] == "step"
    ]
    assert len(logged) == 8 and all({"loss", "perplexity", "grad_norm", "data_wait"} <= set(m) for m in logged)
    assert all(m["perplexity"] > 1 and math.isfinite(m["grad_norm"]) and m["grad_norm"] > 0 for m in logged)
    assert all(0 <= m["data_wait"] <= 1 for m in logged)
    best = json.loads((run.run_dir / "run.json").read_text())["best"]
    assert "perplexity" in json.dumps(best)


def test_resume_keeps_the_factory_groups_and_the_average(gpt):
    first = prepare_run(gpt, ["train.epochs=1"], headless=True)
    assert first.execute() == 0
    again = prepare_run(gpt, ["train.epochs=2"], resume="latest", headless=True)
    assert again.execute() == 0
    ckpt = load_checkpoint(again.run_dir / "checkpoint" / read_index(again.run_dir / "checkpoint")[-1].file)
    assert ckpt["step"] == 16 and "ema" in ckpt


def test_no_decay_builds_two_groups(gpt):
    run = prepare_run(
        gpt, ['optimizer.target=""', "optimizer.name=AdamW", 'optimizer.no_decay=["bias", "ln_"]'], headless=True
    )
    learner, _, _ = run.build(EventBus())
    decayed, plain = learner.optimizer.param_groups
    names = {id(p): n for n, p in learner.raw_model.named_parameters()}
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert sorted(names[id(p)] for p in plain["params"]) == ["fc.bias", "lm_head.bias", "ln_f.bias", "ln_f.weight"]
    assert {names[id(p)] for p in decayed["params"]} == {"wte.weight", "fc.weight", "lm_head.weight"}


@pytest.mark.parametrize(
    "setting, key",
    [
        ('optimizer.no_decay=["bias", 3]', "optimizer.no_decay"),
        ('train.max_time="soon"', "train.max_time"),
        ("ema.decay=1.5", "ema.decay"),
        ('metrics.train=["loss", "acuracy"]', "metrics.train[1]"),
        ('metrics.throughput_unit="words"', "metrics.throughput_unit"),
        ('optimizer.no_decay=["bias"]', "optimizer.no_decay"),  # the factory builds its own groups
        ("train.limit_valid_batches=-1", "train.limit_valid_batches"),
    ],
)
def test_bad_settings_name_their_key(gpt, setting, key, capsys):
    with pytest.raises(ConfigError) as err:
        prepare_run(gpt, [setting])
    assert err.value.key == key
    assert main(["run", str(gpt), "--headless", "--set", setting]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in lines[0]
    assert not (gpt.parent / "runs").exists()


def test_ema_with_fsdp_is_refused(gpt):
    with pytest.raises(ConfigError, match="sharded") as err:
        load_config(gpt, ["train.strategy=fsdp"])
    assert err.value.key == "ema.decay"


def test_a_factory_that_returns_no_optimizer_is_exit_2_with_no_run_left(gpt, capsys):
    assert main(["run", str(gpt), "--headless", "--set", "optimizer.target=gptproj:no_optimizer"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("tuitrain: error: ") and "optimizer.target" in err[-1] and "NoneType" in err[-1]
    assert not (gpt.parent / "runs").exists()  # nothing half-written: not even the empty folders above it


def test_a_factory_that_returns_no_optimizer_under_ddp_is_the_same_one_line_and_exit_2(gpt):
    """Spawned ranks: the parent says it once and exits 2; torchrun: every rank exits 2, rank 0 says it."""
    import subprocess

    bad = ["--headless", "--set", "optimizer.target=gptproj:no_optimizer", "--set", "train.strategy=ddp"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(Path(tuitrain.__file__).parents[1]), os.environ.get("PYTHONPATH")])
        ),
    }
    spawned = subprocess.run(
        [sys.executable, "-m", "tuitrain", "run", str(gpt), *bad, "--set", "train.devices=2"],
        cwd=gpt.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert spawned.returncode == 2, spawned.stdout + spawned.stderr
    lines = spawned.stderr.strip().splitlines()
    assert lines == [l for l in lines if l.startswith("tuitrain: error: ")] and len(lines) == 1, spawned.stderr
    assert "optimizer.target" in lines[0] and "NoneType" in lines[0] and "rank" not in lines[0]
    launched = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "-m",
            "tuitrain",
            "run",
            str(gpt),
            *bad,
        ],
        cwd=gpt.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert launched.returncode != 0
    assert launched.stderr.count("tuitrain: error: ") == 1 and "NoneType" in launched.stderr
    assert "exitcode  : 2" in launched.stderr, launched.stderr[-2000:]  # torchrun's report of the ranks
    assert not (gpt.parent / "runs").exists()  # nothing left of either attempt


def test_a_config_error_found_while_building_closes_the_dashboard_at_once(gpt):
    """Not a "run ended without a final event" screen to quit first: the app leaves with exit code 2,
    and `tuitrain run` then prints the one line (tested above), as for errors found before it opened."""
    import asyncio

    from tuitrain.dashboard.live import LiveApp, LiveRun

    run = prepare_run(gpt, ["optimizer.target=gptproj:no_optimizer"])
    app = LiveApp(LiveRun(run), None)  # as `tuitrain run` opens it (run_live)

    async def watch():
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(300):
                if not app.is_running:
                    return
                await pilot.pause(0.05)

    asyncio.run(watch())
    assert not app.is_running and app.return_value == 2
    assert "NoneType" in str(run.config_error) and not run.run_dir.exists()


# --- the Python API --------------------------------------------------------------------------


@dataclass
class Output:
    loss: torch.Tensor
    logits: torch.Tensor


class DictModel(nn.Module):
    """A Hugging Face shaped model: forward(**batch) returns an object with .loss and .logits."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 3)

    def forward(self, features, labels=None):
        logits = self.net(features)
        return Output(loss=nn.functional.cross_entropy(logits, labels), logits=logits)


class DictData(Dataset):
    def __init__(self, n=48):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 4, generator=g)
        self.y = (self.x[:, 0] > 0).long() + (self.x[:, 1] > 0).long()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"features": self.x[i], "labels": self.y[i]}


class Collect:
    def __init__(self):
        self.events = []

    def __call__(self, event, state=None):
        self.events.append(event)


def test_mapping_batches_train_with_no_glue():
    torch.manual_seed(0)
    model = DictModel()
    seen = Collect()
    learner = tuitrain.Learner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.5),
        epochs=8,
        batch_size=16,
        train_metrics=("loss", "accuracy"),
        valid_metrics=("loss", "accuracy"),
        log_every_n_steps=1,
        callbacks=[seen],
    )
    result = learner.fit(DictData(), DictData(24))
    assert result.status == "completed"
    epochs = [e.metrics for e in seen.events if isinstance(e, MetricsLogged) and e.split == "valid"]
    assert epochs[-1]["accuracy"] > 0.6 and epochs[-1]["loss"] < epochs[0]["loss"]


class TokenTagger(nn.Module):
    """Token classification, Hugging Face style: padding positions labelled -100."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 3)

    def forward(self, input_ids, labels=None):
        logits = self.emb(input_ids)
        return Output(loss=nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten()), logits=logits)


def test_accuracy_leaves_out_labels_of_minus_100():
    torch.manual_seed(0)
    ids = torch.randint(0, 10, (16, 6), generator=torch.Generator().manual_seed(1))
    labels = ids % 3
    labels[::2, 4:] = -100  # padding: half the rows end in two positions no one is asked to predict

    class Data(Dataset):
        def __len__(self):
            return len(ids)

        def __getitem__(self, i):
            return {"input_ids": ids[i], "labels": labels[i]}

    model = TokenTagger()
    with torch.no_grad():
        keep = labels != -100
        want = (model.emb(ids).argmax(-1) == labels)[keep].float().mean().item()
    seen = Collect()
    result = tuitrain.Learner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        epochs=1,
        batch_size=8,
        train_metrics=("loss", "accuracy", "top2_accuracy"),
        valid_metrics=("accuracy",),
        log_every_n_steps=2,
        callbacks=[seen],
    ).fit(Data(), Data())
    assert result.status == "completed", result.error
    logged = [e.metrics for e in seen.events if isinstance(e, MetricsLogged)]
    train = [m for m in logged if "top2_accuracy" in m]
    assert train and train[-1]["accuracy"] == pytest.approx(want)  # 2 steps, the whole set: 80 of 96 counted
    assert 0 < train[-1]["top2_accuracy"] <= 1
    valid = [m for m in logged if "accuracy" in m and "top2_accuracy" not in m and "loss" not in m]
    assert valid and valid[-1]["accuracy"] == pytest.approx(want)


def test_a_real_transformers_model_trains_from_dict_batches():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(
        vocab_size=32,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(cfg)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 32, (32, 8), generator=g)
    labels = (ids[:, 0] > 16).long()

    class Data(Dataset):
        def __len__(self):
            return len(ids)

        def __getitem__(self, i):
            return {"input_ids": ids[i], "attention_mask": torch.ones(8, dtype=torch.long), "labels": labels[i]}

    seen = Collect()
    result = tuitrain.Learner(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-3),
        epochs=2,
        batch_size=8,
        train_metrics=("loss", "accuracy"),
        callbacks=[seen],
    ).fit(Data())
    assert result.status == "completed", result.error
    assert any(isinstance(e, MetricsLogged) and "accuracy" in e.metrics for e in seen.events)


class StepModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 2)

    def train_step(self, batch):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        return {"loss": loss, "perplexity": loss.detach().exp(), "note": "not a number", "logits": self.net(x)}


def _xy(n=32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long())


def test_every_named_scalar_a_train_step_returns_is_logged():
    seen = Collect()
    model = StepModel()
    tuitrain.Learner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        train_metrics=("loss",),
        epochs=2,
        batch_size=8,
        log_every_n_steps=2,
        callbacks=[seen],
    ).fit(_xy())
    steps = [e.metrics for e in seen.events if isinstance(e, MetricsLogged) and e.split == "train"]
    assert steps and all(set(m) == {"loss", "perplexity"} for m in steps)  # no text, no logits
    assert all(m["perplexity"] == pytest.approx(math.exp(m["loss"]), rel=0.2) for m in steps)


def test_grad_norm_is_the_norm_before_clipping():
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    data = _xy(16)
    x, y = data.tensors
    probe = nn.Linear(4, 2)
    probe.load_state_dict(model.state_dict())
    nn.functional.cross_entropy(probe(x), y).backward()
    expected = torch.cat([p.grad.flatten() for p in probe.parameters()]).norm().item()
    seen = Collect()
    # lr 0: the weights never move, so every step's norm is the one computed here
    tuitrain.Learner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        loss_fn=nn.CrossEntropyLoss(),
        train_metrics=("loss", "grad_norm"),
        clip_grad_norm=1e-4,
        epochs=3,
        batch_size=16,
        shuffle=False,
        log_every_n_steps=1,
        callbacks=[seen],
    ).fit(data)
    norms = [e.metrics["grad_norm"] for e in seen.events if isinstance(e, MetricsLogged) and e.scope == "step"]
    assert len(norms) == 3 and norms == pytest.approx([expected] * 3, rel=1e-5)
    assert expected > 1e-3  # far above the clip: the value logged is the norm before clipping


class SlowData(Dataset):
    def __init__(self, sleep: float = 0.004) -> None:
        self.sleep = sleep

    def __len__(self):
        return 16

    def __getitem__(self, i):
        import time

        if self.sleep:
            time.sleep(self.sleep)
        return torch.randn(4), torch.tensor(i % 2)


def _data_waits(data) -> list[float]:
    model = nn.Linear(4, 2)
    seen = Collect()
    tuitrain.Learner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.CrossEntropyLoss(),
        train_metrics=("loss", "data_wait"),
        epochs=2,
        batch_size=4,
        log_every_n_steps=2,
        callbacks=[seen],
    ).fit(data)
    return [
        e.metrics["data_wait"]
        for e in seen.events
        if isinstance(e, MetricsLogged) and e.split == "train" and e.scope == "step"
    ]


def test_data_wait_shows_a_slow_dataset():
    """16 ms of loading per batch against a fraction of a millisecond of training: most of the step is
    the wait; the same data without the sleep is the control (a loaded machine slows both alike)."""
    slow, fast = _data_waits(SlowData()), _data_waits(SlowData(sleep=0.0))
    assert len(slow) == 4 and all(0 < w <= 1 for w in slow) and all(0 <= w <= 1 for w in fast)
    assert statistics.median(slow) > 0.5 and statistics.median(slow) > statistics.median(fast) + 0.25, (slow, fast)


def test_items_per_step_count_every_accumulated_batch_and_tokens():
    model = nn.Linear(4, 2)
    seen = Collect()
    learner = tuitrain.Learner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.CrossEntropyLoss(),
        epochs=1,
        batch_size=4,
        grad_accumulation=2,
        callbacks=[seen],
    )
    learner.bus.subscribe(seen, steps=True)
    learner.fit(_xy(32))
    items = [e.items for e in seen.events if isinstance(e, StepCompleted) and e.phase == "train"]
    assert items and set(items) == {8}  # two batches of 4 per optimizer step

    class Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 10)

        def forward(self, x):
            return self.emb(x).transpose(1, 2)  # (batch, classes, time) for cross_entropy

    seq = Seq()
    ids = torch.randint(0, 10, (16, 5))
    seen = Collect()
    learner = tuitrain.Learner(
        seq,
        torch.optim.SGD(seq.parameters(), lr=0.1),
        loss_fn=nn.CrossEntropyLoss(),
        epochs=1,
        batch_size=4,
        metrics=Metrics(throughput_unit="tokens"),
        callbacks=[seen],
    )
    learner.bus.subscribe(seen, steps=True)
    learner.fit(TensorDataset(ids, ids))
    items = [e.items for e in seen.events if isinstance(e, StepCompleted) and e.phase == "train"]
    assert items and set(items) == {20}  # 4 sequences of 5 tokens


def test_bf16_on_a_cpu_without_it_says_so(monkeypatch):
    from tuitrain.core import optimization

    monkeypatch.setattr(optimization, "cpu_bf16", lambda: False)
    model = nn.Linear(4, 2)
    seen = Collect()
    tuitrain.Learner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.CrossEntropyLoss(),
        precision="bf16-mixed",
        device="cpu",
        callbacks=[seen],
    ).fit(_xy(8))
    lines = [e.text for e in seen.events if isinstance(e, OutputPrinted) and "bf16" in e.text]
    assert len(lines) == 1 and "emulated" in lines[0] and "slower" in lines[0]
    monkeypatch.setattr(optimization, "cpu_bf16", lambda: True)
    seen = Collect()
    tuitrain.Learner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.CrossEntropyLoss(),
        precision="bf16-mixed",
        device="cpu",
        callbacks=[seen],
    ).fit(_xy(8))
    assert not [e for e in seen.events if isinstance(e, OutputPrinted) and "emulated" in e.text]

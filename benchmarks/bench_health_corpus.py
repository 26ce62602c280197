"""The `[watch]` spike rules on a corpus: healthy runs of many kinds must raise no alert, injected faults
must be caught at their step.

Every run is real training with the rules at their defaults (or `--set watch.KEY=VALUE` for all runs),
through the front door such a run uses: a config (`tuitrain run`'s own path, in this process), the
three demos, a hand-written loop with `Monitor`, a LightningModule with Lightning's `TuitrainCallback`,
a GPT-2 under the Hugging Face Trainer with its `TuitrainCallback`. The table gives, per run, the
values the rules judged, the alerts it raised by rule (from its events.jsonl), and for a fault: its
step, how far the loss and the gradients' norm jumped there (the value over the median of the 64 before
it), and the step of the first alert at or after it. A fault is caught when an alert falls on its step
(the lr fault shows in the next step's loss: caught at that step).

Every judged value is also saved (`--save DIR`, default benchmarks/health_corpus/) so that a candidate
rule can be tried on the whole corpus in a second without training again: `--replay` prints the table
of a grid of rules on the saved values (what the defaults were chosen from).

    python benchmarks/bench_health_corpus.py [--only NAME,...] [--skip NAME,...] [--set watch.KEY=VALUE]...
    python benchmarks/bench_health_corpus.py --replay [--save DIR]

The runs need lightning and transformers (the `test` extra); without them those two rows are skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

FAULT_STEP = 1200  # where every fault of the one-epoch fault runs falls (batch 1199)


@dataclass
class Case:
    name: str
    kind: str  # what sort of run: the table's second column
    run: object  # run(workdir, sets) -> the run directory
    fault: str = ""  # "" for a healthy run
    fault_step: int = 0
    expect: str = "none"  # "none": no alert at all; "caught": an alert at fault_step; "report": recall only
    needs: str = ""  # a module the run needs (skipped without it)


# --- config runs (tuitrain run's own path) ---------------------------------------------------------

BASE = """
[experiment]
name = "{name}"
dir = "{runs}"
seed = 0
[model]
{model}
[data]
{data}
[loss]
target = "{loss}"
[optimizer]
{optimizer}
{scheduler}
[train]
epochs = {epochs}
{train}
[metrics]
train = ["loss", "grad_norm"]
valid = ["loss"]
[log]
every_n_steps = {log_every}
[checkpoint]
every_n_epochs = {ckpt_epochs}
every_n_steps = {ckpt_steps}
"""

MLP_CLS = 'target = "corpusproj:MLP"\ninputs = 16\noutputs = 4'
MLP_REG = 'target = "corpusproj:MLP"\ninputs = 8\noutputs = 1'
CE, MSE = "torch.nn:CrossEntropyLoss", "torch.nn:MSELoss"


def config_case(
    name: str,
    *,
    model: str,
    data: str,
    loss: str,
    optimizer: str,
    scheduler: str = "",
    epochs: int = 1,
    log_every: int = 1,
    train: str = "",
    ckpt_epochs: int = 1,
    ckpt_steps: int = 0,
):
    def run(work: Path, sets: list[str]) -> Path:
        from tuitrain.run.runner import prepare_run

        text = BASE.format(
            name=name,
            runs=work / "runs",
            model=model,
            data=data,
            loss=loss,
            optimizer=optimizer,
            scheduler=scheduler,
            epochs=epochs,
            train=train,
            log_every=log_every,
            ckpt_epochs=ckpt_epochs,
            ckpt_steps=ckpt_steps,
        )
        path = work / f"{name}.toml"
        path.write_text(text)
        return _execute(prepare_run(path, list(sets)))

    return run


def demo_case(demo: str, extra: list[str]):
    def run(work: Path, sets: list[str]) -> Path:
        from tuitrain.run.runner import prepare_run

        folder = work / "demo"
        if not folder.exists():
            shutil.copytree(ROOT / "demo", folder)
        return _execute(prepare_run(folder / f"{demo}.toml", [f'experiment.dir="{work / "runs"}"', *extra, *sets]))

    return run


def _execute(run) -> Path:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        run.execute()
    return Path(run.run_dir)


def _fault_data(kind: str, fault: str) -> str:
    """A one-epoch data table of 2000 batches of 16, the fault at batch FAULT_STEP - 1."""
    b = FAULT_STEP - 1
    target = "corpusproj:blobs" if kind == "cls" else "corpusproj:regression"
    extra = {
        "": "",
        "x3": f"scale_batch = {b}\nscale = 3.0",
        "x10": f"scale_batch = {b}\nscale = 10.0",
        "x300": f"scale_batch = {b}\nscale = 300.0",
        "labels": f"shuffle_batch = {b}",
        "drift": f"drift_from = {b}\ndrift = 0.002",
    }[fault]
    return f'target = "{target}"\nbatch_size = 16\nshuffle = false\nn = 32000\n{extra}'


def fault_case(kind: str, fault: str):
    name = f"{'classify' if kind == 'cls' else 'regress'}-b16-{fault or 'healthy'}"
    model, loss = (MLP_CLS, CE) if kind == "cls" else (MLP_REG, MSE)
    optimizer = 'target = "torch.optim:Adam"\nlr = 1e-3' if kind == "cls" else 'target = "torch.optim:SGD"\nlr = 0.02'
    scheduler = ""
    data = _fault_data(kind, fault if fault != "lr" else "")
    if fault == "lr":
        scheduler = f'[scheduler]\ntarget = "corpusproj:spike_lr"\ninterval = "step"\nat = {FAULT_STEP}\nfactor = 100.0'
    return config_case(
        name, model=model, data=data, loss=loss, optimizer=optimizer, scheduler=scheduler, ckpt_epochs=0, ckpt_steps=500
    )


# --- a hand-written loop with Monitor; Lightning; the HF Trainer -------------------------------------


def monitor_loop(work: Path, sets: list[str]) -> Path:
    import torch

    import corpusproj
    from tuitrain import Monitor

    torch.manual_seed(0)
    train, _ = corpusproj.blobs(n=12000, batch_size=32)
    loader = torch.utils.data.DataLoader(train, batch_size=32, shuffle=True)
    model = corpusproj.MLP(16, 64, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    step = 0
    with Monitor(experiment="monitor-loop", dir=work / "runs", dashboard=False, watch=_watch(sets)) as mon:
        for epoch in range(1, 9):
            mon.epoch = epoch
            for x, y in loader:
                step += 1
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
                opt.step()
                mon.log(step, loss=loss.item(), grad_norm=float(norm), lr=opt.param_groups[0]["lr"])
    return Path(mon.run_dir)


def lightning_run(work: Path, sets: list[str]) -> Path:
    import lightning.pytorch as L
    import torch

    import corpusproj
    from tuitrain.integrations.lightning import TuitrainCallback

    class Reg(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = corpusproj.MLP(8, 32, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.02, momentum=0.9)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.3)]

    L.seed_everything(0, verbose=False)
    train, valid = corpusproj.regression(n=4096, batch_size=32)
    cb = TuitrainCallback(experiment="lightning", dir=work / "runs", dashboard=False, watch=_watch(sets))
    trainer = L.Trainer(
        max_epochs=10,
        log_every_n_steps=1,
        callbacks=[cb],
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        accelerator="cpu",
    )
    with (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        trainer.fit(
            Reg(),
            torch.utils.data.DataLoader(train, batch_size=32, shuffle=True),
            torch.utils.data.DataLoader(valid, batch_size=256),
        )
    return newest_run(work / "runs" / "lightning")


def newest_run(folder: Path) -> Path:
    return max((p.parent for p in folder.glob("*/events.jsonl")), key=lambda p: p.stat().st_mtime)


def source_bytes(limit: int = 400_000) -> bytes:
    """Python's own standard library source, as text to learn (nothing downloaded)."""
    import sysconfig

    out, total = [], 0
    for p in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        data = p.read_bytes()
        out.append(data)
        total += len(data)
        if total >= limit:
            break
    return b"".join(out)[:limit]


def hf_gpt2(work: Path, sets: list[str]) -> Path:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    from transformers.utils import logging as hf_logging

    from tuitrain.integrations.transformers import TuitrainCallback

    hf_logging.set_verbosity_error()
    data = torch.tensor(list(source_bytes()), dtype=torch.long).clamp(max=127)
    length = 32

    class Chunks(torch.utils.data.Dataset):
        def __init__(self, lo: int, hi: int):
            self.starts = range(lo, hi - length - 1, length)

        def __len__(self):
            return len(self.starts)

        def __getitem__(self, i):
            x = data[self.starts[i] : self.starts[i] + length]
            return {"input_ids": x, "labels": x}

    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=128, n_positions=length, bos_token_id=0, eos_token_id=0)
    )
    args = TrainingArguments(
        output_dir=str(work / "hf"),
        max_steps=600,
        per_device_train_batch_size=16,
        logging_steps=1,
        learning_rate=1e-3,
        warmup_steps=60,
        eval_strategy="steps",
        eval_steps=200,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    cb = TuitrainCallback(experiment="hf-gpt2", dir=work / "runs", dashboard=False, watch=_watch(sets))
    split = int(len(data) * 0.95)
    trainer = Trainer(
        model=model, args=args, train_dataset=Chunks(0, split), eval_dataset=Chunks(split, len(data)), callbacks=[cb]
    )
    with (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        trainer.train()
    return newest_run(work / "runs" / "hf-gpt2")


def _watch(sets: list[str]) -> dict:
    """--set watch.KEY=VALUE as a Monitor's / callback's watch table."""
    import tomllib

    out = {}
    for s in sets:
        key, _, value = s.partition("=")
        if key.startswith("watch."):
            try:
                out[key[6:]] = tomllib.loads(f"v = {value}")["v"]
            except tomllib.TOMLDecodeError:
                out[key[6:]] = value
    return out


# --- the corpus ----------------------------------------------------------------------------------


def corpus() -> list[Case]:
    cases = [
        Case("demo-spirals", "demo: MLP, AdamW, one-cycle", demo_case("spirals", [])),
        Case("demo-gan", "demo: GAN, two optimizers", demo_case("gan", [])),
        Case(
            "demo-charlm",
            "demo: char-level transformer",
            demo_case("charlm", ["train.epochs=1", "train.validate_every_n_steps=100"]),
        ),
        Case(
            "classify-momentum-steplr",
            "4 classes, SGD momentum, StepLR, 40 epochs",
            config_case(
                "classify-momentum-steplr",
                model=MLP_CLS,
                data='target = "corpusproj:blobs"\nbatch_size = 64\nn = 4000',
                loss=CE,
                optimizer='target = "torch.optim:SGD"\nlr = 0.05\nmomentum = 0.9',
                scheduler='[scheduler]\nname = "StepLR"\nstep_size = 10\ngamma = 0.5',
                epochs=40,
                log_every=1,
            ),
        ),
        Case(
            "regress-adam",
            "regression, Adam, 30 epochs",
            config_case(
                "regress-adam",
                model=MLP_REG,
                data='target = "corpusproj:regression"\nbatch_size = 32',
                loss=MSE,
                optimizer='target = "torch.optim:Adam"\nlr = 3e-3',
                epochs=30,
                log_every=5,
            ),
        ),
        Case(
            "regress-step-drop",
            "regression, SGD momentum, lr x0.1 at epochs 8, 16",
            config_case(
                "regress-step-drop",
                model=MLP_REG,
                data='target = "corpusproj:regression"\nbatch_size = 32',
                loss=MSE,
                optimizer='target = "torch.optim:SGD"\nlr = 0.01\nmomentum = 0.9',
                scheduler='[scheduler]\nname = "MultiStepLR"\nmilestones = [8, 16]\ngamma = 0.1',
                epochs=24,
                log_every=1,
            ),
        ),
        Case(
            "classify-warmup-cosine",
            "4 classes, AdamW, warm-up then cosine, batch 32",
            config_case(
                "classify-warmup-cosine",
                model=MLP_CLS,
                data='target = "corpusproj:blobs"\nbatch_size = 32\nn = 8000',
                loss=CE,
                optimizer='target = "torch.optim:AdamW"\nlr = 3e-3\nweight_decay = 0.05',
                scheduler='[scheduler]\ntarget = "corpusproj:warmup_cosine"\ninterval = "step"\nwarmup = 200\ntotal = 3750',
                epochs=15,
                log_every=1,
            ),
        ),
        Case("regress-b16-healthy", "regression, SGD, batch 16, log every step", fault_case("reg", "")),
        Case("classify-b16-healthy", "4 classes, Adam, batch 16, log every step", fault_case("cls", "")),
        Case("monitor-loop", "hand-written loop with Monitor, SGD nesterov, clipping", monitor_loop),
        Case("lightning", "LightningModule, SGD momentum, StepLR", lightning_run, needs="lightning"),
        Case("hf-gpt2", "GPT-2 (2 layers) on Python source, HF Trainer", hf_gpt2, needs="transformers"),
    ]
    for kind, label in (("reg", "regression"), ("cls", "4 classes")):
        for fault, what, expect in (
            ("x3", "inputs x3", "report"),
            ("x10", "inputs x10", "caught"),
            ("x300", "inputs x300", "caught"),
        ):
            cases.append(
                Case(
                    f"{'regress' if kind == 'reg' else 'classify'}-b16-{fault}",
                    f"{label}: one batch's {what}",
                    fault_case(kind, fault),
                    fault=what,
                    fault_step=FAULT_STEP,
                    expect=expect,
                )
            )
    cases += [
        Case(
            "classify-b16-labels",
            "4 classes: one batch's labels shuffled",
            fault_case("cls", "labels"),
            fault="labels shuffled",
            fault_step=FAULT_STEP,
            expect="report",
        ),
        Case(
            "regress-b16-lr",
            "regression: lr x100 for one step",
            fault_case("reg", "lr"),
            fault="lr x100",
            fault_step=FAULT_STEP + 1,
            expect="report",
        ),
        Case(
            "regress-b16-drift",
            "regression: targets drift upward",
            fault_case("reg", "drift"),
            fault="slow drift (not a spike)",
            fault_step=FAULT_STEP,
            expect="none",
        ),
    ]
    return cases


# --- recording what the rules judge --------------------------------------------------------------


class Recorder:
    """Every value handed to a `Health` (the loss, the gradients' norm), in order, by run."""

    def __init__(self) -> None:
        self.values: list[tuple[str, int, float]] = []

    def install(self) -> None:
        from tuitrain.core.health import Health

        rec = self.values
        loss, grads = Health.loss, Health.grads

        def judged_loss(self, v, step, _real=loss):
            rec.append(("loss", int(step), float(v)))
            return _real(self, v, step)

        def judged_grads(self, v, step, _real=grads):
            rec.append(("grads", int(step), float(v)))
            return _real(self, v, step)

        Health.loss, Health.grads = judged_loss, judged_grads


def alerts_of(run_dir: Path) -> list[dict]:
    out = []
    with open(run_dir / "events.jsonl", encoding="utf-8") as f:
        for line in f:
            e = json.loads(line)
            if e.get("event") == "AlertRaised":
                out.append(e)
    return out


def jump(values: list[tuple[str, int, float]], what: str, step: int) -> float | None:
    """The value at `step` over the median of the 64 judged before it."""
    series = [(s, v) for w, s, v in values if w == what]
    at = [v for s, v in series if s == step]
    before = [v for s, v in series if s < step][-64:]
    if not at or len(before) < 8:
        return None
    med = statistics.median(before)
    return at[0] / med if med > 0 else None


@dataclass
class Row:
    case: Case
    seconds: float
    judged: dict
    alerts_list: list
    jumps: tuple = ()


def verdict(case: Case, alerts: list[dict]) -> tuple[int | None, bool, bool]:
    """(first alert step at or after the fault, caught at its step, the row meets its target)."""
    spikes = [a for a in alerts if a["rule"] in ("loss_spike", "grad_spike")]
    after = [a["step"] for a in spikes if a["step"] >= case.fault_step] if case.fault else []
    first = min(after) if after else None
    caught = bool(case.fault) and first == case.fault_step
    if case.expect == "none":
        ok = not alerts if not case.fault else not [a for a in alerts if a["step"] < case.fault_step] and not after
    elif case.expect == "caught":  # what comes after an alert-only fault is a damaged run's: not counted
        ok = caught and not [a for a in alerts if a["step"] < case.fault_step]
    else:
        ok = not [a for a in alerts if a["step"] < case.fault_step]
    return first, caught, ok


def table(rows: list[Row]) -> tuple[str, bool]:
    head = (
        f"{'run':<26} {'kind':<48} {'judged':>11} {'alerts (loss/grad/other)':>24} {'fault step':>10} "
        f"{'loss, grad jump':>15} {'first alert':>11}  target"
    )
    lines, all_ok = [head, "-" * len(head)], True
    for r in rows:
        c = r.case
        first, caught, ok = verdict(c, r.alerts_list)
        all_ok &= ok
        n = lambda rule: sum(1 for a in r.alerts_list if a["rule"] == rule)  # noqa: E731
        other = len(r.alerts_list) - n("loss_spike") - n("grad_spike")
        judged = f"{r.judged.get('loss', 0)}/{r.judged.get('grads', 0)}"
        jl, jg = r.jumps or (None, None)
        jumps = "" if not c.fault else f"{_x(jl)}, {_x(jg)}"
        target = {"none": "no alert", "caught": "caught at its step", "report": "(recall)"}[c.expect]
        counts = f"{n('loss_spike')}/{n('grad_spike')}/{other}"
        lines.append(
            f"{c.name:<26} {c.kind[:48]:<48} {judged:>11} {counts:>24} "
            f"{c.fault_step if c.fault else '':>10} {jumps:>15} {first if first else '-':>11}  "
            f"{target}: {'met' if ok else 'NOT MET'}" + (" (caught)" if c.fault and caught else "")
        )
    return "\n".join(lines), all_ok


def _x(v) -> str:
    return "-" if v is None else f"x{v:.3g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated run names")
    ap.add_argument("--skip", default="", help="comma-separated run names")
    ap.add_argument("--set", action="append", default=[], dest="sets", metavar="watch.KEY=VALUE")
    ap.add_argument("--save", type=Path, default=HERE / "health_corpus", help="where the judged values go")
    ap.add_argument("--replay", action="store_true", help="try a grid of rules on the saved values")
    args = ap.parse_args(argv)
    if args.replay:
        import health_replay

        return health_replay.main(args.save)
    only = {x for x in args.only.split(",") if x}
    skip = {x for x in args.skip.split(",") if x}
    rec = Recorder()
    rec.install()
    rows = []
    args.save.mkdir(parents=True, exist_ok=True)
    os.environ.pop("TUITRAIN_ALERTS_WEBHOOK", None)
    os.environ.pop("TUITRAIN_ALERTS_COMMAND", None)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copy(HERE / "corpusproj.py", work / "corpusproj.py")
        os.chdir(work)
        for case in corpus():
            if (only and case.name not in only) or case.name in skip:
                continue
            if case.needs:
                try:
                    __import__(case.needs)
                except ImportError:
                    print(f"{case.name}: skipped ({case.needs} is not installed)", flush=True)
                    continue
            rec.values.clear()
            start = time.perf_counter()
            run_dir = case.run(work, args.sets)
            seconds = time.perf_counter() - start
            values = list(rec.values)
            alerts = alerts_of(run_dir)
            judged = {w: sum(1 for x, _, _ in values if x == w) for w in ("loss", "grads")}
            jumps = (
                (jump(values, "loss", case.fault_step), jump(values, "grads", case.fault_step)) if case.fault else ()
            )
            rows.append(Row(case, seconds, judged, alerts, jumps))
            with gzip.open(args.save / f"{case.name}.json.gz", "wt", encoding="utf-8") as f:
                json.dump(
                    {
                        "name": case.name,
                        "kind": case.kind,
                        "fault": case.fault,
                        "fault_step": case.fault_step,
                        "expect": case.expect,
                        "values": values,
                    },
                    f,
                )
            a = ", ".join(f"{x['rule']}@{x['step']}" for x in alerts[:8]) + (" ..." if len(alerts) > 8 else "")
            print(
                f"{case.name}: {seconds:.1f} s, {judged['loss']} losses and {judged['grads']} grad norms judged, "
                f"{len(alerts)} alert(s){': ' + a if alerts else ''}",
                flush=True,
            )
    text, ok = table(rows)
    print()
    print(text)
    healthy = [r for r in rows if not r.case.fault]
    print(
        f"\nhealthy runs with an alert: {sum(1 for r in healthy if r.alerts_list)} of {len(healthy)}; "
        f"faults caught at their step: "
        f"{sum(1 for r in rows if r.case.fault and verdict(r.case, r.alerts_list)[1])} of "
        f"{sum(1 for r in rows if r.case.fault and r.case.expect != 'none')}; every target "
        f"{'met' if ok else 'NOT MET'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

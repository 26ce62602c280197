"""A tiny GPT-2 under `transformers.Trainer` with TuitrainCallback, for the integration tests; the
tests also import `trainer_for` from here.

    python tiny_gpt2.py OUT [--max-steps N] [--save-steps N] [--sleep S] [--fail-at N] [--dashboard auto|true|false]

One process or, under torchrun, one rank. At the end each rank writes OUT/final-step-rank{R}.txt (the
Trainer's final global_step) and OUT/run-dir-rank{R}.txt (the run directory that rank knew).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

from tuitrain.integrations.transformers import TuitrainCallback


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int = 0, length: int = 16) -> None:
        self.x = torch.randint(0, 64, (n, length), generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.x[i], "labels": self.x[i]}


class Pace(TrainerCallback):
    """Slows each step (a request from outside lands mid-run) and fails on purpose at a chosen step."""

    def __init__(self, sleep: float = 0.0, fail_at: int = 0) -> None:
        self.sleep, self.fail_at = sleep, fail_at

    def on_step_end(self, args, state, control, **kwargs):
        if self.fail_at and state.global_step == self.fail_at:
            raise RuntimeError(f"failed on purpose at step {state.global_step}")
        if self.sleep:
            time.sleep(self.sleep)


def trainer_for(out: Path, callbacks: list, *, max_steps: int, save_steps: int = 0, eval_steps: int = 5) -> Trainer:
    """A Trainer of a 2-layer GPT-2 on random tokens: batches of 4, a log every step, an evaluation
    every `eval_steps` and a save every `save_steps` (0: no scheduled saves)."""
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=32, bos_token_id=0, eos_token_id=0)
    )
    args = TrainingArguments(
        output_dir=str(out / "hf"),
        max_steps=max_steps,
        per_device_train_batch_size=4,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=eval_steps,
        save_strategy="steps" if save_steps else "no",
        save_steps=save_steps or 500,
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        seed=0,
    )
    return Trainer(
        model=model,
        args=args,
        train_dataset=RandomTokens(256),
        eval_dataset=RandomTokens(8, seed=1),
        callbacks=callbacks,
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--max-steps", type=int, default=30)
    p.add_argument("--save-steps", type=int, default=0)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--fail-at", type=int, default=0)
    p.add_argument("--dashboard", default="auto", choices=["auto", "true", "false"])
    a = p.parse_args()
    dashboard = {"auto": "auto", "true": True, "false": False}[a.dashboard]
    callback = TuitrainCallback(experiment="gpt2", dashboard=dashboard, dir=a.out / "runs")
    trainer = trainer_for(
        a.out, [callback, Pace(a.sleep, a.fail_at)], max_steps=a.max_steps, save_steps=a.save_steps, eval_steps=10
    )
    trainer.train()
    rank = int(os.environ.get("RANK", "0"))
    (a.out / f"final-step-rank{rank}.txt").write_text(str(trainer.state.global_step))
    (a.out / f"run-dir-rank{rank}.txt").write_text(str(callback.monitor.run_dir))


if __name__ == "__main__":
    main()

"""tuitrain on a GPU against a hand-written loop: a nanoGPT-sized model (GPT, 6 layers, 6 heads, 384 wide,
256 tokens of context, 65 symbols, batches of 64: nanoGPT's shakespeare-char configuration) in bf16
autocast, random tokens made on the machine (nothing downloaded). Also tuitrain's `tflops` and `mfu`
against what the hand-written loop's own FLOP count and clock give, and `max_memory` against
`torch.cuda.max_memory_allocated`.

    python benchmarks/bench_gpu.py [--repeats 6] [--steps 200] [--warmup 30] [--device cuda]
    python benchmarks/bench_gpu.py --device cpu --small     # the script itself, on a CPU (a check, no figure)

Each measurement is its own process, tuitrain and the hand-written loop in turn (who goes first
alternates), so each gets a fresh CUDA context and allocator; each times `--steps` optimizer steps
after `--warmup`, from one `torch.cuda.synchronize()` to another, logging the loss every 10 steps
(a hand-written loop's `loss.item()` there, tuitrain's `log_every_n_steps = 10`: the same syncs).
Both fetch whole batches from the same TensorDataset (tuitrain's way; the hand-written loop through
benchproj.WholeBatches) and move them to the GPU. The figure is the median over pairs of tuitrain's
time per step over the hand-written loop's of the same pair. Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SIZES = {"nanogpt": dict(layers=6, heads=6, width=384, context=256, vocab=65, batch=64, n=64 * 400),
         "small": dict(layers=2, heads=2, width=64, context=32, vocab=65, batch=8, n=8 * 60)}


def build(size: dict):
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self, width: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
            x = x + self.proj(y)
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self, layers, heads, width, context, vocab, **_) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(context, width)
            self.blocks = nn.Sequential(*[Block(width, heads) for _ in range(layers)])
            self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)

        def forward(self, idx):
            pos = torch.arange(idx.shape[1], device=idx.device)
            return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))

    def loss_fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))

    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, size["vocab"], (size["n"], size["context"] + 1), generator=g)
    data = torch.utils.data.TensorDataset(tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())
    torch.manual_seed(0)
    return GPT(**size), loss_fn, data


def child(which: str, size_name: str, device: str, steps: int, warmup: int) -> dict:
    import torch

    size = SIZES[size_name]
    model, loss_fn, data = build(size)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    marks: dict[int, float] = {}
    total = warmup + steps
    out: dict = {"which": which}
    if which == "tuitrain":
        from tuitrain import Learner

        def clock(event, state) -> None:
            if event.name == "MetricsLogged" and event.split == "train" and event.step in (warmup, total):
                sync()
                marks[event.step] = time.perf_counter()
                if event.step == total:
                    out.update({k: v for k, v in event.metrics.items() if k in ("tflops", "mfu", "max_memory")})

        metrics = ["loss", "tflops", "max_memory"] + (["mfu"] if cuda else [])
        learner = Learner(model, opt, loss_fn=loss_fn, train_metrics=metrics, valid_metrics=(), epochs=10**6,
                          max_steps=total, batch_size=size["batch"], precision="bf16-mixed", device=device,
                          log_every_n_steps=10, seed=0, callbacks=[clock])
        result = learner.fit(data, None, dashboard=False)
        assert result.status == "completed", result.status
    else:
        from benchproj import WholeBatches, whole_batch

        model.to(device)
        loader = torch.utils.data.DataLoader(WholeBatches(data), batch_size=size["batch"], shuffle=True,
                                             collate_fn=whole_batch, generator=torch.Generator().manual_seed(0))
        step = 0
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        while step < total:
            for x, y in loader:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16):
                    loss = loss_fn(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                step += 1
                if step % 10 == 0:
                    loss.item()
                if step in (warmup, total):
                    sync()
                    marks[step] = time.perf_counter()
                if step == total:
                    break
        if cuda:
            out["max_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
        # the FLOPs of one step, counted as tuitrain counts them (torch's FlopCounterMode), for the
        # hand-written loop's own TFLOP/s
        from torch.utils.flop_counter import FlopCounterMode

        x, y = next(iter(loader))
        x, y = x.to(device), y.to(device)
        with FlopCounterMode(display=False) as counter:
            with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
            loss.backward()
        out["flops_per_step"] = counter.get_total_flops()
    out["per_step"] = (marks[total] - marks[warmup]) / steps
    if "flops_per_step" in out:
        out["hand_tflops"] = out["flops_per_step"] / out["per_step"] / 1e12
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=6, help="pairs; who goes first alternates")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--device", default="cuda")
    p.add_argument("--small", action="store_true", help="a tiny GPT (checks the script; no figure)")
    p.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        which, size, device, steps, warmup = a.child
        print(json.dumps(child(which, size, device, int(steps), int(warmup))))
        return 0
    if a.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print("no CUDA device here: nothing measured (run on a machine with a GPU)")
            return 0
        print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    size = "small" if a.small else "nanogpt"
    pairs = []
    for r in range(a.repeats):
        order = ("tuitrain", "hand") if r % 2 == 0 else ("hand", "tuitrain")
        got = {}
        for which in order:
            res = subprocess.run([sys.executable, __file__, "--child", which, size, a.device, str(a.steps),
                                  str(a.warmup)], capture_output=True, text=True, timeout=1800)
            if res.returncode != 0:
                print(res.stderr[-3000:])
                return 1
            got[which] = json.loads(res.stdout.strip().splitlines()[-1])
        pairs.append(got)
        t, h = got["tuitrain"], got["hand"]
        print(f"pair {r + 1}: tuitrain {t['per_step'] * 1e3:.2f} ms/step, hand-written {h['per_step'] * 1e3:.2f} "
              f"ms/step, ratio {t['per_step'] / h['per_step']:.3f}; tflops {t.get('tflops', math.nan):.3g} "
              f"(hand-written's own count: {h['hand_tflops']:.3g}), mfu {t.get('mfu', math.nan):.1f} %, "
              f"max_memory {t.get('max_memory', math.nan) / 2**30:.2f} GiB (hand-written's peak "
              f"{h.get('max_memory_gib', math.nan):.2f} GiB; max_memory is bytes, the RSS off CUDA)", flush=True)
    ratios = [pp["tuitrain"]["per_step"] / pp["hand"]["per_step"] for pp in pairs]
    print(f"\ntuitrain / hand-written, time per step: median {statistics.median(ratios):.3f} "
          f"({min(ratios):.3f}-{max(ratios):.3f}) over {len(ratios)} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

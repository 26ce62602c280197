"""A nanoGPT-shaped training script for tests/integrations/test_monitor_ranks.py: the process group and
a DDP model at the top level, `mon = Monitor(...).start()`, a loop that logs, answers checkpoint and
stop requests, and `mon.finish()`. Under torchrun or alone (`python loop.py`).

Each rank writes into --out: `pid-RANK` (its pid, before the loop), `step-RANK` (the step it has reached,
rewritten every step), `final-RANK` (the step it ended at, after finish). Rank 1 prints a marker every
--marker-every steps (it must never reach a dashboard's screen). --fail-at N: both ranks (or
--fail-rank alone) raise at step N and the script never calls finish (the excepthook and atexit end the run). --late-group: the Monitor
starts before init_process_group (it joins the group at its first `stop_requested`).
"""

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from tuitrain import Monitor

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--root", required=True, help="Monitor(dir=...): the run goes to ROOT/ranks/<timestamp>")
p.add_argument("--max-steps", type=int, default=100_000)
p.add_argument("--sleep", type=float, default=0.005, help="seconds of 'work' per step")
p.add_argument("--fail-at", type=int, default=0)
p.add_argument("--fail-rank", type=int, default=-1, help="the rank that raises at --fail-at (default: every rank)")
p.add_argument("--marker-every", type=int, default=0)
p.add_argument("--dashboard", default="false", choices=["auto", "false"])
p.add_argument("--late-group", action="store_true")
args = p.parse_args()

out = Path(args.out)
ddp = "RANK" in os.environ
rank = int(os.environ.get("RANK", "0"))
(out / f"pid-{rank}").write_text(str(os.getpid()))
dashboard = "auto" if args.dashboard == "auto" else False
if args.late_group:
    mon = Monitor(experiment="ranks", config={"sleep": args.sleep}, dir=args.root, dashboard=dashboard).start()
if ddp:
    dist.init_process_group("gloo")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
if ddp:
    model = DDP(model)
if not args.late_group:
    mon = Monitor(experiment="ranks", config={"sleep": args.sleep}, dir=args.root, dashboard=dashboard).start()

step = 0
g = torch.Generator().manual_seed(rank)
while step < args.max_steps:
    step += 1
    x = torch.randn(16, 8, generator=g)
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    model.zero_grad()
    loss.backward()
    with torch.no_grad():  # plain SGD: torch.optim's first step imports torch._dynamo (3 s per process)
        for w in model.parameters():
            w -= 0.01 * w.grad
    time.sleep(args.sleep)
    if step == args.fail_at and args.fail_rank in (-1, rank):
        raise RuntimeError(f"the loop exploded on purpose at step {step}")
    mon.log(step, loss=loss.detach(), rank=rank)  # rank: to tell whose values reached the files
    (out / f"step-{rank}").write_text(str(step))
    if rank == 1 and args.marker_every and step % args.marker_every == 0:
        print(f"RANK1-MARKER {step}", flush=True)
    if mon.checkpoint_requested:
        mon.save_checkpoint({"model": model.state_dict(), "step": step})
    if mon.stop_requested:
        break

mon.finish()
(out / f"final-{rank}").write_text(str(step))
if ddp:
    dist.destroy_process_group()

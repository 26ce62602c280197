"""One process, no torchrun: the same 20-step loop under `with Monitor(...)` (--form with), under
`mon = Monitor(...).start()` ... `mon.finish()` (--form start), or started and left to an uncaught
exception at the script's top level (--form raise: the excepthook and atexit must end the run failed)."""

import argparse

import torch

from tuitrain import Monitor

p = argparse.ArgumentParser()
p.add_argument("--form", choices=["with", "start", "raise"], required=True)
p.add_argument("--run-dir", required=True)
args = p.parse_args()

torch.manual_seed(0)
w = torch.zeros(4, requires_grad=True)
x, y = torch.randn(64, 4), torch.randn(64)


def step_once():
    loss = (x @ w - y).pow(2).mean()
    w.grad = None
    loss.backward()
    with torch.no_grad():  # plain SGD: torch.optim's first step imports torch._dynamo (3 s per process)
        w.sub_(0.1 * w.grad)
    return loss.detach()


if args.form == "with":
    with Monitor(experiment="single", config={"lr": 0.1}, run_dir=args.run_dir, dashboard=False) as mon:
        for step in range(1, 21):
            mon.log(step, loss=step_once())
            if mon.stop_requested:
                break
else:
    mon = Monitor(experiment="single", config={"lr": 0.1}, run_dir=args.run_dir, dashboard=False).start()
    for step in range(1, 21):
        mon.log(step, loss=step_once())
        if args.form == "raise" and step == 5:
            raise ValueError("top-level failure on purpose")
        if mon.stop_requested:
            break
    mon.finish()

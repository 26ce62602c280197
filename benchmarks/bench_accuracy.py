"""Per-call cost of the accuracy metric's update on a (64, 10) batch, one torch thread: 7 rounds of
20,000 calls (a window read every 10), min and median of the rounds. Run it on two commits, in
turns, to compare: `python benchmarks/bench_accuracy.py LABEL`."""

import torch, time, sys
from tuitrain.core.metrics import Accuracy
from tuitrain.core.state import StepOutput

torch.set_num_threads(1)
out = torch.randn(64, 10)
tgt = torch.randint(0, 10, (64,))
so = StepOutput(output=out, target=tgt, items=64)
a = Accuracy()
best = []
for r in range(7):
    t = time.perf_counter()
    for i in range(20000):
        a.update(so, 64)
        if i % 10 == 9:
            a._fold()
    best.append((time.perf_counter() - t) / 20000 * 1e6)
print(sys.argv[1], "µs/update min %.2f median %.2f" % (min(best), sorted(best)[3]))

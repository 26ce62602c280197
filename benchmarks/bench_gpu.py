"""tuitrain on a GPU against a hand-written loop (issue 39): a nanoGPT-sized model (GPT, 6 layers, 6 heads,
384 wide, 256 tokens of context, 65 symbols, batches of 64: nanoGPT's shakespeare-char configuration,
10.7M parameters) in bf16 autocast, random tokens made on the machine (nothing downloaded).

    python benchmarks/bench_gpu.py [--repeats 4] [--steps 300] [--warmup 50] [--compile-pairs 1]
                                   [--budget 270] [--device cuda] [--json PATH]
    python benchmarks/bench_gpu.py --device cpu --small [--json PATH]   # the script itself, on a CPU (no figure)

The contenders, each its own process (a fresh CUDA context and allocator), all on the same clock:
- `hand`: the hand-written loop (autocast, AdamW, `loss.item()` every 10 steps);
- `headless`: tuitrain's `Learner(...).fit(train, dashboard=False)` (`log_every_n_steps = 10`: the
  same syncs), metrics loss, tflops, max_memory and (on a GPU in tuitrain's peak table) mfu;
- `dashboard`: the same with `dashboard=True`, in a pseudo-terminal of 120x40 whose output this script
  drains as a terminal would; once training has ended (the child marks it in a file) it presses `q`
  (then `y`, `q`, ... every 2 s: a `q` that comes before the app has seen the end opens its confirm
  question). The child's stdout is the terminal, so every child hands its figures back in a JSON file.
Neither tuitrain contender has a run directory (no files written), so the two differ by the screen alone.
All fetch whole batches from the same TensorDataset (tuitrain's way; the hand-written loop through
benchproj.WholeBatches), move them to the device, and run with glibc's malloc set alike
(bench_dashboard.allocator_env). A repeat is one triple in a rotating order (hand, headless,
dashboard; then headless, dashboard, hand; ...). The figures are the medians over triples of each
tuitrain contender's time per step over the hand-written loop's of the same triple.

The clock: an optimizer step post-hook, the same in every contender, that counts steps and at steps
`warmup` and `warmup + steps` synchronizes the device and reads `time.perf_counter()`; so any
`--steps` and `--warmup` work, whatever the logging cadence, and no per-step event is asked of
tuitrain's loop (its one callback here takes the logged metrics only).

`--compile-pairs N`: N more pairs, the hand-written loop on `torch.compile(model)` against tuitrain
headless with the model compiled in place (`model.compile()`, what `[train] compile = true` does in
tuitrain/run/build.py); the warm-up (the first steps) includes compiling. It logs `tflops` (and
`mfu`) as the others do: the batch tuitrain counts runs uncompiled (tuitrain/core/flops.py), which keeps
dynamo compiling the model afterwards (a first compiled call under FlopCounterMode, a dispatch mode,
would leave it eager for good: what this benchmark found first); the FLOP goals come from the
uncompiled runs. `compile_trains` is met when the compiled tuitrain run completes with a finite loss
and dynamo compiled at least one graph (torch._dynamo's counters). A compile that fails is recorded (its error
text; the goal not met), not a crash of this script.

FLOPs. tuitrain's `tflops` (FlopCounterMode's count of the first batch, over its own window clock) is
the harmonic mean of its logged windows inside the timed stretch: that is its count of a step over
the stretch's time per step. Beside it, two independent counts over the bench's own time per step
of the same process, with N the parameters and T = batch x context the tokens of a step:
(a) 6·N·T, and (b) the PaLM/nanoGPT count 6·N_nonembedding·T + 12·layers·width·context·T, whose
second term is the attention's two matmuls (QKᵀ and AV, forward and backward, the whole square as
FlopCounterMode's SDPA formula counts it, causal mask or not). The goal (within 10 %) is judged
against (b), which counts what FlopCounterMode counts (every matmul, SDPA's on a GPU included):
(a) leaves the attention out (10 % of this model's FLOPs at context 256) and counts the embeddings'
lookups as matmuls, so a correct count of this model is 1.095 x (a) (1.162e12 FLOPs a step: 6 x the
Linear weights x T plus the attention term) but 0.997 x (b) (the biases and LayerNorms' 0.3 %): judged
against (a) a correct count would sit at the edge of the 10 %. (a) is printed and kept in the JSON. On
a CPU FlopCounterMode has no formula for the CPU's SDPA kernel: tuitrain's count lacks the attention
there (--small: 0.90 x (b)). `mfu` is judged the same way, against (b) over the peak tuitrain's table
gives the device (tuitrain.core.flops.peak_tflops_of): the check that the peak is applied as the
table says.

Memory. tuitrain's `max_memory` (the CUDA peak since its last read, which resets it; the largest
logged value is the run's peak) against the hand-written loop's `torch.cuda.max_memory_allocated()`
over its run (reset once the model is on the device), same model, batch and precision, in the same
triple. Goal: within 10 % either way (0.90-1.10): the peak is activations and AdamW's state, which the
two share; tuitrain holds only a batch and a few scalars more, and a figure under 1 would mean a peak
missed between reads. On a CPU both are resident memory: reported, not judged.

`--json PATH`: device, torch, args, model (sizes, params, params_nonembedding, tokens_per_step,
flops_6nt, flops_palm), triples ([{order, hand, headless, dashboard}], each contender's raw figures:
per_step, loss, status, max_memory, seconds, tflops, mfu, tflops_6nt, tflops_palm, peak_tflops, screen,
error ...; or {order, skipped}), compile_pairs ([{order, hand, headless}], with graphs_compiled),
medians and ranges ({min, max, n}) of each ratio (headless_ratio, dashboard_ratio, tflops_vs_palm,
tflops_vs_6nt, mfu_vs_palm, max_memory_vs_torch, compile_ratio), peak_tflops, goals ({name: {value,
target, met}}; met None where not judged: on a CPU every figure, and whatever was not measured),
failures, seconds. Exit status 0 when
the script ran (goals not met are recorded, not an error), 1 when an uncompiled contender crashed or
timed out (a compiled one that fails, times out or finds no budget left is the `compile_trains` goal,
not a crash). Without CUDA and `--device cuda` it says so and exits 0 (the JSON says skipped). A
SIGTERM or Ctrl+C (run.sh's timeout) kills the running child's process group too: children run in
sessions of their own and would otherwise hold the GPU.

Time on the device (run.sh: --repeats 4 --steps 300 --warmup 50 --compile-pairs 1), estimated, not
measured: an uncompiled process is ~10-15 s (Python and torch imports 3-5 s, CUDA init ~1-2 s,
25,600 x 257 tokens <0.1 s, 350 steps of 10-20 ms 4-7 s; the dashboard's imports and app ~1-2 s more),
so 4 triples are ~120-180 s; a compiled process adds 30-90 s of compiling (the second of the pair finds
the first's inductor cache), so the pair is ~60-120 s: ~180-300 s in all. `--budget` (default 270 s;
run.sh's timeout must exceed it) keeps it within: a child's timeout is what is left of the budget (at
most CHILD_TIMEOUT), and a triple, compile pair or second compiled child that would not fit (the
longest child of its kind so far, or FIRST_GUESS) is skipped and recorded as such. The triples go
first, each admitted only if the compile pairs still fit after it (FIRST_GUESS: 2 x 60 s for one
pair): a 4th triple gives way to the compile pair when the triples run slow (over ~35 s each).
`--device cpu --small --warmup 1` (run.sh --cpu: one triple of 1 + 20 steps of a 2-layer GPT 32 wide
with a context of 16, no compile pair) costs ~18 CPU seconds on a 2-core CPU, mostly three imports of
torch and torch._dynamo (~5 s each).

`--fork` (a CPU only; run.sh --cpu, issue 53): each contender is not a fresh Python but forked from this
one once it has imported torch, torch._dynamo and tuitrain's Learner (one import, not three): the child
runs the same function a fresh contender runs (`child_main`, in its own session, its output to a pipe or
to the pseudo-terminal as before). Before it imports torch the parent takes what a fresh contender
starts with (`fork_parent`: child_env's variables, glibc's malloc thresholds, one torch thread). run.sh
--cpu runs this script itself forked (benchmarks/gpu/collect.py), from a Python that imported torch already.
Not on CUDA: a CUDA context cannot cross a fork, and each contender's is its own there.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import pty
import re
import select
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from importlib.metadata import version
from pathlib import Path
from typing import NoReturn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_dashboard import allocator_env  # noqa: E402
from tuitrain.core import heap  # noqa: E402

SIZES = {
    "nanogpt": dict(layers=6, heads=6, width=384, context=256, vocab=65, batch=64, n=64 * 400),
    # the script's check on a CPU (run.sh --cpu): bf16 there is slow (70 ms a step at width 64, context 32)
    "small": dict(layers=2, heads=2, width=32, context=16, vocab=65, batch=8, n=8 * 60),
}
LOG_EVERY = 10  # tuitrain's log_every_n_steps; the hand-written loop's loss.item() cadence
TRIPLE = ("hand", "headless", "dashboard")
COLS, ROWS = 120, 40  # the pseudo-terminal's size
ALT_SCREEN = b"\x1b[?1049h"  # what a full-screen app (Textual) writes to take the alternate screen
CHILD_TIMEOUT = {"plain": 180, "compiled": 240}  # seconds, at most, for one child
FIRST_GUESS = {"plain": 30, "compiled": 60}  # seconds one child takes, before one has run
TARGETS = {
    "headless_ratio": "<= 1.02",
    "dashboard_ratio": "<= 1.05",
    "tflops_vs_independent": "0.90-1.10",
    "mfu_vs_independent": "0.90-1.10",
    "max_memory_vs_torch": "0.90-1.10",
    "compile_ratio": "<= 1.02",
    "compile_trains": "completed, finite loss, >= 1 graph compiled",
}


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


def model_counts(size: dict, model) -> dict:
    """Parameters, tokens per step and the two independent FLOP counts of a step (module docstring)."""
    n = sum(p.numel() for p in model.parameters())
    n_ne = n - model.tok.weight.numel() - model.pos.weight.numel()  # lookups: no FLOPs
    tokens = size["batch"] * size["context"]
    attention = 12 * size["layers"] * size["width"] * size["context"] * tokens
    return {
        "params": n,
        "params_nonembedding": n_ne,
        "tokens_per_step": tokens,
        "flops_6nt": 6 * n * tokens,
        "flops_palm": 6 * n_ne * tokens + attention,
    }


def child(spec: dict) -> dict:
    """One contender's run (spec: which, size, device, steps, warmup, compile, trained): its figures."""
    import torch

    size = SIZES[spec["size"]]
    device, steps, warmup, compiled = spec["device"], spec["steps"], spec["warmup"], spec["compile"]
    total = warmup + steps
    cuda = device.startswith("cuda")
    model, loss_fn, data = build(size)
    out: dict = {
        "which": spec["which"],
        "compile": compiled,
        **model_counts(size, model),
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
    }
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    marks: dict[int, float] = {}
    done = 0  # optimizer steps

    def clock(optimizer, args, kwargs) -> None:  # every contender's clock (module docstring)
        nonlocal done
        done += 1
        if done in (warmup, total):
            if cuda:
                torch.cuda.synchronize(device)
            marks[done] = time.perf_counter()

    opt.register_step_post_hook(clock)
    if spec["which"] == "hand":
        from benchproj import WholeBatches, whole_batch

        model.to(device)
        net = torch.compile(model) if compiled else model
        loader = torch.utils.data.DataLoader(
            WholeBatches(data),
            batch_size=size["batch"],
            shuffle=True,
            collate_fn=whole_batch,
            generator=torch.Generator().manual_seed(0),
        )
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        step = 0
        while step < total:
            for x, y in loader:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16):
                    loss = loss_fn(net(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                step += 1
                if step % LOG_EVERY == 0:
                    loss.item()
                if step == total:
                    break
        out["status"], out["loss"] = "completed", loss.item()
        if cuda:
            out["max_memory"] = float(torch.cuda.max_memory_allocated(device))
        else:
            import resource

            out["max_memory"] = float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)  # peak RSS
    else:
        from tuitrain import Learner
        from tuitrain.core.events import MetricsLogged, RunFailed, RunFinished
        from tuitrain.core.flops import peak_tflops_of

        logged: list[tuple[int, str, dict]] = []
        trained = Path(spec["trained"]) if spec.get("trained") else None

        def collect(event, state) -> None:
            if isinstance(event, MetricsLogged) and event.split == "train":
                logged.append((event.step, event.scope, dict(event.metrics)))
            elif isinstance(event, (RunFinished, RunFailed)) and trained is not None:
                trained.touch()  # the parent may press q now

        collect.step_events = False  # the logged metrics only: the loop keeps its fast path
        peak = peak_tflops_of(torch.cuda.get_device_name(device)) if cuda else None
        out["peak_tflops"] = peak
        if compiled:
            model.compile()  # in place, as `[train] compile = true` does (tuitrain/run/build.py)
        metrics = ["loss", "max_memory", "tflops"] + (["mfu"] if peak else [])
        learner = Learner(
            model,
            opt,
            loss_fn=loss_fn,
            train_metrics=metrics,
            valid_metrics=(),
            epochs=10**6,
            max_steps=total,
            batch_size=size["batch"],
            precision="bf16-mixed",
            device=device,
            log_every_n_steps=LOG_EVERY,
            seed=0,
            callbacks=[collect],
        )
        result = learner.fit(data, None, dashboard=spec["which"] == "dashboard")
        out["status"] = result.status
        if result.error:
            out["error"] = result.error
        windows = [
            m
            for s, scope, m in logged  # the whole windows of LOG_EVERY steps inside the timed stretch
            if scope == "step" and s % LOG_EVERY == 0 and warmup <= s - LOG_EVERY and s <= total
        ]
        for name in ("tflops", "mfu"):  # the harmonic mean of equal-step windows: FLOPs over the stretch's time
            vals = [m[name] for m in windows if m.get(name)]
            out[name] = len(vals) / sum(1 / v for v in vals) if vals else None
        losses = [m["loss"] for s, scope, m in logged if scope == "step" and "loss" in m]
        out["loss"] = losses[-1] if losses else None
        memory = [m["max_memory"] for _, _, m in logged if "max_memory" in m]
        out["max_memory"] = max(memory) if memory else None
    if compiled:  # what dynamo compiled: a model called first under a dispatch mode may run eager for good
        from torch._dynamo.utils import counters

        out["graphs_compiled"] = counters["stats"]["unique_graphs"]
    if len(marks) == 2:
        out["per_step"] = (marks[total] - marks[warmup]) / steps
    else:
        out.setdefault("error", f"the clock saw {done} optimizer steps of {total}")
    return out


def child_main(spec: dict) -> int:
    """A contender's process (`--child SPEC`, or forked with `--fork`): `child(spec)`'s figures, or why it
    failed, into spec["out"]; its exit status."""
    try:
        res, code = child(spec), 0
    except Exception:  # whatever failed, the parent reads why
        res, code = {"which": spec["which"], "compile": spec["compile"], "error": traceback.format_exc()}, 1
    Path(spec["out"]).write_text(json.dumps(res))
    return code


def forked_child(spec: dict, env: dict) -> NoReturn:
    """In a child forked from this script (`--fork`): what `python bench_gpu.py --child SPEC` does, with
    `env` as its environment and the signals as a fresh Python has them; never returns to the parent's code
    (its temporary folder and handlers stay the parent's)."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [__file__, "--child", json.dumps(spec)]
        code = child_main(spec)
    except BaseException:
        traceback.print_exc()
    finally:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        os._exit(code)


def fork_parent(env: dict) -> None:
    """`--fork`: this process made what a fresh contender starts as, before it forks them: `env` (child_env's)
    its environment, glibc's malloc thresholds raised as `env`'s variables raise them at a process's start
    (tuitrain.core.heap's values, allocator_env's), the checkout on sys.path as `env`'s PYTHONPATH puts it,
    torch's threads as `env` says; then what every contender imports, imported once (torch, torch._dynamo:
    the first torch.optim.Optimizer imports it, tuitrain's Learner). No torch op runs here: no thread pool
    is started that a fork would leave behind."""
    if all(os.environ.get(k) == env.get(k) for k in heap.USER_KNOBS):
        pass  # this process started with them: glibc read them then
    elif not heap.keep_freed_memory():  # mallopt, as the variables would have: before they are set below
        print("--fork: glibc's thresholds not raised here (a malloc knob set, or no glibc)", flush=True)
    os.environ.clear()
    os.environ.update(env)
    sys.path.insert(1, str(HERE.parent))
    import torch

    if "OMP_NUM_THREADS" in env:
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    import torch._dynamo  # noqa: F401

    import benchproj  # noqa: F401
    from tuitrain import Learner  # noqa: F401
    from tuitrain.core import events, flops  # noqa: F401

    gc.collect()
    gc.freeze()  # never garbage: left out of the forked contenders' collections, and of their ends'


def child_env(device: str) -> dict:
    """The children's environment: this checkout and benchmarks/ importable (before what PYTHONPATH held:
    run.sh's wheels), malloc as bench_dashboard's runs, a terminal type for the dashboard (its image
    probe off: nothing would answer it), and on a CPU one torch thread (the cores are the dashboard's
    and the machine's too)."""
    e = allocator_env(dict(os.environ))
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), str(HERE), e.get("PYTHONPATH")]))
    e.update(TERM="xterm-256color", COLUMNS=str(COLS), LINES=str(ROWS), TUITRAIN_GRAPHICS="0")
    if not device.startswith("cuda"):
        e.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return e


LIVE: set[int] = set()  # the children running now (each leads its own session): killed with this script


def kill_live(signum, frame) -> None:
    """SIGTERM (run.sh's `timeout`) or Ctrl+C: the children, in their own sessions, would outlive this
    script and hold the GPU; their process groups go with it."""
    for pid in list(LIVE):
        kill_group(pid)
    sys.exit(128 + signum)


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # the child and what it started (inductor's compile workers)
    except ProcessLookupError:
        pass


def in_terminal(
    cmd: list[str], env: dict, trained: Path, timeout: float, fork: dict | None = None
) -> tuple[int | None, str, dict]:
    """Runs `cmd` in a pseudo-terminal of COLS x ROWS, draining its output as a terminal would; once
    `trained` exists presses q, then y, q, ... every 2 s until it exits. (Its exit status, None when
    killed at `timeout`; the screen's last characters, escape sequences removed; {"bytes": drained,
    "alternate_screen": whether it switched to the alternate screen, as a full-screen app does}.)
    With `fork` (a spec: `--fork`) the child runs `forked_child(fork, env)` in place of exec'ing `cmd`."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid, fd = pty.fork()
    if pid == 0:  # the child: its own session, the terminal's slave side as stdin, stdout and stderr
        import fcntl
        import termios

        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
            if fork is not None:
                forked_child(fork, env)
            os.execvpe(cmd[0], cmd, env)
        finally:
            os._exit(127)
    LIVE.add(pid)
    deadline = time.monotonic() + timeout
    screen = b""
    drawn = {"bytes": 0, "alternate_screen": False}
    pressed, keys = None, 0
    status = None
    try:
        while True:
            if select.select([fd], [], [], 0.05)[0]:
                try:
                    data = os.read(fd, 65536)
                except OSError:  # EIO: the child's side is closed; it is exiting
                    data = b""
                    time.sleep(0.05)
                drawn["bytes"] += len(data)
                drawn["alternate_screen"] |= ALT_SCREEN in screen[-8:] + data
                screen = (screen + data)[-4096:]
            ended, st = os.waitpid(pid, os.WNOHANG)
            if ended:
                status = os.waitstatus_to_exitcode(st)
                break
            now = time.monotonic()
            if now > deadline:
                kill_group(pid)
                os.waitpid(pid, 0)
                break
            if pressed is None and trained.exists():
                pressed = now - 1.7  # the first key 0.3 s after the mark
            if pressed is not None and now - pressed >= 2.0:
                os.write(fd, b"qy"[keys % 2 : keys % 2 + 1])
                pressed, keys = now, keys + 1
    finally:
        os.close(fd)
        LIVE.discard(pid)
    text = re.sub(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-_])", "", screen.decode(errors="replace"))
    return status, text[-1500:], drawn


def in_pipe(spec: dict, env: dict, timeout: float) -> tuple[int | None, str]:
    """`--fork`'s headless and hand-written contenders: `forked_child(spec, env)` in a child forked in a
    session of its own, its stdout and stderr into a pipe, as `subprocess.Popen(..., start_new_session=True,
    stdout=PIPE, stderr=STDOUT)` runs a fresh one. (Its exit status, None when killed at `timeout`; its
    output.)"""
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.close(r)
            os.dup2(w, 1)
            os.dup2(w, 2)
            os.close(w)
            forked_child(spec, env)
        finally:
            os._exit(127)
    os.close(w)
    LIVE.add(pid)
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    status = None
    try:
        while True:  # drain until the child closes its end (it exits), or the deadline
            left = deadline - time.monotonic()
            if left <= 0:
                kill_group(pid)
                break
            if select.select([r], [], [], min(left, 1.0))[0]:
                data = os.read(r, 65536)
                if not data:
                    break
                chunks.append(data)
        _, st = os.waitpid(pid, 0)
        if left > 0:
            status = os.waitstatus_to_exitcode(st)
    finally:
        os.close(r)
        LIVE.discard(pid)
    return status, b"".join(chunks).decode(errors="replace")


def run_child(spec: dict, env: dict, tmp: Path, timeout: float, fork: bool = False) -> dict:
    """One child process for `spec` (forked from this one with `fork`, else a fresh Python); its figures,
    with `seconds`, and `error` when it did not complete."""
    here = Path(tempfile.mkdtemp(dir=tmp))
    out, trained = here / "result.json", here / "trained"
    spec = dict(spec, out=str(out), trained=str(trained) if spec["which"] == "dashboard" else "")
    cmd = [sys.executable, __file__, "--child", json.dumps(spec)]
    t0 = time.perf_counter()
    drawn = None
    if spec["which"] == "dashboard":
        rc, tail, drawn = in_terminal(cmd, env, trained, timeout, spec if fork else None)
    elif fork:
        rc, tail = in_pipe(spec, env, timeout)
    else:
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        LIVE.add(proc.pid)
        try:
            tail = proc.communicate(timeout=timeout)[0]
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            tail, rc = proc.communicate()[0], None
        finally:
            LIVE.discard(proc.pid)
    res = json.loads(out.read_text()) if out.exists() else {"which": spec["which"], "compile": spec["compile"]}
    res["seconds"] = round(time.perf_counter() - t0, 1)
    if drawn is not None:
        res["screen"] = drawn
        if not drawn["alternate_screen"]:  # fit(dashboard=True) trained without a dashboard on the screen
            res.setdefault("error", f"the dashboard never took the screen: {tail.strip()[-1500:]}")
    if rc is None:
        res["error"] = f"timed out after {timeout:.0f} s"
        res["timed_out"] = True
    elif rc != 0 or res.get("status") != "completed" or "per_step" not in res:
        res.setdefault("error", f"exit status {rc}, status {res.get('status')}: {tail.strip()[-1500:]}")
    if res.get("loss") is not None and not math.isfinite(res["loss"]):
        res.setdefault("error", f"loss {res['loss']}")
    return res


def ratio(a: dict, b: dict, key: str) -> float | None:
    return a[key] / b[key] if a.get(key) and b.get(key) and "error" not in a and "error" not in b else None


def independent(res: dict) -> None:
    """The two independent TFLOP/s figures of a tuitrain child over its own time per step (in place)."""
    if res.get("per_step"):
        res["tflops_6nt"] = res["flops_6nt"] / res["per_step"] / 1e12
        res["tflops_palm"] = res["flops_palm"] / res["per_step"] / 1e12


def brief(error: str, n: int = 300) -> str:
    """An error in a line or a few: a traceback's end (the exception), another message's start."""
    error = error.strip()
    return ("..." + error[-n:] if len(error) > n else error) if error.startswith("Traceback") else error[:n]


def fmt(x: float | None, f: str = ".3f") -> str:
    return "n/a" if x is None else format(x, f)


def summarize(report: dict, cuda: bool) -> None:
    """The medians, ranges and goals of `report` (in place)."""
    triples = [t for t in report["triples"] if "skipped" not in t]
    pairs = [p for p in report["compile_pairs"] if "skipped" not in p]
    heads = [t["headless"] for t in triples if "error" not in t["headless"]]
    peak = next((h["peak_tflops"] for h in heads if h.get("peak_tflops")), None)
    mfu_palm = [h["mfu"] / (h["tflops_palm"] / peak * 100) for h in heads if h.get("mfu") and peak]
    figures = {
        "headless_ratio": [r for t in triples if (r := ratio(t["headless"], t["hand"], "per_step"))],
        "dashboard_ratio": [r for t in triples if (r := ratio(t["dashboard"], t["hand"], "per_step"))],
        "tflops_vs_palm": [h["tflops"] / h["tflops_palm"] for h in heads if h.get("tflops")],
        "tflops_vs_6nt": [h["tflops"] / h["tflops_6nt"] for h in heads if h.get("tflops")],
        "mfu_vs_palm": mfu_palm,
        "max_memory_vs_torch": [r for t in triples if (r := ratio(t["headless"], t["hand"], "max_memory"))],
        "compile_ratio": [r for p in pairs if (r := ratio(p["headless"], p["hand"], "per_step"))],
    }
    medians = report["medians"] = {k: statistics.median(xs) if xs else None for k, xs in figures.items()}
    report["ranges"] = {k: {"min": min(xs), "max": max(xs), "n": len(xs)} if xs else None for k, xs in figures.items()}
    report["peak_tflops"] = peak
    value = {
        "headless_ratio": "headless_ratio",
        "dashboard_ratio": "dashboard_ratio",
        "tflops_vs_independent": "tflops_vs_palm",
        "mfu_vs_independent": "mfu_vs_palm",
        "max_memory_vs_torch": "max_memory_vs_torch",
        "compile_ratio": "compile_ratio",
    }
    goals = {}
    for name, key in value.items():
        x = medians[key]
        target = TARGETS[name]
        if x is None or not cuda:
            met = None
        elif target.startswith("<="):
            met = x <= float(target[2:])
        else:
            lo, hi = map(float, target.split("-"))
            met = lo <= x <= hi
        goals[name] = {"value": x, "target": target, "met": met}
    compiled = [p["headless"] for p in pairs]
    said = [
        brief(r["error"])
        if "error" in r
        else f"completed, loss {fmt(r['loss'], '.4g')}, {r['graphs_compiled']} graphs compiled"
        for r in compiled
    ]
    goals["compile_trains"] = {
        "value": said or None,
        "target": TARGETS["compile_trains"],
        "met": all("error" not in r and r["graphs_compiled"] for r in compiled) if compiled else None,
    }
    report["goals"] = goals


def gib(x: float | None) -> str:
    return fmt(x / 2**30 if x is not None else None)


def line(name: str, r: dict) -> str:
    if "error" in r:
        return f"{name} FAILED ({r['seconds']} s): {brief(r['error'])}"
    graphs = f", {r['graphs_compiled']} graphs compiled" if "graphs_compiled" in r else ""
    return f"{name} {r['per_step'] * 1e3:.2f} ms/step ({r['seconds']} s{graphs})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--repeats", type=int, help="triples (hand, headless, dashboard; rotating order); default 4, --small 1"
    )
    p.add_argument(
        "--steps",
        type=int,
        help="timed steps after the warm-up (at least 20: one whole logged "
        "window of tuitrain's inside); default 300, --small 20",
    )
    p.add_argument("--warmup", type=int, help="steps before the clock starts (at least 1); default 50, --small 10")
    p.add_argument(
        "--compile-pairs", type=int, help="pairs with torch.compile (0: none); default 1 on CUDA, 0 on a CPU"
    )
    p.add_argument("--budget", type=float, default=270.0, help="seconds for the whole script (module docstring)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--small", action="store_true", help="a tiny GPT (checks the script; no figure)")
    p.add_argument("--json", type=Path, help="write every figure and the goals here")
    p.add_argument(
        "--fork",
        action="store_true",
        help="a CPU only: the contenders forked from this process once it has imported torch, not fresh "
        "Pythons (a check of the script: no figure)",
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return child_main(json.loads(a.child))
    cuda = a.device.startswith("cuda")
    if a.fork and cuda:
        p.error("--fork is for a CPU only: on CUDA every contender is a fresh process (its own CUDA context)")
    signal.signal(signal.SIGTERM, kill_live)
    signal.signal(signal.SIGINT, kill_live)
    a.repeats = a.repeats if a.repeats is not None else (1 if a.small else 4)
    a.steps = a.steps if a.steps is not None else (20 if a.small else 300)
    a.warmup = a.warmup if a.warmup is not None else (10 if a.small else 50)
    a.compile_pairs = a.compile_pairs if a.compile_pairs is not None else (1 if cuda else 0)
    if a.steps < 2 * LOG_EVERY:
        p.error(
            f"--steps must be at least {2 * LOG_EVERY}: tuitrain's tflops needs a whole logged window "
            f"(every {LOG_EVERY} steps) inside the timed steps"
        )
    if a.warmup < 1 or a.repeats < 0 or a.compile_pairs < 0:
        p.error("--warmup must be at least 1, --repeats and --compile-pairs at least 0")
    size = "small" if a.small else "nanogpt"
    report: dict = {
        "device": a.device,
        "torch": version("torch"),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items() if k != "child"},
        "model": dict(SIZES[size], size=size),
        "triples": [],
        "compile_pairs": [],
    }
    if cuda:
        import torch  # no CUDA context here (the children's name the device): is_available does not make one

        if not torch.cuda.is_available():
            print("no CUDA device here: nothing measured (run on a machine with a GPU, or --device cpu)")
            report["skipped"] = "no CUDA device"
            summarize(report, cuda=False)
            if a.json:
                a.json.write_text(json.dumps(report, indent=1))
            return 0
    print(
        f"torch {report['torch']}, {a.device}; {size} GPT, {a.repeats} triples of {a.warmup} + {a.steps} "
        f"steps, {a.compile_pairs} compile pairs, budget {a.budget:.0f} s",
        flush=True,
    )
    env = child_env(a.device)
    if a.fork:
        fork_parent(env)
    t_start = time.monotonic()
    took = {"plain": [], "compiled": []}  # seconds each child took, by kind

    def expect(kind: str) -> float:
        return max(took[kind], default=FIRST_GUESS[kind])

    def fits(kind: str, children: int, reserve: float = 0.0) -> bool:
        """Whether `children` more children of `kind` fit what is left of the budget, less `reserve` seconds."""
        return a.budget - (time.monotonic() - t_start) - reserve >= children * expect(kind)

    def timeout(kind: str) -> float:
        """A child's timeout: what is left of the budget (a few seconds at least), at most CHILD_TIMEOUT."""
        return min(CHILD_TIMEOUT[kind], max(5.0, a.budget - (time.monotonic() - t_start)))

    base = {"size": size, "device": a.device, "steps": a.steps, "warmup": a.warmup}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.repeats):
            order = TRIPLE[r % 3 :] + TRIPLE[: r % 3]
            triple: dict = {"order": list(order)}
            report["triples"].append(triple)
            if not fits("plain", 3, reserve=2 * a.compile_pairs * expect("compiled")):  # room for them too
                triple["skipped"] = "budget"
                print(f"triple {r + 1}: skipped (the budget)", flush=True)
                continue
            for which in order:
                res = run_child(dict(base, which=which, compile=False), env, Path(tmp), timeout("plain"), a.fork)
                took["plain"].append(res["seconds"])
                if which != "hand":
                    independent(res)
                triple[which] = res
            h = triple["hand"]
            parts = [line(w, triple[w]) for w in order]
            for w in ("headless", "dashboard"):
                if (x := ratio(triple[w], h, "per_step")) is not None:
                    parts.append(f"{w}/hand {x:.3f}")
            print(f"triple {r + 1}: " + "; ".join(parts), flush=True)
            t = triple["headless"]
            if "error" not in t:
                print(
                    f"  headless on {t['device_name']}: tflops {fmt(t['tflops'], '.4g')} (6NT "
                    f"{fmt(t.get('tflops_6nt'), '.4g')}, PaLM {fmt(t.get('tflops_palm'), '.4g')}), mfu "
                    f"{fmt(t['mfu'], '.2f')} %, max_memory {gib(t['max_memory'])} GiB (hand-written "
                    f"{gib(h.get('max_memory'))} GiB{'' if cuda else ', resident memory'}), loss "
                    f"{fmt(t['loss'], '.4f')}",
                    flush=True,
                )
        for r in range(a.compile_pairs):
            order = ("hand", "headless") if r % 2 == 0 else ("headless", "hand")
            pair: dict = {"order": list(order)}
            report["compile_pairs"].append(pair)
            if not fits("compiled", 2):
                pair["skipped"] = "budget"
                print(f"compile pair {r + 1}: skipped (the budget)", flush=True)
                continue
            for which in order:
                if which == order[1] and not fits("compiled", 1):  # the first compile ran long
                    pair[which] = {"which": which, "compile": True, "error": "not run: the budget"}
                    continue
                res = run_child(dict(base, which=which, compile=True), env, Path(tmp), timeout("compiled"), a.fork)
                took["compiled"].append(res["seconds"])
                if which != "hand":
                    independent(res)
                pair[which] = res
            x = ratio(pair["headless"], pair["hand"], "per_step")
            print(
                f"compile pair {r + 1}: "
                + "; ".join(line(w, pair[w]) for w in order)
                + (f"; headless/hand {x:.3f}" if x is not None else ""),
                flush=True,
            )
    first = next(
        (
            c
            for t in report["triples"] + report["compile_pairs"]
            for c in t.values()
            if isinstance(c, dict) and "params" in c
        ),
        None,
    )
    if first:
        report["device"] = first["device_name"]  # the GPU's name
        report["model"].update(
            {k: first[k] for k in ("params", "params_nonembedding", "tokens_per_step", "flops_6nt", "flops_palm")}
        )
    summarize(report, cuda)
    crashed = [
        f"{'compile ' if c['compile'] else ''}{c['which']}: {brief(c['error'])}"
        for t in report["triples"] + report["compile_pairs"]
        for c in t.values()
        if isinstance(c, dict) and "error" in c and not c["compile"]
    ]
    report["failures"] = crashed
    report["seconds"] = round(time.monotonic() - t_start, 1)
    if a.json:
        a.json.write_text(json.dumps(report, indent=1))
    print(f"\n{report['seconds']} s; medians (min-max) over triples{'' if cuda else ' (a CPU: no figure, not judged)'}")
    for key, what in (
        ("headless_ratio", "headless / hand-written, time per step"),
        ("dashboard_ratio", "dashboard / hand-written, time per step"),
        ("tflops_vs_palm", "tflops / PaLM count 6·N_ne·T + 12·L·W·ctx·T (the goal's)"),
        ("tflops_vs_6nt", "tflops / 6·N·T (leaves attention out)"),
        ("mfu_vs_palm", f"mfu / PaLM count over the peak ({fmt(report['peak_tflops'], '.0f')} TFLOP/s)"),
        (
            "max_memory_vs_torch",
            "max_memory / torch.cuda.max_memory_allocated" + ("" if cuda else " (here resident memory)"),
        ),
        ("compile_ratio", "compiled: headless / hand-written"),
    ):
        m, v = report["medians"][key], report["ranges"][key]
        print(f"  {what}: " + (f"{m:.3f} ({v['min']:.3f}-{v['max']:.3f}), n={v['n']}" if v else "n/a"))
    print("goals (value: median; met, NOT met, or - where not judged):")
    for k, g in report["goals"].items():
        v = g["value"]
        print(
            f"  {k} {g['target']}: {fmt(v) if not isinstance(v, list) and v is not None else v or 'n/a'}: "
            f"{'-' if g['met'] is None else 'met' if g['met'] else 'NOT met'}"
        )
    for c in crashed:
        print(f"FAILED {c}")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())

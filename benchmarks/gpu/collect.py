"""run.sh --cpu's side-by-side steps (issue 53): each `NAME ARGS...` group is `python -m pytest ARGS` (run.sh
gives `--collect-only -m cuda tests/cuda` and `--collect-only -m device <files>`), a pytest session of its
own in a process of its own, forked from this one once it has imported pytest, its plugins (the snapshot
plugin imports textual), torch, torch._dynamo (the first torch.optim.Optimizer imports it) and
hypothesis: what two fresh `python -m pytest` of these files each spent importing (~4-5 CPU seconds)
is spent once. A group whose ARGS start with a `.py` file is `python SCRIPT ARGS...` instead (run.sh's
`checks`, benchmarks/gpu/checks.py, and `bench-gpu`, benchmarks/bench_gpu.py --fork), run as `python` runs
a script (as `__main__`, its folder first on sys.path, sys.argv its own), and one whose ARGS start with
`-c` is `python -c CODE ARGS...` (run.sh's `imports`), each forked likewise: their torch imports are spent
once too. The groups run side by side.

What a child collects is what `python -m pytest ARGS` collects from the same working directory: the same
arguments, the working directory first on sys.path (as `-m` puts it), a pytest session of its own that
loads its plugins and the conftest files; the test files are imported in the child. Its output is what
the fresh command prints (the one warning the early imports would add is filtered: see main). Each
child's output goes to DIR/NAME.log and "EXIT_STATUS MILLISECONDS" (since this script started) to
DIR/NAME.rc, what run.sh's step_bg writes for a step, so that wait_steps logs and records each as a step
of its own. Exits 1 if any group failed.

    python benchmarks/gpu/collect.py DIR NAME ARGS... [::: NAME ARGS...]   # pytest ARGS, SCRIPT.py ..., -c CODE
"""

from __future__ import annotations

import gc
import os
import runpy
import sys
import time

ALREADY = "Module already imported so cannot be rewritten; "  # pytest's PytestAssertRewriteWarning


def groups(argv: list[str]) -> list[tuple[str, list[str]]]:
    """`NAME ARGS... ::: NAME ARGS...` -> [(NAME, ARGS), ...]."""
    out: list[tuple[str, list[str]]] = []
    group: list[str] = []
    for a in [*argv, ":::"]:
        if a != ":::":
            group.append(a)
        elif group:
            out.append((group[0], group[1:]))
            group = []
    return out


def main(argv: list[str]) -> int:
    t0 = time.monotonic_ns()  # each step's time counts the imports it shares
    out, todo = argv[0], groups(argv[1:])
    sys.path[0] = os.getcwd()  # as `python -m pytest`: the working directory, not this script's folder
    from importlib import import_module
    from importlib.metadata import entry_points

    import pytest

    before = {name.partition(".")[0] for name in sys.modules}
    for plugin in entry_points(group="pytest11"):  # what every pytest session loads at its start
        try:
            plugin.load()
        except Exception:  # the child's session says so, as a fresh pytest would
            pass
    # what the test files import: torch (torch._dynamo: the first torch.optim.Optimizer), hypothesis
    for name in ("torch", "torch._dynamo", "hypothesis"):
        try:
            import_module(name)
        except ImportError:  # the child's collection says so
            pass
    # pytest rewrites the asserts of its plugins' modules as it imports them, and warns of those imported
    # already (PytestAssertRewriteWarning): these were, by this process, on purpose; a collection runs none
    # of their asserts. The warning stays for any other module (pytest matches a -W message's start).
    preloaded = sorted({name.partition(".")[0] for name in sys.modules} - before)
    quiet = [f"-Wignore:{ALREADY}{name}:pytest.PytestAssertRewriteWarning" for name in preloaded]
    # what these imports made is never garbage: frozen, it is left out of the children's collections (their
    # interpreters' ends above all: ~0.7 CPU s each walking torch's objects otherwise)
    gc.collect()
    gc.freeze()
    running: dict[int, str] = {}
    for name, args in todo:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: its output to its log, then pytest as `python -m pytest` runs it
            fd = os.open(os.path.join(out, f"{name}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
            if args and args[0] == "-c":  # `python -c CODE`
                sys.argv = ["-c", *args[2:]]
                sys.path[0] = ""
                exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
                raise SystemExit(0)  # the code ended without sys.exit: as python, status 0
            if args and args[0].endswith(".py"):  # `python SCRIPT ARGS...`
                sys.argv = list(args)
                sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
                runpy.run_path(args[0], run_name="__main__")
                raise SystemExit(0)
            sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py"), *quiet, *args]
            raise SystemExit(pytest.console_main())  # pytest/__main__.py's one line
        running[pid] = name
    failed = 0
    while running:
        pid, status = os.wait()
        name = running.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        ms = (time.monotonic_ns() - t0) // 1_000_000
        with open(os.path.join(out, f"{name}.rc"), "w") as f:
            f.write(f"{code} {ms}\n")
        failed |= code != 0
    return int(failed)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

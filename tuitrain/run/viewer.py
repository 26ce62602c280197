"""`Viewer`: a `Monitor`'s dashboard, `tuitrain watch RUN_DIR --owned` in a process of its own on this
terminal, while the user's loop runs in theirs.

While it is up, this process's own output goes to RUN_DIR/output.log, so that nothing the loop or a library
prints tears the screen. The window fails alone: a viewer that ends with an error while the run goes on
gives the terminal back (`failed` and `give_back`), and the Monitor prints the headless lines from then on.
Must not import textual.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


class Viewer:
    def __init__(self, run_dir: Path, theme: str | os.PathLike | None = None) -> None:
        self.run_dir, self.theme = Path(run_dir), theme
        self.process: subprocess.Popen | None = None
        self._saved: tuple[int, int] | None = None  # this process's stdout and stderr, while the screen is up

    def open(self) -> Viewer:
        cmd = [sys.executable, "-m", "tuitrain", "watch", str(self.run_dir), "--owned"]
        if self.theme:
            cmd += ["--theme", str(self.theme)]
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = (os.dup(1), os.dup(2))
        self.process = subprocess.Popen(cmd, stdin=sys.stdin, stdout=self._saved[0], stderr=self._saved[1])
        raw = os.open(self.run_dir / "output.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(raw, 1)
        os.dup2(raw, 2)
        os.close(raw)
        return self

    @property
    def failed(self) -> bool:
        """The screen ended with an error (its one line is on the terminal) while the terminal is still
        this process's to give back."""
        code = self.process.poll() if self.process is not None else None
        return self._saved is not None and code is not None and code not in (0, 130)

    def give_back(self) -> None:
        """This process's stdout and stderr on the terminal again."""
        if self._saved is None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)
        for fd in self._saved:
            os.close(fd)
        self._saved = None

    def close(self) -> None:
        """The run has ended: wait for the user to leave the dashboard's summary, then the terminal back."""
        if self.process is None:
            return
        try:
            self.process.wait()
        except KeyboardInterrupt:
            self.process.terminate()
        finally:
            self.give_back()
            self.process = None

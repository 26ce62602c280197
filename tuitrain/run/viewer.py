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

from tuitrain.run.redirect import Redirect


class Viewer:
    def __init__(self, run_dir: Path, theme: str | os.PathLike | None = None) -> None:
        self.run_dir, self.theme = Path(run_dir), theme
        self.process: subprocess.Popen | None = None
        self._output = Redirect()  # this process's stdout and stderr, while the screen is up

    def open(self) -> Viewer:
        cmd = [sys.executable, "-m", "tuitrain", "watch", str(self.run_dir), "--owned"]
        if self.theme:
            cmd += ["--theme", str(self.theme)]
        terminal = self._output.to(self.run_dir / "output.log").saved
        assert terminal is not None
        try:
            self.process = subprocess.Popen(cmd, stdin=sys.stdin, stdout=terminal[0], stderr=terminal[1])
        except BaseException:
            self._output.back()
            raise
        return self

    @property
    def failed(self) -> bool:
        """The screen ended with an error (its one line is on the terminal) while the terminal is still
        this process's to give back."""
        code = self.process.poll() if self.process is not None else None
        return self._output.saved is not None and code is not None and code not in (0, 130)

    def give_back(self) -> None:
        """This process's stdout and stderr on the terminal again."""
        self._output.back()

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

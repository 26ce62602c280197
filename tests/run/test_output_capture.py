"""What a user's code says through `logging` and `warnings` during a run reaches the event stream and
experiment.log, as its prints do (core/output.py's capture, entered by the run)."""

from __future__ import annotations

import json

LOUD = """
import logging
import warnings

from tinyproj import Net

log = logging.getLogger("loudproj")


class Loud(Net):
    def forward(self, x):
        if self.training and self.train_calls == 2:
            log.info("loudproj info at call %d", self.train_calls + 1)
            log.warning("loudproj warning through logging")
            warnings.warn("loudproj deprecated on purpose", DeprecationWarning)
        return super().forward(x)
"""


def test_logging_and_warnings_of_the_user_s_code_reach_the_events_and_experiment_log(tiny):
    (tiny.root / "loudproj.py").write_text(LOUD)
    run = tiny.root / "run"
    r = tiny.cli(
        "run",
        tiny.config,
        "--headless",
        "--run-dir",
        run,
        "--set",
        "model.target=loudproj:Loud",
        "--set",
        "train.epochs=1",
        "--set",
        "model.dropout=0.0",
    )
    assert r.returncode == 0, r.stderr + r.stdout
    printed = [(e["stream"], e["text"]) for e in tiny.read_events(run) if e["event"] == "OutputPrinted"]
    # logging: INFO too (an unconfigured root logger would drop it), with level and logger name
    assert ("log", "INFO loudproj: loudproj info at call 3") in printed
    assert ("log", "WARNING loudproj: loudproj warning through logging") in printed
    # warnings: shown once, even a DeprecationWarning (hidden by default outside __main__), on stderr
    shown = [t for s, t in printed if "loudproj deprecated on purpose" in t]
    assert len(shown) == 1 and [s for s, t in printed if t == shown[0]] == ["stderr"]
    assert "DeprecationWarning" in shown[0] and "loudproj.py" in shown[0]
    log = (run / "experiment.log").read_text()
    assert "[log] INFO loudproj: loudproj info at call 3" in log
    assert "[log] WARNING loudproj: loudproj warning through logging" in log
    assert "DeprecationWarning: loudproj deprecated on purpose" in log
    assert json.loads((run / "run.json").read_text())["status"] == "completed"

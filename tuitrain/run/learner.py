"""`tuitrain.Learner`: the core Learner as a script uses it, writing a run directory's standard files.

The core's Learner (tuitrain/core/learner.py) writes nothing by itself: whoever builds it passes the
sinks in. Given `run_dir` and no `bus`, this one passes the files every run directory gets
(events.jsonl, metric files, experiment.log, run.json), as `tuitrain run` does. Must not import textual.
"""

from __future__ import annotations

import functools
from pathlib import Path

from tuitrain.core.learner import Learner as CoreLearner
from tuitrain.sinks.standard import standard_sinks


class Learner(CoreLearner):
    __doc__ = CoreLearner.__doc__

    @functools.wraps(CoreLearner.__init__)  # help() and IDEs show the core's keyword arguments
    def __init__(self, *args, run_dir=None, bus=None, sinks=None, **kwargs) -> None:
        if sinks is None:
            sinks = []
            if run_dir is not None and bus is None:  # a bus given by the caller already has its sinks
                Path(run_dir).mkdir(parents=True, exist_ok=True)
                sinks = standard_sinks(run_dir)
        super().__init__(*args, run_dir=run_dir, bus=bus, sinks=sinks, **kwargs)

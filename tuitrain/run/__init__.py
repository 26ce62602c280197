"""A run: from a config (or a script) to a run directory with a trained model.

- runner.py: `prepare_run` (every check that can fail, before anything is written) and `Run`
  (the run directory, the sinks, the control watcher, signals; `execute()` trains)
- build.py: the user's model, data, optimizer, scheduler and metrics from the config: a Learner
- launch.py: several processes (DDP, FSDP): spawning ranks, or torchrun's, and supervising them
- directories.py: where runs live, and `tuitrain ls`
- learner.py: `tuitrain.Learner`, the core Learner with a run directory's standard files

The run layer sits above the core, the sinks, the dashboard and the config, and below the CLI.
Must not import textual at import time (the dashboard is opened by the CLI).
"""

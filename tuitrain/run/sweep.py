"""`tuitrain sweep CONFIG.toml`: a hyperparameter search whose trials are tuitrain runs (SPEC "Sweeps").

Optuna samples the values, prunes and keeps the study (a journal file in the sweep folder, or a database
URL that several machines share). tuitrain runs each trial as `tuitrain run CONFIG --set KEY=VALUE ...
--run-dir SWEEP/trial-NNNN --resume auto --headless` in a process of its own (forked from a launcher that has
imported torch once, trial_launcher.py: a trial starts in a fraction of a second), `parallel` at once, and
follows the trial's events.jsonl: each validation's metric is reported to Optuna, and when the pruner
says so (not before the trial has run `prune_after` epochs: a curve that sits on a plateau for its first
epochs is not judged there) the trial is asked to stop through its control folder (source "pruned": it
saves a checkpoint and ends `interrupted`, reason `pruned`).

Lost trials are taken up again: a trial whose worker is gone (kill -9, a lost node: its runs end with it,
the kernel sends them SIGTERM, so they save a checkpoint on the way out) or that a stopped sweep left
unfinished is marked failed in the study and queued again with the same values; whichever worker takes
it continues the trial's own run directory from its newest sound checkpoint (`--resume auto`).

A study whose first trials (`SAME_FAILURES` of them) all failed with the same error starts no more: the
error is said once, with the trials not started (a broken model, a missing file: the other trials would
fail alike).

`tuitrain stop SWEEP_DIR` asks every running trial to stop and the workers to start no new one. Running
the command again continues the study.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tuitrain.core.control import PRUNED, FileControl
from tuitrain.core.events import MetricsLogged, RunStarted, parse_line
from tuitrain.run.signals import die_with_parent
from tuitrain.run.sweep_optuna import grid_size, journal, pruner, sampler, worker_number, worker_seed
from tuitrain.run.sweep_spec import SweepSpec, set_item
from tuitrain.run.trial_launcher import LaunchedTrial, Launcher
from tuitrain.sinks.run_status import live_status, pid_alive, read_run
from tuitrain.sources.events_file import EVENTS_FILE, Tail
from tuitrain.sources.sweep_files import SWEEP_FILE, SweepInfo, trial_name

EXIT_OK, EXIT_FAILED, EXIT_STOPPED = 0, 1, 130
#: seconds between looks at a trial's events
POLL = 0.5
#: the file in SWEEP_DIR that `tuitrain stop SWEEP_DIR` leaves: no new trials start while it is there
STOP_FILE = "stop"
#: this many first trials failed with the same error: no more are started
SAME_FAILURES = 3


@dataclass
class Outcome:
    number: int
    state: str  # "completed", "pruned", "failed", "stopped"
    value: float | None
    values: dict
    seconds: float
    why: str = ""
    same_as: int | None = None  # failed with the error of this earlier trial (said once, there)


class Sweep:
    """One worker of the study: `parallel` trials at once until the study has `trials` or a stop."""

    def __init__(
        self,
        spec: SweepSpec,
        config_path: str,
        overrides: list[str],
        folder: Path,
        out: TextIO | None = None,
        python: str = sys.executable,
    ) -> None:
        self.spec = spec
        self.config_path = config_path
        self.overrides = list(overrides)
        self.folder = folder
        self.out = out or sys.stdout
        self.python = python
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self.stopping = threading.Event()
        self.lock = threading.Lock()  # asking for trials and telling results, one at a time
        self.outcomes: list[Outcome] = []
        self.pruned_at: dict[int, int] = {}  # trial number -> the step whose value the pruner judged
        self.given_up = ""  # the error its first trials all failed with: no new trials
        self.study = None
        self.launcher: Launcher | None = None

    # --- the study ---------------------------------------------------------------------------------

    def open_study(self):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.folder.mkdir(parents=True, exist_ok=True)
        spec = self.spec
        if spec.storage:
            storage = optuna.storages.RDBStorage(spec.storage) if "://" in spec.storage else journal(spec.storage)
        else:
            storage = journal(self.folder / "study.journal")
        seed = spec.seed
        if seed is not None:  # a later command on the study, or a second worker, draws values of its own
            try:
                held = storage.get_n_trials(storage.get_study_id_from_name(spec.name))
            except KeyError:  # a fresh study
                held = 0
            seed = worker_seed(seed, held, worker_number(storage, spec.name, self.worker))
        self.study = optuna.create_study(
            study_name=spec.name,
            storage=storage,
            direction=spec.direction,
            sampler=sampler(spec, seed),
            pruner=pruner(spec),
            load_if_exists=True,
        )
        info = SweepInfo(spec.name, spec.metric, spec.mode, tuple(spec.params), str(Path(self.config_path).resolve()))
        (self.folder / SWEEP_FILE).write_text(
            info.to_json(spec.trials, spec.storage or str(self.folder / "study.journal"))
        )
        return self.study

    def take(self):
        """The next trial for this worker (a lost one first), or None when the study has enough."""
        from optuna.trial import TrialState

        with self.lock:
            if self.stopped() or self.given_up:
                return None
            self.take_up_lost()
            trials = self.study.get_trials(deepcopy=False)
            waiting = [t for t in trials if t.state == TrialState.WAITING]
            if not waiting and self.counted(trials) >= self.wanted():
                return None
            trial = self.study.ask()
            trial.set_user_attr("worker", self.worker)
            return trial

    def wanted(self) -> int:
        """Trials the study is to have (a grid: no more than its size)."""
        return min(self.spec.trials, grid_size(self.spec)) if self.spec.sampler == "grid" else self.spec.trials

    def counted(self, trials: list) -> int:
        """The study's trials that count towards `wanted` (one failed and queued again counts once)."""
        from optuna.trial import TrialState

        retried = {t.user_attrs.get("resume_of") for t in trials} - {None}
        return sum(
            1
            for t in trials
            if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)
            or (t.state == TrialState.FAIL and t.number not in retried)
        )

    def take_up_lost(self) -> None:
        """Trials running in the study whose worker is gone (on this host: its process no longer exists;
        elsewhere: the trial's run ended without the study being told, a minute ago or more): marked
        failed and queued again with their values, to continue in their own run directory."""
        from optuna.trial import TrialState

        host = socket.gethostname()
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            worker = t.user_attrs.get("worker", "")
            if not worker or worker == self.worker:
                continue
            w_host, _, w_pid = worker.rpartition(":")
            if w_host == host:
                lost = w_pid.isdigit() and pid_alive(int(w_pid)) is False
            else:
                run_dir = t.user_attrs.get("run_dir")
                run = read_run(self.folder / run_dir) if run_dir else None
                lost = (
                    run is not None
                    and run.get("status") != "running"
                    and time.time() - (self.folder / run_dir / "run.json").stat().st_mtime > 60
                )
            if lost:
                self.requeue(t.number, t.params, t.user_attrs.get("run_dir"))

    def requeue(self, number: int, params: dict, run_dir: str | None) -> None:
        """Trial `number` failed in the study and queued again, once (the first worker to mark it failed
        queues it: telling a finished trial fails)."""
        from optuna.trial import TrialState

        try:
            self.study.tell(number, state=TrialState.FAIL)
        except (ValueError, RuntimeError):  # another worker took it up first
            return
        attrs = {"resume_of": number}
        if run_dir:
            attrs["run_dir"] = run_dir
        self.study.enqueue_trial(params, user_attrs=attrs, skip_if_exists=False)

    # --- a trial -----------------------------------------------------------------------------------

    def run_trial(self, trial) -> Outcome:
        from optuna.trial import TrialState

        values = {key: p.suggest(trial) for key, p in self.spec.params.items()}
        rel = trial.user_attrs.get("run_dir") or trial_name(trial.number)
        run_dir = self.folder / rel
        trial.set_user_attr("run_dir", rel)
        cmd = [
            self.python,
            "-m",
            "tuitrain",
            "run",
            self.config_path,
            *(f"--set={o}" for o in self.overrides),
            *(f"--set={set_item(k, v)}" for k, v in values.items()),
            "--set=train.requeue=false",  # a preempted trial is the study's to queue again, not Slurm's
            "--run-dir",
            str(run_dir),
            "--resume",
            "auto",
            "--headless",
        ]
        resumed = "resume_of" in trial.user_attrs
        how = f"continues trial {trial.user_attrs['resume_of']} in " if resumed else "starts in "
        self.say(f"trial {trial.number} {how}{run_dir}: {_values_text(values)}")
        start = time.monotonic()
        if resumed and live_status(run_dir) == "completed":
            # its worker died after the run's end and before telling the study: the run is not redone
            cmd = [self.python, "-c", "pass"]
        out = open(self.folder / f"{rel}.out", "ab")
        try:
            env = self.trial_env()
            launcher = self.launcher
            forked = launcher.start(cmd[1:], env, out.fileno()) if launcher and cmd[1:3] == ["-m", "tuitrain"] else None
            proc: subprocess.Popen | LaunchedTrial = forked or subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(),
                env=env,
            )
        finally:
            out.close()
        reports = self.follow(trial, proc, run_dir)
        seconds = time.monotonic() - start
        run = read_run(run_dir) or {}
        status, reason = run.get("status", ""), run.get("reason", "")
        best = _best([v for _, v in reports], self.spec.mode)
        with self.lock:
            if status == "completed" and best is not None:
                self.study.tell(trial, best)
                outcome = Outcome(trial.number, "completed", best, values, seconds)
            elif reason == PRUNED:
                self.study.tell(trial, state=TrialState.PRUNED)
                outcome = Outcome(
                    trial.number,
                    "pruned",
                    best,
                    values,
                    seconds,
                    why=f"at step {self.pruned_at.get(trial.number, reports[-1][0] if reports else 0)}",
                )
            elif status == "interrupted" and (self.stopped() or reason == "preempted"):
                # the sweep was stopped: the trial is queued again, to go on when the command runs again
                self.requeue(trial.number, trial.params, rel)
                outcome = Outcome(
                    trial.number, "stopped", best, values, seconds, why="it continues when the sweep runs again"
                )
            else:
                why = run.get("error") or (
                    f"{self.spec.metric} was never logged"
                    if status == "completed"
                    else f"the run ended {status or 'without a run.json'}"
                    f"{' (' + reason + ')' if reason else ''}, exit code {proc.returncode}"
                )
                if proc.returncode == 2 and not run:
                    why = _last_line(self.folder / f"{rel}.out") or why
                self.study.tell(trial, state=TrialState.FAIL)
                outcome = Outcome(trial.number, "failed", best, values, seconds, why=why)
            if outcome.state == "failed":
                outcome.same_as = next((o.number for o in self.outcomes if o.state == "failed" and o.why == why), None)
            self.outcomes.append(outcome)
            ran = [o for o in self.outcomes if o.state != "stopped"]
            if len(ran) == SAME_FAILURES and all(o.state == "failed" and o.why == ran[0].why for o in ran):
                self.given_up = ran[0].why  # the trials running now end as they will; no new ones
        self.say_outcome(outcome)
        return outcome

    def trial_env(self) -> dict[str, str]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # trials side by side share the cores rather than each taking all of them (torch's default)
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // self.spec.parallel)))
        return env

    def follow(self, trial, proc: subprocess.Popen | LaunchedTrial, run_dir: Path) -> list[tuple[int, float]]:
        """Until the trial's process ends: each logged value of the metric reported to the study; a stop
        asked when the pruner says so, or when the sweep stops."""
        split, _, name = self.spec.metric.partition("/")
        tail = Tail(run_dir / EVENTS_FILE)
        reports: list[tuple[int, float]] = []
        seen_steps: set[int] = set()
        steps_per_epoch = 0  # from the run's start: how far `prune_after` epochs is, in steps
        asked = False
        try:
            while True:
                ended = proc.poll() is not None
                for line in tail.lines():
                    e = parse_line(line)
                    if isinstance(e, RunStarted) and isinstance(e.steps_per_epoch, int):
                        steps_per_epoch = e.steps_per_epoch
                    if not isinstance(e, MetricsLogged) or e.split != split or e.scope == "step":
                        continue
                    value = e.metrics.get(name)
                    if not isinstance(value, (int, float)) or e.step in seen_steps:
                        continue
                    seen_steps.add(e.step)
                    reports.append((e.step, float(value)))
                    trial.report(float(value), e.step)  # (one the run logged just before it ended too)
                    epochs = e.step / steps_per_epoch if steps_per_epoch > 0 else e.epoch
                    if not asked and not ended and epochs >= self.spec.prune_after:
                        if trial.should_prune():
                            FileControl(run_dir).send("stop", source=PRUNED)
                            asked = True
                            self.pruned_at[trial.number] = e.step
                if ended:
                    return reports
                if not asked and self.stopped() and (run_dir / "run.json").exists():
                    FileControl(run_dir).send("stop", source="sweep")
                    asked = True
                try:
                    proc.wait(timeout=POLL)  # (wakes at once when the trial ends: the next one starts then)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            tail.close()

    # --- the worker --------------------------------------------------------------------------------

    def run(self) -> int:
        if self.study is None:
            self.open_study()
        try:
            (self.folder / STOP_FILE).unlink()  # running the command again continues the study
        except FileNotFoundError:
            pass
        spec = self.spec
        warmup = f" (after {spec.prune_after:g} epochs)" if spec.prune_after and spec.pruner != "none" else ""
        self.say(
            f"sweep {self.spec.name}: {self.spec.trials} trials of {self.config_path}, {self.spec.parallel} "
            f"at once, {self.spec.sampler} sampler, {self.spec.pruner} pruner{warmup}, {self.spec.mode} "
            f"{self.spec.metric}; study in {self.spec.storage or self.folder / 'study.journal'}"
        )
        try:
            first = self.take()
            busy = first is not None
        except Exception:  # noqa: BLE001 - the study could not be asked: the slots ask it, and say so, as before
            first, busy = None, True
        # the trials forked from a process that has imported torch already (trial_launcher.py), when there are
        # any; this thread lives while they run (the launcher is killed when it ends)
        if first is not None and Launcher.available():
            self.launcher = Launcher(self.python, self.trial_env())
        try:
            slots = [
                threading.Thread(
                    target=self._slot, args=(first if i == 0 else None,), name=f"tuitrain-sweep-{i}", daemon=True
                )
                for i in range(self.spec.parallel if busy else 0)
            ]
            for t in slots:
                t.start()
            for t in slots:
                while t.is_alive():
                    t.join(0.2)
        finally:
            if self.launcher is not None:
                self.launcher.close()
                self.launcher = None
        self.say_best()
        if self.given_up:
            left = max(self.wanted() - self.counted(self.study.get_trials(deepcopy=False)), 0)
            self.say(
                f"the first {SAME_FAILURES} trials failed with the same error, so the sweep stopped: "
                f"{left} trial{'s' if left != 1 else ''} not started. The error:"
            )
            self.say(f"  {self.given_up}")
            self.say("fix it and run the same command: the study goes on with the trials left")
        if self.stopped():
            return EXIT_STOPPED
        ran = [o for o in self.outcomes if o.state != "stopped"]
        if ran and all(o.state == "failed" for o in ran):
            return EXIT_FAILED
        return EXIT_OK

    def _slot(self, first=None) -> None:
        while True:
            trial, first = first or self.take(), None
            if trial is None:
                return
            try:
                self.run_trial(trial)
            except Exception as e:  # noqa: BLE001 - a trial's bookkeeping failed: said, the slot goes on
                self.say(f"trial {trial.number}: {type(e).__name__}: {e}")

    def stopped(self) -> bool:
        """Ctrl+C or SIGTERM here, or `tuitrain stop SWEEP_DIR` anywhere."""
        return self.stopping.is_set() or (self.folder / STOP_FILE).exists()

    def stop(self, *_: object) -> None:
        """Ctrl+C, SIGTERM: every running trial asked to stop (they save a checkpoint), no new ones."""
        if not self.stopping.is_set():
            self.say("stopping: each running trial saves a checkpoint and stops; run the command again to go on")
        self.stopping.set()

    # --- what it says ------------------------------------------------------------------------------

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def say_outcome(self, o: Outcome) -> None:
        value = f"{self.spec.metric} {o.value:.6g}" if o.value is not None else f"no {self.spec.metric}"
        best = self.best()
        best_text = f" · best: trial {best.number}, {best.value:.6g}" if best is not None else ""
        failed = f"failed: {o.why}" if o.same_as is None else f"failed with the same error as trial {o.same_as}"
        what = {
            "completed": f"completed, {value}",
            "pruned": f"pruned {o.why}, {value}",
            "failed": failed,
            "stopped": f"stopped ({o.why})",
        }[o.state]
        self.say(f"trial {o.number} {what} in {o.seconds:.0f}s · {_values_text(o.values)}{best_text}")

    def best(self) -> Outcome | None:
        done = [o for o in self.outcomes if o.state == "completed" and o.value is not None]
        if not done:
            return None
        return (min if self.spec.mode == "min" else max)(done, key=lambda o: o.value)

    def say_best(self, top: int = 5) -> None:
        """The best trials of the whole study (every worker's), as a table."""
        from optuna.trial import TrialState

        trials = self.study.get_trials(deepcopy=False)
        done = [t for t in trials if t.state == TrialState.COMPLETE]
        # a trial stopped (or lost with its worker) is failed in the study only to be queued again: "stopped"
        retried = {t.user_attrs.get("resume_of") for t in trials} - {None}
        counts: dict[str, int] = {}
        for t in trials:
            if t.state == TrialState.WAITING and t.user_attrs.get("resume_of") is not None:
                continue  # a stopped trial's own continuation, queued: counted as that trial, "stopped"
            state = "stopped" if t.state == TrialState.FAIL and t.number in retried else t.state.name.lower()
            counts[state] = counts.get(state, 0) + 1
        line = f"study {self.spec.name}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        if counts.get("stopped"):
            line += " (a stopped trial goes on from its checkpoint when the sweep runs again)"
        self.say(line)
        if not done:
            return
        done.sort(key=lambda t: t.value, reverse=self.spec.mode == "max")
        rows = [["trial", self.spec.metric, *self.spec.params, "run"]]
        for t in done[:top]:
            rows.append(
                [
                    str(t.number),
                    f"{t.value:.6g}",
                    *(_short(t.params.get(k)) for k in self.spec.params),
                    str(self.folder / t.user_attrs.get("run_dir", "")),
                ]
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        self.say(f"best trials ({self.spec.mode} {self.spec.metric}):")
        for r in rows:
            self.say("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        best = done[0]
        self.say("best trial's settings: " + " ".join(f"--set {set_item(k, v)}" for k, v in best.params.items()))


def _best(values: list[float], mode: str) -> float | None:
    return (min if mode == "min" else max)(values) if values else None


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _values_text(values: dict) -> str:
    return " ".join(f"{k}={_short(v)}" for k, v in values.items())


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""

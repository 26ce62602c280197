"""A sweep's `seed` (newcomer defects): one worker running a fresh study in one go draws what Optuna seeded
with `seed` draws (reproducible, as before); a study continued by a later command, or a second worker on it,
draws values of its own instead of the start-up values its trials already have. The workers are `Sweep`s in
this process on a journal file (two of them are two commands), their trials asked, given their values and
told a result as `run_trial` does, without running anything."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tuitrain.run.sweep import Sweep
from tuitrain.run.sweep_spec import SweepSpec
from tuitrain.sources.sweep_files import read_param

optuna = pytest.importorskip("optuna")

# the docs' [sweep.params], as the newcomer had it
PARAMS = {"optimizer.lr": {"low": 1e-4, "high": 1e-1, "log": True}, "model.hidden": {"choices": [8, 16, 32]}}


def worker(folder: Path, trials: int, sampler: str = "tpe", seed: int | None = 0, table: dict = PARAMS) -> Sweep:
    """`tuitrain sweep` started on the study in `folder` (its study opened, nothing run yet)."""
    params = {k: read_param(k, v) for k, v in table.items()}
    spec = SweepSpec("xg", "valid/loss", "min", trials, 1, sampler, "median", "", seed, params)
    sweep = Sweep(spec, "sw4.toml", [], folder, out=io.StringIO())
    sweep.open_study()
    return sweep


def one_trial(sweep: Sweep) -> tuple | None:
    """The worker's next trial run: its values (None when the study has its trials)."""
    trial = sweep.take()
    if trial is None:
        return None
    values = tuple(p.suggest(trial) for p in sweep.spec.params.values())
    sweep.study.tell(trial, values[0])  # (a result that depends on the values)
    return values


def all_trials(sweep: Sweep) -> list[tuple]:
    ran = []
    while (values := one_trial(sweep)) is not None:
        ran.append(values)
    return ran


def test_a_fresh_study_run_in_one_go_draws_what_the_seed_always_drew(tmp_path):
    ran = all_trials(worker(tmp_path / "a", 4))
    again = all_trials(worker(tmp_path / "b", 4))
    # what Optuna's sampler seeded with `seed` draws: the values a sweep with seed = 0 drew before
    ref = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    expected = []
    for _ in range(4):
        t = ref.ask()
        values = (
            t.suggest_float("optimizer.lr", 1e-4, 1e-1, log=True),
            t.suggest_categorical("model.hidden", [8, 16, 32]),
        )
        ref.tell(t, values[0])
        expected.append(values)
    assert ran == again == expected


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_a_study_continued_by_a_later_command_does_not_draw_its_trials_values_again(tmp_path, sampler):
    """`--trials 2`, then the same command with the config's 4: trials 2 and 3 are not trials 0 and 1 again;
    nor after a stop (the stopped trial is queued again with its values, on purpose: a new one is not)."""
    first = all_trials(worker(tmp_path, 2, sampler))
    later = all_trials(worker(tmp_path, 4, sampler))
    assert len(first) == len(later) == 2
    lrs = [v[0] for v in first + later]
    assert len(set(lrs)) == 4, (first, later)

    stopped = worker(tmp_path / "stopped", 2, sampler)
    assert one_trial(stopped) is not None
    trial = stopped.take()  # trial 1, stopped by Ctrl+C: queued again with its values
    values = tuple(p.suggest(trial) for p in stopped.spec.params.values())
    stopped.requeue(trial.number, trial.params, "trial-0001")
    rerun = all_trials(worker(tmp_path / "stopped", 3, sampler))
    assert rerun[0] == values and len(rerun) == 2  # the stopped trial goes on, then one new trial
    lrs = [t.params["optimizer.lr"] for t in stopped.study.get_trials()]
    assert len(set(lrs)) == 3, lrs  # trial 0's, trial 1's (twice: stopped, continued), the new one's


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_two_workers_started_at_once_on_one_study_draw_different_values(tmp_path, sampler):
    a, b = worker(tmp_path, 4, sampler), worker(tmp_path, 4, sampler)  # both opened before either asks
    ran = []
    for w in (a, b, a, b):
        values = one_trial(w)
        assert values is not None
        ran.append(values)
    assert one_trial(a) is None and one_trial(b) is None  # the study holds its 4
    lrs = [v[0] for v in ran]
    assert len(set(lrs)) == 4, ran


def test_a_grid_with_a_seed_still_stops_after_its_combinations_with_two_workers(tmp_path):
    grid = {"optimizer.lr": {"choices": [0.03, 0.01, 0.003]}}
    a, b = worker(tmp_path, 6, "grid", table=grid), worker(tmp_path, 6, "grid", table=grid)
    ran = []
    for w in (a, b, a, b):
        if (values := one_trial(w)) is not None:
            ran.append(values)
    assert len(ran) == 3 and len(set(ran)) == 3  # each of the grid's 3 once

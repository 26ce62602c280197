"""How `tuitrain sweep` sets Optuna up: the sampler and the pruner a `[sweep]` names, the journal file that
keeps a study, the size of a grid, and the seed each worker's sampler takes (`worker_seed`: a study continued
later, or a second worker on it, draws values of its own). Imports optuna when called (`pip install
'tuitrain[sweep]'`)."""

from __future__ import annotations

import hashlib

from tuitrain.run.sweep_spec import SweepSpec


def grid_size(spec: SweepSpec) -> int:
    n = 1
    for p in spec.params.values():
        n *= len(p.grid())
    return n


def grid_sampler(search_space: dict, seed: int | None):
    """Optuna's GridSampler, without its stop of an `optimize` loop once the grid is used up (there is no
    such loop here: the sweep asks for no more trials than the grid has)."""
    import optuna

    class Grid(optuna.samplers.GridSampler):
        def after_trial(self, study, trial, state, values) -> None:
            pass

    return Grid(search_space, seed=seed)


def journal(path):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(str(path)))


def worker_number(storage, name: str, worker: str) -> int:
    """This worker's number on study `name`: 0 for the first worker ever started on it, then 1, 2 ...; claimed
    atomically in the storage (a trial of the study `NAME/workers` beside it, numbered by the storage; a
    sweep's name has no "/"), so that two workers started at the same moment, on one machine or two, differ."""
    import optuna

    workers = optuna.create_study(
        study_name=f"{name}/workers", storage=storage, sampler=optuna.samplers.RandomSampler(), load_if_exists=True
    )
    claim = workers.ask()
    claim.set_user_attr("worker", worker)
    workers.tell(claim, 0.0)
    return claim.number


def worker_seed(seed: int | None, held: int, worker: int) -> int | None:
    """The seed of a worker's sampler: `seed` itself for the first worker of a fresh study (a sweep run in one
    go draws the values it always drew); otherwise `seed` mixed with the trials the study `held` when the
    worker started and the worker's number (`worker_number`): a study continued by a later command, or a
    second worker on it, does not draw again the start-up values its trials already have. None: a fresh
    seed, as Optuna gives one."""
    if seed is None or (held == 0 and worker == 0):
        return seed
    digest = hashlib.sha256(f"{seed}:{held}:{worker}".encode()).digest()
    return int.from_bytes(digest[:4], "big")  # (numpy's seeds are below 2**32)


def sampler(spec: SweepSpec, seed: int | None):
    """The sampler `spec` names, seeded with `seed` (`worker_seed`)."""
    import optuna

    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.sampler == "grid":
        return grid_sampler({k: p.grid() for k, p in spec.params.items()}, seed=seed)
    if spec.sampler == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed)
    if spec.sampler == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def pruner(spec: SweepSpec):
    import optuna

    if spec.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)
    if spec.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner()
    return optuna.pruners.NopPruner()

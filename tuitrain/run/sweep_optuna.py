"""How `tuitrain sweep` sets Optuna up: the sampler and the pruner a `[sweep]` names, the journal file that
keeps a study, and the size of a grid. Imports optuna when called (`pip install 'tuitrain[sweep]'`)."""

from __future__ import annotations

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


def sampler(spec: SweepSpec):
    import optuna

    seed = spec.seed
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

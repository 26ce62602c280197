"""The throwaway PostgreSQL server of tests/sweep/postgres.py holds an Optuna study: what one storage
object writes, a fresh one reads back (the sweep's workers share a study this way)."""

from __future__ import annotations

import pytest

from tests.sweep.postgres import postgres_url  # noqa: F401  (the fixture)

optuna = pytest.importorskip("optuna")
sqlalchemy = pytest.importorskip("sqlalchemy")


def test_optuna_study_round_trips_through_postgres(postgres_url):  # noqa: F811
    assert postgres_url.startswith("postgresql+") and "@127.0.0.1:" in postgres_url
    engine = sqlalchemy.create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(sqlalchemy.text("select current_database()")).scalar() == "optuna"
    finally:
        engine.dispose()

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=postgres_url, study_name="x")
    study.optimize(lambda trial: trial.suggest_float("lr", 1e-4, 1e-1, log=True), n_trials=3)

    storage = optuna.storages.RDBStorage(postgres_url)  # a fresh storage object: nothing cached
    try:
        again = optuna.load_study(study_name="x", storage=storage)
        complete = again.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        assert len(complete) == 3
        assert again.best_value == min(t.value for t in complete)
    finally:
        storage.engine.dispose()

"""The pace of redraws, decided without Textual (tuitrain/dashboard/state/pacing.py `Pacer`): clock readings
in, a decision out."""

from __future__ import annotations

import pytest

from tuitrain.dashboard.state.pacing import (
    BUSY_DRAIN_INTERVAL,
    LOADING_PLOT_INTERVAL,
    MAX_SLOW,
    PACE_WINDOW,
    PLOT_SHARE,
    PROGRESS_INTERVAL,
    Pacer,
)


def windows(pacer: Pacer, share: float, n: int, relaxed: bool = False, start: tuple = (0.0, 0.0)) -> tuple:
    """`n` pace windows in which the screen took `share` of a core; returns the clocks after them."""
    now, cpu = start
    for _ in range(n):
        now += PACE_WINDOW
        cpu += share * PACE_WINDOW
        pacer.observe(now, cpu, relaxed)
    return now, cpu


def test_slow_doubles_at_most_per_window_up_to_its_cap_and_the_first_window_is_not_counted():
    pacer = Pacer(0.0, 0.0, ui_share=0.025)
    clocks = windows(pacer, 0.10, 1)  # the start-up window: 4x the share, not counted
    assert pacer.slow == 1.0
    clocks = windows(pacer, 0.10, 1, start=clocks)
    assert pacer.slow == pytest.approx(2.0)
    clocks = windows(pacer, 0.10, 3, start=clocks)
    assert pacer.slow == pytest.approx(MAX_SLOW)
    windows(pacer, 0.10, 1, relaxed=True, start=clocks)  # paused, ended or watching: no need to give way
    assert pacer.slow == 1.0


def test_slow_settles_where_the_screen_takes_its_share():
    pacer = Pacer(0.0, 0.0, ui_share=0.025)
    clocks = windows(pacer, 0.0, 1)
    clocks = windows(pacer, 0.05, 1, start=clocks)  # twice the share: twice as slow
    assert pacer.slow == pytest.approx(2.0)
    windows(pacer, 0.025, 4, start=clocks)  # at its share: stays
    assert pacer.slow == pytest.approx(2.0)


def test_a_window_shorter_than_the_pace_window_decides_nothing():
    pacer = Pacer(0.0, 0.0)
    pacer.observe(PACE_WINDOW / 2, 10.0, False)
    assert pacer.slow == 1.0 and not pacer.started


def test_progress_shows_a_change_of_state_at_once_and_counters_at_their_spread_interval():
    pacer = Pacer(0.0, 0.0)
    pacer.slow = 2.0
    assert pacer.progress_due(10.0, ("train", False), ended=False)
    assert not pacer.progress_due(10.0 + PROGRESS_INTERVAL, ("train", False), ended=False)  # 2x the interval
    assert pacer.progress_due(10.0 + PROGRESS_INTERVAL, ("train", True), ended=False)  # paused: at once
    assert pacer.progress_due(10.0 + 3.1 * PROGRESS_INTERVAL, ("train", True), ended=False)
    assert pacer.progress_due(10.0 + 3.2 * PROGRESS_INTERVAL, ("train", True), ended=True)


def test_the_plot_waits_for_its_build_cost_while_training_runs_here():
    pacer = Pacer(0.0, 0.0, plot_interval=1.0)
    cost = 0.06  # a 60 ms figure
    assert pacer.plot_wait(cost, relaxed=False) == pytest.approx(cost / PLOT_SHARE)  # 4 s
    assert pacer.plot_wait(cost, relaxed=True) == 1.0
    assert pacer.plot_due(100.0, cost, relaxed=False, ended=False)
    assert not pacer.plot_due(101.5, cost, relaxed=False, ended=False)
    assert pacer.plot_due(101.5, cost, relaxed=False, ended=True)  # the end is drawn at once
    assert pacer.plot_due(101.5 + cost / PLOT_SHARE, cost, relaxed=False, ended=False)


def test_the_drain_wakes_less_often_while_training_runs_here():
    assert Pacer.drain_every(1 / 15, relaxed=False) == BUSY_DRAIN_INTERVAL
    assert Pacer.drain_every(1 / 15, relaxed=True) == pytest.approx(1 / 15)


def test_while_a_watched_file_loads_the_charts_wait_and_its_end_draws_them_at_once():
    pacer = Pacer(10.0, 0.0, plot_interval=1.0)
    # reading a finished run from its start: not even a first draw before LOADING_PLOT_INTERVAL
    assert not pacer.plot_due(10.5, 0.02, relaxed=True, ended=False, loading=True)
    assert not pacer.plot_due(10.0 + LOADING_PLOT_INTERVAL - 0.1, 0.02, relaxed=True, ended=False, loading=True)
    assert pacer.plot_due(10.0 + LOADING_PLOT_INTERVAL, 0.02, relaxed=True, ended=False, loading=True)
    assert not pacer.plot_due(10.0 + LOADING_PLOT_INTERVAL + 1.0, 0.02, relaxed=True, ended=False, loading=True)
    # the run's end read: drawn at once; then, caught up, at the plain interval again
    assert pacer.plot_due(10.0 + LOADING_PLOT_INTERVAL + 1.1, 0.02, relaxed=True, ended=True, loading=True)
    assert not pacer.plot_due(10.0 + LOADING_PLOT_INTERVAL + 1.5, 0.02, relaxed=True, ended=False)
    assert pacer.plot_due(10.0 + LOADING_PLOT_INTERVAL + 2.2, 0.02, relaxed=True, ended=False)

"""Device samples charted over time like metrics: `device/cpu`, `device/memory`, `device/rss_mib`,
`device/gpuN_util`, `device/gpuN_memory` (other DDP ranks under `device/rankN/`), after the metric
charts, from a replayed run and from a finished run's events.jsonl."""

from __future__ import annotations

from tuitrain.core.events import DevicesSampled, MetricsLogged
from tuitrain.dashboard.app import DashboardApp
from tuitrain.dashboard.state.model import DashboardState
from tuitrain.sources.run_files import FileSource
from tuitrain.dashboard.charts.chart_grid import ChartGrid

from .fixtures import MB, T0, devices, recorded_run, write_jsonl
from .test_app import make_app, sync, until


def test_a_model_fed_device_samples_has_their_series_after_the_metrics():
    st = DashboardState(clock=lambda: T0)
    st.apply([devices(T0, cpu=10.0)])  # before any metric: still charted after the metrics that come
    for step, cpu in ((1, 20.0), (2, 30.0), (3, 40.0)):
        st.apply(
            [
                MetricsLogged(split="train", epoch=1, step=step, metrics={"loss": 1.0 / step}, time=T0 + step),
                devices(T0 + step, cpu=cpu),
            ]
        )
    cpu = st.metric_series("device/cpu", "train")
    assert cpu is not None and cpu.points() == ([0.0, 1.0, 2.0, 3.0], [10.0, 20.0, 30.0, 40.0])  # at the newest step
    assert st.latest["train/device/cpu"] == 40.0
    assert st.metric_names[0] == "loss"
    assert st.metric_names[1:] == [
        "device/cpu",
        "device/memory",
        "device/rss_mib",
        "device/gpu0_util",
        "device/gpu0_memory",
    ]
    assert st.metric_series("device/memory", "train").last == (3.0, 42.0)
    assert st.metric_series("device/rss_mib", "train").last == (3.0, 512.0)
    assert st.metric_series("device/gpu0_util", "train").last == (3.0, 91.0)
    assert st.metric_series("device/gpu0_memory", "train").last == (3.0, 37.5)  # 30 of 80 GiB
    assert st.devices[0].cpu == 40.0  # the devices panel still gets the newest sample


def test_other_ranks_have_their_own_series_and_odd_gpu_entries_are_passed_over():
    st = DashboardState()
    st.apply(
        [
            DevicesSampled(
                cpu=5.0,
                cpu_per_core=[],
                memory=1.0,
                memory_used=0,
                memory_total=0,
                rss=2 * MB,
                gpus=[{"name": "no numbers"}, {"index": 3, "util": 7.0, "mem_used": 1, "mem_total": 0}],
                rank=1,
                time=T0,
            )
        ]
    )
    assert st.metric_series("device/rank1/cpu", "train").last == (0.0, 5.0)
    assert st.metric_series("device/rank1/rss_mib", "train").last == (0.0, 2.0)
    assert st.metric_series("device/rank1/gpu3_util", "train").last == (0.0, 7.0)
    assert st.metric_series("device/rank1/gpu3_memory", "train") is None  # no total: no share
    assert st.metric_series("device/cpu", "train") is None


@sync
async def test_filtering_cpu_shows_the_cpu_history_chart():
    app = make_app(recorded_run(epochs=3, total_epochs=5, end="running"))
    async with app.run_test(size=(120, 40)) as pilot:
        grid = app.query_one(ChartGrid)
        await until(pilot, lambda: "device/cpu" in grid.charts and grid.charts["device/cpu"].points)
        await pilot.press("slash", *"/cpu", "enter")
        await pilot.pause()
        assert [c.chart for c in grid.visible()] == ["device/cpu"]
        assert grid.charts["device/cpu"].points["train"][1] == [37.5, 37.5, 37.5]


@sync
async def test_watch_of_a_finished_run_shows_the_device_history_from_its_file(tmp_path):
    write_jsonl(tmp_path / "events.jsonl", recorded_run(epochs=3, end="completed"))
    app = DashboardApp(FileSource(tmp_path, poll=0.02), None, watch=True, clock=lambda: T0)
    async with app.run_test(size=(120, 40)) as pilot:
        grid = app.query_one(ChartGrid)
        await until(
            pilot,
            lambda: app.state.final and "device/gpu0_util" in grid.charts and grid.charts["device/gpu0_util"].points,
        )
        assert list(grid.charts)[:3] == ["loss", "accuracy", "lr"]  # the metrics first
        assert grid.charts["device/gpu0_util"].points["train"] == ([20.0, 40.0, 60.0], [91.0, 91.0, 91.0])


@sync
async def test_device_charts_wait_for_a_filter_that_names_them():
    app = make_app(recorded_run(epochs=3, total_epochs=5, end="running"))
    async with app.run_test(size=(120, 40)) as pilot:
        grid = app.query_one(ChartGrid)
        await until(pilot, lambda: "device/cpu" in grid.charts and grid.charts["loss"].points)
        assert [c.chart for c in grid.visible()][:1] == ["loss"]
        assert not [c.chart for c in grid.visible() if c.chart.startswith("device/")]
        await pilot.press("slash", *"device", "enter")
        await pilot.pause()
        assert [c.chart for c in grid.visible()] and all(c.chart.startswith("device/") for c in grid.visible())

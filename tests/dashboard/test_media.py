"""The dashboard's samples and distributions (issue 40): the samples panel (each name's newest text or
image, the `[` `]` step slider, Enter), histograms as heatmap charts in the grid (found with `/`), the
paths read from the run directory live and watched, the export's CSVs; a run without media looks as
it did. Fed recorded events (no torch); the PNGs written here with zlib."""

from __future__ import annotations

import csv
import struct
import zlib
from pathlib import Path

import pytest

from tuitrain.core.events import HistogramLogged, MediaLogged
from tuitrain.dashboard.app import DashboardApp
from tuitrain.dashboard.export import write_media
from tuitrain.dashboard.state.media import MediaState, thin
from tuitrain.dashboard.state.model import DashboardState
from tuitrain.sources.run_files import FileSource, ReplaySource
from tuitrain.dashboard.charts.histogram_plot import HistogramPlot
from tuitrain.dashboard.panels.samples_panel import SampleBody, SampleCard, SamplesPanel

from .fixtures import T0, last_time, recorded_run, write_jsonl
from .test_app import RecordingController, sync, until

RED, BLUE = (230, 20, 20), (20, 40, 230)


def png(width: int, height: int, rows: list[list[tuple[int, int, int]]]) -> bytes:
    """A PNG file's bytes (8-bit RGB, filter 0), as the media log writes them."""
    raw = b"".join(b"\x00" + bytes(c for px in row for c in px) for row in rows)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def media_events(run_dir: Path) -> list:
    """Texts at steps 5, 10, 15 (one with an escape sequence and markup); images at 10 (its file
    thinned away) and 20 (red above blue); two histograms every 5 steps."""
    folder = run_dir / "media" / "samples"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "20.png").write_bytes(png(4, 4, [[RED] * 4] * 2 + [[BLUE] * 4] * 2))
    out = []
    for step in (5, 10, 15):
        text = f"generated at step {step}: once upon a time"
        if step == 15:
            text += " \x1b[31mred\x1b[0m [bold]not bold[/bold]\nsecond line"
        out.append(
            MediaLogged(
                key="sample",
                step=step,
                kind="text",
                path=f"media/sample/{step}.txt",
                text=text,
                time=T0 + step * 0.5 + 0.1,
            )
        )
    for step in (10, 20):
        out.append(
            MediaLogged(
                key="samples",
                step=step,
                kind="image",
                path=f"media/samples/{step}.png",
                width=4,
                height=4,
                time=T0 + step * 0.5 + 0.1,
            )
        )
    for step in range(5, 21, 5):
        for key, spread in (("weights/fc1", 0), ("grads/fc1", 2)):
            counts = [0] * 8
            counts[3 + spread % 4] = 50 + step
            counts[4] = 20
            out.append(
                HistogramLogged(
                    key=key,
                    step=step,
                    low=-1.0,
                    high=1.0,
                    counts=counts,
                    min=-0.4,
                    max=0.3,
                    mean=0.01 * step,
                    time=T0 + step * 0.5 + 0.2,
                )
            )
    return out


def with_media(run_dir: Path) -> list:
    events = recorded_run(epochs=1, steps_per_epoch=20, total_epochs=3, end="running")
    return sorted(events + media_events(run_dir), key=lambda e: getattr(e, "time", T0))


def app_of(events: list, run_dir: Path | None = None) -> DashboardApp:
    frozen = last_time(events) + 30
    app = DashboardApp(ReplaySource(events, wait=True), RecordingController(), clock=lambda: frozen)
    app.state.files_dir = run_dir  # where the media files are (the title shows RunStarted's run_dir)
    return app


def card_text(app: DashboardApp, key: str) -> str:
    card = next(c for c in app.query(SampleCard) if c.key == key)
    return card.head.render().plain + "\n" + " ".join(card.body.shown_text.split())  # the words, however wrapped


@sync
async def test_a_run_without_media_has_no_panel_no_heatmap_and_no_slider_keys():
    app = app_of(recorded_run(epochs=1, steps_per_epoch=20, end="running"))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.dashboard.grid.visible())
        await pilot.pause()
        panel = app.query_one(SamplesPanel)
        assert not panel.display and panel.region.height == 0
        assert not app.query(HistogramPlot)
        assert "left_square_bracket" not in app.screen.active_bindings
        await pilot.press("left_square_bracket")  # nothing to step through: nothing happens
        assert panel.at_step is None


@sync
async def test_samples_panel_texts_images_and_the_step_slider(tmp_path):
    app = app_of(with_media(tmp_path), tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        panel = app.query_one(SamplesPanel)
        await until(pilot, lambda: len(panel.cards) == 2 and panel.region.height)
        await pilot.pause()
        assert panel.display and panel.region.height == 12
        assert "left_square_bracket" in app.screen.active_bindings  # [ and ] in the footer now
        text = card_text(app, "sample")
        assert "sample  step 15" in text and "generated at step 15" in text
        assert "[bold]not bold[/bold]" in text and "\x1b" not in text and "second line" in text
        assert panel.title_text == "samples"
        # the newest image, red above blue, in half-blocks
        body = next(c for c in app.query(SampleCard) if c.key == "samples").body
        strip = body.render_line(0)
        cell = next(s for s in strip if s.text == "▀")
        assert cell.style.color.get_truecolor() == RED and cell.style.bgcolor.get_truecolor() == RED
        assert body.render_line(1).text.strip() == "▀" * len(body.render_line(1).text.strip())

        await pilot.press("left_square_bracket")  # one logged step older: 15
        assert panel.at_step == 15 and panel.title_text == "samples · step 15 of 20 · ] newer"
        assert "samples  step 10" in card_text(app, "samples")
        assert "media/samples/10.png is gone" in card_text(app, "samples")  # thinned away: said, no error
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert panel.at_step == 5 and "step 5 of 20" in panel.title_text
        assert "generated at step 5" in card_text(app, "sample")
        assert "nothing logged at or before step 5" in card_text(app, "samples")
        await pilot.press("left_square_bracket")  # the first: it stays
        assert panel.at_step == 5
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert panel.at_step == 15
        await pilot.press("right_square_bracket")  # the newest: it follows new items again
        assert panel.at_step is None and panel.title_text == "samples"

        # Tab reaches the panel after the charts (Shift+Tab: before the first); Enter: the panel alone; Esc back
        await pilot.press("shift+tab")
        assert app.focused is panel
        await pilot.press("left")  # the panel's own ←: older
        assert panel.at_step == 15
        await pilot.press("enter")
        assert app.screen.maximized is panel and panel.region.height > 30
        await pilot.press("escape")
        assert app.screen.maximized is None


@sync
async def test_heatmaps_in_the_grid_found_with_the_filter(tmp_path):
    app = app_of(with_media(tmp_path), tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(app.query(HistogramPlot)) == 2)
        await pilot.pause()
        grid = app.dashboard.grid
        heat = {c.chart: c for c in app.query(HistogramPlot)}
        assert set(heat) == {"weights/fc1", "grads/fc1"}
        assert [type(c).__name__ for c in grid.charts.values()][-2:] == ["HistogramPlot"] * 2  # after the metrics
        await pilot.press("slash", "w", "e", "enter")  # /we: the weights' heatmap alone
        await pilot.pause()
        assert grid.visible() == [heat["weights/fc1"]]
        chart = heat["weights/fc1"]
        assert "weights/fc1" in chart.title_text and "-0.4" in chart.title_text and "0.3" in chart.title_text
        assert [c.step for c in chart.columns] == [5, 10, 15, 20]
        lines = chart.frame()
        assert any("▀" in line.text for line in lines)  # the shades
        await pilot.press("i")  # the step under the cursor, with its min, mean and max
        assert chart.readout_text.startswith("▏step 20") and "mean 0.2" in chart.readout_text
        await pilot.press("escape", "enter")
        assert app.screen.maximized is chart


@sync
async def test_watched_run_reads_media_from_its_folder(tmp_path):
    """`tuitrain watch`: events.jsonl's paths are the run directory's, wherever it was written."""
    run_dir = tmp_path / "moved"
    write_jsonl(run_dir / "events.jsonl", with_media(run_dir))
    app = DashboardApp(FileSource(run_dir, live=False), None, watch=True)
    async with app.run_test(size=(80, 24)) as pilot:
        panel = app.query_one(SamplesPanel)
        await until(pilot, lambda: len(panel.cards) == 2 and panel.region.height)
        await pilot.pause()
        # 80x24: one chart keeps its rows above the panel, which has room for one name: the other waits
        chart = app.dashboard.grid.visible()[0]
        assert chart.region.height >= 12 and chart.region.bottom <= panel.region.y
        assert panel.hidden_keys == ["samples"] and "+1 more: Enter" in str(panel.border_subtitle)
        assert "generated at step 15" in card_text(app, "sample")
        panel.focus()
        await pilot.press("enter")  # alone, every name; the image read from the watched folder
        await pilot.pause()
        body = next(c for c in app.query(SampleCard) if c.key == "samples").body
        assert not panel.hidden_keys and body.item.step == 20
        assert any(s.text == "▀" for s in body.render_line(0))


def test_media_state_thins_bounds_and_steps():
    media = MediaState(keep=4, columns=3)
    for step in range(1, 11):
        media.add(MediaLogged(key="s", step=step, kind="text", path="", text=str(step)))
        media.add(HistogramLogged(key="h", step=step, low=0.0, high=1.0, counts=[1, 2]))
    steps = [x.step for x in media.items["s"]]
    assert len(steps) == 4 and steps[0] == 1 and steps[-1] == 10  # spread over the run, as the writer keeps files
    assert thin([1, 2, 3, 4], 2) == [2, 3]
    assert 3 <= len(media.histograms["h"].columns) <= 6 and media.histograms["h"].latest.step == 10
    assert media.at("s", 9).step == steps[-2] and media.at("s", 0) is None
    assert media.step_before(None) == steps[-2] and media.step_after(steps[-2]) is None
    media.add(MediaLogged(key="s", step=10, kind="text", path="", text="again"))  # a step again: replaced
    assert media.at("s").text == "again"


def test_export_writes_histograms_and_the_samples_list(tmp_path):
    state = DashboardState()
    state.apply(media_events(tmp_path))
    files = write_media(state, tmp_path)
    names = sorted(p.name for p in files)
    assert len(names) == 3 and names[0].startswith("histogram-grads_fc1") and names[2] == "media.csv"
    rows = list(csv.reader(open(files[1], encoding="utf-8")))  # weights/fc1's
    assert rows[0][:7] == ["step", "epoch", "min", "max", "mean", "low", "high"] and len(rows) == 5
    assert rows[1][:1] == ["5"] and rows[1][7:] == ["0", "0", "0", "55", "20", "0", "0", "0"]
    listed = list(csv.DictReader(open(tmp_path / "media.csv", encoding="utf-8")))
    assert [(r["key"], r["step"], r["kind"]) for r in listed][-2:] == [
        ("samples", "10", "image"),
        ("samples", "20", "image"),
    ]
    assert write_media(DashboardState(), tmp_path) == []


def test_snapshot_samples_and_heatmap(snap_compare, tmp_path):
    assert snap_compare(app_of(with_media(tmp_path), tmp_path), terminal_size=(120, 40))


@pytest.fixture(autouse=True)
def _no_graphics(monkeypatch):
    """Half-blocks, whatever the machine has installed."""
    from tuitrain.dashboard.panels import graphics

    monkeypatch.setattr(graphics, "IMAGE_WIDGET", None)


class _Tty:
    def __init__(self, tty: bool = True) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_the_terminal_is_asked_for_graphics_only_where_it_can_answer(monkeypatch):
    from tuitrain.dashboard.panels import graphics

    monkeypatch.setattr(graphics.importlib.util, "find_spec", lambda name: object())  # textual-image there
    tty = dict(stdin=_Tty(), stdout=_Tty())
    assert graphics.worth_asking({"TERM": "xterm-kitty"}, **tty)
    assert not graphics.worth_asking({"TERM": "xterm-kitty"}, stdin=_Tty(), stdout=_Tty(False))  # a pipe
    assert not graphics.worth_asking({"TERM": "screen-256color", "TMUX": "/tmp/tmux-0/default,1,0"}, **tty)
    assert not graphics.worth_asking({"TEXTUAL_DRIVER": "textual.drivers.web_driver:WebDriver"}, **tty)  # serve
    assert not graphics.worth_asking({"TUITRAIN_GRAPHICS": "0"}, **tty)
    monkeypatch.setattr(graphics.importlib.util, "find_spec", lambda name: None)  # not installed: half-blocks
    assert not graphics.worth_asking({"TERM": "xterm-kitty"}, **tty)

"""The picture a notebook keeps (issue 51): an `<img>` of the SVG as a data URL in `text/html`, which
JupyterLab and Notebook 7 draw in a notebook opened untrusted (an `image/svg+xml` output they leave out:
`<IPython.core.display.SVG object>`), and at most 80 KB where it was 140-220 KB, drawn the same."""

from __future__ import annotations

import asyncio
import base64
import functools
import html
import re

from rich.cells import cell_len

from tuitrain.dashboard.small_svg import smaller
from tuitrain.run.notebook import picture_bundle

CELL_W, CELL_H, BASELINE = 12.2, 24.4, 20  # Rich's export_svg at its 20px font


def picture_svg(data: dict) -> str:
    """The SVG a display's data shows: from the `<img>`'s data URL (or an `image/svg+xml` output)."""
    if "image/svg+xml" in data:
        return data["image/svg+xml"]
    found = re.search(r'src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', data["text/html"])
    return base64.b64decode(found.group(1)).decode("utf-8")


def drawn(svg: str) -> tuple[dict, dict]:
    """What each cell shows: {(row, col): (character, its CSS)} for every visible character, and
    {(row, col): fill} for the backgrounds (later rectangles over earlier ones)."""
    rules = dict(re.findall(r"\.[\w-]+?-(r\d+) \{ ([^}]*) \}", svg))
    chars = {}
    for cls, x, y, content in re.findall(
        r'<text class="[\w-]+?-(r\d+)" x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>', svg, re.S
    ):
        row, col = round((float(y) - BASELINE) / CELL_H), round(float(x) / CELL_W)
        for ch in html.unescape(content).replace("\xa0", " "):
            if not ch.isspace():
                chars[row, col] = (ch, rules[cls].strip())
            col += cell_len(ch)
    fills = {}
    body = svg[svg.find("clip-terminal)") :]
    for fill, x, y, w, h in re.findall(
        r'<rect fill="(#\w+)" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" '
        r'height="([\d.]+)"',
        body,
    ):
        r0, r1 = round((float(y) - 1.5) / CELL_H), round((float(y) - 1.5 + float(h) - 0.25) / CELL_H)
        c0, c1 = round(float(x) / CELL_W), round((float(x) + float(w)) / CELL_W)
        for row in range(r0, r1):
            for col in range(c0, c1):
                fills[row, col] = fill
    return chars, fills


@functools.lru_cache(maxsize=None)
def screenshot(size=(120, 40)) -> str:
    """A real dashboard's screenshot: a recorded run, ended, its charts and panels full."""
    from tuitrain.dashboard.app import DashboardApp
    from tuitrain.sources.run_files import ReplaySource

    from tests.dashboard.fixtures import last_time, recorded_run

    events = recorded_run(epochs=3, total_epochs=5, end="running", step_events=True)
    frozen = last_time(events) + 30

    async def take() -> str:
        app = DashboardApp(ReplaySource(events, wait=True), None, None, clock=lambda: frozen)
        async with app.run_test(size=size) as pilot:
            await pilot.pause(0.5)
            return app.export_screenshot(title="spirals")

    return asyncio.run(take())


def test_the_smaller_picture_draws_every_cell_as_the_screenshot_does_in_under_a_third_of_the_bytes():
    svg = screenshot()
    small = smaller(svg)
    chars, fills = drawn(svg)
    assert len(chars) > 1500 and len(set(fills.values())) > 2  # a full screen: charts, panels, colours
    assert drawn(small) == (chars, fills)
    assert len(small.encode()) * 3 < len(svg.encode()), (len(small.encode()), len(svg.encode()))
    bundle = picture_bundle(small, "tuitrain: the dashboard of runs/x")
    assert len(bundle["text/html"].encode()) < 80_000


def test_the_kept_output_is_an_img_of_a_data_url_in_html_which_an_untrusted_notebook_draws():
    svg = smaller(screenshot())
    bundle = picture_bundle(svg, "tuitrain: the dashboard of runs/<x>")
    assert set(bundle) == {"text/html", "text/plain"}  # no image/svg+xml: untrusted, it is not drawn
    page = bundle["text/html"]
    assert re.fullmatch(
        r'<img src="data:image/svg\+xml;base64,[A-Za-z0-9+/=]+" alt="[^"<>]*" width="1482" '
        r'style="max-width: 100%; height: auto">',
        page,
    ), page[:200]
    assert picture_svg(bundle) == svg
    assert bundle["text/plain"] == "tuitrain: the dashboard of runs/<x>" and "runs/&lt;x&gt;" in page


def test_a_picture_not_in_richs_shape_is_kept_as_it_is():
    odd = '<svg xmlns="http://www.w3.org/2000/svg"><text x="1" y="2">hi</text></svg>'
    assert smaller(odd) == odd


def test_cells_without_a_background_keep_none_and_odd_styles_stay_theirs():
    """Rich's own export, not the dashboard's: rows that leave cells without a background (the commonest
    colour must not be painted under those), bold, underline, wide characters."""
    import io

    from rich.console import Console

    console = Console(record=True, width=40, file=io.StringIO(), force_terminal=True)
    console.print("[on red]ab[/] cd [on blue]ef[/] [bold]gh[/]")
    console.print("[on red]ab[/]  [underline]ü 漢字 x[/] [on red]yz[/]")
    console.print("[on red]" + "r" * 40 + "[/]")
    svg = console.export_svg(title="odd")
    small = smaller(svg)
    assert small != svg and drawn(small) == drawn(svg)


def test_every_dashboard_snapshot_is_drawn_the_same_smaller():
    """The dashboard's SVG snapshots (every screen, theme and size the snapshot tests keep)."""
    from pathlib import Path

    snapshots = sorted(Path(__file__).resolve().parents[1].glob("**/__snapshots__/**/*.svg"))
    assert snapshots
    for path in snapshots:
        svg = path.read_text(encoding="utf-8")
        small = smaller(svg)
        assert len(small) * 2 < len(svg) and drawn(small) == drawn(svg), path.name

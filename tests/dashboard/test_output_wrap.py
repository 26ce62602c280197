"""The output panel wraps without losing a character: what was printed is all on screen, at any width,
after a resize and with its scrollbar come or gone."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from textual.app import App
from textual.geometry import Region

from tuitrain.core.events import OutputPrinted
from tuitrain.dashboard.panels.output_log import OutputLog

from .test_app import make_app, sync, until
from .fixtures import T0, recorded_run

PRINTED = [
    "loss 0.005976 at step 19878 is above 0.005958",
    "{'train/loss': 0.21764480590820312, 'train/accuracy': 0.973125, "
    "'valid/loss': 0.20683156967163085, 'valid/accuracy': 0.9731250000000001}",
    "/usr/lib/python3.11/site-packages/lightning/pytorch/trainer/connectors/data_connector.py:424: "
    "The 'train_dataloader' does not have many workers which may be a bottleneck. Consider increasing "
    "the value of the `num_workers` argument` to `num_workers=15` in the `DataLoader` to improve performance.",
    'Traceback (most recent call last):\n  File "/home/user/project/train_with_a_long_name.py", line 42, '
    "in <module>\n    main()\nRuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; "
    "79.15 GiB total capacity)",
    "resumed from checkpoint/step-000000790-with-a-long-name.pt at step 790",
]


class LogApp(App):
    def compose(self):
        yield OutputLog()


def squeezed(text: str) -> str:
    return "".join(text.split())


def panel_text(log: OutputLog) -> str:
    """Every row the panel draws, scrolled through from top to bottom (its own render, as the screen
    gets it: the rows cropped to the room left of its scrollbar)."""
    rows: dict[int, str] = {}
    top = 0
    while top < log.virtual_size.height:
        log.scroll_to(y=top, animate=False, immediate=True)
        region = log.scrollable_content_region.translate(-log.region.offset)  # inside its border
        at = log.scroll_offset.y
        for i, strip in enumerate(log.render_lines(region)):
            rows[at + i] = strip.text
        top += region.height
    return "\n".join(rows[i] for i in sorted(rows) if i < log.virtual_size.height)


def screen_rows(app, log: OutputLog) -> list[str]:
    """The panel's rows on the screen as it is drawn now."""
    region = log.scrollable_content_region
    strips = app.screen._compositor.render_strips()
    return [strips[y].crop(region.x, region.right).text for y in range(region.y, region.bottom)]


WORD = st.one_of(
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=12),  # printable words
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=30, max_size=200),  # no spaces
    st.text(st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF), min_size=1, max_size=40),  # wide CJK
    st.text(st.sampled_from("àéîõüßøåçñαβγδλπΩЖжщЯ€№"), min_size=1, max_size=15),  # narrow non-ASCII
)
GAP = st.sampled_from([" ", " ", " ", "  ", "\t", "\n", " \t "])


@st.composite
def printed(draw) -> list[tuple[str, str]]:
    """Lines as the panel is given them: (stream, text), each text words and gaps."""
    out = []
    for _ in range(draw(st.integers(1, 4))):
        words = draw(st.lists(WORD, min_size=1, max_size=12))
        text = "".join(w + draw(GAP) for w in words).rstrip()
        out.append((draw(st.sampled_from(["stdout", "stderr", "tuitrain"])), text))
    return out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# a panel one cell wide (a terminal of 2 with the scrollbar) cannot show a two-cell character at all
@given(
    lines=printed(),
    width=st.integers(3, 140),
    height=st.integers(5, 40),
    resized=st.none() | st.integers(3, 140),
    before_layout=st.booleans(),
)
def test_the_panel_shows_every_character_printed_at_any_width(lines, width, height, resized, before_layout):
    async def body() -> str:
        app = LogApp()
        async with app.run_test(size=(width, height)) as pilot:
            log = app.query_one(OutputLog)
            if not before_layout:
                await pilot.pause()
            for stream, text in lines:
                log.add(stream, text)
            if resized is not None:
                await pilot.pause()
                await pilot.resize_terminal(resized, height)
            await pilot.pause()
            return panel_text(log)

    shown = asyncio.run(body())
    assert squeezed(shown) == squeezed("".join(text for _, text in lines))


@sync
async def test_long_lines_are_whole_on_the_dashboard_at_80x24_and_120x40():
    for size in [(80, 24), (120, 40)]:
        events = recorded_run(epochs=1, total_epochs=3, end="running")
        events += [
            OutputPrinted(text=text, stream=stream, time=T0 + 100)
            for text in PRINTED
            for stream in ("stdout", "stderr")
        ]
        app = make_app(events)
        async with app.run_test(size=size) as pilot:
            log = app.query_one(OutputLog)
            await until(pilot, lambda: log.count >= 2 * sum(t.count("\n") + 1 for t in PRINTED))
            assert log.show_vertical_scrollbar  # more rows than the panel: its scrollbar takes a column
            await pilot.pause()
            bottom = squeezed("".join(screen_rows(app, log)))  # the screen, scrolled to its end
            assert bottom.endswith(squeezed(PRINTED[-1])), bottom
            shown = squeezed(panel_text(log))
            assert bottom in shown
            for text in PRINTED:
                assert shown.count(squeezed(text)) == 2, (size, text)

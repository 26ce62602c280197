"""The chart's braille canvas reads plotext's ANSI output with its own reader (drawing.ansi_cells: each run of
escape codes decoded once, by rich's AnsiDecoder): cell for cell what rich's `Text.from_ansi` made of it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.style import Style

from tuitrain.dashboard.charts.drawing import ansi_cells, blank_figure, rich_cells

RGB = st.tuples(*[st.integers(0, 255)] * 3)
COLOR = st.one_of(RGB, st.sampled_from(["red", "blue+", "default", "white", "orange"]))
SERIES = st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=40)


@settings(derandomize=True, max_examples=40, deadline=None, database=None)
@given(
    st.integers(1, 50),
    st.integers(1, 12),
    RGB,
    st.lists(st.tuples(SERIES, COLOR), min_size=1, max_size=3),
    st.booleans(),
)
def test_plotexts_output_reads_as_rich_reads_it(width, height, bg, series, styled_base):
    plt = blank_figure(width, height, bg)  # as the chart's canvas sets plotext up
    for ys, color in series:
        plt.plot(list(range(len(ys))), ys, marker="braille", color=color)
    ansi = plt.build()
    base = Style(color="#c0c0c0", bgcolor="#%02x%02x%02x" % bg) if styled_base else Style.null()
    cells = ansi_cells(ansi, width, base)
    assert cells is not None
    assert cells[:height] == rich_cells(ansi, width, base)[:height]


def test_codes_carry_across_lines_and_resets_and_other_escapes_go_to_rich():
    base = Style(bgcolor="#000000")
    ansi = "\x1b[1;38;2;1;2;3mab\ncd\x1b[0mef\x1b[mg\x1b[4mh\x1b[0;31mi"
    assert ansi_cells(ansi, 6, base) == rich_cells(ansi, 6, base)
    # the bold rgb of the first line goes on to the second; after a reset, the base alone
    bold = base + Style(bold=True, color="#010203")
    assert ansi_cells(ansi, 6, base)[1][:3] == [["c", bold], ["d", bold], ["e", base]]
    assert ansi_cells("a\rb", 3, base) is None  # a carriage return: rich keeps what follows it
    assert ansi_cells("\x1b]8;;https://x\x1b\\link", 4, base) is None  # a hyperlink (OSC 8)

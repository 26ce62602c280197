"""core/text.py: what the user's code names and prints is made safe for a screen (properties over
any text), and core/output.py: a progress bar redrawn with \r is one line that updates."""

from __future__ import annotations

import re

from hypothesis import given, settings, strategies as st

from tuitrain.core.events import OutputPrinted
from tuitrain.core.output import PARTIAL_INTERVAL, LineWriter
from tuitrain.core.text import cell_width, collapse_redraws, safe_name, safe_text, shorten_middle

# anything a terminal acts on: C0 but \n, DEL, C1, bidi controls, lone surrogates, line separators
OBEYED = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff\u2028\u2029]"
)
# text made of the pieces that break screens, mixed with ordinary characters
PIECES = st.sampled_from(
    [
        "\x1b[2J",
        "\x1b]0;title\x07",
        "\x1b]8;;http://x\x1b\\",
        "\x1bP1$r\x1b\\",
        "\x1b[31m",
        "\x9b2J",
        "\x1bc",
        "\x1b(0",
        "\r",
        "\n",
        "\t",
        "\x07",
        "\x08",
        "\x7f",
        "\u202e",
        "[b]",
        "\ud800",
        "\u2028",
        "a",
        "é",
        "损",
        " ",
        "\x1b",
        "\x1b[",
        "\x1b]",
    ]
)
HOSTILE = st.one_of(st.text(), st.lists(PIECES, max_size=30).map("".join))


@settings(max_examples=300, deadline=None)
@given(HOSTILE)
def test_nothing_left_that_a_terminal_obeys(text):
    safe = safe_text(text)
    assert not OBEYED.search(safe), repr(safe)
    assert safe_text(safe) == safe  # idempotent: made safe once is safe
    one_row = safe_text(text, lines=False)
    assert "\n" not in one_row and not OBEYED.search(one_row)


@settings(max_examples=300, deadline=None)
@given(HOSTILE)
def test_colour_kept_only_as_plain_sgr(text):
    safe = safe_text(text, colour=True)
    without_sgr = re.sub(r"\x1b\[[0-9;:]*m", "", safe)
    assert not OBEYED.search(without_sgr) and "\x1b" not in without_sgr, repr(safe)


@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126)))
def test_printable_ascii_is_shown_as_typed(text):
    assert safe_text(text) == text  # markup too: "[bold]" stays "[bold]"


@given(HOSTILE, st.integers(min_value=1, max_value=80))
def test_a_name_takes_one_row_and_at_most_its_width(text, width):
    name = safe_name(text, width)
    assert "\n" not in name and not OBEYED.search(name)
    assert cell_width(name) <= width


def test_the_measured_cases():
    assert safe_text("a\x1b[2Jb") == "ab"  # issue 28: blanked the top 20 rows
    assert safe_text("x\x1b]0;pwned\x07y") == "xy"  # the payload goes too, not only the ESC
    assert safe_text("preparing 26/30\rpreparing 27/30\rpreparing 30/30") == "preparing 30/30"
    assert safe_text("[red]not markup[/]") == "[red]not markup[/]"
    assert safe_text("\x1b[1;31mred\x1b[0m", colour=True) == "\x1b[1;31mred\x1b[0m"
    assert safe_text("a\tb") == "a   b"
    assert collapse_redraws("done\r") == "done" and collapse_redraws("a\r\nb") == "a\nb"


def test_long_names_are_shortened_in_the_middle():
    name = "model.layers.0." + "x" * 300 + ".attn.norm"
    short = shorten_middle(name, 30)
    assert cell_width(short) == 30 and short.startswith("model.layers.0") and short.endswith("attn.norm")
    assert "…" in short
    assert shorten_middle("loss", 30) == "loss"
    assert cell_width(shorten_middle("损失" * 40, 11)) <= 11  # wide characters count two cells


def writer(clock):
    events: list[OutputPrinted] = []
    return LineWriter(events.append, "stderr", None, clock=lambda: clock[0]), events


def test_a_redrawn_bar_is_one_line_that_updates():
    clock = [0.0]
    w, events = writer(clock)
    for i in range(1, 31):  # tqdm: "\r" + the bar, then flush, ten times a second
        w.write(f"\rpreparing {i}/30")
        w.flush()
        clock[0] += 0.1
    w.write("\n")
    partial = [e for e in events if e.partial]
    assert all("\r" not in e.text for e in events)
    assert 1 < len(partial) <= 30 * 0.1 / PARTIAL_INTERVAL + 1  # at most every PARTIAL_INTERVAL
    assert [e.text for e in events if not e.partial] == ["preparing 30/30"]  # its final state, whole
    assert len(w._buf) == 0


def test_a_flushed_line_without_its_newline_is_completed_later_and_at_the_end():
    clock = [0.0]
    w, events = writer(clock)
    w.write("loading...")
    w.flush()
    clock[0] += 1
    w.write(" done\n")
    w.write("left without a newline\r")
    w.finish()
    assert [(e.text, e.partial) for e in events] == [
        ("loading...", True),
        ("loading... done", False),
        ("left without a newline", False),
    ]


def test_a_bar_that_never_ends_its_line_keeps_only_its_newest_state():
    w, events = writer([0.0])
    for i in range(20_000):
        w.write(f"\r{i:>8} it")
    assert len(w._buf) < 100  # memory bounded however long the bar runs
    w.finish()
    assert events[-1].text == "   19999 it"

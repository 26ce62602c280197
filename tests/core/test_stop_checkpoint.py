"""The checkpoint a stop promises a loop of one's own (core/lifecycle.py `StopCheckpoint`, what
`Monitor.checkpoint_requested` and `stop_requested` say): told to the loop before the stop, whichever
flag the loop reads first, and taken once."""

from __future__ import annotations

from tuitrain.core.lifecycle import StopCheckpoint


def loop_sees(reads: str, promised: bool = True) -> list[tuple[str, bool]]:
    """What a loop reading the flags in `reads` order ("c": checkpoint_requested, "s": stop_requested)
    sees after a stop, saving whenever `c` says True; it leaves at the first True `s`."""
    sc = StopCheckpoint()
    said = []
    for _ in range(4):
        for flag in reads:
            sc.see(True, promised)
            if flag == "c":
                asked = sc.asked()
                said.append(("c", asked))
                if asked:
                    sc.take()  # the loop saves
            else:
                stop = sc.stop(True)
                said.append(("s", stop))
                if stop:
                    return said
    return said


def test_a_loop_that_reads_the_checkpoint_first_saves_then_stops():
    assert loop_sees("cs") == [("c", True), ("s", True)]


def test_a_loop_that_reads_the_stop_first_is_held_back_once_to_save():
    assert loop_sees("sc") == [("s", False), ("c", True), ("s", True)]


def test_no_checkpoint_promised_stops_at_once():
    assert loop_sees("sc", promised=False) == [("s", True)]
    assert loop_sees("cs", promised=False) == [("c", False), ("s", True)]


def test_a_stop_is_seen_once_and_a_taken_checkpoint_stays_taken():
    sc = StopCheckpoint()
    sc.see(False, True)
    assert sc.state == StopCheckpoint.NONE and not sc.asked()
    sc.see(True, True)
    assert sc.state == StopCheckpoint.DUE and sc.take() and not sc.take()
    sc.see(True, True)  # seen already: no second promise
    assert not sc.asked() and sc.stop(True)

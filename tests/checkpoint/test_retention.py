"""Retention policies decide which checkpoints stay; they are pure and never touch files."""

from __future__ import annotations

import math

import pytest

from tuitrain.core.retention import Entry, KeepAny, KeepBest, KeepLast, KeepRequested, Split, best_entry, decide


def entry(
    step: int, loss: float | None = None, acc: float | None = None, epoch: int | None = None, t: float = 0.0
) -> Entry:
    metrics = {}
    if loss is not None:
        metrics["valid/loss"] = loss
    if acc is not None:
        metrics["valid/accuracy"] = acc
    return Entry(file=f"s{step}.pt", epoch=epoch if epoch is not None else step, step=step, metrics=metrics, time=t)


def files(entries) -> list[str]:
    return sorted(e.file for e in entries)


# --- KeepLast ---------------------------------------------------------------------------------


def test_keep_last_keeps_the_newest_n_by_step_whatever_the_list_order():
    entries = [entry(30), entry(10), entry(50), entry(20), entry(40)]
    assert KeepLast(2).keep(entries) == {"s50.pt", "s40.pt"}
    assert KeepLast(1).keep(entries) == {"s50.pt"}


def test_keep_last_more_than_there_are_keeps_all():
    entries = [entry(1), entry(2)]
    assert KeepLast(5).keep(entries) == {"s1.pt", "s2.pt"}


@pytest.mark.parametrize("n", [0, -1])
def test_keep_last_zero_or_negative_keeps_nothing(n):
    assert KeepLast(n).keep([entry(1), entry(2)]) == set()


def test_keep_last_on_no_entries():
    assert KeepLast(3).keep([]) == set()


def test_keep_last_same_step_is_ordered_by_time():
    # a request checkpoint and an epoch checkpoint at the same step: the later write is the newer
    a = Entry(file="a.pt", epoch=1, step=7, time=100.0)
    b = Entry(file="b.pt", epoch=1, step=7, time=200.0)
    assert KeepLast(1).keep([b, a]) == {"b.pt"}


# --- KeepBest ---------------------------------------------------------------------------------


def test_keep_best_min_keeps_the_lowest():
    entries = [entry(1, 0.9), entry(2, 0.3), entry(3, 0.5), entry(4, 0.1)]
    assert KeepBest(1, "valid/loss", "min").keep(entries) == {"s4.pt"}
    assert KeepBest(2, "valid/loss", "min").keep(entries) == {"s4.pt", "s2.pt"}


def test_keep_best_max_keeps_the_highest():
    entries = [entry(1, acc=0.5), entry(2, acc=0.9), entry(3, acc=0.7), entry(4, acc=0.2)]
    assert KeepBest(1, "valid/accuracy", "max").keep(entries) == {"s2.pt"}
    assert KeepBest(2, "valid/accuracy", "max").keep(entries) == {"s2.pt", "s3.pt"}


def test_keep_best_tie_goes_to_the_earlier_checkpoint():
    entries = [entry(3, 0.5), entry(1, 0.5), entry(2, 0.5)]
    assert KeepBest(1, "valid/loss", "min").keep(entries) == {"s1.pt"}
    assert KeepBest(1, "valid/loss", "max").keep(entries) == {"s1.pt"}
    assert KeepBest(2, "valid/loss", "min").keep(entries) == {"s1.pt", "s2.pt"}


def test_keep_best_ignores_entries_without_the_metric_or_with_nan():
    entries = [entry(1), entry(2, math.nan), entry(3, 0.7), entry(4, acc=0.1)]
    assert KeepBest(3, "valid/loss", "min").keep(entries) == {"s3.pt"}


def test_keep_best_ignores_non_numeric_values():
    e = Entry(file="str.pt", epoch=1, step=1, metrics={"valid/loss": "0.1"})
    assert KeepBest(1, "valid/loss", "min").keep([e, entry(2, 0.9)]) == {"s2.pt"}


def test_keep_best_with_no_measured_entry_keeps_nothing():
    assert KeepBest(1, "valid/loss", "min").keep([entry(1), entry(2)]) == set()


def test_keep_best_zero_keeps_nothing():
    assert KeepBest(0, "valid/loss", "min").keep([entry(1, 0.1)]) == set()


def test_keep_best_negative_infinity_is_a_value():
    entries = [entry(1, 0.1), entry(2, -math.inf)]
    assert KeepBest(1, "valid/loss", "min").keep(entries) == {"s2.pt"}


# --- KeepAny and decide -----------------------------------------------------------------------


def test_keep_any_is_the_union():
    entries = [entry(1, 0.1), entry(2, 0.9), entry(3, 0.8), entry(4, 0.7)]
    policy = KeepAny((KeepLast(2), KeepBest(1, "valid/loss", "min")))
    assert policy.keep(entries) == {"s1.pt", "s3.pt", "s4.pt"}


def test_keep_any_of_nothing_keeps_nothing():
    assert KeepAny(()).keep([entry(1)]) == set()


def test_decide_splits_keep_and_delete_preserving_order():
    entries = [entry(1, 0.1), entry(2, 0.9), entry(3, 0.8), entry(4, 0.7)]
    policy = KeepAny((KeepLast(2), KeepBest(1, "valid/loss", "min")))
    keep, delete = decide(policy, entries)
    assert [e.file for e in keep] == ["s1.pt", "s3.pt", "s4.pt"]
    assert [e.file for e in delete] == ["s2.pt"]


def test_decide_always_keeps_the_newest_even_when_the_policy_keeps_nothing():
    entries = [entry(5, 0.1), entry(9, 0.9), entry(2, 0.5)]
    keep, delete = decide(KeepLast(0), entries)
    assert files(keep) == ["s9.pt"]
    assert files(delete) == ["s2.pt", "s5.pt"]


def test_decide_keeps_newest_alongside_best_only_policy():
    entries = [entry(1, 0.1), entry(2, 0.9), entry(3, None)]
    keep, delete = decide(KeepBest(1, "valid/loss", "min"), entries)
    assert files(keep) == ["s1.pt", "s3.pt"]
    assert files(delete) == ["s2.pt"]


def test_decide_on_nothing():
    assert decide(KeepLast(2), []) == ([], [])


def test_decide_every_entry_lands_in_exactly_one_list():
    entries = [entry(i, loss=(i * 37 % 11) / 10) for i in range(1, 20)]
    keep, delete = decide(KeepAny((KeepLast(3), KeepBest(2, "valid/loss", "min"))), entries)
    assert files(keep + delete) == files(entries)
    assert not set(files(keep)) & set(files(delete))
    assert len(keep) <= 5


# --- best_entry -------------------------------------------------------------------------------


def test_best_entry_min_and_max():
    entries = [entry(1, 0.5, acc=0.2), entry(2, 0.2, acc=0.9), entry(3, 0.3, acc=0.95)]
    assert best_entry(entries, "valid/loss", "min").file == "s2.pt"
    assert best_entry(entries, "valid/accuracy", "max").file == "s3.pt"
    assert best_entry(entries, "valid/loss", "max").file == "s1.pt"


def test_best_entry_none_when_unmeasured():
    assert best_entry([entry(1), entry(2)], "valid/loss", "min") is None
    assert best_entry([], "valid/loss", "min") is None


def test_best_entry_tie_is_the_first_to_reach_it():
    assert best_entry([entry(4, 0.2), entry(2, 0.2)], "valid/loss", "min").file == "s2.pt"


def test_entry_to_dict_has_the_index_keys():
    d = entry(3, 0.5).to_dict()
    assert {"file", "epoch", "step", "metrics", "time", "bytes", "best"} <= set(d)
    assert d["file"] == "s3.pt" and d["step"] == 3 and d["metrics"] == {"valid/loss": 0.5}


# --- checkpoints asked for: Split, KeepRequested ------------------------------------------------


def asked(step: int, loss: float | None = None, by: str = "dashboard") -> Entry:
    return Entry(
        file=f"s{step}.pt",
        epoch=step,
        step=step,
        metrics={"valid/loss": loss} if loss is not None else {},
        requested=by,
    )


def test_keep_last_and_keep_best_count_only_the_runs_own_and_never_delete_those_asked_for():
    entries = [entry(1, 0.9), asked(2, 0.01), entry(3, 0.5), asked(4, 0.02), entry(5, 0.8), entry(6, 0.7)]
    policy = Split(KeepAny((KeepLast(2), KeepBest(1, "valid/loss", "min"))), KeepRequested(0))
    keep, delete = decide(policy, entries)
    # the run's own: the last two (5, 6) and the best of them (3), though 2 and 4 have lower losses
    assert files(keep) == ["s2.pt", "s3.pt", "s4.pt", "s5.pt", "s6.pt"]
    assert files(delete) == ["s1.pt"]


def test_keep_requested_n_keeps_the_newest_n_asked_for():
    entries = [asked(1), entry(2), asked(3), asked(4), entry(5)]
    assert KeepRequested(0).keep(entries) == {"s1.pt", "s3.pt", "s4.pt"}
    assert KeepRequested(1).keep(entries) == {"s4.pt"}
    assert Split(KeepLast(1), KeepRequested(2)).keep(entries) == {"s3.pt", "s4.pt", "s5.pt"}


def test_an_entry_asked_for_is_marked_in_its_index_row_and_an_old_row_is_the_runs_own(tmp_path):
    import json

    from tuitrain.core.checkpoint import read_index

    row = asked(3, by="command").to_dict()
    assert row["requested"] is True and row["requested_by"] == "command"
    assert "requested" not in entry(3).to_dict()
    (tmp_path / "index.json").write_text(json.dumps([row, entry(4).to_dict()]))
    assert [e.requested for e in read_index(tmp_path)] == ["command", ""]


def test_a_libraries_own_checkpoint_is_never_deleted_by_a_later_checkpoints_retention(tmp_path):
    """A Hugging Face `checkpoint-N` folder (outside the run's checkpoint/) and a file adopted with
    retain=False stay on disk and listed while the run's own checkpoints come and go under keep_last."""
    from tuitrain.core.checkpoint import Checkpointer, read_index

    hf = tmp_path / "hf" / "checkpoint-10"
    hf.mkdir(parents=True)
    (hf / "model.safetensors").write_bytes(b"weights")
    folder = tmp_path / "checkpoint"
    folder.mkdir()  # the run directory's, made with it
    ck = Checkpointer(folder, keep_last=1, keep_best=0, background=False)
    ck.adopt(hf, epoch=1, step=10, metrics={}, reason="api", retain=False)
    inside = folder / "lightning.ckpt"
    inside.write_bytes(b"ckpt")
    ck.adopt(inside, epoch=1, step=12, metrics={}, reason="api", retain=False)
    for step in (20, 30, 40):
        ck.save({"w": step}, epoch=2, step=step, metrics={}, reason="epoch")
    ck.wait()
    assert (hf / "model.safetensors").read_bytes() == b"weights" and inside.exists()
    listed = {e.file: e for e in read_index(folder)}
    assert str(hf.resolve()) in listed and "lightning.ckpt" in listed
    assert listed["lightning.ckpt"].library and listed[str(hf.resolve())].library
    own = [e for e in listed.values() if not e.library]
    assert [e.step for e in own] == [40]  # keep_last = 1 over the run's own


def test_a_request_for_a_state_saved_already_marks_it_and_says_so_in_an_event(tmp_path):
    """`c` pressed as an epoch's checkpoint of that very state is written: no second file, but the
    entry is marked and a CheckpointSaved saying requested goes out, so the dashboard's list marks it."""
    from tuitrain.core.checkpoint import Checkpointer, read_index
    from tuitrain.core.events import CheckpointSaved

    folder = tmp_path / "checkpoint"
    folder.mkdir()
    ck = Checkpointer(folder, keep_last=2, keep_best=0, background=False)
    ck.save({"w": 1}, epoch=39, step=3900, metrics={"valid/loss": 0.5}, reason="epoch")
    ck.wait()
    first = ck.take_events()
    assert [e.requested for e in first if isinstance(e, CheckpointSaved)] == [""]
    ck.ask(39, 3900, "dashboard")
    again = [e for e in ck.take_events() if isinstance(e, CheckpointSaved)]
    assert [(e.file, e.step, e.requested, e.reason) for e in again] == [
        ("checkpoint/epoch-0039-step-00003900.pt", 3900, "dashboard", "epoch")
    ]
    assert [e.requested for e in read_index(folder)] == ["dashboard"]

"""`Agreement` and `SyncedInterrupter` with 2 real gloo ranks: this file is also the ranks' script
(`python test_agreement.py --rank R --port P --out FILE`), run once for the module; each rank writes
what it saw to a JSON file and the tests compare the two. No textual anywhere (tests/core)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

EVERY = 3
TICKS = 40
STOP_AT = (4, 5, 6, 7)  # rank 1's stop request, before the tick's read: every phase of an every=3 schedule
CHECKPOINT_AT = 9  # rank 0's checkpoint request


def worker(rank: int, port: int, out: Path) -> None:
    import datetime

    import torch.distributed as dist

    from tuitrain.core.strategies.agreement import Agreement, SyncedInterrupter

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60)
    )
    seen: dict = {"pid": os.getpid()}
    a = Agreement(width=5)
    seen["now"] = a.now([[1, 0, 5, 0, 2], [0, 3, 1, 0, 7]][rank])
    seen["now_again"] = a.now([[0, 0, 0, 0, 0], [0, 0, 0, 9, 0]][rank])  # the other buffer
    seen["finish_idle"] = a.finish()
    a.start([[0, 9, 0, 0, 0], [4, 0, 0, 0, 1]][rank])
    seen["in_flight"] = a.in_flight
    seen["started"] = a.finish()
    seen["in_flight_after"] = a.in_flight

    seen["runs"] = []
    for stop_at in STOP_AT:  # one interrupter per request time, the same sequence on both ranks
        s = SyncedInterrupter(rank, None, every=EVERY)
        first: dict = {}
        for tick in range(1, TICKS + 1):
            if rank == 1 and tick == stop_at:
                s.inbox.request_stop("test")
            if rank == 0 and tick == CHECKPOINT_AT:
                s.inbox.request_checkpoint("test")
            s.pending  # noqa: B018 - the tick
            if s.stop_requested:
                first.setdefault("stop", tick)
            if s.checkpoint_requested:
                first.setdefault("checkpoint", tick)
        s.close()
        seen["runs"].append(
            {
                "stop_at": stop_at,
                "first": first,
                "source": s.stop_source,
                "reason": s.stop_reason,
                "log": [list(x) for x in s.take_log()],
            }
        )

    s = SyncedInterrupter(rank, None, every=EVERY)  # SIGUSR1 reaches rank 1 alone: a preemption everywhere
    for tick in range(1, TICKS + 1):
        if rank == 1 and tick == 5:
            s.inbox.preempt("SIGUSR1")
        s.pending  # noqa: B018 - the tick
        if s.stop_requested:
            seen.setdefault("preempted_at", tick)
    s.close()
    seen["preempted"] = (s.stop_reason, s.stop_source)

    s = SyncedInterrupter(rank, None, every=EVERY)  # pause: the blocking form, rank 0's request
    if rank == 0:
        s.inbox.pause("test")
    seen["paused_after_sync"] = (s.sync(), s.paused)
    if rank == 0:
        s.inbox.resume("test")
    seen["resumed"] = s.wait_while_paused(0.01)
    s.close()

    seen["textual"] = "textual" in sys.modules
    dist.destroy_process_group()
    out.write_text(json.dumps(seen))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("agreement")
    port = free_port()
    from tests.conftest import cli_env, python_popen  # (not at the top: this file runs as each rank's script)

    env = cli_env()  # OMP_NUM_THREADS=1
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    # two processes of their own, each `python THIS_FILE --rank R`, from the suite's fork server (torch imported)
    procs = [
        python_popen(
            [__file__, "--rank", r, "--port", port, "--out", tmp / f"rank-{r}.json"],
            tmp,
            env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for r in (0, 1)
    ]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=120)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, (p, text) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"rank {r}:\n{text[-3000:]}"
    return [json.loads((tmp / f"rank-{r}.json").read_text()) for r in (0, 1)]


def test_now_returns_the_elementwise_max_on_both_ranks(ranks):
    for seen in ranks:
        assert seen["now"] == [1, 3, 5, 0, 7]
        assert seen["now_again"] == [0, 0, 0, 9, 0]


def test_start_and_finish_give_the_max_and_finish_alone_gives_none(ranks):
    for seen in ranks:
        assert seen["finish_idle"] is None
        assert seen["in_flight"] is True and seen["in_flight_after"] is False
        assert seen["started"] == [4, 9, 0, 0, 1]


def test_a_stop_on_rank_1_is_seen_by_both_ranks_at_the_same_tick(ranks):
    r0, r1 = ranks
    for a, b in zip(r0["runs"], r1["runs"]):
        k = a["stop_at"]
        assert a["first"]["stop"] == b["first"]["stop"], (k, a["first"], b["first"])
        # taken in by the next exchange, applied at the one after: later than k, within two spacings
        assert k < a["first"]["stop"] <= k + 2 * EVERY, (k, a["first"])
        assert b["source"] == "test" and a["source"] == "rank 1"  # rank 0 knows who asked
        # rank 0 writes the run's events: it says where the stop came from
        assert ["stop", "test", ""] in b["log"] and ["stop", "rank 1", "requested on another rank"] in a["log"]


def test_a_preemption_on_rank_1_is_one_on_both_ranks(ranks):
    """Rank 0 owns the run: it ends it as preempted (and requeues the job) though the signal reached rank 1."""
    r0, r1 = ranks
    assert r0["preempted_at"] == r1["preempted_at"] > 5
    assert r0["preempted"] == ["preempted", "rank 1"] and r1["preempted"][0] == "preempted"
    assert all(run["reason"] == "stopped" for seen in ranks for run in seen["runs"])  # a plain stop stays one


def test_a_checkpoint_on_rank_0_is_seen_by_both_ranks_at_the_same_tick(ranks):
    r0, r1 = ranks
    for a, b in zip(r0["runs"], r1["runs"]):  # a stop agreed before it changes nothing here
        assert a["first"]["checkpoint"] == b["first"]["checkpoint"], (a["first"], b["first"])
        assert CHECKPOINT_AT < a["first"]["checkpoint"] <= CHECKPOINT_AT + 2 * EVERY


def test_pause_is_agreed_by_a_blocking_exchange(ranks):
    for seen in ranks:
        assert seen["paused_after_sync"] == [True, True]
        assert seen["resumed"] is True


def test_the_ranks_never_imported_textual(ranks):
    assert [seen["textual"] for seen in ranks] == [False, False]


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    worker(args.rank, args.port, args.out)

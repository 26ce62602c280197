"""Two runs' events.jsonl compared field by field, clocks left out (issue 53: "the same demo run's
events.jsonl equal field by field except clocks" before and after a refactor).

    python benchmarks/events_equal.py RUN_A/events.jsonl RUN_B/events.jsonl

The media and checkpoint writers' events (off the loop's thread) are compared in their own order, the loop's
in theirs.
Left out: DevicesSampled (sent by a clock), every event's `time`, and the fields that are clocks or follow
them: durations, waits, stalls, throughput and step times, the run directory and process id, the host's
environment. Exit 0 when every other field of every event is equal (same count, same order), else 1 with
the first differences.
"""

from __future__ import annotations

import json
import sys

#: fields that are clocks, or differ between two runs of one config for reasons other than the loop
CLOCKS = {"time", "duration", "write", "stall", "wait", "pid", "run_dir", "env", "resumed_from", "elapsed"}
#: events sent by a clock (about once a second), not by the loop
CLOCK_EVENTS = {"DevicesSampled"}
#: events written off the loop's thread (media.py, the checkpoint writer, whose finished writes are said at
#: the next boundary after they finish): compared in their own order, apart from the loop's
OFF_THREAD = {"HistogramLogged", "MediaLogged", "CheckpointSaved", "CheckpointDeleted"}
#: metrics measured by a clock
CLOCK_METRICS = ("throughput", "step_time", "data_wait", "tflops", "mfu", "time")


def scrub(value, key: str = ""):
    if isinstance(value, dict):
        return {
            k: scrub(v, k)
            for k, v in value.items()
            if k not in CLOCKS and not any(k == m or k.endswith("/" + m) for m in CLOCK_METRICS)
        }
    if isinstance(value, list):
        return [scrub(v, key) for v in value]
    if isinstance(value, str) and key == "text":  # an output line that carries a time ("in 3.2s", "spent")
        return value
    return value


def events(path: str) -> list[dict]:
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [scrub(e) for e in rows if e.get("event") not in CLOCK_EVENTS]


def compare(ea: list[dict], eb: list[dict], what: str) -> list[str]:
    diffs = []
    for i, (x, y) in enumerate(zip(ea, eb)):
        if x != y:
            keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
            said = ", ".join(f"{k}: {x.get(k)!r} != {y.get(k)!r}" for k in keys)
            diffs.append(f"{what} event {i} ({x.get('event', '?')}): {said}")
    if len(ea) != len(eb):
        diffs.append(f"{what}: {len(ea)} events != {len(eb)} events")
    return diffs


def main(a: str, b: str) -> int:
    ea, eb = events(a), events(b)
    diffs = []
    for what, keep in (
        ("loop", lambda e: e.get("event") not in OFF_THREAD),
        ("writers", lambda e: e.get("event") in OFF_THREAD),
    ):
        diffs += compare([e for e in ea if keep(e)], [e for e in eb if keep(e)], what)
    if diffs:
        print(f"{a} and {b} differ in {len(diffs)} place(s):")
        for d in diffs[:20]:
            print("  " + d[:600])
        return 1
    print(f"{len(ea)} events equal field by field (clocks left out; writers' events in their own order)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))

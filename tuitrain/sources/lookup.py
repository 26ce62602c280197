"""`StepLookup`: a logged value at a given step, exactly, from a run's files.

The charts keep a long series as buckets (each its minimum and maximum, see series.py), so the inspect
cursor of a 1M-step run stands on those points and the other series' stored points near it are some
steps away. The run's `events.columns` (the numbers `JsonlWriter` writes beside events.jsonl, see
tuitrain/sinks/columns.py) holds every logged value: an index of each record's steps (read once,
then only what the file gained) says which records can hold a step, and only those are read. A
record is believed only where events.jsonl still holds the very bytes it was written from (CRC-32:
`events_file.record_lines`), as `FileSource` believes it; otherwise, or without the side file, the
lookup says None and the cursor reads the chart's own points. Must not import textual.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tuitrain.sinks.columns import ColumnsReader, Record
from tuitrain.sources.events_file import record_lines


class StepLookup:
    """`value(split, name, step)`: (the newest logged step at or before `step`, its value), read from
    RUN_DIR/events.columns; None where the file cannot tell."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self._reader: ColumnsReader | None = None
        self._records: list[Record] = []
        # (split, name) -> ([record index], [its first step], [its last step]), in file order
        self._index: dict[tuple[str, str], tuple[list[int], list[int], list[int]]] = {}
        self.reads = 0  # records read for values (tests: a lookup reads few)

    def _refresh(self) -> None:
        if self._reader is None:
            self._reader = ColumnsReader(self.run_dir)
        reader = self._reader
        for record in reader.refresh():
            if not record.rows:
                continue
            steps = reader.steps(record)
            if steps is None:
                continue
            i = len(self._records)
            self._records.append(record)
            for name in record.names:
                rows, first, last = self._index.setdefault((record.split, name), ([], [], []))
                rows.append(i)
                first.append(int(steps.min()))
                last.append(int(steps.max()))

    def _values(self, record: Record, name: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(steps, values) of one record, if its lines in events.jsonl are still the ones it came from."""
        cols = self._reader.columns(record) if self._reader is not None else None
        if cols is None or record_lines(self.run_dir, record) is None:
            return None
        self.reads += 1
        ints, floats = cols
        return ints[0], floats[1 + record.names.index(name)]

    def value(self, split: str, name: str, step: float) -> tuple[float, float] | None:
        self._refresh()
        found = self._index.get((split, name))
        if not found:
            return None
        rows, first, last = found
        s = int(step)
        # the records that can hold a step at or before s, the closest first (later in the file first)
        bound = [(min(hi, s), k) for k, (lo, hi) in enumerate(zip(first, last)) if lo <= s]
        best: tuple[int, float] | None = None
        for top, k in sorted(bound, reverse=True):
            if best is not None and top < best[0]:
                break
            got = self._values(self._records[rows[k]], name)
            if got is None:
                return None  # a side file events.jsonl no longer matches: not believed at all
            steps, values = got
            ok = np.flatnonzero((steps <= s) & np.isfinite(values))
            if not ok.size:
                continue
            top_step = steps[ok].max()
            j = ok[steps[ok] == top_step][-1]  # a repeated step: its newest value
            at = int(steps[j])
            if best is None or at > best[0]:
                best = (at, float(values[j]))
        return (float(best[0]), best[1]) if best is not None else None

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


__all__ = ["StepLookup"]

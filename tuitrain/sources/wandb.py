"""W&B runs from their `.wandb` files (`wandb/offline-run-<time>-<id>/run-<id>.wandb`, and an online run's
`run-<time>-<id>/` the same way), decoded with wandb's own record classes (`wandb_internal_pb2.Record`):
`pip install tuitrain[wandb]`; without them, one line saying so (docs/formats/others.md).

The file: a 7-byte header (":W&B", 0xBEE1 little-endian, version 0), then LevelDB-log blocks of 32 KiB,
each a run of chunks: CRC-32 (zlib's, of the type byte and the data), length (u16), type (1 FULL, 2 FIRST,
3 MIDDLE, 4 LAST), data; a record is a FULL chunk or FIRST, MIDDLE..., LAST; under 7 bytes left in a
block are padding. A chunk whose CRC is wrong (a flipped byte) is skipped with the rest of its block, as
LevelDB does; a last record cut short is normal in a live file and, when the writer has stopped, said.

Records read: `run` (its config, display name, project, start), `config` (config updates seen before the
run's start is said), `history` (a logged row: items by `nested_key`, joined by "/", or `key` in older
files, each with `value_json`; its step is `step.num` or the "_step" item, its time "_timestamp"; items
whose names begin with "_" are W&B's own), `exit` (the run's end and exit code). A history value that
is a W&B image file (`{"_type": "image-file", "path": ...}`) is shown from the run's files/ folder where
it is; a histogram (`{"_type": "histogram"}`) as one; other media are left out. `latest-run` is a link
to the newest run beside it, not a run of its own.

Finding runs and `tuitrain ls` read only a file's ends, with a small reader of protobuf's wire format of
their own (no wandb needed, nor its second of import): the run record near the file's start (its display
name, id and start: `RunRef.info`, the names the run list and `ls` show), and from the last 32 KiB blocks
the exit record and the last history record's step (`summary`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import struct
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from tuitrain.core.events import HistogramLogged, MediaLogged, RunFinished, RunStarted
from tuitrain.sources.polled import Columns, Item, PolledSource, split_name, written_within
from tuitrain.sources.peek import signed, wire_fields
from tuitrain.sources.refs import RunRef, Summary

TOOL = "wandb"
EXTRA = "wandb"  # wandb's record classes (protobuf)
HEADER = b":W&B" + struct.pack("<H", 0xBEE1) + b"\x00"
BLOCK = 32 * 1024
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
MISSING = "W&B runs are read with wandb's record classes: pip install tuitrain[wandb]"
_SKIP_DIRS = {"files", "logs", "tmp", "__pycache__", "node_modules", ".git", "mlruns", "checkpoints"}


def record_class() -> Any:
    """wandb's `Record` protobuf class, or None when wandb is not installed."""
    try:
        from wandb.proto import wandb_internal_pb2
    except Exception:  # not installed, or its protobuf runtime does not load
        return None
    return wandb_internal_pb2.Record  # (made at import by protobuf; wandb is not analysed: pyproject.toml)


def _run_file(folder: Path) -> Path | None:
    try:
        found = sorted(p for p in folder.iterdir() if p.suffix == ".wandb" and p.name.startswith("run-"))
    except OSError:
        return None
    return found[-1] if found else None


HEAD_LIMIT = 8 * BLOCK  # bytes of a file's start looked through for its run record
TAIL_BLOCKS = 8  # blocks of a file's end looked through for its last history record
# the field numbers of wandb_internal.proto read here (tests check them against wandb's own classes)
RECORD_HISTORY, RECORD_RUN, RECORD_EXIT = 2, 17, 18
RUN_ID, RUN_DISPLAY_NAME, RUN_START_TIME = 1, 8, 17
EXIT_CODE = 1
HISTORY_ITEM, HISTORY_STEP = 1, 2
ITEM_KEY, ITEM_NESTED_KEY, ITEM_VALUE_JSON = 1, 2, 16


def _text_of(fields: dict[int, list[Any]], number: int) -> str:
    got = fields.get(number)
    return got[-1].decode("utf-8", "replace") if got and isinstance(got[-1], bytes) else ""


def head(run_file: Path) -> dict[str, Any]:
    """The run record's display name, id and start ("display_name", "run_id", "started"), read from the
    file's first blocks; {} when none is there yet (or the file is not a W&B run file)."""
    chunks = Chunks(run_file.name)
    try:
        with open(run_file, "rb") as f:
            while chunks.pos + len(chunks.pending) < HEAD_LIMIT:
                data = f.read(BLOCK)
                if not data:
                    return {}
                for _, raw in chunks.feed(data):
                    run = wire_fields(raw).get(RECORD_RUN)
                    if run and isinstance(run[0], bytes):
                        return _run_info(wire_fields(run[0]))
                if chunks.header_ok is False:
                    return {}
    except OSError:
        return {}
    return {}


def _run_info(run: dict[int, list[Any]]) -> dict[str, Any]:
    info: dict[str, Any] = {"display_name": _text_of(run, RUN_DISPLAY_NAME), "run_id": _text_of(run, RUN_ID)}
    start = run.get(RUN_START_TIME)
    if start and isinstance(start[0], bytes):
        stamp = wire_fields(start[0])
        seconds, nanos = stamp.get(1, [0])[0], stamp.get(2, [0])[0]
        if isinstance(seconds, int) and isinstance(nanos, int) and seconds:
            info["started"] = seconds + nanos / 1e9
    return {k: v for k, v in info.items() if v}


def _step_of(history: dict[int, list[Any]]) -> int | None:
    step = history.get(HISTORY_STEP)
    if step and isinstance(step[0], bytes):
        num = wire_fields(step[0]).get(1)
        return signed(num[0]) if num and isinstance(num[0], int) else 0  # num 0 is not written
    for item in history.get(HISTORY_ITEM, []):  # an older file: the "_step" item
        fields = wire_fields(item) if isinstance(item, bytes) else {}
        if _text_of(fields, ITEM_KEY) == "_step" or _text_of(fields, ITEM_NESTED_KEY) == "_step":
            value = _value(_text_of(fields, ITEM_VALUE_JSON))
            return int(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
    return None


def summary(ref: RunRef) -> Summary:
    """The run's start (its run record), its end (the exit record: "completed", or "failed" with a code
    that is not 0, as the dashboard says it) and its last step (the last history record's), read from the
    file's first and last blocks; the step None when no history record is in the last TAIL_BLOCKS blocks."""
    run_file = _run_file(Path(ref.path))
    if run_file is None:
        return {}
    started = ref.info.get("started")
    out: Summary = {"started": started if isinstance(started, float) else head(run_file).get("started")}
    try:
        with open(run_file, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            last = max(0, (size - 1) // BLOCK)
            for back in range(1, TAIL_BLOCKS + 1):
                first = max(0, last - back + 1)
                f.seek(first * BLOCK)
                chunks = Chunks(run_file.name)
                if first:  # a block's start is a chunk's: read from there (a record begun before it left out)
                    chunks.header_ok, chunks.pos = True, first * BLOCK
                step, code = None, None
                for _, raw in chunks.feed(f.read()):
                    record = wire_fields(raw)
                    if record.get(RECORD_HISTORY) and isinstance(record[RECORD_HISTORY][0], bytes):
                        step = _step_of(wire_fields(record[RECORD_HISTORY][0]))
                    elif record.get(RECORD_EXIT) and isinstance(record[RECORD_EXIT][0], bytes):
                        exit_code = wire_fields(record[RECORD_EXIT][0]).get(EXIT_CODE, [0])[0]
                        code = signed(exit_code) if isinstance(exit_code, int) else 0
                if code is not None:
                    out["status"] = "failed" if code else "completed"
                if step is not None or first == 0:
                    out["step"] = step
                    break
    except OSError:
        return out
    return out


def _named(refs: list[RunRef]) -> list[RunRef]:
    """The refs with what each run record says (`head`) in their info."""
    out = []
    for ref in refs:
        run_file = _run_file(Path(ref.path))
        got = head(run_file) if run_file is not None else {}
        out.append(RunRef(ref.tool, ref.path, ref.name, ref.key, {**ref.info, **got}))
    return out


def find_runs(path: Path | str) -> list[RunRef]:
    """The W&B runs `path` is or holds: each folder with a `run-<id>.wandb` file (`latest-run` is a link
    to one of them, never a second run; asked for itself, it is the run it links to), named by its folder;
    its run record's display name, id and start in its info (registry.names shows the display name)."""
    return _named(_find_runs(path))


def _find_runs(path: Path | str) -> list[RunRef]:
    path = Path(path)
    if path.is_file():
        if path.suffix == ".wandb":
            run = path.parent.resolve() if path.parent.is_symlink() else path.parent
            return [RunRef(TOOL, run, run.name, info={"file": path.name})]
        return []
    if not path.is_dir():
        return []
    if path.is_symlink():
        path = path.resolve()
    own = _run_file(path)
    if own is not None:
        return [RunRef(TOOL, path, path.name, info={"file": own.name})]
    found = []
    for folder, dirs, _ in os.walk(path):  # links (latest-run) are listed among dirs but never walked into
        here = Path(folder)
        kept = []
        for d in sorted(dirs):
            if d in _SKIP_DIRS or d.startswith(".") or (here / d).is_symlink():
                continue
            run_file = _run_file(here / d) if d.startswith(("offline-run-", "run-")) else None
            if run_file is not None:
                run = here / d
                found.append(RunRef(TOOL, run, run.relative_to(path).as_posix(), info={"file": run_file.name}))
            else:
                kept.append(d)
        dirs[:] = kept
    return found


def is_live(ref: RunRef) -> bool:
    """Written to within polled.LIVE_WITHIN seconds (the source says the run's end once it reads it)."""
    run_file = _run_file(Path(ref.path))
    return run_file is not None and written_within([run_file])


def open_source(ref: RunRef, live: bool | None = None) -> WandbSource:
    return WandbSource(ref, is_live(ref) if live is None else live)


class Chunks:
    """The records of a .wandb file's bytes as they come (`feed`), checked and put together."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pos = 0  # the file's byte where `pending` begins
        self.pending = b""
        self.header_ok: bool | None = None
        self._parts: list[bytes] = []  # a FIRST chunk and its MIDDLEs, awaiting their LAST
        self._record_at = 0
        self.damaged: list[int] = []  # where chunks were skipped (bytes)

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """(byte, record data) of each whole record the bytes so far complete."""
        self.pending += data
        out: list[tuple[int, bytes]] = []
        buf, pos, at = self.pending, self.pos, 0
        if self.header_ok is None:
            if len(buf) < len(HEADER):
                return out
            self.header_ok = buf[:4] == HEADER[:4] and buf[4:6] == HEADER[4:6]
            if not self.header_ok:
                return out
            at = len(HEADER)
        elif not self.header_ok:
            return out
        while True:
            left = BLOCK - (pos + at) % BLOCK
            if left < CHUNK_HEADER:  # a block's padding
                if len(buf) - at < left:
                    break
                at += left
                continue
            if len(buf) - at < CHUNK_HEADER:
                break
            crc, length, kind = struct.unpack_from("<IHB", buf, at)
            end = at + CHUNK_HEADER + length
            if kind == 0 and length == 0:  # zeros: space the writer holds but has not written
                if not any(buf[at : at + CHUNK_HEADER]) and len(buf) - at >= left:
                    at += left
                    continue
                break
            if CHUNK_HEADER + length > left or kind not in (FULL, FIRST, MIDDLE, LAST):
                self._skip_block(pos + at)
                at += left
                continue
            if len(buf) < end:
                break  # the rest is not written yet
            data_part = buf[at + CHUNK_HEADER : end]
            if zlib.crc32(data_part, zlib.crc32(bytes([kind]))) != crc:
                self._skip_block(pos + at)
                at += left
                continue
            if kind == FULL:
                self._parts = []
                out.append((pos + at, data_part))
            elif kind == FIRST:
                self._parts, self._record_at = [data_part], pos + at
            elif self._parts:
                self._parts.append(data_part)
                if kind == LAST:
                    out.append((self._record_at, b"".join(self._parts)))
                    self._parts = []
            at = end
        self.pending, self.pos = buf[at:], pos + at
        return out

    def _skip_block(self, byte: int) -> None:
        self.damaged.append(byte)
        self._parts = []


def _value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _items_key(item: Any) -> str:
    return "/".join(item.nested_key) if len(item.nested_key) else item.key


class WandbSource(PolledSource):
    """Follows a run's .wandb file (see the module's docstring)."""

    records_its_end = True  # its status / exit record: said by this reader

    def __init__(self, ref: RunRef, live: bool) -> None:
        super().__init__(live)
        self.ref = ref
        self.run_dir = Path(ref.path)
        self.file = _run_file(self.run_dir) or self.run_dir / "run.wandb"
        self.chunks = Chunks(self.file.name)
        self.Record = record_class()
        self._started = False
        self._config: dict[str, Any] = {}
        self._run: Any = None
        self._size = -1
        self._undecoded = 0
        self._top = 0
        self._ended = False
        self._start_time = 0.0

    def describe(self) -> str:
        return str(self.file)

    def read(self) -> Iterable[Item]:
        out: list[Item] = []
        if self.Record is None:
            if not self._started:
                self._started = True
                self.problem(MISSING)
                out.append(self._run_started())
            return out
        try:
            with open(self.file, "rb") as f:
                f.seek(self.chunks.pos + len(self.chunks.pending))
                data = f.read()
                size = os.fstat(f.fileno()).st_size
        except OSError as e:
            self.problem(f"{self.file}: not readable ({e.strerror})", "unreadable")
            return out
        grown, self._size = size != self._size, size
        records = self.chunks.feed(data)
        if self.chunks.header_ok is False:
            self.problem(f"{self.file}: not a W&B run file (its first bytes are not :W&B)", "header")
        if self.chunks.damaged:
            n, first = len(self.chunks.damaged), self.chunks.damaged[0]
            self.problem(
                f"{self.file}: {n} damaged record{'s' if n > 1 else ''} skipped with the rest of "
                f"{'their' if n > 1 else 'its'} 32 KiB block (the first at byte {first:,})",
                "damaged",
            )
        if self.chunks.pending and (not grown or not self.live) and self.chunks.header_ok:
            self.problem(f"{self.file}: a torn last record at byte {self.chunks.pos:,} skipped", "torn")
        cols = Columns()
        media: list[Item] = []
        end: list[Item] = []
        for at, raw in records:
            try:
                record = self.Record.FromString(raw)
            except Exception:  # protobuf's DecodeError: its class differs by runtime
                self._undecoded += 1
                self.problem(
                    f"{self.file}: {self._undecoded} record(s) that do not decode skipped (the first at byte {at:,})",
                    "decode",
                )
                continue
            kind = record.WhichOneof("record_type")
            if kind == "history":
                self._history(record.history, cols, media)
            elif kind == "run" and self._run is None:
                self._run = record.run
                start = record.run.start_time
                self._start_time = start.seconds + start.nanos / 1e9 if record.run.HasField("start_time") else 0.0
                self._update(record.run.config.update)
            elif kind == "config" and not self._started:
                self._update(record.config.update)
            elif kind == "exit":
                end.extend(self._end(record.exit))
        if not self._started and (self._run is not None or len(cols) or not self.live):
            self._started = True
            out.append(self._run_started())
        if not self._started:
            return out  # the run record not written yet: its values wait with the file
        block = cols.block()
        if block is not None:
            out.append(block)
        out.extend(media)
        out.extend(end)
        return out

    def _update(self, updates: Any) -> None:
        for item in updates:
            key = _items_key(item)
            if key.startswith("_"):
                continue
            value = _value(item.value_json)
            if isinstance(value, dict) and set(value) == {"value", "desc"}:
                value = value["value"]  # an older wandb's config item
            self._config[key] = value

    def _run_started(self) -> RunStarted:
        run, env = self._run, {"tool": TOOL}
        name = self.ref.name
        if run is not None:
            env.update(
                {
                    k: v
                    for k, v in (
                        ("project", run.project),
                        ("run_id", run.run_id),
                        ("entity", run.entity),
                        ("group", run.run_group),
                    )
                    if v
                }
            )
            name = run.display_name or name
        return RunStarted(
            run_dir=str(self.run_dir),
            experiment=name,
            epochs=0,
            max_steps=0,
            steps_per_epoch=0,
            batch_size=0,
            config=dict(self._config),
            env=env,
            time=self._start_time,
            loop=TOOL,  # the dashboard's word for a run another tool wrote (dashboard/state/foreign.py)
        )

    def _history(self, history: Any, cols: Columns, media: list[Item]) -> None:
        values: dict[str, Any] = {}  # a row's items as the nested dicts they were logged as
        for item in history.item:
            path = list(item.nested_key) if len(item.nested_key) else [item.key]
            node = values
            for part in path[:-1]:
                inner = node.get(part)
                if not isinstance(inner, dict):
                    inner = node[part] = {}
                node = inner
            node[path[-1]] = _value(item.value_json)
        step = history.step.num if history.HasField("step") else values.get("_step")
        if not isinstance(step, int) or isinstance(step, bool):
            step = int(step) if isinstance(step, float) and math.isfinite(step) else self._top
        self._top = max(self._top, step)
        at = values.get("_timestamp")
        at = float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else None
        self._values(values, "", step, at, cols, media)

    def _values(
        self, values: dict[str, Any], prefix: str, step: int, at: float | None, cols: Columns, media: list[Item]
    ) -> None:
        for key, value in values.items():
            if not prefix and key.startswith("_"):
                continue  # W&B's own: _step, _runtime, _timestamp, _wandb
            name = f"{prefix}{key}"
            if isinstance(value, dict):
                if "_type" in value:
                    self._media(name, step, value, at, media)
                else:
                    self._values(value, name + "/", step, at, cols, media)
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            split, short = split_name(name)
            cols.add(split, "step", short, float(step), float(value), at)

    def _media(self, key: str, step: int, value: dict[str, Any], at: float | None, media: list[Item]) -> None:
        kind = value.get("_type")
        when = at if at is not None else self._start_time
        if kind == "image-file" and isinstance(value.get("path"), str):
            path = (self.run_dir / "files" / value["path"]).resolve()
            if self.run_dir.resolve() not in path.parents:  # a path out of the run's folder: not followed
                return
            width, height = value.get("width", 0), value.get("height", 0)
            media.append(
                MediaLogged(
                    key=key,
                    step=step,
                    kind="image",
                    path=str(path),
                    time=when,
                    width=width if isinstance(width, int) else 0,
                    height=height if isinstance(height, int) else 0,
                )
            )
        elif kind == "histogram":
            counts, bins = value.get("values"), value.get("bins")
            if not isinstance(counts, list) or not isinstance(bins, list) or not counts or len(bins) != len(counts) + 1:
                return
            try:
                weights, edges = np.asarray(counts, np.float64), np.asarray(bins, np.float64)
            except (TypeError, ValueError):
                return
            low, high = float(edges[0]), float(edges[-1])
            if not (np.isfinite(edges).all() and np.isfinite(weights).all() and high > low):
                return
            # equal bins from low to high, as HistogramLogged has them (W&B's own are; a user's may not be)
            centers = (edges[:-1] + edges[1:]) / 2
            equal, _ = np.histogram(centers, bins=len(counts), range=(low, high), weights=weights)
            media.append(
                HistogramLogged(
                    key=key,
                    step=step,
                    low=low,
                    high=high,
                    counts=[int(round(c)) for c in equal.tolist()],
                    min=low,
                    max=high,
                    time=when,
                )
            )

    def _end(self, exit_record: Any) -> list[Item]:
        if self._ended:
            return []
        self._ended, self.live = True, False
        code = exit_record.exit_code
        duration = float(exit_record.runtime)
        at = self._start_time + duration if self._start_time else 0.0
        if code:
            from tuitrain.core.lifecycle import run_failed  # (it imports torch: only for a failed run)

            failed = run_failed(
                f"the W&B run exited with code {code}", step=self._top, duration=duration, exit_code=code
            )
            return [dataclasses.replace(failed, time=at)]
        return [
            RunFinished(
                status="completed",
                exit_code=0,
                epoch=0,
                step=self._top,
                reason="",
                duration=duration,
                summary={},
                best={},
                time=at,
            )
        ]


__all__ = [
    "EXTRA",
    "HEADER",
    "MISSING",
    "TOOL",
    "Chunks",
    "WandbSource",
    "find_runs",
    "is_live",
    "open_source",
    "summary",
]

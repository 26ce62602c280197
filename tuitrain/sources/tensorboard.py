"""TensorBoard event files as a run of tuitrain's dashboard (docs/formats/tensorboard.md).

A folder holding `events.out.tfevents.*` files is a run (as TensorBoard has it; nested folders are runs
of their own); its files are read in the order of the timestamps in their names (a run written in two
sessions has two). Scalars go out as `MetricsBlock`s, one per read of the files, decoded with numpy from
the records' bytes where a record is what `add_scalar` writes (tfrecord.py); pictures, texts,
histograms and hparams, and scalars written as tensors, through protobuf (tb_summary.py).

A tag's split: "val", "valid", "validation", "eval" or "evaluation" as its first or last part makes it
a "valid" metric named by the rest ("loss/val", "val/loss", "val_loss", "loss_val", "val-loss" -> valid
"loss"; parts are split at "/", or at "_" and "-" in a tag without "/"), "train" or "training" a "train"
one ("train_loss" -> train "loss"); any other tag is a "train" metric under its own name ("test/acc").
Where two tags would take one name ("train/loss" and "loss"), the later keeps its whole tag ("loss (2)"
if that is taken too). tuitrain's own TensorBoard sink writes "train/epoch_loss" for a phase's aggregate:
read back as scope "epoch". A tag without "/" ending in "_step" or "_epoch" (Lightning's on_step/on_epoch
pair, "train_loss_step" and "train_loss_epoch") is that scope of the rest, as the Lightning CSV reader
and the Lightning callback name them; Lightning's "epoch" scalar is the run's epoch, not a chart.

Live: while a process of this machine writes a file of the run (or, for a file written elsewhere, while
it changed in the last 150 s): tb_live.py. A live source reads what its files gained every `poll` s.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tuitrain.core.events import Event, RunFinished, RunStarted
from tuitrain.core.text import safe_text
from tuitrain.sources import tb_ends, tfrecord
from tuitrain.sources.tb_live import LIVE_SECONDS, TIMESTAMP, writing
from tuitrain.sources.refs import RunRef, Summary
from tuitrain.sources.run_files import Emit, MetricsBlock
from tuitrain.sources.polled import scope_suffix

if TYPE_CHECKING:
    from tuitrain.sources.tb_summary import Found

TOOL = "tensorboard"
EXTRA = "tensorboard"  # protobuf for all but plain scalars, and a C CRC32C: pip install 'tuitrain[tensorboard]'
PREFIX = "events.out.tfevents."
CHUNK = 1 << 26  # bytes read at a time (a 1M-step file of scalars is ~42 MB: one read)
MAX_PROBLEMS = 20  # lines a file's damage may take; past them one line counts the rest
_VALID = {"val", "valid", "validation", "eval", "evaluation"}
_TRAIN = {"train", "training"}
_WORDS = "|".join(sorted(_VALID | _TRAIN, key=len, reverse=True))
_PREFIXED = re.compile(rf"^(?P<word>{_WORDS})[_-](?P<rest>.+)$", re.IGNORECASE)
_SUFFIXED = re.compile(rf"^(?P<rest>.+?)[_-](?P<word>{_WORDS})$", re.IGNORECASE)
_HPARAMS_DIR = re.compile(r"^\d{9,11}\.\d+$")  # SummaryWriter.add_hparams writes into RUN/<time.time()>/


def is_event_file(name: str) -> bool:
    return name.startswith(PREFIX) and not name.endswith((".tmp", ".part"))


def _file_order(name: str) -> tuple[int, str]:
    m = TIMESTAMP.match(name)
    return (int(m.group(1)) if m else 1 << 62, name)


def event_files(folder: Path) -> list[Path]:
    """A run's event files, in the order of the timestamps in their names."""
    try:
        names = [e.name for e in os.scandir(folder) if is_event_file(e.name) and e.is_file()]
    except OSError:
        return []
    return [folder / n for n in sorted(names, key=_file_order)]


def run_files(folder: Path) -> list[Path]:
    """The files a run's source reads: its own, then those of the folders `add_hparams` made in it."""
    own = event_files(folder)
    return own + hparams_files(folder) if own else own


def hparams_files(folder: Path) -> list[Path]:
    """The event files of the folders `SummaryWriter.add_hparams` made in a run (named by time.time())."""
    try:
        subs = sorted(e.name for e in os.scandir(folder) if e.is_dir() and _HPARAMS_DIR.match(e.name))
    except OSError:
        return []
    return [f for sub in subs for f in event_files(folder / sub)]


def find_runs(path: str | os.PathLike[str]) -> list[RunRef]:
    """Each folder at or under `path` holding event files (a file given: its folder)."""
    root = Path(path)
    if root.is_file():
        return (
            [_ref(root.parent, root.parent.name or str(root.parent), [root.name])] if is_event_file(root.name) else []
        )
    runs: list[RunRef] = []
    for folder, dirs, files in os.walk(root, onerror=lambda e: None):
        dirs.sort()
        names = sorted((f for f in files if is_event_file(f)), key=_file_order)
        if names:
            dirs[:] = [d for d in dirs if not _HPARAMS_DIR.match(d)]  # torch's add_hparams: this run's config
            rel = os.path.relpath(folder, root)
            name = root.resolve().name if rel == "." else rel.replace(os.sep, "/")
            runs.append(_ref(Path(folder), name, names))
    return runs


def _ref(folder: Path, name: str, names: list[str]) -> RunRef:
    return RunRef(tool=TOOL, path=folder, name=name, info={"files": len(names)})


def open_source(ref: RunRef, live: bool | None = None) -> TensorBoardSource:
    return TensorBoardSource(ref, live=live)


def is_live(ref: RunRef) -> bool:
    """Whether the run's writer is still writing (the module's docstring says the rule: tb_live.py)."""
    return writing(event_files(ref.path))


def summary(ref: RunRef) -> Summary:
    """What `tuitrain ls` shows of the run: its start and last step, from its files' ends (tb_ends.py)."""
    return tb_ends.summary(event_files(Path(ref.path)))


def split_of(tag: str) -> tuple[str, str, str]:
    """(split, scope, name) of a tag (the module's docstring says the rule)."""
    parts = tag.split("/")
    for i in (0, len(parts) - 1) if len(parts) > 1 else ():
        low = parts[i].lower()
        if low in _VALID or low in _TRAIN:
            rest = "/".join(parts[:i] + parts[i + 1 :])
            split = "valid" if low in _VALID else "train"
            if rest.startswith("epoch_") and len(rest) > 6:
                return split, "epoch", rest[6:]
            return split, "step", rest
    if len(parts) == 1:
        tag, scope = scope_suffix(tag)  # Lightning's on_step/on_epoch pair ("train_loss_epoch"), as its CSV reader
        scope = scope or "step"
        m = _PREFIXED.match(tag) or _SUFFIXED.match(tag)
        if m:
            return ("valid" if m.group("word").lower() in _VALID else "train"), scope, m.group("rest")
        return "train", scope, tag
    return "train", "step", tag


class _File:
    """How far one event file is read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.label = safe_text(path.name, lines=False)  # as problem lines name it: nothing in it obeyed
        self.pos = 0  # the next record's first byte
        self.seen = -1  # the file's size when last read
        self.damage: tuple[int, int, int, str] | None = None  # the last range said: (line's index, from, to, line)
        self.torn: int | None = None  # a record not all there at the last read
        self.said = 0  # problem lines of this file so far
        self.ident: tuple[int, int] | None = None


class TensorBoardSource:
    """The dashboard's source of one TensorBoard run (refs.py's contract): its event files read from
    the start, followed while `live` (a new file of the folder too), until closed."""

    def __init__(self, ref: RunRef, live: bool | None = None, poll: float = 0.25, verify: bool = True) -> None:
        self.ref = ref
        self.folder = Path(ref.path)
        self._live_given = live
        self.live = is_live(ref) if live is None else live
        self.poll = poll
        self.verify = verify  # every record's data CRC checked (cheap: tfrecord.py)
        self.problems: list[str] = []
        self.caught_up = False
        self.ends_reached = 0
        self.points = 0  # scalar values handed on
        self.backlog: Callable[[], int] = lambda: 0  # set by the app: events not yet shown
        self._stop = threading.Event()
        self._emit: Emit | None = None
        self._files: dict[Path, _File] = {}
        self._decoder: Any = None
        self._no_protobuf = ""
        self._names: dict[str, tuple[str, str, str]] = {}  # tag -> (split, scope, name)
        self._taken: set[tuple[str, str, str]] = set()
        self._started = False
        self._finished = False
        self._first_wall: float | None = None
        self._last_wall: float | None = None
        self._max_step = 0
        self._config: dict[str, Any] = {}
        self._epoch = 0

    # the Source protocol

    def open(self, emit: Emit) -> None:
        self._emit = emit

    def close(self) -> None:
        self._stop.set()

    def work(self) -> int | None:
        assert self._emit is not None, "open() first"
        checked = time.monotonic()
        while not self._stop.is_set():
            grew = self.read_to_end()
            self.caught_up = True
            self.ends_reached += 1
            if self._live_given is None and time.monotonic() - checked > 2.0:
                checked = time.monotonic()
                self.live = is_live(self.ref)
            if not (self.live and grew):
                self._stop.wait(self.poll)
        return None

    def read_to_end(self) -> bool:
        """One pass of `work`: what the files gained is handed on; the run said started (the first time)
        and, where its writer stopped, a torn record and its end said once. Whether anything new came."""
        grew = self.read_once()
        if not self._started:
            self._start()
        if not self.live:
            self._at_rest()
        return grew

    # reading

    def read_once(self) -> bool:
        """Reads what the run's files gained since the last call; whether anything new was read."""
        grew = False
        for path in run_files(self.folder):
            f = self._files.get(path)
            if f is None:
                f = self._files[path] = _File(path)
            grew |= self._read_file(f)
        return grew

    def _read_file(self, f: _File) -> bool:
        try:
            st = os.stat(f.path)
            if f.ident == (st.st_dev, st.st_ino) and st.st_size in (f.pos, f.seen):
                return False  # nothing new (a live run's files, polled; a torn record as it was): not opened
            with open(f.path, "rb") as handle:
                st = os.fstat(handle.fileno())
                ident = (st.st_dev, st.st_ino)
                if f.ident is not None and (ident != f.ident or st.st_size < f.pos):  # replaced or cut: anew
                    self._say(f, f"{f.label}: the file was replaced or cut; read again from its start")
                    f.pos, f.torn = 0, None
                f.ident, f.seen = ident, st.st_size
                if st.st_size <= f.pos:
                    return False
                handle.seek(f.pos)
                grew = False
                while not self._stop.is_set():
                    base = f.pos
                    buf = handle.read(CHUNK)
                    if not buf:
                        break
                    used = self._chunk(f, buf, base)
                    if used == 0 and len(buf) == CHUNK:  # no whole record in a chunk: one longer than it?
                        length = tfrecord.header_length(buf, 0)
                        if length is None:  # no record begins here, nor anywhere in the chunk
                            self._damage(f, base, base + len(buf))
                            used = len(buf)
                        elif base + length + 16 <= os.fstat(handle.fileno()).st_size:
                            more = handle.read(length + 16 - len(buf))
                            used = self._chunk(f, buf + more, base)
                    f.pos = base + used
                    if used == 0:
                        break  # a record longer than a chunk, not all written yet
                    grew |= used > 0
                    if len(buf) < CHUNK:
                        break
                    handle.seek(f.pos)
                    while self.backlog() > 50 and not self._stop.is_set():
                        self._stop.wait(0.05)  # the screen is behind: wait for it
                return grew
        except OSError as e:
            self._say(f, f"{f.label}: cannot be read ({e.strerror or e})")
            return False

    def _chunk(self, f: _File, buf: bytes, base: int) -> int:
        """The whole records of `buf` (the file's bytes from `base`): handed on; returns the bytes used."""
        framing = tfrecord.frame(buf)
        for start, end in framing.damage:
            self._damage(f, base + start, base + end)
        f.torn = base + framing.torn if framing.torn is not None else None
        starts, lengths = framing.starts, framing.lengths
        if not starts.size:
            return framing.stop
        rec = tfrecord.read_records(buf, starts, lengths, verify=self.verify)
        bad = np.flatnonzero(~rec.good)
        for i in bad[:MAX_PROBLEMS].tolist():
            self._say(f, f"{f.label}: the record at byte {base + int(starts[i]):,} is damaged (its CRC): skipped")
        if bad.size > MAX_PROBLEMS:
            self._say(f, f"{f.label}: {bad.size - MAX_PROBLEMS:,} more damaged records skipped", force=True)
        rest = rec.good.copy()
        rest[rec.which] = False
        others = [i for i in np.flatnonzero(rest).tolist() if not _file_version(buf, int(starts[i]), int(lengths[i]))]
        found = self._decode(f, buf, base, starts, lengths, np.array(others, np.int64))
        self._hand_on(rec, found)
        return framing.stop

    def _decode(
        self, f: _File, buf: bytes, base: int, starts: np.ndarray, lengths: np.ndarray, which: np.ndarray
    ) -> Found | None:
        if not which.size:
            return None
        if self._decoder is None and not self._no_protobuf:
            from tuitrain.sources import tb_summary

            try:
                self._decoder = tb_summary.Decoder()
            except tb_summary.MissingProtobuf as e:
                self._no_protobuf = str(e)
                self.problems.append(self._no_protobuf)
        if self._decoder is None:
            return None
        found: Found = self._decoder.decode(buf, starts, lengths, which)
        for i in found.undecodable[:MAX_PROBLEMS]:
            self._say(f, f"{f.label}: the record at byte {base + int(starts[i]):,} is no event: skipped")
        if found.first_wall is not None and self._first_wall is None:
            self._first_wall = found.first_wall
        self._config.update(found.config)
        return found

    def _name(self, tag: str) -> tuple[str, str, str]:
        key = self._names.get(tag)
        if key is None:
            key = split_of(tag)
            if key in self._taken:
                key = ("train", "step", tag)
                n = 2
                while key in self._taken:  # "loss" taken by "train/loss" and then a tag named "loss" itself
                    key, n = ("train", "step", f"{tag} ({n})"), n + 1
            self._taken.add(key)
            self._names[tag] = key
        return key

    def _hand_on(self, rec: tfrecord.Records, found: Any) -> None:
        emit = self._emit
        assert emit is not None
        which, steps, walls, values, ids = rec.which, rec.steps, rec.walls, rec.values, rec.tag_ids
        tags = [t.decode("utf-8", errors="replace") for t in rec.tags]
        if found is not None and found.scalars:
            extra = found.scalars
            index = {t: k for k, t in enumerate(tags)}
            for _, tag, *_ in extra:
                if tag not in index:
                    index[tag] = len(tags)
                    tags.append(tag)
            which = np.concatenate([which, np.array([e[0] for e in extra], np.int64)])
            steps = np.concatenate([steps, np.array([e[2] for e in extra], np.int64)])
            walls = np.concatenate([walls, np.array([e[3] for e in extra], np.float64)])
            values = np.concatenate([values, np.array([e[4] for e in extra], np.float64)])
            ids = np.concatenate([ids, np.array([index[e[1]] for e in extra], np.int64)])
        if walls.size and self._first_wall is None:
            self._first_wall = float(walls.min())
        if not self._started and (walls.size or (found is not None and found.media)):
            self._start()
        if which.size:
            block = _block(tags, self._name, which, steps, walls, values, ids)
            self._max_step = max(self._max_step, block.max_step or 0)
            if block.epoch:
                self._epoch = block.epoch
            else:
                block.epoch = self._epoch
            self._last_wall = block.time
            self.points += which.size
            emit(block, None)  # type: ignore[arg-type]  # a block stands for many MetricsLogged, as FileSource's do
        if found is not None:
            for _, event in found.media:
                emit(event, None)

    def _start(self) -> None:
        self._started = True
        self._config.update(self._hparams_config())
        t = _opened_at(event_files(self.folder)) or self._first_wall or time.time()
        self._first_wall = t
        event = RunStarted(
            run_dir=str(self.folder),
            experiment=self.ref.name,
            epochs=0,
            max_steps=0,
            steps_per_epoch=0,
            batch_size=0,
            config=dict(self._config),
            time=t,
            loop=TOOL,  # the dashboard's word for what it knows of a run another tool wrote
        )
        assert self._emit is not None
        self._emit(event, None)

    def _hparams_config(self) -> dict[str, Any]:
        """The config in the run's add_hparams folders: wanted in RunStarted, though their files are read
        after the run's own (so that the run's own metrics come first in the chart grid)."""
        config: dict[str, Any] = {}
        for path in hparams_files(self.folder):
            if path not in self._files:
                config.update(_config_of(path))
        return config

    def _at_rest(self) -> None:
        """The writer stopped: a record left torn is said once, and the run is said finished once."""
        for f in self._files.values():
            if f.torn is not None:
                self._say(f, f"{f.label}: a torn last record at byte {f.torn:,} skipped")
                f.torn = None
        if not self._finished and self._started:
            self._finished = True
            assert self._emit is not None
            first = self._first_wall or 0.0
            last = self._last_wall or first
            self._emit(
                RunFinished(
                    status="completed",
                    exit_code=0,
                    epoch=self._epoch,
                    step=self._max_step,
                    reason="",
                    duration=max(0.0, last - first),
                    summary={},
                    best={},
                    time=last,
                ),
                None,
            )

    def _damage(self, f: _File, start: int, end: int) -> None:
        """A range of bytes that are no records: one line, which grows while the next range goes on from it."""
        if f.damage is not None and f.damage[2] == start and self.problems[f.damage[0]] == f.damage[3]:
            start = f.damage[1]
            line = f"{f.label}: bytes {start:,}-{end:,} are no records (damaged): skipped"
            self.problems[f.damage[0]] = line
            f.damage = (f.damage[0], start, end, line)
            return
        line = f"{f.label}: bytes {start:,}-{end:,} are no records (damaged): skipped"
        self._say(f, line)
        if self.problems and self.problems[-1] == line:
            f.damage = (len(self.problems) - 1, start, end, line)

    def _say(self, f: _File, line: str, force: bool = False) -> None:
        if f.said < MAX_PROBLEMS or force:
            self.problems.append(line)
        f.said += 1


def _config_of(path: Path) -> dict[str, Any]:
    """The hparams a small event file holds (an add_hparams folder's), read ahead of the run's start."""
    try:
        from tuitrain.sources import tb_summary

        buf = path.read_bytes()[: 1 << 24]
        framing = tfrecord.frame(buf)
        which = np.arange(framing.starts.size)
        return tb_summary.Decoder().decode(buf, framing.starts, framing.lengths, which).config
    except (OSError, ImportError):
        return {}


def _file_version(buf: bytes, start: int, length: int) -> bool:
    """Whether a record is a file's first: its wall time, `file_version` ("brain.Event:2") and perhaps
    `source_metadata` (the writer's name) alone; read without protobuf (plain scalars then need none)."""
    d, end = start + 12, start + 12 + length
    if length >= 256 or buf[d] != 9 or buf[d + 9] != 0x1A:
        return False
    j = d + 11 + buf[d + 10]
    return j == end or (j + 2 <= end and buf[j] == 0x52 and j + 2 + buf[j + 1] == end)


def _opened_at(files: list[Path]) -> float | None:
    """When the run's first file was begun: the wall time of its first record (the file_version event)."""
    for path in files[:1]:
        try:
            with open(path, "rb") as f:
                head = f.read(21)
        except OSError:
            return None
        if len(head) == 21 and head[12] == 9:
            wall = float(np.frombuffer(head[13:21], "<f8")[0])
            return wall if np.isfinite(wall) and wall > 0 else None
    return None


class TensorBoardBlock(MetricsBlock):
    """A MetricsBlock of TensorBoard scalars (it has no events.jsonl lines behind it)."""

    __slots__ = ()

    @property
    def lines(self) -> list[bytes]:
        return []

    def events(self) -> list[Event]:
        from tuitrain.core.events import MetricsLogged

        out: list[Event] = []
        for (split, scope, name), (xs, ys) in self.series.items():
            for x, y in zip(xs.tolist(), ys.tolist(), strict=True):
                out.append(MetricsLogged(split=split, epoch=self.epoch, step=int(x), metrics={name: y}, scope=scope))
        return out


def _block(
    tags: list[str],
    name: Callable[[str], tuple[str, str, str]],
    which: np.ndarray,
    steps: np.ndarray,
    walls: np.ndarray,
    values: np.ndarray,
    ids: np.ndarray,
) -> TensorBoardBlock:
    """The scalars of one read as a block: each tag's (steps, values) in the records' order (`which`: each
    point's record; the points come grouped by the records' lengths, not in the records' order), its key
    `name(tag)`, asked in the order the tags first came (the first of two tags of one name keeps it)."""
    block = TensorBoardBlock.__new__(TensorBoardBlock)
    block._lines, block._raw, block._n = [], None, int(steps.size)
    block.samples, block.progress = [], {}
    block.series, block.latest = {}, {}
    fsteps = steps.astype(np.float64)
    if len(tags) == 1:
        segments = [np.arange(steps.size)]
    else:
        small = ids.astype(np.int16) if len(tags) < 32768 else ids
        order = np.argsort(small, kind="stable")  # a radix sort, for 16-bit keys
        segments = np.split(order, np.flatnonzero(np.diff(small[order])) + 1)
    groups = []
    for seg in segments:
        w = which[seg]
        if w.size > 1 and (w[1:] < w[:-1]).any():  # a tag's records of several lengths: back in their order
            seg = seg[np.argsort(w, kind="stable")]
        groups.append((int(ids[seg[0]]), seg, int(which[seg[0]])))
    groups.sort(key=lambda g: g[2])  # names in the order they first came
    train = None
    for tag_id, part, _ in groups:
        if tags[tag_id] == "epoch":  # Lightning's epoch counter: the run's epoch (below), not a chart
            continue
        if tags[tag_id] == "hp_metric" and (values[part] == -1).all():  # Lightning's placeholder, never set
            continue
        key = name(tags[tag_id])
        block.series[key] = (fsteps[part], values[part])
        block.latest[f"{key[0]}/{key[2]}"] = float(values[part[-1]])
        if key[0] == "train" and key[1] == "step" and (train is None or part.size > train.size):
            train = part
    block.max_step = int(steps.max())
    block.time = float(walls.max())
    block.epoch = 0
    epoch = next((part for tag_id, part, _ in groups if tags[tag_id] == "epoch"), None)
    if epoch is not None:  # Lightning logs the epoch (from 0) as a scalar
        last = values[epoch[-1]]
        block.epoch = int(last) + 1 if np.isfinite(last) and 0 <= last < 1e9 else 0
    block.train_steps = None
    if train is not None:  # the x axes and the speed from the train metric logged most often
        zeros = np.zeros(train.size)
        block.train_steps = (fsteps[train], walls[train], zeros, zeros, zeros)
    return block


__all__ = [
    "EXTRA",
    "LIVE_SECONDS",
    "TOOL",
    "TensorBoardSource",
    "event_files",
    "find_runs",
    "is_live",
    "open_source",
    "split_of",
]

"""Another tool's SQLite database read and never written (mlflow.py's `mlflow.db`, trackio.py's project
databases): opened read-only (`file:...?mode=ro`), a query's rows read in parts so that a damaged file
gives the rows before the damage, a database locked by its writer waited for at the next look.

A database that cannot be opened read-only as it is (a hot journal left by a writer that died in a
transaction asks to be rolled back: a write) is read as it is on disk (`immutable=1`), which is said.
Never imports textual.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

MAGIC = b"SQLite format 3\x00"


def is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(16) == MAGIC
    except OSError:
        return False


class Unreadable(Exception):
    """A database that said no: `kind` "locked" (its writer holds it: read again later) or "damaged"."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Database:
    """One read-only connection, opened when first asked and again after a failure."""

    def __init__(self, path: Path | str, timeout: float = 0.25) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.immutable = False  # read as it is on disk: its journal not applied, its writer's locks ignored
        self._conn: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            uri = self.path.resolve().as_uri() + ("?immutable=1" if self.immutable else "?mode=ro")
            self._conn = sqlite3.connect(uri, uri=True, timeout=self.timeout, check_same_thread=False)
        return self._conn

    def rows(self, sql: str, args: tuple[object, ...] = (), part: int = 20_000) -> tuple[list[Any], str]:
        """The rows of a query and "" or, where the file is damaged past some rows, the rows before the
        damage and what went wrong. Raises `Unreadable` where nothing could be read."""
        got: list[Any] = []
        try:
            cursor = self._connect().execute(sql, args)
            while True:
                chunk = cursor.fetchmany(part)
                if not chunk:
                    return got, ""
                got.extend(chunk)
        except sqlite3.OperationalError as e:
            self.close()
            text = str(e)
            if "locked" in text or "busy" in text:
                raise Unreadable("locked", text) from None
            if not self.immutable and ("readonly" in text or "unable to open" in text):
                self.immutable = True  # a hot journal, or a WAL file's index it may not make: the file as it is
                return self.rows(sql, args, part)
            if got:
                return got, text
            raise Unreadable("damaged", text) from None
        except sqlite3.DatabaseError as e:  # malformed, not a database, a page cut short
            self.close()
            if got:
                return got, str(e)
            raise Unreadable("damaged", str(e)) from None

    def tables(self) -> set[str]:
        try:
            rows, _ = self.rows("SELECT name FROM sqlite_master WHERE type = 'table'")
        except Unreadable:
            return set()
        return {r[0] for r in rows}

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
            self._conn = None


def say_unreadable(source: Any, path: Path, e: Unreadable) -> None:
    """A database a reader could not read this time said on its source (a `PolledSource`): locked by its
    writer (read again at the next look), or not a database it can read."""
    if e.kind == "locked":
        source.problem(f"{path}: locked by its writer; read again at the next look", "locked")
    else:
        source.problem(f"{path}: not readable as a database ({e})", "damaged")


def say_read(source: Any, path: Path, damage: str, immutable: bool, read: str, on_disk: str) -> None:
    """A read that came through said on its source: no longer locked; `damage` met after the `read` rows;
    the file read as it is on disk (`on_disk`: what that leaves out)."""
    source.clear("locked")
    if damage:
        source.problem(f"{path}: damaged ({damage}); the {read} before it read", "damaged")
    if immutable:
        source.problem(f"{path}: read as it is on disk ({on_disk})", "ro")


__all__ = ["say_read", "say_unreadable", "MAGIC", "Database", "Unreadable", "is_sqlite"]

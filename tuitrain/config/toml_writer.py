"""A small TOML writer for resolved configs: `dumps(dict) -> str` that `tomllib.loads` reads back equal.

Tables become `[a.b]` sections, dicts inside arrays become inline tables, floats are written
exactly (repr, plus inf/nan). Python's standard library reads TOML but does not write it, and the
config needs no more than this. Must not import torch or textual.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def dumps(data: dict[str, Any]) -> str:
    """TOML text for `data`; TypeError names the key of a value TOML cannot hold (such as None)."""
    lines: list[str] = []
    _write_table(lines, [], data)
    return "\n".join(lines).lstrip("\n") + "\n"


def _write_table(lines: list[str], path: list[str], table: dict[str, Any]) -> None:
    scalars = [(k, v) for k, v in table.items() if not isinstance(v, dict)]
    tables = [(k, v) for k, v in table.items() if isinstance(v, dict)]
    # a table with only sub-tables needs no header: the sub-table headers create it
    if path and (scalars or not tables):
        lines.append("")
        lines.append("[" + ".".join(_key(p) for p in path) + "]")
    for key, value in scalars:
        lines.append(f"{_key(key)} = {_value(value, path + [key])}")
    for key, value in tables:
        _write_table(lines, path + [key], value)


def _key(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"TOML keys are strings, got {key!r}")
    return key if _BARE_KEY.match(key) else _string(key)


def _string(text: str) -> str:
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _float(x: float) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(x)  # shortest text that reads back to the same float; "1e-05" and "3.0" are TOML


def value_text(value: Any) -> str:
    """One value as TOML writes it (what `--set KEY=VALUE` takes); TypeError for what TOML cannot hold."""
    return _value(value, [])


def _value(value: Any, path: list[str]) -> str:
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v, path) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = ", ".join(f"{_key(k)} = {_value(v, path + [k])}" for k, v in value.items())
        return "{ " + items + " }"
    where = ".".join(str(p) for p in path)
    raise TypeError(f"{where}: TOML cannot hold {type(value).__name__} value {value!r}")

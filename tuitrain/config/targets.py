"""Turning a config's "module:callable" strings into callables, and checking their keyword arguments.

Modules resolve against the config file's folder first, then the current directory, then installed
packages. Importing a target runs the user's module (that is the point), but nothing here builds a
model or imports torch or textual itself.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

from tuitrain.config.kwarg_types import annotations_of, type_error
from tuitrain.config.schema import ConfigError, suggest


def split_target(spec: str, key: str, file: str | None = None) -> tuple[str, str]:
    """("pkg.mod", "Class.attr") from "pkg.mod:Class.attr"; ConfigError when malformed."""
    module, sep, attr = spec.partition(":")
    if not sep or not module.strip() or not attr.strip() or ":" in attr:
        hint = ""
        if not sep and "." in spec:
            hint = " (did you mean '{}:{}'?)".format(*spec.rsplit(".", 1))
        raise ConfigError(f'expected "module:callable", got {spec!r}{hint}', file=file, key=key)
    return module.strip(), attr.strip()


def _local_folders(base_dir: Path) -> list[str]:
    folders = [str(Path(base_dir).resolve()), str(Path.cwd().resolve())]
    return list(dict.fromkeys(folders))


def _put_first_on_path(folder: str) -> None:
    # the user's module may import its siblings, and DataLoader workers unpickle by module name
    if folder in sys.path:
        sys.path.remove(folder)
    sys.path.insert(0, folder)
    importlib.invalidate_caches()


def import_module(module: str, base_dir: Path, key: str, file: str | None = None) -> Any:
    """Import `module`, looking in base_dir, then the current directory, then installed packages."""
    top = module.split(".")[0]
    folders = _local_folders(base_dir)
    for folder in folders:
        if PathFinder.find_spec(top, [folder]) is not None:
            _put_first_on_path(folder)
            break
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is not None and module != e.name and not module.startswith(e.name + "."):
            raise ConfigError(f"importing {module!r} failed: {e}", file=file, key=key) from e
        looked = ", ".join(folders)
        raise ConfigError(
            f"no module named {module!r} (looked in {looked} and installed packages)", file=file, key=key
        ) from e
    except SyntaxError as e:
        where = f"{e.filename}:{e.lineno}" if e.filename else module
        raise ConfigError(f"importing {module!r} failed: {where}: {e.msg}", file=file, key=key) from e
    except Exception as e:  # the user's module raised at import time: still a config problem
        raise ConfigError(f"importing {module!r} failed: {type(e).__name__}: {e}", file=file, key=key) from e


def resolve_target(spec: str, base_dir: Path, key: str, file: str | None = None) -> Callable[..., Any]:
    """The callable named by "module:callable" (or "pkg.mod:Class.attr"); ConfigError otherwise."""
    module_name, attr_path = split_target(spec, key, file)
    obj = import_module(module_name, base_dir, key, file)
    owner = module_name
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            raise ConfigError(f"{owner!r} has no attribute {part!r}{suggest(part, names)}", file=file, key=key)
        obj = getattr(obj, part)
        owner = f"{owner}:{part}" if owner == module_name else f"{owner}.{part}"
    if not callable(obj):
        raise ConfigError(f"{spec!r} is not callable (it is a {type(obj).__name__})", file=file, key=key)
    found: Callable[..., Any] = obj
    return found


def describe_callable(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{module}:{name}" if module else name


def check_kwargs(
    fn: Callable[..., Any],
    kwargs: dict[str, Any],
    key: str,
    file: str | None = None,
    provided: Sequence[str] = (),
    positional: int = 0,
    target: str | None = None,
) -> None:
    """Check `fn(<positional args>, **kwargs)` against fn's signature, before calling it.

    `provided` names arguments tuitrain fills in itself (by keyword when the signature has them);
    `positional` is how many leading arguments tuitrain passes by position. An unknown keyword,
    a keyword that collides with a positional argument, or a missing required argument is a
    ConfigError at `<key>.<argument>`, and so is a value of a type the signature rules out (see
    kwarg_types.py). Callables without a readable signature are not checked.
    """
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    what = target or describe_callable(fn)
    params = list(sig.parameters.values())
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params)
    by_position = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    passed_positionally = {p.name for p in by_position[:positional]}
    keywordable = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    positional_only = {p.name for p in params if p.kind is p.POSITIONAL_ONLY}

    for name in kwargs:
        if name in passed_positionally:
            raise ConfigError(
                f"is passed by tuitrain to {what}; remove it from the config", file=file, key=f"{key}.{name}"
            )
        if name in positional_only and not takes_any:
            raise ConfigError(f"is a positional-only argument of {what}", file=file, key=f"{key}.{name}")
        if name not in keywordable and not takes_any:
            choices = [p.name for p in params if p.name in keywordable - passed_positionally - set(provided)]
            takes = f"; it takes {', '.join(choices)}" if choices else "; it takes none"
            raise ConfigError(
                f"unexpected keyword argument for {what}{suggest(name, choices)}{takes}", file=file, key=f"{key}.{name}"
            )
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is not p.empty:
            continue
        if p.name in kwargs or p.name in passed_positionally or p.name in provided:
            continue
        raise ConfigError(f"missing required argument of {what}", file=file, key=f"{key}.{p.name}")
    check_kwarg_types(fn, sig, kwargs, key, file)


def check_kwarg_types(
    fn: Callable[..., Any], sig: inspect.Signature, kwargs: dict[str, Any], key: str, file: str | None = None
) -> None:
    """A keyword argument of a type its parameter's annotation (or, unannotated, its default) rules
    out is a ConfigError at `<key>.<argument>`: `lr = "abc"` where the signature says float."""
    annotations = annotations_of(fn, sig)
    for name, value in kwargs.items():
        param = sig.parameters.get(name)
        if param is None or param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            continue  # taken by **kwargs: the signature says nothing of it
        if message := type_error(param, annotations.get(name, param.empty), value):
            raise ConfigError(message, file=file, key=f"{key}.{name}")


def metric_name(item: Any) -> str:
    """The name a metric item logs under: the string itself, a dict's "name", or else the
    callable part of its target ("torchmetrics.classification:MulticlassF1Score" -> "MulticlassF1Score")."""
    if isinstance(item, str):
        return item
    return item.get("name") or str(item.get("target", "")).rpartition(":")[2]


__all__ = [
    "split_target",
    "import_module",
    "resolve_target",
    "check_kwargs",
    "check_kwarg_types",
    "metric_name",
    "describe_callable",
]

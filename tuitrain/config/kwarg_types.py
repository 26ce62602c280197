"""Judging a config's keyword arguments by the types a callable's signature asks for.

A TOML value is a string, an integer, a float, a boolean, an array, a table or a date. A parameter's
annotation (`lr: float | Tensor`, `mode: Literal["min", "max"]`, `betas: tuple[float, float]`) says
which of these it takes; without one, a default of a number or a boolean says that a string is wrong.
Whatever the signature leaves open (no annotation, a class of the user's, `Any`, a callable) is left
to the callable itself. Nothing here imports torch or textual.
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from typing import Any
from collections.abc import Callable

from tuitrain.config.schema import describe, suggest

_SCALARS = {float: "a number", int: "an integer", bool: "true or false", str: "a string"}
_PLURALS = {"a number": "numbers", "an integer": "integers", "true or false": "booleans", "a string": "strings"}


def annotations_of(fn: Callable[..., Any], sig: inspect.Signature) -> dict[str, Any]:
    """Parameter name -> its annotation, evaluated where it was a string (`from __future__ import
    annotations`); a string that does not evaluate (a name imported only for type checkers) is left out."""
    try:
        resolved = inspect.signature(fn, eval_str=True)
    except Exception:  # one bad annotation spoils eval_str for all: evaluate them one by one
        resolved = sig
    init = fn.__init__ if inspect.isclass(fn) else fn
    scope = getattr(inspect.unwrap(init), "__globals__", {})
    out = {}
    for name, p in resolved.parameters.items():
        ann = p.annotation
        if isinstance(ann, str):
            try:
                ann = eval(ann, dict(scope))  # noqa: S307 (what eval_str does, for one annotation)
            except Exception:
                continue
        if ann is not p.empty:
            out[name] = ann
    return out


def _is_tensor(t: Any) -> bool:
    return inspect.isclass(t) and t.__name__ == "Tensor" and t.__module__.partition(".")[0] == "torch"


def _union_members(ann: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        return typing.get_args(ann)
    return None


def judge(ann: Any, value: Any) -> bool | None:
    """Whether the TOML `value` fits the annotation `ann`: True, False, or None (cannot tell). An integer
    fits float; a float with no fraction fits int."""
    if typing.get_origin(ann) is typing.Annotated:
        return judge(typing.get_args(ann)[0], value)
    members = _union_members(ann)
    if members is not None:
        # None cannot be written in TOML, nor a tensor: they decide nothing beside another member
        others = [m for m in members if m is not type(None) and not _is_tensor(m)]
        if not others:
            return None
        verdicts = [judge(m, value) for m in others]
        if True in verdicts:
            return True
        return None if None in verdicts else False
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if ann is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if ann is int:
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if ann is bool or ann is str:
        return isinstance(value, ann)
    if ann in (list, tuple) or origin in (list, tuple):
        if not isinstance(value, list):
            return False
        return _judge_items(origin or ann, args, value)
    if ann is dict or origin in (dict, collections.abc.Mapping) or ann is collections.abc.Mapping:
        return isinstance(value, dict)
    return None  # a class of the user's, Any, a callable, a sequence (a string is one too) ...


def _judge_items(kind: type, args: tuple[Any, ...], value: list[Any]) -> bool | None:
    if not args:
        return True
    if kind is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        if len(value) != len(args):
            return False
        verdicts = [judge(a, v) for a, v in zip(args, value)]
    else:
        verdicts = [judge(args[0], v) for v in value]
    if False in verdicts:
        return False
    return None if None in verdicts else True


def wanted(ann: Any) -> str:
    """What an annotation asks for, in the words of an error message ("a number or an array")."""
    if typing.get_origin(ann) is typing.Annotated:
        return wanted(typing.get_args(ann)[0])
    members = _union_members(ann)
    if members is not None:
        words = [wanted(m) for m in members if m is not type(None) and not _is_tensor(m)]
        return " or ".join(dict.fromkeys(words))
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if ann in _SCALARS:
        return _SCALARS[ann]
    if ann in (list, tuple) or origin in (list, tuple):
        if not args:
            return "an array"
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            kinds = {wanted(a) for a in args}
            if len(kinds) == 1:
                return f"an array of {len(args)} {_PLURALS.get(kinds.pop(), 'items')}"
            return f"an array of {len(args)} items"
        return f"an array of {_PLURALS.get(wanted(args[0]), 'items')}"
    return "a table"


def _by_default(default: Any, value: Any) -> str | None:
    """What an unannotated parameter's default says a value must be, when `value` is not that."""
    if isinstance(value, (str, dict)):
        if isinstance(default, bool):
            return "true or false"
        if isinstance(default, (int, float)):
            return "a number"
    return None


def type_error(param: inspect.Parameter, ann: Any, value: Any) -> str | None:
    """The message for a keyword argument of the wrong type, or None when it fits (or cannot be told)."""
    verdict = judge(ann, value) if ann is not inspect.Parameter.empty else None
    if verdict is None:
        want = _by_default(param.default, value) if param.default is not param.empty else None
        return f"expected {want}, got {describe(value)}" if want else None
    if verdict:
        return None
    got = describe(value)
    members = _union_members(ann) or (ann,)
    if isinstance(value, list) and any(m in (list, tuple) or typing.get_origin(m) in (list, tuple) for m in members):
        bad = next((i for i, v in enumerate(value) if _item_fails(ann, i, v)), None)
        if bad is not None:
            got = f"{got} whose item [{bad}] is {describe(value[bad])}"
        else:
            got = f"an array of {len(value)} item{'s' * (len(value) != 1)}"
    hint = ""
    if typing.get_origin(ann) is typing.Literal and isinstance(value, str):
        hint = suggest(value, [a for a in typing.get_args(ann) if isinstance(a, str)])
    return f"expected {wanted(ann)}, got {got}{hint}"


def _item_fails(ann: Any, i: int, item: Any) -> bool:
    """Whether item `i` of an array is what makes it not fit `ann` (some list or tuple member of it)."""
    for member in _union_members(ann) or (ann,):
        origin, args = typing.get_origin(member), typing.get_args(member)
        if origin in (list, tuple) and args:
            fixed = origin is tuple and not (len(args) == 2 and args[1] is Ellipsis)
            if fixed and i >= len(args):
                continue
            if judge(args[i] if fixed else args[0], item) is False:
                return True
    return False


__all__ = ["annotations_of", "judge", "type_error", "wanted"]

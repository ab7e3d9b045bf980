"""What a JAX apply function can reach without taking it as an argument: closures, globals, bound objects.

JAX's counterpart of a module's plain attribute is a value the function closes over. This walks
from the function through closure cells, referenced globals, `functools.partial` arguments, bound
`self`s (a Flax module's fields) and the functions among them, a few levels deep. Cost: Python
introspection only; nothing is traced or compiled.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import types
from collections.abc import Iterator
from dataclasses import dataclass

from comparisons.doctor.source import is_user_file

_MAX_DEPTH = 3


@dataclass(frozen=True)
class Reached:
    """A value reachable from the apply function: its name and the functions that mention it."""

    name: str                            # "scale", "model.table", "LOG"
    value: object
    functions: tuple[types.FunctionType, ...]
    global_of: dict | None = None        # the globals dict it lives in, for a global name


def reachable(fn: object) -> list[Reached]:
    """Every named value the function (and functions it reaches) can read, deduplicated by name."""
    found: dict[str, Reached] = {}
    seen: set[int] = set()
    _walk(fn, "", (), found, seen, 0)
    return list(found.values())


def functions_of(reached: list[Reached], fn: object) -> list[types.FunctionType]:
    """The Python functions the walk went through, the apply function's own first."""
    functions = list(_own_functions(fn))
    for item in reached:
        functions.extend(f for f in item.functions if f not in functions)
    return functions


def _own_functions(fn: object) -> Iterator[types.FunctionType]:
    if isinstance(fn, functools.partial):
        yield from _own_functions(fn.func)
    elif isinstance(fn, types.MethodType):
        yield from _own_functions(fn.__func__)
    elif isinstance(fn, types.FunctionType):
        yield fn


def _walk(obj: object, prefix: str, via: tuple, found: dict, seen: set, depth: int) -> None:
    if id(obj) in seen or depth > _MAX_DEPTH:
        return
    seen.add(id(obj))
    if isinstance(obj, functools.partial):
        _walk(obj.func, prefix, via, found, seen, depth)
        named = [(f"{prefix}partial.args[{i}]", arg) for i, arg in enumerate(obj.args)]
        named += [(f"{prefix}{key}", arg) for key, arg in obj.keywords.items()]
        for name, value in named:
            if _add(name, value, via, found):
                _descend(name, value, via, found, seen, depth)
    elif isinstance(obj, types.MethodType):
        _walk(obj.__func__, prefix, via, found, seen, depth)
        _fields(obj.__self__, prefix or "self.", via, found, seen, depth)
        _methods(type(obj.__self__), via, found, seen, depth)
    elif isinstance(obj, types.FunctionType):
        if not is_user_file(obj.__code__.co_filename):
            return  # a library's closures are not the user's state
        via = (*via, obj)
        try:
            variables = inspect.getclosurevars(obj)
        except (TypeError, ValueError):
            return
        named = [(name, value, None) for name, value in variables.nonlocals.items()]
        named += [(name, value, obj.__globals__) for name, value in variables.globals.items()]
        # Names this function reads come before anything found deeper (which may reuse a name).
        added = [(name, value) for name, value, globals_ in named
                 if _add(prefix + name, value, via, found, globals_)]
        for name, value in added:
            _descend(prefix + name, value, via, found, seen, depth)
        for name, value, _ in named:
            if isinstance(value, type):
                _walk(value, "", via, found, seen, depth + 1)
    elif isinstance(obj, type):
        _methods(obj, via, found, seen, depth)
    elif dataclasses.is_dataclass(obj):
        _fields(obj, prefix, via, found, seen, depth)
        _methods(type(obj), via, found, seen, depth)


def _methods(cls: type, via: tuple, found: dict, seen: set, depth: int) -> None:
    """The user-written methods of a class (a Flax module's __call__ and setup): their globals."""
    for klass in cls.__mro__:
        for value in vars(klass).values():
            value = inspect.unwrap(value) if callable(value) else value  # past decorators (nn.compact)
            if isinstance(value, types.FunctionType) and is_user_file(value.__code__.co_filename):
                _walk(value, "", via, found, seen, depth + 1)


def _add(name: str, value: object, via: tuple, found: dict, globals_=None) -> bool:
    """Record a name (first one wins); False when it is not worth recording or already known."""
    if isinstance(value, (types.ModuleType, type)) or name.startswith("__") or name in found:
        return False
    found[name] = Reached(name, value, via, globals_)
    return True


def _descend(name: str, value: object, via: tuple, found: dict, seen: set, depth: int) -> None:
    if callable(value) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        prefix = "" if isinstance(value, types.FunctionType) else f"{name}."
        _walk(value, prefix, via, found, seen, depth + 1)


def _fields(obj: object, prefix: str, via: tuple, found: dict, seen: set, depth: int) -> None:
    """A bound object's dataclass fields (a Flax module's attributes), else its instance __dict__."""
    if dataclasses.is_dataclass(obj):
        names = [f.name for f in dataclasses.fields(obj) if f.name not in ("parent", "name")]
    else:
        names = [n for n in getattr(obj, "__dict__", {}) if not n.startswith("_")]
    for name in names:
        value = getattr(obj, name, None)
        if _add(prefix + name, value, via, found):
            _descend(prefix + name, value, via, found, seen, depth + 1)

"""What a JAX apply function can reach without taking it as an argument: closures, globals, bound objects.

JAX's counterpart of a module's plain attribute is a value the function closes over. This walks
from the function through closure cells, referenced globals, `functools.partial` arguments, bound
`self`s (a Flax module's fields), the user-written methods of their classes, and the functions
among them, a few levels deep; library code is not entered. Cost: Python introspection only;
nothing is traced or compiled.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import types
from dataclasses import dataclass, field

from comparisons.doctor.source import is_user_file

_MAX_DEPTH = 3


@dataclass(frozen=True)
class Reached:
    """A value reachable from the apply function: its name and the functions that lead to it."""

    name: str                            # "scale", "self.table", "LOG"
    value: object
    functions: tuple[types.FunctionType, ...]
    global_of: dict | None = None        # the globals dict it lives in, for a global name


@dataclass
class Reach:
    """The walk's result: named values (first name wins) and every user function entered."""

    values: dict[str, Reached] = field(default_factory=dict)
    functions: list[types.FunctionType] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)


def reachable(fn: object) -> Reach:
    """Every named value the function (and the user functions it reaches) can read."""
    reach = Reach()
    _walk(reach, fn, "", (), 0)
    return reach


def reachable_from_classes(classes: list[type]) -> Reach:
    """Every named value the user-written methods of these classes can read (an NNX module's layer classes):
    their globals and closures. Their instances' attributes are the module's state, which nnx.split carries."""
    reach = Reach()
    for cls in dict.fromkeys(classes):
        _methods(reach, cls, (), 0)
    return reach


def _walk(reach: Reach, obj: object, prefix: str, via: tuple, depth: int) -> None:
    if id(obj) in reach.seen or depth > _MAX_DEPTH:
        return
    reach.seen.add(id(obj))
    if isinstance(obj, functools.partial):
        _walk(reach, obj.func, prefix, via, depth)
        named = [(f"{prefix}partial.args[{i}]", arg) for i, arg in enumerate(obj.args)]
        _add_all(reach, [(f"{prefix}{key}", arg, None) for key, arg in obj.keywords.items()]
                 + [(name, arg, None) for name, arg in named], via, depth)
    elif isinstance(obj, types.MethodType):
        _walk(reach, obj.__func__, prefix, via, depth)
        _fields(reach, obj.__self__, prefix or "self.", via, depth)
        _methods(reach, type(obj.__self__), via, depth)
    elif isinstance(obj, types.FunctionType):
        _function(reach, obj, prefix, via, depth)
    elif isinstance(obj, type):
        _methods(reach, obj, via, depth)
    elif dataclasses.is_dataclass(obj):
        _fields(reach, obj, prefix, via, depth)
        _methods(reach, type(obj), via, depth)


def _function(reach: Reach, fn: types.FunctionType, prefix: str, via: tuple, depth: int) -> None:
    if not is_user_file(fn.__code__.co_filename):
        return  # a library's closures are not the user's state
    reach.functions.append(fn)
    try:
        variables = inspect.getclosurevars(fn)
    except (TypeError, ValueError):
        return
    named = [(prefix + name, value, None) for name, value in variables.nonlocals.items()]
    named += [(prefix + name, value, fn.__globals__) for name, value in variables.globals.items()]
    _add_all(reach, named, (*via, fn), depth)
    for _, value, _ in named:
        if isinstance(value, type):
            _walk(reach, value, "", (*via, fn), depth + 1)


def _add_all(reach: Reach, named: list, via: tuple, depth: int) -> None:
    """Record every name first (the names a function reads beat anything found deeper), then descend."""
    added = [(name, value) for name, value, globals_ in named if _add(reach, name, value, via, globals_)]
    for name, value in added:
        if callable(value) or dataclasses.is_dataclass(value):
            _walk(reach, value, "" if isinstance(value, types.FunctionType) else f"{name}.", via, depth + 1)


def _add(reach: Reach, name: str, value: object, via: tuple, globals_: dict | None) -> bool:
    if isinstance(value, (types.ModuleType, type)) or name.startswith("__") or name in reach.values:
        return False
    reach.values[name] = Reached(name, value, via, globals_)
    return True


def _fields(reach: Reach, obj: object, prefix: str, via: tuple, depth: int) -> None:
    """A bound object's dataclass fields (a Flax module's attributes), else its instance __dict__."""
    if dataclasses.is_dataclass(obj):
        names = [f.name for f in dataclasses.fields(obj) if f.name not in ("parent", "name")]
    else:
        names = [n for n in getattr(obj, "__dict__", {}) if not n.startswith("_")]
    _add_all(reach, [(prefix + name, getattr(obj, name, None), None) for name in names], via, depth + 1)


def _methods(reach: Reach, cls: type, via: tuple, depth: int) -> None:
    """The user-written methods of a class (a Flax module's __call__ and setup)."""
    for klass in cls.__mro__:
        for value in list(vars(klass).values()):
            value = inspect.unwrap(value) if callable(value) else value  # past decorators (nn.compact)
            if isinstance(value, types.FunctionType):
                _walk(reach, value, "", via, depth + 1)

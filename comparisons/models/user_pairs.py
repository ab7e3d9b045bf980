"""Model pairs from user code: `--pair module:NAME`, `--import module`, installed packages; the CLI and the
multi-process workers (which import the same targets) load them here.

An installed package offers pairs through the entry-point group `dp_compare.pairs`:

    [project.entry-points."dp_compare.pairs"]
    my_net = "my_package.pairs:MY_NET"      # a ModelPair, a list of them, or a module that registers them

Loading imports the user's module (and whatever it imports); nothing here imports torch or JAX.
"""
from __future__ import annotations

import importlib
import traceback
from importlib import metadata
from pathlib import Path
from typing import Any

from comparisons.errors import UsageError
from comparisons.models import ModelPair, names, register
from comparisons.models.jax_nnx import describe, is_nnx_module

ENTRY_POINT_GROUP = "dp_compare.pairs"


class UserPairError(UsageError):
    """A user pair could not be loaded: the message names the flag or entry point, the value and the fix."""


def import_module(name: str, given: str = "") -> Any:
    """Import `name` (a module that may register pairs with comparisons.models.register).

    `given` is what the user wrote, for the message (default: `--import name`).
    """
    given = given or f"--import {name}"
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise UserPairError(f"{given}: cannot import {name} ({error}); put the folder "
                            "holding it on "
                            "PYTHONPATH (or run from that folder), or pip install its package") from None
    except UsageError as error:  # our refusal of what the module builds: its own words, at the user's line
        raise UserPairError(f"{given}: importing {name}: {error} (at {_where(error, skip=_PACKAGE)}); "
                            "fix the module") from None
    except Exception as error:  # the user's module is broken: say where, not a traceback of ours
        raise UserPairError(f"{given}: importing {name} failed: {type(error).__name__}: {_message(error)} "
                            f"at {_where(error)}; fix the module") from None


def _message(error: Exception) -> str:
    return error.msg if isinstance(error, SyntaxError) else str(error)


_PACKAGE = str(Path(__file__).resolve().parents[1])  # comparisons/: a refusal raised here is about a user's line


def _where(error: Exception, skip: str = "<") -> str:
    """'file, line N': a syntax error's own position, else the innermost frame outside importlib's frozen code
    (and outside `skip`, a folder whose frames are not the user's)."""
    if isinstance(error, SyntaxError):
        return f"{error.filename}, line {error.lineno}"
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if not frame.filename.startswith(("<", skip))]
    return f"{frames[-1].filename}, line {frames[-1].lineno}" if frames else "an unknown line"


def load_pair(spec: str, flag: str = "--pair") -> ModelPair:
    """'package.module:NAME' -> that ModelPair, registered (once) under its name."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise UserPairError(f"{flag} {spec!r}: expected module:NAME, e.g. {flag} my_package.pairs:MY_NET")
    module = import_module(module_name, f"{flag} {spec}")
    try:
        value = getattr(module, attribute)
    except AttributeError:
        raise UserPairError(f"{flag} {spec}: module {module_name} has no attribute {attribute!r}; "
                            "name the ModelPair object it defines") from None
    pairs = _pairs_in(value, f"{flag} {spec}")
    if len(pairs) != 1:
        raise UserPairError(f"{flag} {spec}: expected one ModelPair, got {len(pairs)}; name a single pair")
    return pairs[0]


def load_entry_points(group: str = ENTRY_POINT_GROUP) -> list[str]:
    """Register the pairs every installed package offers in `group`; returns the names added."""
    added = []
    for entry_point in metadata.entry_points(group=group):
        where = f"entry point {entry_point.name!r} ({entry_point.value}) in group {group!r}"
        try:
            value = entry_point.load()
        except Exception as error:  # the user's package is broken: say which one, not a traceback
            raise UserPairError(f"{where}: loading it raised {type(error).__name__}: {error}; fix or "
                                "uninstall the package that declares it") from None
        added += [pair.name for pair in _pairs_in(value, where)]
    return added


def _pairs_in(value: Any, where: str) -> list[ModelPair]:
    """A ModelPair, a list/tuple of them, or a module (its import registered them): registered, returned."""
    if isinstance(value, type(importlib)):  # a module: importing it was the registration
        return []
    candidates = list(value) if isinstance(value, (list, tuple)) else [value]
    for candidate in candidates:
        if is_nnx_module(candidate):  # the twin alone: say how to pair it
            raise UserPairError(f"{where} is {describe(candidate)}, not a comparisons.models.ModelPair; pair it "
                                "with its torch model: pair_from_modules(name, torch_model, twin, make_inputs=..., "
                                "loss_torch=..., loss_jax=...)")
        if not isinstance(candidate, ModelPair):
            raise UserPairError(f"{where} is a {type(candidate).__name__}, not a comparisons.models.ModelPair; "
                                "point it at a ModelPair (or a list of them)")
    return [_register_once(pair, where) for pair in candidates]


def _register_once(pair: ModelPair, where: str) -> ModelPair:
    from comparisons.models import get

    if pair.name in names():
        if get(pair.name) is pair:  # the module registered it itself on import
            return pair
        raise UserPairError(f"{where}: a different pair named {pair.name!r} is registered already; "
                            "give yours another name")
    return register(pair)

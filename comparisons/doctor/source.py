"""The user's line behind an op: the innermost Python frame that is neither ours nor a library's.

Cost: a walk up the current stack with a prefix test per frame (microseconds); called only when
something is recorded, never per op.
"""
from __future__ import annotations

import os
import re
import sys
import sysconfig
from types import FrameType

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_OURS = [os.path.join(_ROOT, name) + os.sep for name in ("comparisons", "dp_torch", "dp_jax")]
_DRIVERS = {os.path.join(_ROOT, "comparisons", "doctor", name) for name in ("torch_run.py", "jax_probe.py")}
_STDLIB = [p + os.sep for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}]
_LIBRARY_NAMES = ("torch", "jax", "jaxlib", "flax", "optax", "numpy", "transformers")


def _library_dirs() -> list[str]:
    dirs = []
    for name in _LIBRARY_NAMES:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path:
            dirs.append(os.path.dirname(os.path.abspath(path)) + os.sep)
    return dirs


def is_user_file(filename: str, skip: list[str] | None = None, module_name: str = "__main__") -> bool:
    """False for our packages, the standard library, torch/JAX/Flax and frozen or generated code.

    `<string>` is the user's (`python -c`) only in `__main__`; elsewhere it is generated code
    (a dataclass's __init__ in a library).
    """
    if filename.startswith("<"):
        return filename in ("<string>", "<stdin>") and module_name == "__main__"
    path = os.path.abspath(filename)
    prefixes = _OURS + _STDLIB + (skip if skip is not None else _library_dirs())
    return not any(path.startswith(prefix) for prefix in prefixes)


def user_line(frame: FrameType | None = None) -> str | None:
    """'file.py:line' of the innermost user frame above `frame` (default: the caller), or None.

    The search stops at the doctor's drivers (the code that calls the user's model): user code
    reached only through them, such as the caller of a backward pass, is not blamed.
    """
    frame = frame or sys._getframe(1)
    skip = _library_dirs()
    while frame is not None:
        filename = frame.f_code.co_filename
        if is_user_file(filename, skip, frame.f_globals.get("__name__", "")):
            return f"{short_path(filename)}:{frame.f_lineno}"
        if os.path.abspath(filename) in _DRIVERS:
            return None
        frame = frame.f_back
    return None


def short_path(filename: str) -> str:
    """A path relative to the working directory when it lies below it, else as given."""
    try:
        relative = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if relative.startswith("..") else relative


def user_line_of(traceback) -> str | None:
    """'file.py:line' of the innermost user frame in an exception's traceback, or None."""
    return _innermost_user_line(traceback, _library_dirs())


def error_line(error: BaseException) -> str | None:
    """The user's line behind an error, the innermost cause first (`raise ... from` wraps replica errors)."""
    chain = []
    while error is not None and len(chain) < 16:
        chain.append(error)
        error = error.__cause__
    lines = (user_line_of(e.__traceback__) for e in reversed(chain))
    return next((line for line in lines if line is not None), None)


def _innermost_user_line(traceback, skip: list[str]) -> str | None:
    found = None
    while traceback is not None:
        code = traceback.tb_frame.f_code
        if is_user_file(code.co_filename, skip, traceback.tb_frame.f_globals.get("__name__", "")):
            found = f"{short_path(code.co_filename)}:{traceback.tb_lineno}"
        traceback = traceback.tb_next
    return found


def assignment_line(cls: type, attribute: str) -> str | None:
    """'file.py:line' of the first `self.<attribute> = ...` in `cls`'s source (or a base's), or None.

    Best effort: the doctor sees that a replica assigned the attribute, not where; the class's source
    says where it is written. Cost: reads the source file once per call.
    """
    return _first_line_outside_init(cls, rf"\bself\.{re.escape(attribute)}\s*(=(?!=)|\+=|-=|\*=|/=|:)")


def fill_line(cls: type, attribute: str) -> str | None:
    """'file.py:line' where `cls`'s methods fill the container `self.<attribute>`, or None.

    An item assignment or a mutating method call (`self.cache[k] = v`, `self.seen.append(x)`), else
    the first mention outside `__init__` (a fill through a local alias). Cost: as `assignment_line`.
    """
    name = re.escape(attribute)
    filled = (rf"\bself\.{name}\s*\[[^\]]*\]\s*(=(?!=)|[-+*/|&]=)|\bself\.{name}\."
              rf"(append|extend|insert|update|setdefault|add|pop|popitem|clear|remove|discard|__setitem__)\(")
    return _first_line_outside_init(cls, filled) or _first_line_outside_init(cls, rf"\bself\.{name}\b")


def construction_line(cls: type, attribute: str) -> str | None:
    """'file.py:line' of the first `self.<attribute> = ...` in `cls`'s source, `__init__` included (where an NNX
    module builds its layers), or None. Cost: as `assignment_line`."""
    return _first_line_outside_init(cls, rf"\bself\.{re.escape(attribute)}\s*(=(?!=)|:)", skip=None)


def _first_line_outside_init(cls: type, pattern: str, skip: str | None = "__init__") -> str | None:
    import inspect

    compiled = re.compile(pattern)
    for klass in cls.__mro__:
        try:
            lines, first = inspect.getsourcelines(klass)
            filename = inspect.getsourcefile(klass)
        except (OSError, TypeError):
            continue
        method = None
        for offset, text in enumerate(lines):
            defined = re.match(r"\s*def (\w+)", text)
            method = defined.group(1) if defined else method
            if method != skip and compiled.search(text) and filename and is_user_file(filename):
                return f"{short_path(filename)}:{first + offset}"
    return None

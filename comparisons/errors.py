"""The one base class of every refusal of a user's input, and the CLI's rule for it.

`UsageError` (a ValueError) is what `python -m comparisons` reports as bad input, exit status 2,
with its message alone; any other exception is a bug of ours and is shown with its traceback.
Each subsystem raises a subclass (ComparisonError, ConversionError, UserPairError, the doctor's
and the launcher's), so one `except UsageError` catches them all. The bottom layer: it imports
nothing.
"""
from __future__ import annotations


class UsageError(ValueError):
    """Bad input from the user: the message names the argument, the value and the fix."""


class ComparisonError(UsageError):
    """Bad input to compare(): the message names the argument, the value and the fix."""


class UsageTypeError(UsageError, TypeError):
    """Bad input of the wrong type (a string where a tuple goes, a non-Module): still a UsageError."""


def positive_integer(value: object, *, argument: str, caller: str, example: str = "") -> int:
    """`value` as an int >= 1 (numpy integers too; not bools, floats or strings), else a ComparisonError naming
    `caller`, the argument, the value (and its type when its repr would hide it) and the fix, `example` after it."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        kind = "" if type(value) is int else f" (a {type(value).__name__})"
        raise ComparisonError(f"{caller}: {argument}={value!r}{kind}; pass a positive integer{example}")
    return int(value)


class UserCodeError(UsageError):
    """An exception raised inside the user's own code (model, factory, make_inputs, loss): theirs, not ours."""

    in_forward: bool = False


_OURS = ("comparisons", "dp_torch", "dp_jax")
_TRANSPARENT = ("dp_torch/virtual/",)  # the virtual devices run torch's own ops: an error there is the op's
_MODULE_CALL = "torch/nn/modules/module.py"


def frames(text: str) -> list[tuple[str, int, str]]:
    """(file, line, function) of every frame a formatted traceback names, outermost first (nested ones too)."""
    import re

    return [(m[1], int(m[2]), m[3]) for m in re.finditer(r'File "(.+?)", line (\d+), in (\S+)', text)]


def _kind(path: str) -> str:
    """'ours', 'library' (installed packages, the standard library, torch's own) or 'user'."""
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1].as_posix() + "/"
    posix = Path(path).as_posix()
    if posix.startswith(root) and posix[len(root):].split("/", 1)[0] in _OURS:
        return "library" if any(posix[len(root):].startswith(t) for t in _TRANSPARENT) else "ours"
    stdlib = Path(sys.base_prefix, "lib").as_posix() + "/"
    if path.startswith("<") or "-packages/" in posix or posix.startswith(stdlib):
        return "library"
    return "user"


def user_frames(named: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """The frames of `named` in the user's own files (neither ours nor an installed package's)."""
    return [frame for frame in named if _kind(frame[0]) == "user"]


def blame_user_code(error: BaseException) -> UserCodeError | None:
    """A UserCodeError for `error` when it was raised inside the user's code (their file and line named), or
    inside a torch module's forward that our code called (the user's model); None when the error is ours.
    Its `in_forward` says whether the model's forward raised it (so the inputs may be the cause).

    Reads the formatted traceback, so the replicas' re-raised tracebacks count too. Cost: one format."""
    import traceback

    text = "".join(traceback.format_exception(error))
    named = frames(text)
    kinds = [_kind(path) for path, _, _ in named]
    last_ours = max((i for i, kind in enumerate(kinds) if kind == "ours"), default=-1)
    after = list(zip(named[last_ours + 1:], kinds[last_ours + 1:]))
    user = [frame for frame, kind in after if kind == "user"]
    in_module = bool(after) and after[0][0][0].replace("\\", "/").endswith(_MODULE_CALL)
    if user:
        where = f"{user[-1][0]}, line {user[-1][1]}, in {user[-1][2]}"
    elif in_module:
        torch_nn = [frame for frame, _ in after if "torch/nn/" in frame[0].replace("\\", "/")]
        path, line, function = torch_nn[-1]
        where = f"inside your model's forward: torch's {function} ({path}, line {line})"
    else:
        return None
    lines = [line for line in text.splitlines() if line and not line[0].isspace()]
    raised = lines[-1] if lines else f"{type(error).__name__}: {error}"
    blamed = UserCodeError(f"your code raised {raised}\n  at {where}\n  (raised by your model, factory, "
                           "make_inputs or loss, not by dp-compare)")
    blamed.in_forward = in_module or any(function == "forward" for _, _, function in user)
    return blamed

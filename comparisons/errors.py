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

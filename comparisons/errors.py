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

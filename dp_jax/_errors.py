"""What a user of dp_jax sees when something is theirs to fix: UsageError, and warnings at their own line."""
from __future__ import annotations

import os
import sys
import warnings

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """warnings.warn at the first frame outside dp_jax: the user's call, however deep the call inside.

    The eager and the traced runner reach the same warning through different depths, so a fixed
    stacklevel is right for one of them only (Python 3.12's skip_file_prefixes does this walk).
    """
    frame, level = sys._getframe(1), 2  # level 2: warn_user's caller
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


class UsageError(ValueError):
    """Something dp_jax refuses to run (an argument, a batch, a device list, a strategy, a model's
    outputs): the message names it, the value, and the fix. Every refusal of user input is one."""


class UsageTypeError(UsageError, TypeError):
    """A UsageError for a value of the wrong type: also a TypeError, as Python's own would be."""

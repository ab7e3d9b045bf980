"""What a user of dp_torch sees when something is theirs to fix: UsageError and its TypeError flavour.

Errors that reproduce PyTorch's own (its RuntimeErrors, IndexErrors, KeyErrors) keep PyTorch's type.
"""
from __future__ import annotations


class UsageError(ValueError):
    """Something dp_torch refuses to run (an argument, a batch, a device list, replicas' outputs):
    the message names it, the value, and the fix. Every refusal of user input that is not one of
    PyTorch's own errors is one."""


class UsageTypeError(UsageError, TypeError):
    """A UsageError for a value of the wrong type: also a TypeError, as Python's own would be."""

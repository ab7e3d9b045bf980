"""`python -m comparisons demo | run | list | doctor`: the command line.

    _main.py       the parser, main() and its exit statuses, emit() (the report on stdout or into --out)
    _progress.py   the rich progress bar compare() ticks

Pairs from user code (--pair, --import, entry points) load through comparisons/models/user_pairs.py,
which the multi-process workers use too.

The top layer with distributed/ and doctor/ (whose `doctor` and `run --processes` it dispatches to).
Exit status: 0 when every check passes, 1 when one fails, 2 on bad input, 130 on Ctrl-C.
"""
from comparisons.cli._main import emit, main

__all__ = ["emit", "main"]

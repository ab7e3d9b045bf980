"""One spelling for a tensor's path everywhere in a report: dotted, as torch names its parameters.

torch parameters are 'fc1.weight', Flax variables 'params.fc1.kernel', outputs 'logits.0' and, in a
placement map, inputs and outputs under their argument name: 'args.0', 'out.logits.0'. That is what
users type in `torch_only=`; the other spellings they may type are accepted and read as it: Flax's
'params/fc1/kernel' and Python's "out['logits'][0]". `path_matches` globs in that spelling.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from fnmatch import fnmatch

_SUBSCRIPT = re.compile(r"""\[(?:'([^']*)'|"([^"]*)"|(\d+))\]""")


def canonical_path(path: str) -> str:
    """`path` in the dotted spelling: 'params/fc1/kernel' and "out['logits'][0]" -> 'params.fc1.kernel',
    'out.logits.0'. Glob patterns keep their wildcards and character classes ('h.[0-9].*')."""
    dotted = _SUBSCRIPT.sub(lambda m: "." + next(g for g in m.groups() if g is not None), path)
    return dotted.replace("/", ".").lstrip(".")


def path_matches(path: str, patterns: Iterable[str]) -> bool:
    """Whether `path` matches one of the glob `patterns` (fnmatch), both read in the one dotted spelling,
    whichever spelling they came in ('params/a/b', "out['logits'][0]" and 'params.a.b' are all dotted): how a
    pair's `torch_only=` and `flax_only=` declarations are read."""
    dotted = canonical_path(path)
    return any(fnmatch(dotted, canonical_path(pattern)) for pattern in patterns)

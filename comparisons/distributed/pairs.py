"""Which pair the workers run: built in, or from user code they import again (they are fresh processes).

The parent names, for a pair that is not built in, the import targets that define it: what the user
gave (`--import module`, `--pair module:NAME`, `imports=`), or else the module holding the registered
pair object (an entry point's module, or a module the user imported). Each worker imports the same
targets before it looks the pair up, with those modules' folders on its PYTHONPATH. A pair defined
in `__main__` (a script, a notebook) cannot be imported again and is refused, naming the way out.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from comparisons.errors import UsageError
from comparisons.models import ModelPair


def pair_sources(name: str, imports: Sequence[str]) -> tuple[str, ...]:
    """The import targets ('module' or 'module:NAME') that make `name` known in a fresh process.

    Costs a scan of sys.modules' attributes when `imports` is empty and the pair is not built in.
    """
    from comparisons import models
    from comparisons.models.builtin import BUILTIN

    if name in {p.name for p in BUILTIN}:
        return ()
    if imports:
        return tuple(imports)
    found = _module_holding(models.get(name))
    if found is None:
        raise UsageError(
            f"compare_distributed: pair {name!r} is not built in and no importable module holds it (defined in "
            "__main__, a script or a notebook?); the workers are fresh processes that import the pair again: "
            "define it in a module on PYTHONPATH and pass imports=('module',) or ('module:NAME',) "
            "(CLI: --import module or --pair module:NAME)")
    return (found,)


def _module_holding(pair: ModelPair) -> str | None:
    """'module:ATTRIBUTE' of the first importable module whose attribute is `pair` itself.

    The main script (also under multiprocessing's alias `__mp_main__`) is skipped: a worker cannot import it.
    """
    main = sys.modules.get("__main__")
    for module_name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        if module is None or module is main or spec is None or spec.name != module_name \
                or not getattr(module, "__file__", None):
            continue
        for attribute, value in list(vars(module).items()):
            if value is pair:
                return f"{module_name}:{attribute}"
    return None


def python_path(sources: Sequence[str]) -> list[str]:
    """The folders the workers need on PYTHONPATH to import `sources` as this process did."""
    roots = []
    for source in sources:
        module = importlib.import_module(source.partition(":")[0])
        depth = module.__name__.count(".") + (Path(module.__file__).name == "__init__.py")
        roots.append(str(Path(module.__file__).resolve().parents[depth]))
    return list(dict.fromkeys(roots))


def seed_imports(seed: int) -> None:
    """Seed torch's, numpy's and Python's global generators before the user's modules are imported: a pair built
    at import (pair_from_modules on a module made there) then gets the same weights in every process."""
    import random

    import numpy as np
    import torch

    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def in_api(name: str, flax: str | None) -> ModelPair:
    """The registered pair `name` in the Flax API `flax`: a built-in pair's twin in that API (None: NNX, as
    `compare` picks), any other pair itself (compare_distributed has refused another API by name already)."""
    from comparisons import models
    from comparisons.models.builtin import in_flax_api

    return in_flax_api(models.get(name), flax, caller="compare_distributed")


def load(name: str, sources: Sequence[str], seed: int, flax: str | None = None) -> ModelPair:
    """In a worker: import `sources` (registering their pairs) under `seed_imports(seed)`, then the pair `name` in
    the Flax API `flax` (`in_api`)."""
    from comparisons.models import user_pairs

    seed_imports(seed)
    for source in sources:
        if ":" in source:
            user_pairs.load_pair(source, flag="--pair")
        else:
            user_pairs.import_module(source)
    return in_api(name, flax)

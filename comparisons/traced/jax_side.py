"""The parent's half of a traced comparison: describe the torch side for a worker, start it, take its runs.

The worker (worker.py) is one process started by the multi-process launcher (comparisons/distributed): a
timeout, errors that name the side and the process, nothing left running. torchax is imported there only,
so its process-wide changes (PrivateUse1 renamed 'jax', the MHA fast path off) never reach this process,
its vdev devices or its torch runs.
"""
from __future__ import annotations

import dataclasses
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any

from comparisons.errors import UsageError


def source_of(obj: Any, argument: str) -> Any:
    """What a worker rebuilds `obj` from: a 'module:name' / 'file.py:name' target, or `obj` pickled."""
    if isinstance(obj, str):
        return obj
    name, module = getattr(obj, "__qualname__", None), getattr(obj, "__module__", None)
    is_factory = isinstance(obj, type) or (callable(obj) and not hasattr(obj, "state_dict"))
    if is_factory and name and module and "<" not in name:
        if module == "__main__":
            main = getattr(sys.modules["__main__"], "__file__", None)
            if main is None:
                raise UsageError(f"pair_from_torch: {argument}={obj!r} is defined in an interactive session, which "
                                 "the JAX worker process cannot import; define it in a file and pass it, or pass "
                                 "'path/to/file.py:name'")
            return f"{Path(main).resolve()}:{name}"
        return f"{module}:{name}"
    try:
        return pickle.dumps(obj)
    except Exception as error:  # noqa: BLE001 - any pickling failure means the same fix
        raise UsageError(f"pair_from_torch: {argument}={obj!r} cannot be sent to the JAX worker process "
                         f"({type(error).__name__}: {error}); pass a function defined at a module's top level, "
                         "or a 'package.module:name' / 'path/to/file.py:name' target") from None


def resolve(source: Any, argument: str) -> Any:
    """The object `source_of` described; a target naming a factory (not a module) is called."""
    if isinstance(source, bytes):
        return pickle.loads(source)
    from comparisons.doctor.cli import load

    made = load(source, argument)
    if (hasattr(made, "state_dict") and not isinstance(made, type)) or argument != "module_or_factory":
        return made
    if not callable(made):
        raise UsageError(f"{argument} {source!r} is a {type(made).__name__}; name a torch nn.Module or a factory")
    return made()


def run_in_worker(pair: Any, run: Any, strategies: list[str], devices: int, float64: bool) -> tuple[list, Any]:
    """Start the worker on `run` (inputs, settings, the weights of `pair`'s torch module) and return its
    BackendRuns, one per strategy, and the float64 JAX reference (or None). A refusal in the worker (an op
    torchax cannot trace, a buffer it cannot return) comes back as the UsageError it raised.

    Cost: one Python process (imports of torch, JAX and torchax, ~10 s on 2 cores) and its compiles.
    """
    import importlib.util

    from comparisons.distributed.launcher import launch
    from comparisons.traced._torchax import INSTALL, PIN

    if importlib.util.find_spec("torchax") is None:  # looked up, not imported: this process stays torchax-free
        raise UsageError(f"{pair.name}: the JAX side traced by torchax needs torchax ({PIN}), which is not "
                         f"installed; install it with {INSTALL}")
    module = pair.build_torch(run.config.seed, run.config.dtype)
    spec = {"torch_source": pair.torch_source, "loss_source": pair.loss_source, "name": pair.name,
            "state_dict": {k: v.detach().cpu().numpy() for k, v in module.state_dict().items()},
            "parameter_names": pair.parameter_names, "buffer_names": pair.buffer_names,
            "run": dataclasses.replace(run, pair=None), "strategies": list(strategies), "devices": devices,
            "float64": float64}
    with tempfile.TemporaryDirectory(prefix="dp_compare_traced_") as folder:
        path = Path(folder) / "spec.pkl"
        path.write_bytes(pickle.dumps(spec))
        [result] = launch([sys.executable, "-m", "comparisons.traced.worker", str(path)], 1, side="jax",
                          timeout=pair.timeout, env=_import_path())
    if result.value is None or "refused" in result.value:
        raise UsageError(result.value["refused"] if result.value else "the torchax worker returned no result")
    return result.value["runs"], result.value["float64"]


class TracedSide:
    """The `JaxSide` (comparisons/models/jax_side.py) of a TracedPair: the torch module traced by torchax, made,
    run and (for the layer view) unrecorded in a worker process; its variables are torch's, by name."""

    in_worker = True
    captures_layers = False
    computes_in_run_dtype = False

    def make(self, pair: Any) -> None:
        return None  # the worker traces the torch module itself

    def convert(self, pair: Any, torch_module: Any, model: Any, dtype: Any) -> dict:
        return pair.torch_to_flax(torch_module.state_dict())

    def computing_in(self, model: Any, dtype: str) -> Any:
        return model

    def run_in_worker(self, pair: Any, run: Any, strategies: list[str], devices: int, float64: bool
                      ) -> tuple[list, Any]:
        return run_in_worker(pair, run, strategies, devices, float64)

    def __repr__(self) -> str:
        return "TRACED"


TRACED = TracedSide()

SYS_PATH_ENV = "DP_COMPARE_PARENT_SYS_PATH"


def _import_path() -> dict[str, str]:
    """The worker imports this very `comparisons` (first on its path) and, after its own path, every folder
    this process imports from, so the user's modules resolve by the names they have here."""
    import json

    import comparisons

    root = str(Path(comparisons.__file__).resolve().parent.parent)
    python_path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": python_path, SYS_PATH_ENV: json.dumps([p or os.getcwd() for p in sys.path])}


def extend_import_path() -> None:
    """In the worker: append the parent's import folders that this process lacks (after the standard library)."""
    import json

    for folder in json.loads(os.environ.get(SYS_PATH_ENV, "[]")):
        if folder not in sys.path:
            sys.path.append(folder)

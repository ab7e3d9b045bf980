"""`python -m comparisons.traced.worker SPEC`: the JAX side of a traced comparison, in its own process.

Rebuilds the torch module with the parent's weights, traces it and its loss with torchax, checks that the
trace returns every buffer torch updates in place, then runs each dp_jax strategy and the single-device
references exactly as a Flax twin's runs (comparisons.runs). Hands back {'runs', 'float64'} or
{'refused': message} through the launcher's result file.
"""
from __future__ import annotations

import copy
import dataclasses
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np

from comparisons.distributed.ranks import write_result
from comparisons.errors import UsageError


def main(spec_path: str) -> None:
    from comparisons.runs import set_jax_cpu_devices
    from comparisons.traced.jax_side import extend_import_path

    extend_import_path()
    spec = pickle.loads(Path(spec_path).read_bytes())
    set_jax_cpu_devices(max(8, spec["devices"]))
    try:
        result = _run(spec)
    except UsageError as error:
        result = {"refused": str(error)}
    except Exception as error:  # noqa: BLE001 - the user's code's error is theirs; any other is re-raised
        result = {"refused": _theirs(spec, error)}
    write_result(result)


def _theirs(spec: dict, error: Exception) -> str:
    """The refusal of an error raised by the user's code, or an op torchax cannot trace; re-raises any other."""
    from comparisons.errors import blame_user_code
    from comparisons.traced import _torchax

    op = _torchax.data_dependent_op(error) or _torchax.untraceable_op(error)
    if op is not None:
        return (f"{spec['name']}: torchax {_torchax.version()} cannot trace this model: {op}; the JAX side cannot "
                "be traced (replace the op, or port that layer to Flax: docs/no_twin.md)")
    blamed = blame_user_code(error)
    if blamed is None:
        raise error
    return str(blamed)


def _run(spec: dict) -> dict:
    import jax

    from comparisons.harness import jax_precision
    from comparisons.runs import jax_devices
    from comparisons.runs.jax_run import run_jax, run_jax_reference
    from comparisons.traced import _torchax

    _torchax.import_torchax()
    devices = jax_devices(spec["devices"])
    run = spec["run"]
    module = _module(spec, run.config.dtype)
    pair = _local_pair(spec, module)
    run = dataclasses.replace(run, pair=pair)
    with jax_precision(run.config.dtype):  # the variables too: made outside x64 they would be float32
        traced = pair.make_flax()
        variables = _host(traced.variables())
        _check_first_forward(spec, module, traced, variables, run)
        runs = [run_jax(run, traced, variables, devices, strategy, progress=lambda: None)
                for strategy in spec["strategies"]]
    reference = None
    if spec["float64"]:
        wide = dataclasses.replace(run, config=dataclasses.replace(run.config, dtype="float64"),
                                   inputs=tuple(_wider(x) for x in run.inputs), targets=_wider(run.targets))
        traced64 = _torchax.TracedApply(copy.deepcopy(module).double(), tuple(spec["buffer_names"]))
        with jax_precision("float64"):
            reference = run_jax_reference(wide, traced64, _host(traced64.variables()), devices[0],
                                          spec["devices"])
        reference = _torch_dtypes(reference, spec["state_dict"])
    del jax
    return {"runs": [_run_in_torch_dtypes(r, spec["state_dict"]) for r in runs], "float64": reference}


def _module(spec: dict, dtype: str) -> Any:
    import torch

    from comparisons.traced.jax_side import resolve

    module = resolve(spec["torch_source"], "module_or_factory")
    state = {k: torch.from_numpy(np.array(v)) for k, v in spec["state_dict"].items()}
    module.load_state_dict(state)
    return module.to(torch.float64 if dtype == "float64" else torch.float32)


def _local_pair(spec: dict, module: Any) -> Any:
    from comparisons.models import ModelPair
    from comparisons.traced import _torchax
    from comparisons.traced.jax_side import resolve

    loss_torch = resolve(spec["loss_source"], "loss_torch")
    traced = _torchax.TracedApply(module, tuple(spec["buffer_names"]))
    names, expected = set(traced.jittable.params), set(spec["parameter_names"])
    if names != expected:  # the JAX gradients would not line up with torch's by name
        raise UsageError(f"{spec['name']}: torchax names the parameters {sorted(names ^ expected)} unlike torch's "
                         "named_parameters(); the two sides cannot be lined up by name")
    return ModelPair(spec["name"], lambda: module, lambda: traced, (), _inputs_come_from_the_parent, loss_torch,
                     _torchax.traced_loss(loss_torch), has_batch_stats=bool(spec["buffer_names"]))


def _inputs_come_from_the_parent(*_: Any) -> Any:
    """The worker's pair makes no inputs: the parent's run (its spec) carries the very arrays torch ran on."""
    raise AssertionError("the traced worker ran make_inputs; its inputs come from the parent's run")


def _check_first_forward(spec: dict, module: Any, traced: Any, variables: dict, run: Any) -> None:
    """Trace one training forward on chunk 0 (an op torchax cannot lower is refused by name) and refuse a
    buffer that torch's own forward changes but the trace gives back unchanged: it would pass silently."""
    import jax
    import torch

    from comparisons.traced import _torchax

    rows = -(-run.config.batch_size // spec["devices"])
    chunk = tuple(np.take(x, range(min(rows, x.shape[run.config.dim])), axis=run.config.dim) for x in run.inputs)
    try:
        result = jax.jit(lambda v, *x: traced.apply(v, *x, train=True, mutable=["batch_stats"]))(variables, *chunk)
    except Exception as error:  # noqa: BLE001 - only torchax's 'no lowering' is the user's; re-raised otherwise
        op = _torchax.untraceable_op(error)
        if op is None:
            raise
        raise UsageError(f"{spec['name']}: torchax {_torchax.version()} cannot trace this model: {op}; the "
                         "JAX side cannot be traced (port that layer to Flax, or replace the op)") from None
    returned = jax.device_get(result[1].get("batch_stats", {}))
    reference = copy.deepcopy(module).train()
    with torch.no_grad():
        reference(*(torch.from_numpy(np.ascontiguousarray(x)) for x in chunk))
    after = reference.state_dict()
    for name in spec["buffer_names"]:
        changed_by_torch = not np.array_equal(after[name].numpy(), np.asarray(variables["batch_stats"][name]))
        if changed_by_torch and np.array_equal(returned[name], variables["batch_stats"][name]):
            raise UsageError(f"{spec['name']}: buffer {name!r} is updated in place by torch's forward, but the "
                             f"trace by torchax {_torchax.version()} gives it back unchanged (the op writing it "
                             "keeps its update outside the trace), so its checks could only pass by accident; "
                             "refused. Make the update an in-place tensor op (buffer.copy_(new), buffer += x) or "
                             "declare the buffer torch_only")


def _host(variables: dict) -> dict:
    import jax

    return jax.tree.map(np.asarray, jax.device_get(variables))


def _wider(x: Any) -> Any:
    return x.astype(np.float64) if np.issubdtype(np.asarray(x).dtype, np.floating) else x


def _torch_dtypes(snapshot: Any, state_dict: dict) -> Any:
    """Integer buffers (num_batches_tracked) in torch's dtype: JAX without x64 keeps int64 as int32."""
    stats = {k: np.asarray(v, dtype=state_dict[k].dtype) if np.issubdtype(np.asarray(v).dtype, np.integer) else v
             for k, v in (snapshot.batch_stats or {}).items()}
    return dataclasses.replace(snapshot, batch_stats=stats)


def _run_in_torch_dtypes(run: Any, state_dict: dict) -> Any:
    eager = None if run.eager is None else _torch_dtypes(run.eager, state_dict)
    return dataclasses.replace(run, dp=_torch_dtypes(run.dp, state_dict), single=_torch_dtypes(run.single, state_dict),
                               eager=eager)


if __name__ == "__main__":
    main(sys.argv[1])

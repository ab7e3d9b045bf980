"""A pair's functions checked before any training step, where a run would fail with a raw error from inside torch
or JAX, or compare two different computations: what make_inputs and the losses return, whether the JAX model
takes `train=`, active dropout on either side, bfloat16 leaves. Each refusal is a ComparisonError naming the pair,
the function or argument, the value and the fix (docs/models.md lists them)."""
from __future__ import annotations

from typing import Any

import numpy as np

from comparisons.errors import ComparisonError

from .jax_nnx import short_description

_FIX_DTYPE = "return floating arrays in the dtype asked (x.astype(dtype))"


def checked_inputs(pair: Any, batch_size: int, seed: int, dtype: Any) -> tuple[tuple, Any]:
    """`pair.make_inputs(batch_size, seed, dtype)`, refused unless it is (a tuple of arrays, targets) whose floating
    arrays are in `dtype` (never bfloat16). Costs the call."""
    where = (f"ModelPair {pair.name!r}: make_inputs(batch_size={batch_size}, seed={seed}, "
             f"dtype={np.dtype(dtype).name})")
    made = pair.make_inputs(batch_size, seed, dtype)
    if not (isinstance(made, (tuple, list)) and len(made) == 2):
        raise ComparisonError(f"{where} returned {short_description(made)}; return the pair (inputs, targets), "
                              "inputs a tuple of numpy arrays in forward's order: ((x,), y)")
    inputs, targets = made
    if not isinstance(inputs, tuple) or not inputs:
        raise ComparisonError(f"{where} returned inputs {short_description(inputs)}, not a non-empty tuple; "
                              "return (tuple(inputs), targets): ((x,), y)")
    for label, value in [*((f"inputs[{i}]", x) for i, x in enumerate(inputs)), ("targets", targets)]:
        _check_leaf(where, label, getattr(value, "dtype", None), dtype)
    return inputs, targets


def _check_leaf(where: str, label: str, found: Any, asked: Any) -> None:
    if found is None:
        return
    if str(found) == "bfloat16":
        raise ComparisonError(f"{where} returned {label} in bfloat16: a comparison runs in float32 or float64 "
                              f"(compare(dtype=...)); {_FIX_DTYPE}")
    if np.issubdtype(np.dtype(found), np.floating) and np.dtype(found) != np.dtype(asked):
        raise ComparisonError(f"{where} returned {label} in {np.dtype(found).name} in a {np.dtype(asked).name} run "
                              f"(torch refuses to mix them); {_FIX_DTYPE}")


def check_training(pair: Any, built: Any, dtype: Any) -> None:
    """Refuse what the training runs would trip on, on a batch of 2: mistaken inputs (`checked_inputs`), active
    dropout in torch, a torch loss that is not a tensor, bfloat16 variables, and on the JAX side (when it runs in
    this process) a model without `train=`, one that draws random numbers in training, a loss that is a Python
    number. Costs one torch forward (a copy of the module, eval mode, no grad) and one trace of the JAX loss
    (`jax.eval_shape`)."""
    inputs, targets = checked_inputs(pair, 2, 0, dtype)
    check_no_dropout(pair.name, built.torch)
    _check_torch_loss(pair, built.torch, inputs, targets)
    if built.flax is None:
        return
    import jax

    bfloat16 = [jax.tree_util.keystr(path) for path, leaf in jax.tree_util.tree_flatten_with_path(built.variables)[0]
                if str(getattr(leaf, "dtype", "")) == "bfloat16"]
    if bfloat16:
        raise ComparisonError(f"ModelPair {pair.name!r}: variables= holds bfloat16 leaves ({', '.join(bfloat16[:3])}"
                              f"{', ...' if len(bfloat16) > 3 else ''}): a comparison runs in float32 or float64; pass "
                              "them in float32 (jax.tree.map(lambda a: a.astype('float32'), variables))")
    _check_jax_training(pair, built.flax, built.variables, inputs, targets, dtype)


def check_no_dropout(name: str, torch_module: Any) -> None:
    """Refuse torch dropout layers with p > 0: a training comparison runs them in train mode, and torch and JAX draw
    different masks, so no number of the step could compare (until the two share masks)."""
    active = active_dropout(torch_module)
    if active:
        raise ComparisonError(
            f"ModelPair {name!r}: make_torch() gives active dropout in a training comparison: {', '.join(active[:4])}"
            f"{f' and {len(active) - 4} more' if len(active) > 4 else ''}; torch and JAX draw different random "
            "masks, so no output or gradient could compare: set p=0 for the comparison (nn.Dropout(0.0)), on the "
            "Flax side too")


def active_dropout(torch_module: Any) -> list[str]:
    """'name (Dropout p=0.1)' for each torch dropout layer with p > 0 (the training runs put every module in train
    mode, so each is active there)."""
    import torch

    return [f"{n or '(root)'} ({type(m).__name__} p={m.p})" for n, m in torch_module.named_modules()
            if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0]


def _check_torch_loss(pair: Any, torch_module: Any, inputs: tuple, targets: Any) -> None:
    """The loss of one eval-mode forward of a copy: a forward may update a buffer even in eval mode (a counter),
    and the compared runs must start from the very module built (the copy costs one more set of weights)."""
    import copy

    import torch

    probe = copy.deepcopy(torch_module).eval()
    with torch.no_grad():
        output = probe(*(torch.from_numpy(np.ascontiguousarray(x)) for x in inputs))
        loss = pair.loss_torch(output, torch.from_numpy(np.ascontiguousarray(targets)))
    if not isinstance(loss, torch.Tensor):
        raise ComparisonError(f"ModelPair {pair.name!r}: loss_torch(output, targets) returned {short_description(loss)}"
                              ", not a torch tensor: backward needs the tensor; return it without float() or .item()")


def _check_jax_training(pair: Any, model: Any, variables: Any, inputs: tuple, targets: Any, dtype: Any) -> None:
    """One abstract training forward and loss (`jax.eval_shape`): what fails there is named."""
    import flax
    import jax

    mutable = ["batch_stats"] if pair.has_batch_stats else False
    where = {"now": "make_flax"}

    def loss_of(variables, *x):
        result = model.apply(variables, *x, train=True, mutable=mutable)
        where["now"] = "loss_jax"
        return pair.loss_jax(result[0] if mutable else result, targets)

    name = type(getattr(model, "module", model)).__name__
    try:
        with jax.enable_x64(np.dtype(dtype) == np.float64):
            jax.eval_shape(loss_of, variables, *pair.to_flax_inputs(inputs))
    except jax.errors.ConcretizationTypeError:
        if where["now"] != "loss_jax":
            raise
        raise ComparisonError(f"ModelPair {pair.name!r}: loss_jax(output, targets) makes a traced value a Python "
                              "number (float(), .item(), a Python if on it): it runs under jax.grad and jit; return "
                              "the jax array (jnp.mean(...))") from None
    except flax.errors.InvalidRngError as error:
        raise ComparisonError(f"ModelPair {pair.name!r}: the Flax model {name} draws random numbers in a training "
                              f"forward (active dropout: {str(error).splitlines()[0]}); torch and JAX draw different "
                              "masks, so no number could compare: set its dropout rates to 0 for the comparison, on "
                              "the torch side too") from None
    except TypeError as error:
        if where["now"] != "make_flax" or "train" not in str(error):
            raise
        raise ComparisonError(f"ModelPair {pair.name!r}: make_flax() gives {name}, whose __call__ takes no train= "
                              f"({error}); the harness calls it with train=True to train (train=False otherwise): add "
                              "`train: bool = False` to its __call__ and pass it to Dropout/BatchNorm") from None

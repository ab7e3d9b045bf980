"""Run a ModelPair's two halves on the same weights and inputs, and measure how far apart they are."""
from __future__ import annotations

import jax
import numpy as np
import torch

# float32 torch vs XLA is not bitwise (spec §6): max-abs or relative-norm within 1e-5; float64: 1e-12
TOLERANCE = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}


def disagreement(a, b) -> float:
    """min(max-abs difference, relative norm of the difference): 0 means equal."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, f"shapes differ: {a.shape} vs {b.shape}"
    diff = np.abs(a - b)
    return float(min(diff.max(initial=0.0), np.linalg.norm(diff) / max(np.linalg.norm(b), 1e-300)))


def assert_agree(a, b, dtype, what: str) -> None:
    tol = TOLERANCE[np.dtype(dtype)]
    gap = disagreement(a, b)
    assert gap <= tol, f"{what}: torch and flax differ by {gap:.3g} > {tol:g}"


def torch_run(pair, module, inputs, targets, train: bool = True):
    """Torch output, {param name: grad}, state_dict after the forward (running stats updated)."""
    module.train(train)
    module.zero_grad(set_to_none=True)
    out = module(*(torch.from_numpy(x) for x in inputs))
    pair.loss_torch(out, targets).backward()
    grads = {n: p.grad.clone() for n, p in module.named_parameters()}
    return out.detach().numpy(), grads, module.state_dict()


def flax_run(pair, module, variables, inputs, targets, train: bool = True, grads: bool = True):
    """Flax output, params-shaped grads (None unless `grads`), variables after the forward."""
    flax_inputs = pair.to_flax_inputs(inputs)
    rest = {k: v for k, v in variables.items() if k != "params"}
    mutable = ["batch_stats"] if pair.has_batch_stats and train else False

    def loss(params):
        result = module.apply({"params": params, **rest}, *flax_inputs, train=train, mutable=mutable)
        out, updates = result if mutable else (result, {})
        return pair.loss_jax(out, targets), (out, updates)

    if not grads:
        _, (out, updates) = loss(variables["params"])
        return np.asarray(out), None, {**variables, **updates}
    param_grads, (out, updates) = jax.jit(jax.grad(loss, has_aux=True))(variables["params"])
    return np.asarray(out), param_grads, {**variables, **updates}


def assert_pair_agrees(pair, seed: int, batch_size: int, dtype, train: bool = True) -> None:
    """Build the pair, run both halves, and check outputs, gradients and updated buffers agree."""
    torch_module, flax_module, variables = pair.build(seed=seed, dtype=dtype)
    inputs, targets = pair.make_inputs(batch_size, seed, dtype)
    assert_models_agree(pair, torch_module, flax_module, variables, inputs, targets, dtype, train)


def assert_models_agree(pair, torch_module, flax_module, variables, inputs, targets, dtype,
                        train=True, grads=True):
    """Outputs, then (if `grads`) gradients, then buffers: the first disagreement fails."""
    t_out, t_grads, t_state = torch_run(pair, torch_module, inputs, targets, train)
    f_out, f_grads, f_vars = flax_run(pair, flax_module, variables, inputs, targets, train, grads)
    assert_agree(t_out, f_out, dtype, f"{pair.name} output")
    for name, grad in (pair.grads_to_torch(f_grads) if grads else {}).items():
        assert_agree(t_grads[name], grad, dtype, f"{pair.name} grad of {name}")
    buffers = [n for n, _ in torch_module.named_buffers() if not n.endswith("num_batches_tracked")]
    flax_state = pair.flax_to_torch(f_vars)
    for name in buffers:
        assert_agree(t_state[name], flax_state[name], dtype, f"{pair.name} buffer {name}")

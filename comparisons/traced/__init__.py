"""`comparisons.traced`: no Flax twin? The JAX side traced from the torch model by torchax.

    from comparisons import compare
    from comparisons.traced import pair_from_torch
    report = compare(pair_from_torch("my_pkg.nets:make_net", make_inputs=..., loss_torch=...), batch_size=7)

  pair         TracedPair, pair_from_torch: one torch model, torch's names on both sides, no mapping
  jax_side     the parent's half: what the worker rebuilds the model from, and the worker's launch
  worker       `python -m comparisons.traced.worker`: trace, check the buffers, run every dp_jax strategy
  cli          `python -m comparisons run --torch TARGET --input-shape ...`
  _torchax     every use of torchax (the pin, the import, the trace, the batch-norm write-back), fenced
Importing this package imports neither torch, JAX nor torchax; torchax is imported in the worker alone.
"""
from comparisons.traced._torchax import INSTALL, PIN
from comparisons.traced.pair import LABEL, TracedPair, pair_from_torch

__all__ = ["INSTALL", "LABEL", "PIN", "TracedPair", "pair_from_torch"]

"""One backend's run of a model pair: data-parallel and single-device, K training steps, placement.

    _records.py      RunConfig, RunInputs (what every run takes), Snapshot, Trajectory, BackendRun,
                     Float64Reference (what runs give)
    torch_run.py     run_torch: dp_torch's four steps vs the chunks one after another on one device
    jax_run.py       run_jax, run_padded: dp_jax.DataParallel (one strategy) vs the chunked reference
    _jax_apply.py    the one dp_apply builder, the chunked reference and the loss every JAX run uses
    _jax_compiled.py the mapped strategies' training through dp_jax's compiled step
    _optimizers.py   OPTIMIZERS and the torch.optim / optax twins, side by side
    _devices.py      the torch devices (cpu, vdev, cuda, auto) and JAX's, one rule for compare() and the CLI
    _compile_cache.py   JAX's persistent compilation cache, on by default in a per-user folder
    _light_compiles.py  XLA's light CPU compile while compare() runs (compiling is what a comparison costs)
    _memory_maps.py  cached programs freed before a process passes Linux's memory-map limit
    _checks.py       what a pair's make_inputs and losses return, checked as the runs call them
    _trees.py        outputs as plain trees of host numpy arrays, one shape for torch and Flax

Above placement/, convert/ and models/; judge/ and harness/ build on it. Importing this package
imports neither torch nor JAX: `torch_run` and `jax_run` do, and are imported when a run starts.
"""
from comparisons.runs._checks import pair_inputs, scalar_loss
from comparisons.runs._compile_cache import ENV as COMPILE_CACHE_ENV
from comparisons.runs._compile_cache import use_compile_cache
from comparisons.runs._devices import (
    TORCH_DEVICES,
    install_virtual,
    jax_devices,
    no_cuda_reason,
    set_jax_cpu_devices,
    torch_devices,
    torch_kind,
)
from comparisons.runs._light_compiles import ENV as XLA_OPTIMIZE_ENV
from comparisons.runs._light_compiles import NOTE as LIGHT_COMPILES_NOTE
from comparisons.runs._light_compiles import light_compiles
from comparisons.runs._memory_maps import clear_cached_programs, free_programs_near_map_limit, map_count, map_limit
from comparisons.runs._optimizers import OPTIMIZERS, optax_optimizer, torch_optimizer
from comparisons.runs._records import BackendRun, Float64Reference, RunConfig, RunInputs, Snapshot, Trajectory
from comparisons.runs._trees import output_tree, to_numpy

__all__ = ["COMPILE_CACHE_ENV", "LIGHT_COMPILES_NOTE", "OPTIMIZERS", "TORCH_DEVICES", "XLA_OPTIMIZE_ENV",
           "BackendRun", "Float64Reference", "RunConfig", "RunInputs", "Snapshot", "Trajectory",
           "clear_cached_programs", "free_programs_near_map_limit", "install_virtual", "jax_devices",
           "light_compiles", "map_count", "map_limit", "no_cuda_reason", "optax_optimizer", "output_tree",
           "pair_inputs", "scalar_loss", "set_jax_cpu_devices", "to_numpy", "torch_devices", "torch_kind",
           "torch_optimizer", "use_compile_cache"]

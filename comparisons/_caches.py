"""`comparisons.clear_caches`: forget the compiled programs and cached steps comparisons keep."""
from __future__ import annotations


def clear_caches() -> None:
    """Forget every compiled program and cached step a comparison keeps (comparisons' and dp_jax's).

    compare() caches its reference steps, compiled train steps and optimizer steps per model, loss and
    devices, so a second comparison of the same pair compiles nothing; they hold your modules and losses.
    After this call the next comparison compiles again. A no-op where no JAX run happened.
    """
    from comparisons.runs import clear_cached_programs

    clear_cached_programs()

"""What must happen before a user builds a transformers Flax model, so at `import comparisons.hf`.

The two-line recipe (docs/your_models.md) builds the Flax model before `hf.pair` runs, and building it
starts JAX and logs transformers' Flax deprecation line: neither can wait for the first `hf.pair`. Only the
call in `comparisons/hf/__init__.py` runs this; everything else in the folder is done on first use.
"""
from __future__ import annotations

import logging

# transformers 4.x logs this once per process when a Flax model is built (logger.warning_once, not
# warnings.warn, so warnings.filterwarnings cannot reach it): the `hf` extra pins transformers < 5
# on purpose, and the line says nothing about the comparison. Only this message of that logger.
_FLAX_DEPRECATION = "TensorFlow and JAX classes are deprecated and will be removed in Transformers v5"
_FLAX_LOGGER = "transformers.modeling_flax_utils"


def prepare_for_flax_models(cpu_devices: int = 8) -> None:
    """Give JAX compare()'s CPU device count and quiet transformers' Flax deprecation line; idempotent.

    Building a transformers Flax model (even with `_do_init=False`) starts JAX, after which its CPU device
    count is fixed at one and compare(devices=2) cannot run; compare() would set this count itself had JAX
    not started. A count chosen already (XLA_FLAGS, jax.config) or a JAX already started is left alone.
    Costs the import of JAX (not torch nor transformers).
    """
    from comparisons.runs import set_jax_cpu_devices

    set_jax_cpu_devices(cpu_devices)
    logger = logging.getLogger(_FLAX_LOGGER)
    if _drop_flax_deprecation not in logger.filters:
        logger.addFilter(_drop_flax_deprecation)


def _drop_flax_deprecation(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_FLAX_DEPRECATION)

"""Hugging Face pairs: a transformers torch model and its Flax twin through the harness, as they are.

    from comparisons import hf
    pair = hf.pair("bert-tiny", BertForMaskedLM(config), FlaxBertForMaskedLM(config, _do_init=False))

`pair` derives everything else from the two models: the mapping by parameter path (the two
libraries name modules alike), the rules transformers' layers need, the inputs (from the model's
main input and config), the loss (from its head), how the Flax model is called (its own
`__call__`, by keyword, so masks and positions are filled as transformers fills them), and what
exists on one side only. Needs the `hf` extra (`pip install -e '.[dev]'` includes it; transformers
< 5: version 5 dropped the Flax models).

  _pair       pair: what it derives from the two models, and in what order
  _inputs     token_inputs, image_inputs, and inputs derived from a model
  _losses     cross-entropy on logits, the mean square of a base model's hidden state
  _calling    PretrainedCall (the model's own __call__, by keyword), flax_apply (a bare module)
  _rules      GPT-2's Conv1D, same-name rules for parameters a module holds, weight norm; `pair`
              registers them on first use (call `register_rules()` to convert transformers layers without it)
  _checks     refusals before any run: arguments, batch-dependent and scalar outputs, version notes,
              BatchNorms a Flax port leaves in inference mode while training, random masks (SpecAugment),
              Flax parameters the torch config turned off
  _variables  from_pt_variables (transformers' own converter)
  _before_flax_models  the one thing done at import (below)
  sweep       every family with a torch and a Flax class in the installed transformers, tiny, in a table
Importing this package imports JAX (not torch nor transformers) to give it compare()'s CPU devices, and quiets
transformers' Flax deprecation line, before the user's Flax model starts JAX and logs it: the recipe builds
that model before `pair` runs (`_before_flax_models.py`, docs/your_models.md).
"""
from comparisons.hf import _before_flax_models
from comparisons.hf._calling import PretrainedCall, flax_apply
from comparisons.hf._checks import (
    BatchDependentOutput,
    FlaxOnlyParameter,
    RandomMasking,
    TrainingModeIgnored,
    VersionNote,
    version_note,
)
from comparisons.hf._inputs import derived_inputs, image_inputs, token_inputs
from comparisons.hf._losses import cross_entropy_jax, cross_entropy_torch
from comparisons.hf._pair import pair
from comparisons.hf._rules import register_rules
from comparisons.hf._variables import from_pt_variables

# the one import-time call (see the docstring): before the recipe's Flax model starts JAX
_before_flax_models.prepare_for_flax_models()

__all__ = ["BatchDependentOutput", "FlaxOnlyParameter", "PretrainedCall", "RandomMasking",
           "TrainingModeIgnored", "VersionNote", "cross_entropy_jax",
           "cross_entropy_torch", "derived_inputs", "flax_apply", "from_pt_variables", "image_inputs", "pair",
           "register_rules", "token_inputs", "version_note"]

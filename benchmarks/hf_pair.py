"""A tiny GPT-2 pair (docs/your_models.md's recipe) for `run --import benchmarks.hf_pair --model gpt2-tiny`:
the Hugging Face pair the prepared GPU check benches (benchmarks/gpu_check.sh). Random weights, nothing
downloaded; importing it imports torch, JAX and transformers."""
import transformers

from comparisons import hf, models

CONFIG = transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=40, n_positions=16, resid_pdrop=0.0,
                                 embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
PAIR = models.register(hf.pair("gpt2-tiny", transformers.GPT2LMHeadModel(CONFIG),
                               transformers.FlaxGPT2LMHeadModel(CONFIG, _do_init=False),
                               make_inputs=hf.token_inputs(vocab=40, length=7)), replace=True)

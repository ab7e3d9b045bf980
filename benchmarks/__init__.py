"""Ratio benchmarks: what data parallelism costs in dp_torch and dp_jax, measured side by side.

Run `python -m benchmarks` (see `--help`). Every figure is a ratio of two timings taken
alternately in one run, so a busy machine slows both sides alike. Importing this package
imports neither torch nor JAX; `python -m benchmarks` sets up JAX's devices before it does.
"""

"""compare(pair, ...): run one model pair through dp_torch and dp_jax and judge every number and placement.

    _compare.py    compare(): checks every argument, builds the pair, runs torch and each strategy, judges
    _arguments.py  compare()'s argument checks, before any work runs
    _trajectory.py whether every training step is recorded (the drift per step), within a memory bound

Above runs/ and judge/; the CLI, distributed/ and the public `comparisons.compare` build on it.
"""
from comparisons.errors import ComparisonError
from comparisons.harness._compare import STRATEGIES, compare, tolerance_record
from comparisons.harness._trajectory import TRAJECTORY_BYTES, with_trajectory

__all__ = ["STRATEGIES", "TRAJECTORY_BYTES", "ComparisonError", "compare", "tolerance_record", "with_trajectory"]

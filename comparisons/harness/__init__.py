"""compare(pair, ...): run one model pair through dp_torch and dp_jax and judge every number and placement.

    _compare.py    compare(): its Settings, then devices -> runs -> verdicts -> notes, one report
    _settings.py   Settings: a comparison's settings, one frozen record checked once; the report's header
    _arguments.py  the checks Settings and compare() run, before any work runs
    _layers.py     the layer view in a comparison: when it runs, the report fields it fills
    _trajectory.py whether every training step is recorded (the drift per step), within a memory bound

Above runs/ and judge/; the CLI, distributed/ and the public `comparisons.compare` build on it.
"""
from comparisons.errors import ComparisonError
from comparisons.harness._arguments import model_pair
from comparisons.harness._compare import compare, compare_settings, jax_precision
from comparisons.harness._settings import PRECISIONS, STRATEGIES, Settings, tolerance_record
from comparisons.harness._trajectory import TRAJECTORY_BYTES, with_trajectory

__all__ = ["PRECISIONS", "STRATEGIES", "TRAJECTORY_BYTES", "ComparisonError", "Settings", "compare",
           "compare_settings", "jax_precision", "model_pair", "tolerance_record", "with_trajectory"]

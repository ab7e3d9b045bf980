"""Where a port diverges, layer by layer and replica by replica (docs/debugging_a_port.md).

    _capture.py   the recorders: torch forward hooks, a Flax linen method interceptor
    _forward.py   one single-device training-mode forward per side, every mapped layer recorded
    _align.py     torch's calls beside Flax's through the mapping, in torch's order, each side judged
    _walk.py      first_divergence: inside a layer, between two, or a gradient or statistic
    _attention.py which attention bug (scale, mask, softmax axis, head order) a divergence before an output
                  projection points to
    _view.py      layer_view: the forwards, the rows and the first divergence of one comparison
    _replicas.py  replica_divergences: each replica's layers against the single-device run on its chunk
    _records.py   Call, Side, Row

Above runs/ and judge/ (a row is judged as every torch-vs-JAX leaf is, with the float64 run's cause);
harness/ and render/ build on it. Importing it imports neither torch nor JAX.
"""
from comparisons.layers._attention import attention_hint, between_attention
from comparisons.layers._records import Row, Side
from comparisons.layers._replicas import replica_divergences
from comparisons.layers._view import LayerView, layer_view
from comparisons.layers._walk import OUTPUT, first_divergence

__all__ = ["OUTPUT", "LayerView", "Row", "Side", "attention_hint", "between_attention", "first_divergence",
           "layer_view", "replica_divergences"]

"""The JAX side of a Flax NNX Module: split into a pure apply and linen-style variables, then run as a linen Module.

`NNXApply(model)` holds the module's `nnx.split` (its GraphDef and state) and presents it as the harness calls a
linen Module: `init` returns {'params': <every nnx.Param>, 'batch_stats': <every nnx.BatchStat>} keyed by the NNX
state path (list indices as strings: torch `blocks.0.attn` is NNX `blocks[0].attn`, path 'blocks.0.attn'), and
`apply(variables, *inputs, train=, mutable=)` merges them back into a fresh module, sets its train/eval mode and
calls it. So runs, judge and render see a linen-shaped model, and the steps the harness takes (optax on 'params'
only) are the steps `nnx.Optimizer(model, tx, wrt=nnx.Param)` takes. RNG state (nnx.RngKey, nnx.RngCount) and
any other Variable stay inside, as constants: never converted, never compared. A Variable of another type
(a plain `nnx.Variable`) appears in `init` under its type's name, so a torch parameter mapped onto one is
refused by name (`check_trainable`): the NNX optimizer would never update it.
"""
from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from comparisons.convert import nnx_key
from comparisons.errors import ComparisonError, UsageTypeError
from comparisons.models.jax_side import convert_flax

TRAINED, STATISTICS = "params", "batch_stats"


def is_nnx_module(value: Any) -> bool:
    """True for an instance of a flax.nnx Module (imports flax only when it is loaded already)."""
    import sys

    nnx = sys.modules.get("flax.nnx")
    return nnx is not None and isinstance(value, nnx.Module)


def nnx_kind(value: Any) -> str | None:
    """Words for an NNX object that is not an NNX module instance (a Module class, a GraphDef, a State), or None."""
    import sys

    nnx = sys.modules.get("flax.nnx")
    if nnx is None:
        return None
    if isinstance(value, type) and issubclass(value, nnx.Module):
        return (f"the NNX Module class {value.__name__} itself, not a module: construct it, e.g. "
                f"{value.__name__}(..., rngs=nnx.Rngs(0))")
    if isinstance(value, nnx.GraphDef):
        return "an NNX GraphDef alone (no weights): pass the module itself, or nnx.merge(graphdef, state)"
    if isinstance(value, nnx.State):
        return "an NNX State alone (no structure): pass the module itself, or nnx.merge(graphdef, state)"
    return _bridged(value, nnx)


def _bridged(value: Any, nnx: Any) -> str | None:
    """Words for an `nnx.bridge` twin, which is refused: the layer view cannot see through the bridge, and NNX's
    fixed dtypes inside a linen wrapper keep float32 in a float64 run. Each names the native path."""
    if isinstance(value, nnx.bridge.ToLinen):
        name = value.nnx_class.__name__
        return (f"nnx.bridge.to_linen({name}), an NNX Module wrapped as linen, which the comparison does not see "
                f"through: pass the NNX module itself, {name}(..., rngs=nnx.Rngs(0)), which it runs natively")
    if not isinstance(value, nnx.Module):
        return None
    for path, module in nnx.iter_modules(value):
        if isinstance(module, nnx.bridge.ToNNX):
            wrapped = getattr(module, "to_nnx__module", None) or module.module  # flax >= 0.12 renamed it
            linen = f"the linen {type(wrapped).__name__}"
            if not path:
                return (f"an nnx.bridge.ToNNX wrapping {linen}, which the comparison does not see through: pass the "
                        "linen module itself, which it runs natively, or write the twin in NNX")
            at = ".".join(map(str, path))
            return (f"an NNX Module ({type(value).__name__}) holding nnx.bridge.ToNNX at `{at}` ({linen}), which "
                    f"the comparison does not see through: write `{at}` in NNX, or the whole twin in linen")
    return None


def describe(value: Any) -> str:
    """One line naming `value`: the NNX words when it is an NNX object, else its type (never a module's repr)."""
    if is_nnx_module(value):
        return f"an NNX Module ({type(value).__name__})"
    return nnx_kind(value) or f"a {type(value).__module__}.{type(value).__qualname__}"


def short_description(value: Any) -> str:
    """`value` for a one-line message: its repr with its type when short, else `describe(value)` (a model's repr
    runs to hundreds of lines)."""
    if is_nnx_module(value) or nnx_kind(value) is not None:
        return describe(value)
    shown = repr(value)
    return f"{shown} (a {type(value).__name__})" if len(shown) <= 80 and "\n" not in shown else describe(value)


def refuse_nnx_kind(pair: Any, made: Any) -> None:
    """Refuse what `pair.make_flax()` returned when it is an NNX object that is not a twin (`nnx_kind`)."""
    words = nnx_kind(made)
    if words is not None:
        raise UsageTypeError(f"ModelPair {pair.name!r}: make_flax() returned {words}")


def _collection(variable_type: type) -> str:
    """The linen-style collection of an NNX Variable type: 'params', 'batch_stats', else the type's name."""
    from flax import nnx

    if issubclass(variable_type, nnx.Param):
        return TRAINED
    if issubclass(variable_type, nnx.BatchStat):
        return STATISTICS
    return variable_type.__name__


class NNXApply:
    """An `nnx.Module` called the way the harness calls a linen Module: `apply(variables, *inputs, train=,
    mutable=)` with variables {'params': ..., 'batch_stats': ...} keyed by NNX state path.

    Costs one `nnx.split` when made; each apply merges a fresh module (inside jit: trace time only).
    Hashes by identity, so the harness's compiled programs are reused while this object lives.
    """

    def __init__(self, model: Any):
        from flax import nnx

        self.model = model
        self.graphdef, self.state = nnx.split(model)
        flat = list(nnx.to_flat_state(self.state))
        self.variable_paths = {path: _collection(type(var)) for path, var in flat
                               if not isinstance(var, nnx.RngState)}
        self._flat = flat
        self._in_dtype: dict[str, NNXApply] = {}

    def init(self, rngs: Any = None, *inputs: Any) -> dict:
        """The module's own variables by collection (nnx.Param as 'params', nnx.BatchStat as 'batch_stats', other
        non-RNG Variables under their type's name); `rngs` and `inputs` are unused (an NNX module is built)."""
        from flax.traverse_util import unflatten_dict

        flat = {(collection, *nnx_key(path)): var.get_value() for path, var in self._flat
                if (collection := self.variable_paths.get(path)) is not None}
        return unflatten_dict(flat)

    def module_with(self, variables: Any) -> Any:
        """A fresh module holding `variables` where given and a copy of this module's own state elsewhere (a copy:
        inside a traced apply, NNX refuses to change a Variable made outside it, as nnx.RNN's RNG count is)."""
        from flax import nnx
        from flax.traverse_util import flatten_dict

        given = flatten_dict(dict(variables)) if variables else {}
        replaced = []
        for path, var in self._flat:
            key = (self.variable_paths.get(path), *nnx_key(path))
            replaced.append((path, var.copy(given[key]) if key in given else var.copy()))
        return nnx.merge(self.graphdef, nnx.from_flat_state(replaced))

    def apply(self, variables: Any, *inputs: Any, train: bool = False, mutable: Any = False,
              rngs: Any = None, **kwargs: Any) -> Any:
        """The module on `inputs` in train (BatchNorm by the batch) or eval mode; (out, {'batch_stats': ...}) when
        `mutable` names collections (each one's state after the call)."""
        from flax import nnx

        model = self.module_with(variables)
        model.train() if train else model.eval()
        recorder = _RECORDER.get()
        output = model(*inputs, **kwargs) if recorder is None else _recorded_call(model, inputs, kwargs, *recorder)
        if not mutable:
            return output
        after = {(self.variable_paths.get(path), *nnx_key(path)): var.get_value()
                 for path, var in nnx.to_flat_state(nnx.state(model))}
        wanted = [mutable] if isinstance(mutable, str) else list(mutable)
        return output, {name: _subtree(after, name) for name in wanted}

    __call__ = apply

    def with_dtype(self, dtype: str) -> NNXApply:
        """A copy whose every module computes in `dtype`: each floating `dtype` and `param_dtype` attribute (fixed
        at construction: nnx.Embed's float32) reset on a merged copy, and in float64 nnx.MultiHeadAttention's
        default attention_fn swapped for the same function's own softmax path; the user's module is untouched."""
        import numpy as np
        from flax import nnx

        if dtype in self._in_dtype:
            return self._in_dtype[dtype]
        copy = nnx.merge(self.graphdef, self.state)
        for _, module in nnx.iter_modules(copy):
            for name in ("dtype", "param_dtype"):
                value = getattr(module, name, None)
                if value is not None and np.issubdtype(np.dtype(value), np.floating):
                    setattr(module, name, np.dtype(dtype).type)
            if np.dtype(dtype) == np.float64 and getattr(module, "attention_fn", None) is nnx.dot_product_attention:
                module.attention_fn = _attention_in_its_dtype
        self._in_dtype[dtype] = NNXApply(copy)
        return self._in_dtype[dtype]

    def __repr__(self) -> str:
        return f"NNXApply({type(self.model).__name__})"


class _NoSowing:
    """A falsy `module` argument: nnx.dot_product_attention then computes its weights itself (softmax in the inputs'
    dtype) instead of calling jax.nn.dot_product_attention, whose softmax is float32 whatever the inputs, and
    dot_product_attention_weights' `if module:` sows nothing."""

    def __bool__(self) -> bool:
        return False


def _attention_in_its_dtype(*args: Any, module: Any = None, **kwargs: Any) -> Any:
    """nnx.dot_product_attention with every step in the inputs' dtype (the float64 run's attention: no float32
    island), the same function as the default's, so the float32 runs and this one compute one formula."""
    from flax import nnx

    return nnx.dot_product_attention(*args, module=_NoSowing() if module is None else module, **kwargs)


_RECORDER: contextvars.ContextVar = contextvars.ContextVar("nnx_layer_recorder", default=None)
LayerRecord = Callable[[int, Any, Any], None]


@contextlib.contextmanager
def recording_layers(targets: dict[str, int], record: LayerRecord) -> Iterator[None]:
    """Inside the block, every `NNXApply.apply` reports each call of a module whose dotted path is in `targets`
    as record(targets[path], ((input,), {}), output), through `nnx.capture` (the layer view's NNX recorder, beside
    linen's interceptor)."""
    token = _RECORDER.set((targets, record))
    try:
        yield
    finally:
        _RECORDER.reset(token)


_INPUT = "layer_input"


def _recorded_call(model: Any, inputs: tuple, kwargs: dict, targets: dict[str, int], record: LayerRecord) -> Any:
    """`model(*inputs, **kwargs)` under `nnx.capture(..., method_outputs=nnx.Intermediate)`: each module's calls'
    outputs by module path and call, and (sown by a wrapper around the mapped modules' classes) their inputs."""
    from flax import nnx

    found = {".".join(nnx_key(path)): (path, m) for path, m in nnx.iter_modules(model)}
    wanted = {found[p][0]: index for p, index in targets.items() if p in found}
    with _inputs_sown({type(found[p][1]) for p in targets if p in found}), _sown_outside_transforms():
        output, captured = nnx.capture(model, nnx.Intermediate, method_outputs=nnx.Intermediate)(*inputs, **kwargs)
    flat = {tuple(path): var.get_value() for path, var in nnx.to_flat_state(captured)}
    for path, index in wanted.items():
        outputs, ins = flat.get((*path, "__call__"), ()), flat.get((*path, _INPUT), ())
        for k, out in enumerate(outputs):
            record(index, ((ins[k] if k < len(ins) else None,), {}), out)
    return output


@contextlib.contextmanager
def _sown_outside_transforms() -> Iterator[None]:
    """While the block runs, `Module.sow` stores nothing when called inside a JAX transform that the capture runs
    around (nnx.scan, as nnx.RNN steps its cell; nnx.vmap; nnx.remat). Why: a value sown there adds to state the
    transform carries, and jax.lax.scan refuses a carry whose structure changed (a TypeError); nor could a traced
    per-step value leave the transform. So a module called only there has no recorded call (its row reads
    "missing"), and the module around the transform keeps its row: an nnx.RNN's is its whole output, as torch's
    hook on nn.LSTM sees it. Costs one trace-state lookup per sow."""
    from flax import nnx
    from jax.extend.core import get_opaque_trace_state

    outside, sow = get_opaque_trace_state(convention="nnx"), nnx.Module.__dict__["sow"]

    def sow_outside_transforms(self, *args, **kwargs):
        if get_opaque_trace_state(convention="nnx") != outside:
            return False
        return sow(self, *args, **kwargs)
    nnx.Module.sow = sow_outside_transforms
    try:
        yield
    finally:
        nnx.Module.sow = sow


@contextlib.contextmanager
def _inputs_sown(classes: set[type]) -> Iterator[None]:
    """Each class's `__call__` sows its first argument as an nnx.Intermediate while the block runs."""
    from flax import nnx

    own = {cls: cls.__dict__.get("__call__") for cls in classes}

    def sowing(call):
        def wrapper(self, *args, **kwargs):
            if args and hasattr(args[0], "shape"):
                self.sow(nnx.Intermediate, _INPUT, args[0])
            return call(self, *args, **kwargs)
        return wrapper
    for cls in classes:
        cls.__call__ = sowing(cls.__call__)
    try:
        yield
    finally:
        for cls, call in own.items():
            if call is None:
                del cls.__call__
            else:
                cls.__call__ = call


def _subtree(flat: dict, collection: str) -> dict:
    from flax.traverse_util import unflatten_dict

    return unflatten_dict({key[1:]: value for key, value in flat.items() if key[0] == collection})


_ADAPTERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def nnx_apply(model: Any) -> NNXApply:
    """The `NNXApply` of `model`, one per module object (so a warm compare reuses its compiled programs)."""
    try:
        adapter = _ADAPTERS.get(model)
        if adapter is None:
            adapter = _ADAPTERS[model] = NNXApply(model)
        return adapter
    except TypeError:  # not weak-referenceable: a fresh adapter (compiles again)
        return NNXApply(model)


def check_trainable(pair: Any, torch_module: Any, model: NNXApply) -> None:
    """Refuse a torch parameter mapped onto an NNX Variable that `nnx.Optimizer(..., wrt=nnx.Param)` never updates."""
    trained = {name for name, p in torch_module.named_parameters() if p.requires_grad}
    for layer in pair.mapping:
        prefix = nnx_key(tuple(p for p in layer.flax.replace("/", ".").split(".") if p))
        for path, collection in model.variable_paths.items():
            if collection in (TRAINED, STATISTICS) or nnx_key(path)[:len(prefix)] != prefix:
                continue
            torch_names = sorted(n for n in trained if n.startswith(f"{layer.torch}.") or n == layer.torch)
            if torch_names:
                leaf = ".".join(nnx_key(path))
                raise ComparisonError(
                    f"pair {pair.name!r}: NNX `{leaf}` is an nnx.{collection}, not an nnx.Param: "
                    f"nnx.Optimizer(model, tx, wrt=nnx.Param) never updates it, while torch trains "
                    f"{torch_names}; declare it nnx.Param(...)")


class NNXSide:
    """A `JaxSide` for an `nnx.Module`: made into an `NNXApply`, converted and run as a linen Module is."""

    in_worker = False
    captures_layers = True
    computes_in_run_dtype = True  # nnx layers fix dtype at construction: a float64 run resets it on a copy

    def make(self, pair: Any) -> NNXApply:
        model = pair.make_flax()
        refuse_nnx_kind(pair, model)
        if not is_nnx_module(model):
            raise UsageTypeError(f"ModelPair {pair.name!r}: make_flax() returned {describe(model)}, not an NNX "
                                 "module instance; return the model, e.g. make_flax=lambda: MyNet(rngs=nnx.Rngs(0))")
        return nnx_apply(model)

    def convert(self, pair: Any, torch_module: Any, model: Any, dtype: Any) -> dict:
        check_trainable(pair, torch_module, model)
        if pair.variables is not None:
            return convert_flax(pair, torch_module, model, dtype)
        like = {k: v for k, v in pair.flax_shapes(model).items() if k in (TRAINED, STATISTICS)}
        return pair.torch_to_flax(torch_module.state_dict(), like=like)

    def computing_in(self, model: Any, dtype: str) -> Any:
        return model.with_dtype(dtype) if isinstance(model, NNXApply) else model

    def run_in_worker(self, pair: Any, run: Any, strategies: list[str], devices: int, float64: bool
                      ) -> tuple[list, Any]:
        raise NotImplementedError("an NNX module runs in this process (in_worker is False)")

    def __repr__(self) -> str:
        return "NNX"


NNX = NNXSide()

"""nnx_traps names each NNX setting planted against torch's, by path, and nothing on honest twins."""
import jax.numpy as jnp
import torch
from flax import nnx
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from comparisons.judge import NNXTrap, nnx_traps, with_traps
from comparisons.models import nnx_nets, torch_nets
from comparisons.verdicts import Check, Leaf


class TorchNorms(torch.nn.Module):
    def __init__(self, features: int, momentum: float, eps: float):
        super().__init__()
        self.embed = torch.nn.Embedding(7, features)
        self.blocks = torch.nn.ModuleList([torch.nn.BatchNorm1d(features, momentum=momentum, eps=eps),
                                           torch.nn.LayerNorm(features, eps=eps)])
        self.rms = torch.nn.RMSNorm(features, eps=eps)


class NNXNorms(nnx.Module):
    def __init__(self, features: int, *, momentum: float, eps: float, ln_eps: float, fast: bool,
                 dtype=None, rngs: nnx.Rngs):
        self.embed = nnx.Embed(7, features, dtype=dtype, param_dtype=dtype or jnp.float32, rngs=rngs)
        self.blocks = nnx.List([
            nnx.BatchNorm(features, momentum=momentum, epsilon=eps, use_fast_variance=fast, rngs=rngs),
            nnx.LayerNorm(features, epsilon=ln_eps, rngs=rngs)])
        self.rms = nnx.RMSNorm(features, epsilon=eps, rngs=rngs)


def kinds(traps) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for trap in traps:
        found.setdefault(trap.path, set()).add(trap.kind)
        assert trap.cause and "\n" not in trap.cause and trap.hint
    return found


@given(features=st.integers(1, 6), torch_momentum=st.floats(0.05, 0.5), eps=st.sampled_from([1e-5, 1e-3, 1e-4]))
@settings(max_examples=5, deadline=None)
def test_nnx_defaults_are_named_with_their_paths(features, torch_momentum, eps):
    torch_model = TorchNorms(features, torch_momentum, eps)
    planted = NNXNorms(features, momentum=0.99, eps=eps, ln_eps=1e-6, fast=True, rngs=nnx.Rngs(0))
    found = kinds(nnx_traps(planted, torch_model))
    assert found == {"embed": {"fixed-dtype"},
                     "blocks.0": {"batchnorm-momentum", "batchnorm-variance", "batchnorm-fast-variance"},
                     "blocks.1": {"layernorm-epsilon"}}
    momentum = next(t for t in nnx_traps(planted, torch_model) if t.kind == "batchnorm-momentum")
    assert f"momentum={1 - torch_momentum:g}" in momentum.hint


@given(features=st.integers(1, 6), torch_momentum=st.floats(0.01, 0.5), eps=st.sampled_from([1e-5, 1e-3]))
@settings(max_examples=5, deadline=None)
def test_a_twin_with_torchs_settings_has_only_the_biased_variance_left(features, torch_momentum, eps):
    torch_model = TorchNorms(features, torch_momentum, eps)
    honest = NNXNorms(features, momentum=1 - torch_momentum, eps=eps, ln_eps=eps, fast=False,
                      dtype=jnp.float32, rngs=nnx.Rngs(0))
    assert kinds(nnx_traps(honest, torch_model, dtype="float32")) == {"blocks.0": {"batchnorm-variance"}}


def test_torchs_rmsnorm_default_epsilon_has_no_fixed_nnx_equal():
    torch_model = torch.nn.Sequential()
    torch_model.add_module("rms", torch.nn.RMSNorm(4))
    holder = nnx.Dict(rms=nnx.RMSNorm(4, epsilon=1.2e-7, rngs=nnx.Rngs(0)))
    assert kinds(nnx_traps(holder, torch_model)) == {"rms": {"rmsnorm-epsilon"}}


def test_the_builtin_nnx_twins_have_no_traps_but_the_embedding_dtype_of_a_float64_run():
    for name, expected in [("MLP", {}), ("CNNBN", {}), ("TransformerBlock", {}),
                           ("EmbeddingLSTM", {"embed": {"fixed-dtype"}})]:
        model = getattr(nnx_nets, name)(rngs=nnx.Rngs(0))
        assert kinds(nnx_traps(model, getattr(torch_nets, name)())) == expected
        assert kinds(nnx_traps(model, dtype="float32")) == {}


LAYERS = st.sampled_from(["bn", "blocks.0", "blocks.0.norm", "head"])


def _leaf(path: str, passed: bool) -> Leaf:
    return Leaf(path, 0.0 if passed else 1.0, None, passed, "rounding" if passed else "port",
                message=f"`{path}`: drawn {'agreeing' if passed else 'differing'}")


def _check(leaves, compared="torch DP vs jax:explicit DP") -> Check:
    failing = [leaf for leaf in leaves if not leaf.passed]
    return Check("gradients", compared, not failing, detail=f"{len(failing)} fail: "
                 + "; ".join(leaf.message for leaf in failing) + "; a suffix stays", leaves=tuple(leaves))


@given(trapped=LAYERS, other=LAYERS, leaf_name=st.sampled_from(["scale", "bias", "mean", "var"]))
@settings(max_examples=25, deadline=None)
def test_with_traps_names_the_trap_of_the_layer_owning_each_failing_leaf(trapped, other, leaf_name):
    assume(other != trapped)
    epsilon = NNXTrap(trapped, "layernorm-epsilon", "nnx.LayerNorm epsilon=1e-06", "epsilon=1e-05")
    fast = NNXTrap(trapped, "batchnorm-fast-variance", "E[x2] - E[x]2", "use_fast_variance=False")
    owned, elsewhere = _leaf(f"{trapped}.{leaf_name}", False), _leaf(f"{other}.x{leaf_name}", False)
    passing = _leaf(f"{trapped}.kept", True)
    [check] = with_traps([_check([owned, elsewhere, passing])], (epsilon, fast))
    by_path = {leaf.path: leaf for leaf in check.leaves}
    message = by_path[owned.path].message
    assert message.startswith(owned.message) and "\n" not in message
    assert f"NNX trap at `{trapped}`: nnx.LayerNorm epsilon=1e-06; fix: epsilon=1e-05" in message
    assert f"NNX trap at `{trapped}`: E[x2] - E[x]2; fix: use_fast_variance=False" in message
    assert by_path[elsewhere.path].message == (f"{elsewhere.message}; NNX settings unlike torch's in the twin: "
                                               f"`{trapped}` layernorm-epsilon")  # the local trap is not spread
    assert by_path[passing.path] == passing
    assert message in check.detail and check.detail.endswith("; a suffix stays")


def test_with_traps_leaves_passing_checks_within_backend_checks_and_trapless_twins_alone():
    trap = NNXTrap("bn", "batchnorm-momentum", "momentum=0.99", "momentum=0.9")
    within = _check([_leaf("bn.mean", False)], compared="jax:explicit DP vs single")
    agreeing = _check([_leaf("bn.mean", True)])
    assert with_traps([within, agreeing], (trap,)) == [within, agreeing]
    failing = _check([_leaf("bn.scale", False)])
    assert with_traps([failing], ()) == [failing]
    variance = NNXTrap("bn", "batchnorm-variance", "biased", "unbiased")  # moves `var` alone, named nowhere else
    assert with_traps([failing], (variance,)) == [failing]
    [named] = with_traps([_check([_leaf("bn.var", False)])], (variance,))
    assert "NNX trap at `bn`: biased; fix: unbiased" in named.leaves[0].message

"""Pairs from objects a user has: derived mappings, public rules, given variables, declarations."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from comparisons import compare
from comparisons.convert import ConversionError, Layer, Rule, kind_of, register_rule
from comparisons.models import FlaxApply, ModelPair, derive_mapping, pair_from_modules
from comparisons.models.builtin import cross_entropy_jax, cross_entropy_torch

SMALL = dict(batch_size=5, devices=2, strategies=["explicit"], steps=1, torch_devices="cpu")


def features(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch_size, 6)).astype(dtype),), rng.integers(0, 3, batch_size).astype(np.int32)


class TorchNet(torch.nn.Module):
    """fc1 -> BatchNorm -> fc2; `spare` takes no part in forward; a causal-mask-like transient buffer."""

    def __init__(self, spare: bool = False):
        super().__init__()
        self.fc1, self.bn, self.fc2 = torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 3)
        self.spare = torch.nn.Linear(8, 3) if spare else None
        self.register_buffer("mask", torch.ones(8), persistent=False)

    def forward(self, x):
        return self.fc2(torch.tanh(self.bn(self.fc1(x))) * self.mask)


class FlaxNet(nn.Module):
    spare: bool = False
    use_spare: bool = False
    biased_bn: bool = False
    flax_momentum: float = 0.9

    @nn.compact
    def __call__(self, x, train: bool = False):
        from comparisons.models.flax_nets import TorchBatchNorm

        h = nn.Dense(8, name="fc1")(x)
        if self.biased_bn:  # flax's own BatchNorm: running var from the biased batch variance
            h = nn.BatchNorm(use_running_average=not train, momentum=self.flax_momentum, epsilon=1e-5, name="bn")(h)
        else:
            h = TorchBatchNorm(name="bn")(h, train)
        out = nn.Dense(3, name="fc2")(jnp.tanh(h))
        if self.spare:
            spare = nn.Dense(3, name="spare")(jnp.tanh(h))
            out = out + spare if self.use_spare else out
        return out


def make_pair(spare=False, use_spare=False, biased_bn=False, flax_momentum=0.9, **kwargs):
    torch.manual_seed(1)
    return pair_from_modules("user_net", TorchNet(spare), FlaxNet(spare, use_spare, biased_bn, flax_momentum),
                             make_inputs=features, loss_torch=cross_entropy_torch, loss_jax=cross_entropy_jax,
                             **kwargs)


@pytest.mark.parametrize("flax_model", [FlaxNet(), FlaxApply(FlaxNet())])
def test_a_derived_pair_is_described_by_its_two_classes_unless_told(flax_model, capsys):
    from comparisons import cli, models

    torch.manual_seed(1)
    pair = pair_from_modules("described_net", TorchNet(), flax_model, make_inputs=features,
                             loss_torch=cross_entropy_torch, loss_jax=cross_entropy_jax)
    assert pair.description == "torch TorchNet -> Flax FlaxNet"
    told = pair_from_modules("told_net", TorchNet(), flax_model, make_inputs=features, loss_torch=cross_entropy_torch,
                             loss_jax=cross_entropy_jax, description="my port")
    assert told.description == "my port"
    models.register(pair, replace=True)
    try:
        assert cli.main(["list"]) == 0
        line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("described_net"))
        # the pair's Flax API (a FlaxApply is linen), then its description: not blank in `comparisons list`
        assert line.split(None, 2)[1:] == ["linen", "torch TorchNet -> Flax FlaxNet"]
    finally:
        models.pair._REGISTRY.pop("described_net", None)


def test_mapping_is_derived_by_path_with_kinds_from_module_classes():
    pair = make_pair()
    assert list(pair.mapping) == [Layer("linear", "fc1", "fc1"), Layer("batchnorm", "bn", "bn"),
                                  Layer("linear", "fc2", "fc2")]
    assert pair.has_batch_stats and "mask" in pair.torch_only  # non-persistent: no Flax counterpart


def test_a_derived_pair_passes_every_check_and_lists_its_torch_only_buffer():
    report = compare(make_pair(), seed=4, **SMALL)
    assert report.ok, report.render("markdown")
    assert any(note.startswith("torch-only (declared") and "mask" in note for note in report.notes)


def test_undeclared_torch_only_buffer_fails_placement():
    derived = make_pair()
    undeclared = ModelPair(**{**derived.__dict__, "torch_only": ()})
    report = compare(undeclared, seed=4, **SMALL)
    placement = [c for c in report.checks if c.subject == "placement"]
    assert placement and not placement[0].passed and "mask" in placement[0].detail


def test_unused_parameter_is_reported_as_unused_not_as_a_mapping_error():
    report = compare(make_pair(spare=True), seed=2, **SMALL)
    unused = [c for c in report.checks if c.subject == "unused_parameters"]
    assert [c.passed for c in unused] == [True]
    assert "spare.weight" in unused[0].detail and "spare.bias" in unused[0].detail
    assert report.ok, report.render("markdown")


def test_parameter_used_by_flax_only_fails_the_unused_check():
    report = compare(make_pair(spare=True, use_spare=True), seed=2, **SMALL)
    unused = [c for c in report.checks if c.subject == "unused_parameters"]
    assert [c.passed for c in unused] == [False]
    assert "spare" in unused[0].detail and unused[0].max_abs > 0


def test_flax_batchnorm_biased_variance_is_measured_as_a_known_difference_not_hidden():
    undeclared = compare(make_pair(biased_bn=True), seed=3, **SMALL)
    stats = [c for c in undeclared.checks if c.subject == "batch_stats" and "torch DP vs jax" in c.compared]
    assert not stats[0].passed and stats[0].max_abs > 1e-3  # unbiased vs biased: not rounding
    declared = compare(make_pair(biased_bn=True, known_differences=("flax_batchnorm_biased_var",)), seed=3, **SMALL)
    known = [c for c in declared.checks if c.subject == "known_difference"]
    assert [c.passed for c in known] == [True]
    assert known[0].max_abs == pytest.approx(stats[0].max_abs)
    assert "n = 3..3" in known[0].detail  # chunk 0 has 3 rows, one position each
    assert declared.ok, declared.render("markdown")


def test_the_known_difference_check_fails_when_another_difference_hides_behind_it():
    wrong_momentum = make_pair(biased_bn=True, flax_momentum=0.8, known_differences=("flax_batchnorm_biased_var",))
    known = [c for c in compare(wrong_momentum, seed=3, **SMALL).checks if c.subject == "known_difference"]
    assert [c.passed for c in known] == [False] and "another difference" in known[0].detail


def test_given_variables_are_used_as_they_are_and_checked_bitwise():
    derived = make_pair()
    torch_module, flax_module, variables = derived.build(seed=0)
    good = compare(make_pair(variables=variables), seed=1, **SMALL)
    conversion = [c for c in good.checks if c.subject == "conversion"]
    assert [c.passed for c in conversion] == [True] and good.ok
    nudged = jax.tree.map(np.copy, variables)
    nudged["params"]["fc2"]["bias"][1] += 0.25
    bad = compare(make_pair(variables=nudged), seed=1, **SMALL)
    conversion = [c for c in bad.checks if c.subject == "conversion"]
    assert not conversion[0].passed and conversion[0].max_abs == pytest.approx(0.25)


class Scale(torch.nn.Module):
    """A layer kind the core does not know: y = x * gain."""

    def __init__(self, n):
        super().__init__()
        self.gain = torch.nn.Parameter(torch.linspace(0.5, 1.5, n))

    def forward(self, x):
        return x * self.gain


class FlaxScale(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        return x * self.param("g", nn.initializers.ones, (x.shape[-1],))


def test_a_registered_rule_converts_a_new_torch_class_by_path():
    with pytest.raises(ConversionError, match="register_rule"):
        derive_mapping(Scale(6), {"params": {"g": np.ones(6)}})
    register_rule("test_scale", Rule(("gain",), ("gain",), (), lambda t, layer, check: {("params", "g"): t["gain"]},
                                     lambda f, layer, check: {"gain": f[("params", "g")]}),
                  torch_types=[Scale], replace=True)
    assert kind_of(Scale(2)) == "test_scale"
    pair = pair_from_modules("scale", Scale(6), FlaxScale(), make_inputs=features,
                             loss_torch=lambda out, y: (out ** 2).mean(), loss_jax=lambda out, y: (out ** 2).mean())
    _, _, variables = pair.build()
    np.testing.assert_array_equal(variables["params"]["g"], np.linspace(0.5, 1.5, 6, dtype=np.float32))
    assert compare(pair, seed=0, **SMALL).ok


def test_register_rule_refuses_builtin_kinds_and_non_rules():
    with pytest.raises(ValueError, match="built in"):
        register_rule("linear", Rule(("weight",), ("weight",), (), dict, dict))
    with pytest.raises(TypeError, match="not a comparisons.convert.Rule"):
        register_rule("other", {"to_flax": dict})


def test_a_missing_flax_path_names_the_hook_and_the_hook_fixes_it():
    renamed = {"params": {"dense_in": {"kernel": np.ones((6, 8)), "bias": np.ones(8)}}}
    with pytest.raises(ConversionError, match=r"'fc1'.*flax_path=hook"):
        derive_mapping(torch.nn.ModuleDict({"fc1": torch.nn.Linear(6, 8)}), renamed)
    layers, _ = derive_mapping(torch.nn.ModuleDict({"fc1": torch.nn.Linear(6, 8)}), renamed,
                               flax_path=lambda name: {"fc1": "dense_in"}.get(name))
    assert layers == [Layer("linear", "fc1", "dense_in")]


def test_flax_apply_translates_train_into_deterministic():
    class Det(nn.Module):
        @nn.compact
        def __call__(self, x, deterministic: bool = True):
            return x * (1.0 if deterministic else 2.0)

    call = FlaxApply(Det(), train_arg="deterministic")
    x = jnp.ones(3)
    assert float(call.apply({}, x, train=True)[0]) == 2.0 and float(call.apply({}, x)[0]) == 1.0


def test_declarations_are_checked_when_the_pair_is_made():
    with pytest.raises(TypeError, match=r"torch_only='lm_head.weight' is a string; pass a tuple"):
        make_pair(torch_only="lm_head.weight")
    with pytest.raises(TypeError, match=r"flax_only='params/x' is a string; pass a tuple"):
        ModelPair(**{**make_pair().__dict__, "flax_only": "params/x"})
    with pytest.raises(ValueError, match=r"known_differences \['bn_momentum'\] are not known"):
        make_pair(known_differences=("bn_momentum",))


def test_torch_only_names_are_left_out_of_conversion_and_flax_only_leaves_out_of_the_way_back():
    pair = make_pair(torch_only=("fc2.*",), flax_only=("params/fc2/*",))
    torch_module, _, _ = make_pair().build()
    variables = pair.torch_to_flax(torch_module.state_dict())
    assert "fc2" not in variables["params"] and "fc1" in variables["params"]
    assert not any(name.startswith("fc2.") for name in pair.flax_to_torch(variables))

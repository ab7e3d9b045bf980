"""The JAX doctor: committed arrays a function closes over, Python effects while tracing, and no false alarms."""
from __future__ import annotations

from pathlib import Path

import _doctor_models_jax as models
import jax
import numpy as np
import pytest

import dp_jax
from comparisons import doctor_jax  # the public spelling: comparisons.doctor_jax
from comparisons import models as pairs
from comparisons.models.builtin import BUILTIN_NNX

MODELS_FILE = Path(models.__file__)


def marked_lines(kind: str) -> list[int]:
    lines = MODELS_FILE.read_text().splitlines()
    return [n for n, text in enumerate(lines, 1) if text.rstrip().endswith(f"# doctor: {kind}")]


def at(line_text: str | None, numbers: list[int]) -> bool:
    return line_text is not None and any(line_text.endswith(f"{MODELS_FILE.name}:{n}") for n in numbers)


def batch(rows: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 3)).astype(np.float32)


def doctor(module, x, **options):
    variables = module.init(jax.random.key(0), x)
    return doctor_jax(module.apply, variables, x, **options)


def test_committed_global_array_is_closed_over_array_at_its_name_and_line():
    report = doctor(models.Offset(), batch(seed=1))
    assert report.kinds() == ["closed-over-array"]
    [finding] = report.findings
    assert finding.where == "OFFSET" and finding.devices == ("cpu:1",)
    assert finding.replicas == (0, 2, 3)  # every replica but the one it is committed to
    assert at(finding.source, marked_lines("closed-over-array"))


def test_committed_module_field_is_named_by_its_attribute():
    table = jax.device_put(np.full(2, 2.0, np.float32), jax.devices()[2])
    report = doctor(models.Field(table=table), batch(seed=11))
    assert report.kinds() == ["closed-over-array"]
    [finding] = report.findings
    assert finding.where == "self.table" and finding.replicas == (0, 1, 3) and finding.devices == ("cpu:2",)
    assert at(finding.source, marked_lines("closed-over-array"))


def test_closure_of_a_lambda_is_named_too():
    model, x = models.Shifted(), batch(seed=2)
    variables = model.init(jax.random.key(0), x)
    scale = jax.device_put(np.full(2, 3.0, np.float32), jax.devices()[0])
    report = doctor_jax(lambda v, x: model.apply(v, x) * scale, variables, x, devices=2)
    assert report.kinds() == ["closed-over-array"]
    assert report.findings[0].where == "scale" and report.findings[0].replicas == (1,)


def test_what_the_finding_says_about_eager_replicas_is_what_jax_does():
    devices = jax.devices()[:2]
    model, x = models.Offset(), batch(seed=3)
    replicas = dp_jax.replicate(model.init(jax.random.key(0), x), devices)
    chunks = dp_jax.scatter(x, devices)
    with pytest.raises(ValueError, match="incompatible devices"):
        model.apply(replicas[0], chunks[0])  # OFFSET lives on device 1
    assert "incompatible devices" in doctor(model, x, devices=2).findings[0].message


def test_uncommitted_and_numpy_constants_are_clean():
    assert doctor(models.Shifted(), batch(seed=4)).ok


@pytest.mark.parametrize("model", [models.Remembers, models.Counts], ids=lambda m: m.__name__)
def test_global_changed_while_tracing_is_a_side_effect(model):
    report = doctor(model(), batch(seed=5))
    assert report.kinds() == ["side-effect-in-trace"]
    [finding] = report.findings
    assert finding.where in ("SEEN", "CALLS")
    assert at(finding.source, marked_lines("side-effect-in-trace"))
    assert "ran 4 time(s)" in finding.message and "in the next 0" in finding.message


@pytest.mark.parametrize("seed", [12, 13])
def test_assigning_an_existing_key_of_a_global_dict_while_tracing_is_a_side_effect(seed):
    models.LATEST["input"] = np.zeros(1)  # the key exists before the trace, as the case has it
    report = doctor(models.StoresLatest(), batch(seed=seed))
    assert report.kinds() == ["side-effect-in-trace"]
    [finding] = report.findings
    assert finding.where == "LATEST" and "dict" in finding.message and "tracers" in finding.message
    assert at(finding.source, marked_lines("side-effect-in-trace"))
    assert set(models.LATEST) == {"input"}  # the same key, a new value: only the value changed


def test_counts_in_the_message_are_the_traces_dp_jax_makes():
    model, x = models.Counts(), batch(seed=6)
    variables = model.init(jax.random.key(0), x)
    before = models.CALLS
    dp_jax.data_parallel(model.apply, variables, (x,), device_ids=jax.devices()[:3])
    assert models.CALLS - before == 3  # one trace per device, so "ran N time(s)" counts devices


def test_print_while_tracing_points_at_the_print(capsys):
    report = doctor(models.Prints(), batch(seed=7))
    assert report.kinds() == ["side-effect-in-trace"]
    assert at(report.findings[0].where, marked_lines("side-effect-in-trace"))
    assert "batch" in capsys.readouterr().out  # the user's print still prints


def test_batch_sized_reshape_is_a_run_error():
    report = doctor(models.BatchSized(), batch(seed=8))
    assert report.kinds() == ["run-error"]
    assert at(report.findings[0].where, marked_lines("run-error"))


def test_a_function_that_fails_to_trace_is_a_run_error_at_its_line():
    def apply_fn(variables, x):
        return x @ variables["w"]  # doctor-test: fails

    report = doctor_jax(apply_fn, {"w": np.ones((4, 2), np.float32)}, batch(seed=10))
    line = apply_fn.__code__.co_firstlineno + 1
    assert report.kinds() == ["run-error"] and report.findings[0].where.endswith(f"test_doctor_jax.py:{line}")
    assert "tracing the apply function failed with TypeError" in report.findings[0].message


@pytest.mark.parametrize("name", pairs.names())
def test_every_builtin_flax_model_is_clean(name):
    pair = pairs.get(name)
    _, flax_module, variables = pair.build(seed=9)
    inputs, _ = pair.make_inputs(10, 9, np.float32)
    report = doctor_jax(flax_module.apply, variables, *pair.to_flax_inputs(inputs))
    assert report.findings == ()


def test_too_few_devices_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="xla_force_host_platform_device_count"):
        doctor(models.Shifted(), batch(), devices=64)


# --- a bound Flax NNX module, given as it is: doctor_jax(model, *inputs) --------------------------------------


def test_an_nnx_module_closing_over_a_committed_array_is_flagged_as_the_linen_module_is():
    from flax import nnx

    x = batch(seed=14)
    report = doctor_jax(models.NNXOffset(nnx.Rngs(14)), x)
    linen = doctor(models.Offset(), x)
    assert report.kinds() == linen.kinds() == ["closed-over-array"]
    [finding], [linen_finding] = report.findings, linen.findings
    assert (finding.where, finding.replicas, finding.devices) == ("OFFSET", (0, 2, 3), ("cpu:1",))
    assert (finding.where, finding.replicas, finding.devices) == (linen_finding.where, linen_finding.replicas,
                                                                  linen_finding.devices)
    assert at(finding.source, marked_lines("closed-over-array")) and finding.source != linen_finding.source
    assert "nnx.Variable" in finding.fix and report.target == "NNXOffset"


@pytest.mark.parametrize("device", [0, 3])
def test_a_committed_array_in_a_static_attribute_of_an_nnx_module_is_named_by_its_path(device):
    from flax import nnx

    table = jax.device_put(np.full(2, 2.0, np.float32), jax.devices()[device])
    with pytest.raises(dp_jax.UsageError, match="static value"):  # what dp_jax does with it
        dp_jax.DataParallel(models.NNXStaticTable(table, nnx.Rngs(0)), device_ids=jax.devices()[:4])(batch())
    report = doctor_jax(models.NNXStaticTable(table, nnx.Rngs(0)), batch(seed=15 + device))
    assert report.kinds() == ["closed-over-array"]  # named once, by its path, not again as an unnamed constant
    [finding] = report.findings
    assert finding.where == "table.values" and finding.devices == (f"cpu:{device}",)
    assert finding.replicas == tuple(i for i in range(4) if i != device)
    assert at(finding.source, marked_lines("closed-over-array")) and "static attribute" in finding.message
    assert any("did not call it" in note for note in report.notes)


def test_a_committed_plain_array_attribute_of_an_nnx_module_is_state_and_clean():
    from flax import nnx

    shift = jax.device_put(np.ones(2, np.float32), jax.devices()[2])
    report = doctor_jax(models.NNXShifted(shift, nnx.Rngs(16)), batch(seed=16))
    assert report.ok, report.render()


def test_an_nnx_module_changing_a_global_and_its_own_attribute_while_tracing_is_flagged():
    from flax import nnx

    model = models.NNXRemembers(nnx.Rngs(17))
    report = doctor_jax(model, batch(seed=17))
    assert sorted(report.kinds()) == ["side-effect-in-trace", "state-on-self"]
    effect = next(f for f in report.findings if f.kind == "side-effect-in-trace")
    assert effect.where == "SEEN" and at(effect.source, marked_lines("side-effect-in-trace"))
    assert "tracing the module's call changes SEEN" in effect.message
    assert "ran 4 time(s)" in effect.message and "in the next 0" in effect.message
    kept = next(f for f in report.findings if f.kind == "state-on-self")
    assert kept.where == "calls" and at(kept.source, marked_lines("state-on-self")) and "nnx.Variable" in kept.fix
    assert model.calls == 0  # the doctor ran copies: the user's module is as it was


def test_the_doctors_runs_leave_the_nnx_modules_state_as_it_was():
    from flax import nnx

    model = models.NNXHonest(3, 2, nnx.Rngs(18))
    before = jax.tree.map(np.asarray, nnx.state(model))
    report = doctor_jax(model, batch(seed=18) * 5 + 3)
    assert report.ok, report.render()
    after = jax.tree.map(np.asarray, nnx.state(model))
    assert jax.tree.all(jax.tree.map(np.array_equal, before, after))  # BatchNorm's statistics included


@pytest.mark.parametrize("pair", BUILTIN_NNX, ids=lambda p: p.name)
def test_every_builtin_nnx_twin_is_clean_but_the_embeddings_fixed_float32(pair):
    inputs, _ = pair.make_inputs(6, 19, np.float32)
    report = doctor_jax(pair.make_flax(), *pair.to_flax_inputs(inputs), devices=2)
    assert [(f.kind, f.where) for f in report.findings if f.kind != "nnx-default"] == []
    assert {f.where for f in report.findings} <= {"embed"}

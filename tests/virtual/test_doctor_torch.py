"""The torch doctor on virtual devices: each broken model yields exactly its kind, sound ones nothing."""
from __future__ import annotations

import time
from pathlib import Path

import _doctor_models as models
import numpy as np
import pytest
import torch
from torch import nn

from comparisons import models as pairs
from comparisons.doctor import doctor_torch
from dp_torch import virtual

MODELS_FILE = Path(models.__file__)


def marked_line(kind: str) -> str:
    """'_doctor_models.py:N' for the line marked `# doctor: <kind>` (exactly one such line)."""
    numbers = [n for n, text in enumerate(MODELS_FILE.read_text().splitlines(), 1)
               if text.rstrip().endswith(f"# doctor: {kind}")]
    assert len(numbers) >= 1, kind
    return numbers


def line_of(text_on_line: str) -> int:
    matches = [n for n, text in enumerate(MODELS_FILE.read_text().splitlines(), 1) if text_on_line in text]
    assert len(matches) == 1, (text_on_line, matches)
    return matches[0]


def at(finding_line: str | None, line: int) -> bool:
    return finding_line is not None and finding_line.endswith(f"{MODELS_FILE.name}:{line}")


def batch(rows: int = 8, features: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, features, generator=torch.Generator().manual_seed(seed))


def test_plain_tensor_in_a_list_is_unreplicated_tensor_at_its_path():
    report = doctor_torch(models.PlainAttribute(), batch(seed=1))
    assert report.kinds() == ["unreplicated-tensor", "unreplicated-tensor"]
    first, second = report.findings
    assert (first.where, second.where) == ("encoder.1.scale[0]", "encoder.1.scale[1]")
    assert second.replicas == (0, 1, 2, 3) and second.devices == ("cpu",)  # .to() skipped it
    assert at(second.source, line_of("return x * self.scale[1]"))
    assert first.source is None  # never read in forward, still shared


@pytest.mark.parametrize("low, high", [(0.5, 2.0), (-3.0, 7.5)])
def test_a_tensor_inside_a_tuple_attribute_is_found_at_its_index(low, high):
    report = doctor_torch(models.TupleAttribute(low, high), batch(seed=31))
    assert [(f.kind, f.where) for f in report.findings] == [("unreplicated-tensor", "bounds[0]"),
                                                            ("unreplicated-tensor", "bounds[1]")]
    read = report.findings[1]
    assert read.replicas == (0, 1, 2, 3) and read.devices == ("cpu",)
    assert at(read.source, marked_line("unreplicated-tensor (tuple)")[0])


@pytest.mark.parametrize("temperature", [0.5, 3.0])
def test_a_0_dim_cpu_tensor_attribute_is_a_scalar_and_sound(temperature):
    report = doctor_torch(models.ScalarAttribute(temperature), batch(seed=32), backward=True)
    assert report.ok and report.notes == (), report.render()


def test_the_0_dim_cpu_attribute_really_runs_under_stock_data_parallel():
    model, x = models.ScalarAttribute(2.5), batch(seed=33)
    expected = model(x)
    with virtual.stock_comm():
        out = nn.DataParallel(model.to("vdev:0"), device_ids=[0, 1, 2, 3])(x)
    torch.testing.assert_close(virtual.cpu_view(out), expected)


def test_tensor_moved_to_device_0_is_wrong_on_the_other_replicas_only():
    model = models.PlainAttribute().to("vdev:0")
    scaled = model.encoder[1]
    scaled.scale = [t.to("vdev:0") for t in scaled.scale]
    report = doctor_torch(model, batch(seed=2))
    assert {f.replicas for f in report.findings} == {(1, 2, 3)}
    assert {f.devices for f in report.findings} == {("vdev:0",)}


def test_layers_in_a_plain_list_are_unreplicated_modules():
    report = doctor_torch(models.ListOfLayers(), batch(seed=3))
    assert report.kinds() == ["unreplicated-module"] * 2
    assert [f.where for f in report.findings] == ["layers[0]", "layers[1]"]
    assert all(at(f.source, line_of("x = layer(x)")) for f in report.findings)


def test_a_list_of_activations_is_harmless():
    class Activations(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)
            self.acts = [nn.ReLU(), nn.Tanh()]

        def forward(self, x):
            for act in self.acts:
                x = act(self.fc(x))
            return x

    assert doctor_torch(Activations(), batch(seed=4)).ok


@pytest.mark.parametrize("model, replicas, device", [
    (models.FixedDevice, (0, 1, 2, 3), "cpu"),     # no device=: the CPU, wrong even for replica 0
    (models.CudaZero, (1, 2, 3), "vdev:0"),         # "cuda:0": device 0, right for replica 0 only
])
def test_tensor_made_on_a_fixed_device_points_at_its_creation(model, replicas, device):
    report = doctor_torch(model(), batch(seed=5))
    assert report.kinds() == ["fixed-device-creation"]
    [finding] = report.findings
    [creation] = [n for n in marked_line("fixed-device-creation") if at(finding.where, n)]
    assert finding.replicas == replicas and finding.devices == (device,)
    assert f"{MODELS_FILE.name}:{creation + 1}" in finding.message  # where it was mixed


@pytest.mark.parametrize("index", [0, 2])
def test_a_hard_coded_cuda_index_is_reported_as_the_virtual_device_it_was_run_on(index):
    class CudaIndexed(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 4)

        def forward(self, x):
            return self.fc(x) + torch.ones(4, device=f"cuda:{index}")

    report = doctor_torch(CudaIndexed(), batch(seed=29 + index))
    [finding] = report.findings
    assert finding.kind == "fixed-device-creation" and finding.devices == (f"vdev:{index}",)
    assert f"cuda:{index}" in finding.message and f"vdev:{index}" in finding.message
    [note] = [n for n in report.notes if f"cuda:{index}" in n]
    assert f"vdev:{index}" in note and "test_doctor_torch.py:" in note


def test_cuda_without_index_means_the_replicas_own_device():
    assert doctor_torch(models.CudaCurrent(), batch(seed=6)).ok


def test_global_tensor_on_device_0_is_a_cross_device_op_at_the_line():
    saved = models.COUNTER
    models.COUNTER = torch.zeros(3).to("vdev:0")
    try:
        report = doctor_torch(models.GlobalOffset(), batch(seed=7))
    finally:
        models.COUNTER = saved
    assert report.kinds() == ["cross-device-op"]
    [finding] = report.findings
    assert at(finding.where, marked_line("cross-device-op")[0])
    assert finding.replicas == (1, 2, 3) and finding.devices == ("vdev:0",) and "aten.sub" in finding.message


def test_cpu_tensor_made_in_a_custom_backward_is_found_with_backward_only():
    assert doctor_torch(models.BackwardOnCpu(), batch(seed=21)).ok  # the forward is sound
    report = doctor_torch(models.BackwardOnCpu(), batch(seed=21), backward=True)
    assert report.kinds() == ["cross-device-op"]
    [finding] = report.findings
    assert at(finding.where, marked_line("cross-device-op (backward)")[0])
    assert finding.replicas == (0, 1, 2, 3) and finding.devices == ("cpu",)


def test_buffer_counter_is_lost_on_replicas_1_and_up_and_kept_on_0():
    model = models.StepCounter()
    report = doctor_torch(model, batch(seed=8))
    assert report.kinds() == ["lost-inplace-update"]
    [finding] = report.findings
    assert finding.where == "calls" and finding.replicas == (1, 2, 3)
    assert at(finding.source, marked_line("lost-inplace-update")[0])
    assert "Replica 0's write is kept" in finding.message
    assert model.calls.item() == 1  # what the doctor says: only replica 0's increment reached the original


def test_parameter_scaled_through_data_is_lost_too():
    class Decay(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, x):
            self.fc.weight.data.mul_(0.5)
            return self.fc(x)

    report = doctor_torch(Decay(), batch(seed=9))
    assert report.kinds() == ["lost-inplace-update"] and report.findings[0].where == "fc.weight"


def test_replica_0_alone_writing_is_kept_and_not_reported():
    model = models.StepCounter()
    assert doctor_torch(model, batch(rows=1, seed=10)).ok  # one chunk: replica 0 only
    assert model.calls.item() == 1


def test_output_stored_on_self_is_state_on_self():
    model = models.CachesOutput()
    report = doctor_torch(model, batch(seed=11))
    assert report.kinds() == ["state-on-self"]
    [finding] = report.findings
    assert finding.where == "last_output" and finding.replicas == (0, 1, 2, 3)
    assert at(finding.source, marked_line("state-on-self")[0])
    assert not hasattr(model, "last_output")  # the original never saw it


@pytest.mark.parametrize("model, attribute, container", [
    (models.WeightCache, "cache", dict), (models.KeepsInputs, "seen", list)], ids=["dict", "list"])
@pytest.mark.parametrize("seed", [25, 26])
def test_a_dict_or_list_filled_in_forward_is_a_shared_cache_at_its_filling_line(model, attribute, container, seed):
    module = model()
    report = doctor_torch(module, batch(seed=seed))
    assert report.kinds() == ["shared-cache"], report.render()
    [finding] = report.findings
    assert finding.where == attribute and finding.replicas == (0, 1, 2, 3)
    dict_line, list_line = marked_line("shared-cache")  # WeightCache's, then KeepsInputs'
    assert at(finding.source, dict_line if container is dict else list_line)
    assert container.__name__ in finding.message
    assert isinstance(getattr(module, attribute), container) and getattr(module, attribute)  # the original's


@pytest.mark.parametrize("pause", [0.02, 0.1])
def test_replicas_take_turns_so_replica_0_fills_a_shared_cache_and_the_others_read_it(pause):
    module = models.SlowToFill(pause)
    report = doctor_torch(module, batch(seed=34))
    assert report.kinds() == ["shared-cache"], report.render()
    [finding] = report.findings
    assert finding.devices == ("vdev:0",) and "replicas read entries another replica stored" in finding.message
    assert module.cache["bias"].device == torch.device("vdev:0")


def test_the_weight_cache_really_fails_under_stock_data_parallel():
    model = models.WeightCache().to("vdev:0")
    model.cache["w"] = model.fc.weight.t() * 2  # as replica 0 leaves it: on vdev:0
    with virtual.stock_comm(), pytest.raises(RuntimeError, match="in replica 1"):
        nn.DataParallel(model, device_ids=[0, 1, 2, 3])(batch(seed=27))


def test_a_cache_keyed_by_the_replicas_device_is_clean():
    report = doctor_torch(models.CacheByDevice(), batch(seed=28), backward=True)
    assert report.ok and report.notes == (), report.render()


def test_reshape_with_the_global_batch_is_a_run_error_in_the_users_line():
    report = doctor_torch(models.BatchSized(), batch(seed=12))
    assert report.kinds() == ["run-error"]
    assert at(report.findings[0].where, marked_line("run-error")[0])


@pytest.mark.parametrize("name", pairs.names())
def test_every_builtin_pair_is_clean_forward_and_backward(name):
    pair = pairs.get(name)
    inputs, _ = pair.make_inputs(10, 13, np.float32)
    tensors = [torch.as_tensor(x).long() if x.dtype.kind == "i" else torch.as_tensor(x) for x in inputs]
    report = doctor_torch(pair.make_torch(), *tensors, backward=True)
    assert report.findings == () and report.notes == ()


@pytest.mark.parametrize("model", [models.WithBatchNorm, models.Sound], ids=lambda m: m.__name__)
def test_sound_models_are_clean_in_training_mode_with_backward(model):
    module = model().train()
    report = doctor_torch(module, batch(seed=14), backward=True)
    assert report.ok and report.notes == ()


def test_attribute_a_pre_hook_recomputes_on_each_replica_is_not_reported():
    # spectral_norm keeps `weight` as a plain attribute, recomputed from the replica's own
    # weight_orig, u and v by a forward pre-hook before anything reads it.
    model = nn.Sequential(nn.utils.spectral_norm(nn.Linear(3, 4)), nn.ReLU())
    report = doctor_torch(model.train(), batch(seed=19), backward=True)
    assert report.ok and report.notes == ()


@pytest.mark.parametrize("seed", [22, 23])
def test_batchnorm_subclasses_keep_their_statistics_unreported_like_stock_batchnorm(seed):
    x = torch.randn(8, 3, 4, 4, generator=torch.Generator().manual_seed(seed))
    report = doctor_torch(models.BatchNormSubclasses().train(), x, backward=True)
    assert report.ok, report.render()


def test_a_buffer_of_its_own_on_a_batchnorm_subclass_is_still_a_lost_update():
    x = torch.randn(8, 3, 4, 4, generator=torch.Generator().manual_seed(24))
    report = doctor_torch(models.BatchNormSubclasses(counted=True).train(), x)
    assert [(f.kind, f.where, f.replicas) for f in report.findings] == [
        ("lost-inplace-update", "counted.seen", (1, 2, 3))]
    assert at(report.findings[0].source, marked_line("lost-inplace-update (BatchNorm subclass)")[0])


def test_batchnorm_running_statistics_come_from_chunk_0_as_documented():
    module = models.WithBatchNorm().train()
    x = batch(seed=15)
    doctor_torch(module, x)
    chunk0 = module.fc(x[:2].to("vdev:0"))
    expected = 0.9 * torch.zeros(4) + 0.1 * chunk0.mean(0).detach().cpu()
    assert torch.allclose(virtual.cpu_view(module.bn.running_mean), expected, atol=1e-6)


def tiny_hf_models():
    """Tiny BERT, GPT-2, ViT and ResNet from configs (random weights, nothing downloaded)."""
    transformers = pytest.importorskip("transformers", reason="the hf extra is not installed")
    tokens = torch.randint(0, 50, (8, 6), generator=torch.Generator().manual_seed(17))
    images = torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(18))
    small = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
    gpt2 = transformers.GPT2Config(vocab_size=50, n_embd=16, n_layer=2, n_head=2, use_cache=False)
    return [  # GPT-2's key/value cache is a DynamicCache, which DataParallel cannot gather: off
        (transformers.BertModel(transformers.BertConfig(vocab_size=50, **small)), tokens),
        (transformers.GPT2Model(gpt2), tokens),
        (transformers.ViTModel(transformers.ViTConfig(image_size=32, patch_size=8, **small)), images),
        (transformers.ResNetModel(transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16],
                                                            depths=[1, 1])), images),
    ]


def test_transformers_tiny_models_are_clean():
    for model, x in tiny_hf_models():
        report = doctor_torch(model.train(), x, backward=True)
        assert report.ok, (type(model).__name__, report.render())


def test_ten_layer_mlp_on_4_devices_costs_under_10_s():
    model, x = models.mlp(), torch.randn(64, 64)
    doctor_torch(model, x)  # warm: imports and first-call set-up are excluded, as the issue asks
    start = time.perf_counter()
    report = doctor_torch(model, x)
    assert report.ok and time.perf_counter() - start < 10.0


def test_fewer_rows_than_devices_is_noted():
    report = doctor_torch(models.Sound(), batch(rows=2, seed=16))
    assert report.ok and "only replicas 0..1 ran" in report.notes[0]


def test_an_explicit_device_list_is_used_as_given():
    report = doctor_torch(models.StepCounter(), batch(seed=20), devices=virtual.devices()[1:3])
    assert report.devices == ("vdev:1", "vdev:2")
    assert report.findings[0].replicas == (1,) and report.findings[0].devices == ("vdev:2",)
    with pytest.raises(ValueError, match="at least 2 distinct devices"):
        doctor_torch(models.Sound(), batch(), devices=["vdev:1", "vdev:1"])


def test_too_few_devices_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="at least 2 devices"):
        doctor_torch(models.Sound(), batch(), devices=1)
    with pytest.raises(ValueError, match="5 virtual devices|has 4 virtual devices"):
        doctor_torch(models.Sound(), batch(), devices=5)

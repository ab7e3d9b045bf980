"""The vdev backend itself: devices, numbers vs CPU, errors, threads, install rules."""
import io
import threading

import pytest
import torch
import torch.nn.functional as F
from _helpers_virtual import assert_close_to_cpu, on_device, vdev
from torch import nn

from dp_torch import virtual

SAME_DEVICE = "Expected all tensors to be on the same device, but found at least two devices"
SEEDS = [0, 1, 2]


def test_devices_are_distinct_torch_devices_reported_by_accelerator():
    assert virtual.is_installed()
    assert virtual.devices() == [torch.device("vdev", i) for i in range(4)]
    assert len(set(virtual.devices())) == 4
    assert torch.accelerator.current_accelerator() == torch.device("vdev")
    assert torch.accelerator.device_count() == 4


@pytest.mark.parametrize("index", [0, 1, 3])
def test_factories_and_to_put_tensors_on_the_requested_device(index):
    device = vdev(index)
    made = [torch.zeros(2, 3, device=device), torch.randn(4, device=device),
            torch.arange(5, device=device), torch.eye(3, device=device),
            torch.tensor([1.5, 2.5], device=device), torch.full((2,), 7, device=device),
            torch.empty(3, device=f"vdev:{index}")]
    made += [torch.ones_like(made[0]), made[1].new_zeros(6), torch.randn(3).to(device)]
    for t in made:
        assert t.device == device and t.get_device() == index
    assert torch.equal(made[2].cpu(), torch.arange(5))
    assert torch.equal(made[3].cpu(), torch.eye(3))


def test_index_less_device_means_device_0_like_current_device():
    assert torch.zeros(1, device="vdev").device == vdev(0)


def test_to_another_device_copies_and_to_the_same_device_returns_self():
    x = torch.randn(3, 4, device=vdev(1))
    moved = x.to(vdev(2))
    assert moved.device == vdev(2) and torch.equal(moved.cpu(), x.cpu())
    assert not virtual.shares_memory(moved, x)
    assert x.to(vdev(1)) is x
    back = moved.cpu()
    assert type(back) is torch.Tensor and back.device.type == "cpu"


def _mlp():
    return nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.GELU(), nn.Dropout(0.0),
                         nn.Linear(16, 4))


def _cnn():
    return nn.Sequential(nn.Conv2d(3, 5, 3, padding=1), nn.BatchNorm2d(5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(5, 4))


class _Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.out = nn.Embedding(11, 6), nn.Linear(6, 4)

    def forward(self, tokens):
        return self.out(self.emb(tokens).mean(1))


class _Recurrent(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(5, 7, num_layers=2, batch_first=True)
        self.out = nn.Linear(7, 4)

    def forward(self, x):
        return self.out(self.rnn(x)[0][:, -1])


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn, self.out = nn.MultiheadAttention(8, 2, batch_first=True), nn.Linear(8, 4)

    def forward(self, x):
        return self.out(self.attn(x, x, x)[0].mean(1))


MODELS = {
    "mlp": (_mlp, lambda g: torch.randn(5, 6, generator=g)),
    "conv_bn": (_cnn, lambda g: torch.randn(5, 3, 8, 8, generator=g)),
    "embedding": (_Embed, lambda g: torch.randint(0, 11, (5, 3), generator=g)),
    "lstm": (lambda: _Recurrent(nn.LSTM), lambda g: torch.randn(5, 4, 5, generator=g)),
    "gru": (lambda: _Recurrent(nn.GRU), lambda g: torch.randn(5, 4, 5, generator=g)),
    "attention": (_Attention, lambda g: torch.randn(5, 3, 8, generator=g)),
}
LOSSES = {
    "cross_entropy": lambda out, y: F.cross_entropy(out, y),
    "nll": lambda out, y: F.nll_loss(out.log_softmax(-1), y),
    "mse+smooth_l1": lambda out, y: F.mse_loss(out, F.one_hot(y, 4).float())
    + F.smooth_l1_loss(out, out.detach() * 0.5),
}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("model", MODELS)
def test_module_forward_backward_match_cpu(model, seed):
    make, make_input = MODELS[model]
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    cpu_model = make()
    device = vdev(1 + seed % 3)
    v_model = on_device(cpu_model, device)
    x, y = make_input(g), torch.randint(0, 4, (5,), generator=g)
    loss_name = list(LOSSES)[seed % len(LOSSES)]
    cpu_loss = LOSSES[loss_name](cpu_model(x), y)
    v_loss = LOSSES[loss_name](v_model(x.to(device)), y.to(device))
    cpu_loss.backward()
    v_loss.backward()
    assert_close_to_cpu(cpu_loss.detach(), v_loss.detach(), device)
    for (name, p), v_p in zip(cpu_model.named_parameters(), v_model.parameters()):
        assert isinstance(v_p, nn.Parameter), name
        assert_close_to_cpu(p.grad, v_p.grad, device, rtol=1e-4, atol=1e-5)
    for b, v_b in zip(cpu_model.buffers(), v_model.buffers()):
        assert_close_to_cpu(b, v_b, device)


def test_batchnorm_eval_mode_matches_cpu_and_counts_batches_on_device():
    torch.manual_seed(3)
    cpu_model = _cnn()
    v_model = on_device(cpu_model, vdev(2))
    x = torch.randn(4, 3, 8, 8)
    cpu_model(x), v_model(x.to(vdev(2)))
    assert v_model[1].num_batches_tracked.device == vdev(2)
    assert v_model[1].num_batches_tracked.item() == 1
    cpu_model.eval(), v_model.eval()
    assert_close_to_cpu(cpu_model(x), v_model(x.to(vdev(2))), vdev(2))


@pytest.mark.parametrize("make_optimizer", [
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: torch.optim.Adam(ps, lr=0.01),
], ids=["sgd_momentum", "adam"])
def test_optimizer_steps_match_cpu_and_keep_state_on_device(make_optimizer):
    torch.manual_seed(4)
    cpu_model = _mlp()
    v_model = on_device(cpu_model, vdev(3))
    cpu_opt, v_opt = make_optimizer(cpu_model.parameters()), make_optimizer(v_model.parameters())
    for _ in range(3):
        x = torch.randn(7, 6)
        for model, opt, inp in ((cpu_model, cpu_opt, x), (v_model, v_opt, x.to(vdev(3)))):
            opt.zero_grad()
            model(inp).square().mean().backward()
            opt.step()
    for p, v_p in zip(cpu_model.parameters(), v_model.parameters()):
        assert_close_to_cpu(p.detach(), v_p.detach(), vdev(3), rtol=1e-5, atol=1e-6)
    state_devices = {t.device for s in v_opt.state.values() for t in s.values() if t.dim() > 0}
    assert state_devices == {vdev(3)}


def test_state_dict_round_trips_through_load_state_dict_and_torch_save():
    torch.manual_seed(5)
    source = on_device(_cnn(), vdev(1))
    source(torch.randn(2, 3, 8, 8, device=vdev(1)))  # non-trivial BN buffers
    target = on_device(_cnn(), vdev(3))
    target.load_state_dict(source.state_dict())
    buffer = io.BytesIO()
    torch.save(source.state_dict(), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    for key, value in source.state_dict().items():
        assert target.state_dict()[key].device == vdev(3)
        assert loaded[key].device == vdev(1)
        assert torch.equal(target.state_dict()[key].cpu(), value.cpu()), key
        assert torch.equal(loaded[key].cpu(), value.cpu()), key


def test_gradients_flow_back_across_devices_to_each_leaf_device():
    torch.manual_seed(6)
    x = torch.randn(3, 4, requires_grad=True)
    w0 = torch.randn(4, 5, device=vdev(0), requires_grad=True)
    w1 = torch.randn(5, 2, device=vdev(1), requires_grad=True)
    ((x.to(vdev(0)) @ w0).to(vdev(1)) @ w1).sum().backward()
    x_ref, w0_ref, w1_ref = (t.detach().cpu().requires_grad_() for t in (x, w0, w1))
    (x_ref @ w0_ref @ w1_ref).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    assert_close_to_cpu(w0_ref.grad, w0.grad, vdev(0))
    assert_close_to_cpu(w1_ref.grad, w1.grad, vdev(1))


MIXES = {
    "add": lambda a, b: a + b,
    "matmul": lambda a, b: a @ b,
    "linear": lambda a, b: F.linear(a, b),
    "cat": lambda a, b: torch.cat([a, b]),
    "add_": lambda a, b: a.add_(b),
}


@pytest.mark.parametrize("op", MIXES)
def test_mixing_two_virtual_devices_raises_pytorchs_error(op):
    a, b = torch.randn(3, 3, device=vdev(0)), torch.randn(3, 3, device=vdev(1))
    with pytest.raises(RuntimeError, match=f"{SAME_DEVICE}, vdev:0 and vdev:1!"):
        MIXES[op](a, b)


def test_mixing_a_virtual_device_with_a_cpu_tensor_raises():
    with pytest.raises(RuntimeError, match=f"{SAME_DEVICE}, vdev:2 and cpu!"):
        torch.randn(3, device=vdev(2)) * torch.randn(3)


def test_module_on_one_device_rejects_input_on_another():
    model = on_device(nn.Linear(3, 2), vdev(1))
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        model(torch.randn(4, 3, device=vdev(0)))


def test_zero_dim_cpu_scalars_and_cpu_indices_are_allowed_like_on_cuda():
    x = torch.arange(6.0).reshape(3, 2).to(vdev(1))
    scaled = x * torch.tensor(2.0)
    picked = x[torch.tensor([2, 0])]
    x[torch.tensor([1])] = torch.tensor(-1.0)
    assert scaled.device == picked.device == vdev(1)
    assert torch.equal(scaled.cpu(), torch.arange(6.0).reshape(3, 2) * 2)
    assert torch.equal(picked.cpu(), torch.tensor([[4.0, 5.0], [0.0, 1.0]]))
    assert torch.equal(x.cpu()[1], torch.tensor([-1.0, -1.0]))


def test_in_place_shape_changes_keep_the_wrapper_in_step():
    x = torch.randn(2, 3, device=vdev(2))
    expected = x.cpu().t()
    x.t_()
    assert x.shape == (3, 2) and torch.equal(x.cpu(), expected)
    out = torch.empty(0, device=vdev(2))
    torch.add(torch.ones(4, device=vdev(2)), 1, out=out)
    assert out.shape == (4,) and torch.equal(out.cpu(), torch.full((4,), 2.0))


def _grads_of_step(model, x):
    model.zero_grad()
    model(x).square().sum().backward()
    return [p.grad.cpu() for p in model.parameters()]


def test_backward_in_many_threads_on_many_devices_matches_serial():
    torch.manual_seed(8)
    models = [on_device(_mlp(), vdev(i)) for i in range(4)]
    inputs = [torch.randn(9, 6, device=vdev(i)) for i in range(4)]
    serial = [_grads_of_step(m, x) for m, x in zip(models, inputs)]
    threaded = {}

    def worker(i):
        for _ in range(5):
            threaded[i] = _grads_of_step(models[i], inputs[i])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(threaded) == [0, 1, 2, 3]
    for i in range(4):
        for a, b in zip(serial[i], threaded[i]):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


class _BackwardInForward(nn.Module):
    """Runs a backward inside forward, i.e. inside parallel_apply's worker threads."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x):
        w = self.lin.weight.detach().requires_grad_()
        (grad,) = torch.autograd.grad(F.linear(x, w).square().sum(), w)
        return grad


def test_backward_inside_stock_parallel_apply_workers():
    torch.manual_seed(7)
    module = _BackwardInForward()
    replicas = [on_device(module, vdev(i)) for i in range(3)]
    inputs = [torch.randn(4, 3, device=vdev(i)) for i in range(3)]
    # Stock parallel_apply takes CUDA devices or ints: pass indices, as DataParallel does.
    outputs = torch.nn.parallel.parallel_apply(replicas, inputs, devices=[0, 1, 2])
    for i, (out, x) in enumerate(zip(outputs, inputs)):
        assert_close_to_cpu(module(x.cpu()), out, vdev(i))


def test_cpu_view_and_shares_memory_see_aliasing_without_storage_pointers():
    x = torch.randn(4, 5, device=vdev(1))
    assert x.data_ptr() == 0  # no real storage: pointer checks cannot work
    view, row = x.view(20), x.detach()[2]
    assert virtual.shares_memory(x, view) and virtual.shares_memory(x, row)
    assert not virtual.shares_memory(x, x.clone())
    assert not virtual.shares_memory(x, x.to(vdev(2)))
    assert virtual.cpu_view(row).data_ptr() == virtual.cpu_view(x)[2].data_ptr()
    plain = torch.randn(2)
    assert virtual.cpu_view(plain) is plain
    assert virtual.shares_memory(plain, plain[1:])


def test_cpu_view_rejects_non_tensors_naming_the_type():
    with pytest.raises(TypeError, match="cpu_view: expected a virtual-device or CPU tensor, got list"):
        virtual.cpu_view([1, 2])


def test_second_install_with_same_arguments_is_a_no_op():
    before = torch._C._get_privateuse1_backend_name()
    assert virtual.install(4, "vdev") == virtual.devices()
    assert virtual.install() == virtual.devices()
    assert torch._C._get_privateuse1_backend_name() == before == "vdev"


@pytest.mark.parametrize("n, name", [(2, "vdev"), (4, "xdev"), (8, "vdev")])
def test_second_install_with_other_arguments_raises_clearly(n, name):
    with pytest.raises(RuntimeError, match=rf"install\(n={n}, name='{name}'\): already installed "
                                           r"as install\(n=4, name='vdev'\)"):
        virtual.install(n, name)


@pytest.mark.parametrize("n, name, message", [
    (0, "vdev", "n=0; pass an int between 1 and 64"),
    (2.0, "vdev", "n=2.0; pass an int"),
    (4, "cuda", "name='cuda'; pass a new lowercase identifier"),
    (4, "v dev", "name='v dev'"),
])
def test_install_rejects_bad_arguments_naming_them(n, name, message):
    with pytest.raises(ValueError, match=message):
        virtual.install(n, name)


def test_missing_experimental_torch_api_gives_a_clear_error(monkeypatch):
    import torch.utils.backend_registration as registration

    from dp_torch.virtual import backend, setup

    monkeypatch.delattr(registration, "_setup_privateuseone_for_python_backend")
    missing = "torch.utils.backend_registration._setup_privateuseone_for_python_backend"
    assert setup.missing_torch_apis() == [missing]
    with pytest.raises(RuntimeError, match=f"lacks the experimental APIs {missing}"):
        backend.check_torch_support()


def test_backward_leaves_the_threads_autograd_multithreading_flag_as_it_was():
    assert torch._C._is_multithreading_enabled()
    w = torch.randn(3, device=vdev(3), requires_grad=True)
    (w * w).sum().backward()
    assert torch._C._is_multithreading_enabled()
    torch.testing.assert_close(w.grad.cpu(), 2 * w.detach().cpu())


# --- limits: an index past install(n), and what has no vdev counterpart -------------------------


@pytest.mark.parametrize("make", [
    lambda d: torch.zeros(2, device=d),
    lambda d: torch.empty((2, 3), device=d),
    lambda d: torch.tensor([1.0, 2.0], device=d),
    lambda d: torch.randn(3, device=d),
    lambda d: torch.arange(4.0).to(d),
    lambda d: torch.ones(2, device="vdev:1").to(d),
    lambda d: nn.Linear(2, 2).to(d),
], ids=["zeros", "empty", "tensor", "randn", "to_from_cpu", "to_from_vdev", "module_to"])
@pytest.mark.parametrize("index", [4, 7, 9])
def test_an_index_past_the_installed_count_is_an_invalid_device_ordinal_like_cuda(make, index):
    with pytest.raises(RuntimeError, match=rf"invalid device ordinal: vdev:{index} does not exist; "
                                           r"install\(4\) made vdev:0 \.\. vdev:3"):
        make(f"vdev:{index}")


def test_tolist_copies_the_values_like_cuda():
    values = torch.randn(3, 2)
    assert torch.as_tensor(values).to(vdev(2)).tolist() == values.tolist()
    assert torch.arange(5, device=vdev(1))[3].tolist() == 3


def test_numpy_is_refused_like_cuda_naming_vdev_and_cpu():
    x = torch.randn(3, device=vdev(1))
    with pytest.raises(TypeError, match=r"can't convert vdev:1 device type tensor to numpy\. Use Tensor\.cpu\(\)"):
        x.numpy()
    assert x.numpy(force=True).tolist() == x.cpu().tolist()


@pytest.mark.parametrize("method", ["untyped_storage", "storage"])
def test_storage_access_names_vdev_and_the_ways_out(method):
    x = torch.randn(3, device=vdev(2))
    with pytest.raises(RuntimeError, match=r"vdev:2 tensors have no storage of their own.*virtual\.cpu_view\(t\)"
                                           r".*\.cpu\(\) first"):
        getattr(x, method)()


@pytest.mark.parametrize("tensor", [lambda: torch.ones(2), lambda: torch.ones(2, device=vdev(1))], ids=["cpu", "vdev"])
def test_pin_memory_names_vdev_and_the_way_out(tensor):
    with pytest.raises(RuntimeError, match=r"pin_memory\(\): .*dp_torch\.virtual is installed.*pin_memory=False"):
        tensor().pin_memory()


def test_a_data_loader_with_pin_memory_names_the_way_out():
    loader = torch.utils.data.DataLoader(torch.arange(4.0), batch_size=2, pin_memory=True)
    with pytest.raises(RuntimeError, match=r"DataLoader\(\.\.\., pin_memory=False\)"):
        list(loader)

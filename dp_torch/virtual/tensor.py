"""The tensor behind virtual devices: a storage-less wrapper around a CPU tensor.

`VTensor` reports `device=vdev:i`; its data is an ordinary CPU tensor in `._data`. Every aten op
on it reaches `__torch_dispatch__`, which checks devices like CUDA does, runs the op on the CPU
data and wraps the results on the op's device. Only the `dp_torch.virtual` package uses this module.
"""
from __future__ import annotations

from collections import OrderedDict

import torch

from dp_torch.virtual.kernels import CPU_KERNELS
from dp_torch.virtual.moves import note_move

aten = torch.ops.aten

# Ops handled specially, keyed by id(): OpOverload.__hash__ is Python, id() is not (hot path).
_MOVES, _INDEXES, _COPY_FROM, _NOTHING = "moves", "indexes", "copy_from", "nothing"
_SPECIAL = {id(op): kind for kind, ops in {
    # These may mix devices: they are how data moves between devices.
    _MOVES: [aten.copy_.default, aten._to_copy.default],
    _COPY_FROM: [aten._copy_from.default, aten._copy_from_and_resize.default],
    # CUDA accepts CPU index tensors here (`x[cpu_index]`), so we do too.
    _INDEXES: [aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
               aten._index_put_impl_.default],
    # Stream bookkeeping means nothing without streams.
    _NOTHING: [aten.record_stream.default],
}.items() for op in ops}
_CPU_KERNELS = {id(op): kernel for op, kernel in CPU_KERNELS.items()}

_CPU = torch.device("cpu")
_backend_name = "vdev"  # set by install(); used for device objects and messages


_device_count = 0  # set by install(); indices past it are refused
_devices: dict[int, torch.device] = {}  # index -> device, built once (hot path)


def set_backend(name: str, n: int) -> None:
    global _backend_name, _device_count
    _backend_name, _device_count = name, n
    _devices.clear()


def check_index(index: int) -> int:
    """``index`` if ``name:index`` was installed, else CUDA's "invalid device ordinal" error."""
    if not 0 <= index < _device_count:
        last = _device_count - 1
        raise RuntimeError(
            f"{_backend_name} error: invalid device ordinal: {_backend_name}:{index} does not exist; "
            f"install({_device_count}) made {_backend_name}:0 .. {_backend_name}:{last}; "
            f"pass an index up to {last} (or install more devices, in a fresh process)"
        )
    return index


def device_of(index: int) -> torch.device:
    device = _devices.get(index)
    if device is None:
        device = _devices[index] = torch.device(_backend_name, index)
    return device


class VTensor(torch.Tensor):
    """A tensor on `vdev:<index>` whose values live in the CPU tensor `_data`."""

    _data: torch.Tensor
    _index: int

    @staticmethod
    def __new__(cls, data: torch.Tensor, index: int, requires_grad: bool = False):
        wrapper = torch.Tensor._make_wrapper_subclass(
            cls, data.size(), strides=data.stride(), storage_offset=data.storage_offset(),
            dtype=data.dtype, layout=data.layout, device=device_of(index),
            requires_grad=requires_grad,
        )
        wrapper._data = data
        wrapper._index = index  # device.index builds a torch.device: too slow per op
        return wrapper

    # No Python __torch_function__ layer: ops go straight to __torch_dispatch__ (cheaper).
    __torch_function__ = torch._C._disabled_torch_function_impl

    def __repr__(self) -> str:
        return f"VTensor({self._data!r}, device='{self.device}')"

    def __reduce_ex__(self, protocol):
        # PyTorch's own format for storage-less PrivateUse1 tensors (Tensor._reduce_ex_internal):
        # CPU data plus the device name, which torch.load maps through map_location (str,
        # torch.device or dict) as it maps CUDA storages. It is on torch's weights_only
        # allowlist, so map_location="cpu" loads it even where dp_torch is not installed.
        if getattr(self, "_is_param", False):  # nn.Parameter(v) stays a VTensor: save it as one
            return torch._utils._rebuild_parameter, (
                VTensor(self._data, self._index), self.requires_grad, OrderedDict())
        return torch._utils._rebuild_device_tensor_from_cpu_tensor, (
            self._data, self.dtype, str(self.device), self.requires_grad)

    # Being a "traceable" wrapper makes Module.to/.double swap tensors in place, as CUDA keeps
    # Parameter identity: tied weights stay tied and optimizers keep pointing at the params
    # (a parameter an autograd graph holds moves by `.data` instead, see setup.py). Dynamo
    # fakes traceable wrappers, so it meets untyped_storage's refusal.
    def __tensor_flatten__(self):
        return ["_data"], self._index

    @staticmethod
    def __tensor_unflatten__(inner, index, outer_size, outer_stride):
        return VTensor(inner["_data"], index)

    @property
    def data(self):
        return torch._C.TensorBase.data.__get__(self)

    @data.setter
    def data(self, new: torch.Tensor) -> None:
        # `p.data = x` swaps the wrapper's metadata in C++; the CPU data must follow.
        note_move(self, new)
        torch._C.TensorBase.data.__set__(self, new)
        self._data, self._index = new._data, new._index

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return run_on_cpu(func, args, kwargs or {})

    # Python-level Tensor methods that never reach __torch_dispatch__.
    def tolist(self):
        return self._data.tolist()  # CUDA copies to the host here too

    def numpy(self, *, force: bool = False):
        if force:
            return self.cpu().numpy(force=True)
        raise TypeError(
            f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy the "
            "tensor to host memory first."
        )

    def untyped_storage(self):
        if torch.compiler.is_compiling():  # dynamo asks while it fakes an input or parameter
            raise _compile_refusal(self.device)
        raise RuntimeError(
            f"{self.device} tensors have no storage of their own: a virtual device keeps a tensor's values "
            "in a CPU tensor. For aliasing checks use dp_torch.virtual.cpu_view(t).untyped_storage() or "
            "virtual.shares_memory(a, b); for the values, call .cpu() first"
        )

    storage = untyped_storage


def _compile_refusal(device: torch.device) -> RuntimeError:
    """torch.compile's error for vdev tensors; a TorchRuntimeError, so dynamo passes it on unwrapped."""
    from torch._dynamo.exc import TorchRuntimeError  # loaded already: dynamo is tracing

    return TorchRuntimeError(
        f"torch.compile cannot trace {device} tensors: dynamo reads every tensor's storage, and a virtual "
        "device keeps its values in a CPU tensor instead. Run the module on vdev without torch.compile "
        "(placement checks need no compiler), or compile it where it runs for real: on the CPU "
        "(module.cpu()) or on a GPU"
    )


def _rebuild(data: torch.Tensor, index: int, requires_grad: bool) -> torch.Tensor:
    """Loads checkpoints written before `__reduce_ex__` used PyTorch's format, honouring map_location."""
    return torch._utils._rebuild_device_tensor_from_cpu_tensor(
        data, data.dtype, f"{_backend_name}:{index}", requires_grad)


def wrap(data: torch.Tensor, index: int) -> VTensor:
    return VTensor(data, index)


class _Unwrapper:
    """Unwraps one op's arguments, tracking the devices seen and the objects unwrapped."""

    __slots__ = ("index", "first", "other", "originals", "allow_cpu")

    def __init__(self, allow_cpu: bool):
        self.index = None      # vdev index of the first VTensor: where results go
        self.first = None      # first device seen: an int (vdev index) or a torch.device
        self.other = None      # first device seen that differs from `first`
        self.originals = {}    # id(cpu data) -> VTensor, so in-place ops return their input
        self.allow_cpu = allow_cpu

    def leaf(self, x):
        if isinstance(x, VTensor):
            data, index = x._data, x._index
            self.originals[id(data)] = x
            if self.first is None:
                self.first = self.index = index
            elif self.index is None:
                self.index = index
                self._differs(index)
            elif index != self.first:
                self._differs(index)
            return data
        # 0-dim CPU tensors act as scalars on CUDA, so they never conflict.
        if isinstance(x, torch.Tensor) and not self.allow_cpu and x.dim() != 0:
            if self.first is None:
                self.first = x.device
            else:
                self._differs(x.device)
        return x

    def _differs(self, device) -> None:
        if self.other is None and device != self.first:
            self.other = device

    def args(self, args):
        leaf = self.leaf
        return [
            [leaf(y) for y in x] if isinstance(x, (list, tuple)) else leaf(x) for x in args
        ]

    def mismatch(self):
        """The two devices to name in a same-device error, or None."""
        if self.other is None:
            return None
        return tuple(d if isinstance(d, torch.device) else device_of(d)
                     for d in (self.first, self.other))


def same_device_error(first, second) -> RuntimeError:
    return RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"{first} and {second}!"
    )


def _target_index(kwargs: dict, default):
    """The vdev index an op's `device=` asks for (None: CPU, no wrapping); rewrites it to cpu."""
    device = kwargs.get("device")
    if device is None:
        return default
    device = torch.device(device)
    if device.type != _backend_name:
        return None
    kwargs["device"] = _CPU
    return 0 if device.index is None else check_index(device.index)


def run_on_cpu(func, args, kwargs):
    """Runs `func` on the CPU data of its arguments and wraps the results on their vdev."""
    special = _SPECIAL.get(id(func))
    if special is _NOTHING:
        return None
    unwrapper = _Unwrapper(allow_cpu=special is _INDEXES)
    cpu_args = unwrapper.args(args)
    index = unwrapper.index
    if kwargs:
        cpu_kwargs = dict(zip(kwargs, unwrapper.args(kwargs.values())))
        index = _target_index(cpu_kwargs, index)
    else:
        cpu_kwargs = kwargs
    if unwrapper.other is not None and special is not _MOVES and special is not _COPY_FROM:
        raise same_device_error(*unwrapper.mismatch())
    if special is _COPY_FROM:
        return _copy_into(args[1], cpu_args[0])
    out = _CPU_KERNELS.get(id(func), func)(*cpu_args, **cpu_kwargs)
    return _wrap_results(out, index, unwrapper.originals)


def _copy_into(dst, src):
    dst_data = dst._data if isinstance(dst, VTensor) else dst
    if dst_data.shape != src.shape:
        dst_data.resize_(src.shape)
    dst_data.copy_(src)
    if isinstance(dst, VTensor):
        _match_metadata(dst)
    return dst


def _match_metadata(wrapper: VTensor) -> None:
    """Gives `wrapper` its data's sizes/strides after an in-place op changed them (resize_, out=).

    Python cannot set a TensorImpl's sizes, but the CPU kernels of resize_/as_strided_ can,
    on the wrapper itself; the wrapper's own storage then holds unused bytes.
    """
    data = wrapper._data
    if wrapper.shape == data.shape and wrapper.stride() == data.stride():
        return
    cpu_only = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    extent = data.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(data.shape, data.stride()))
    aten.resize_.default.redispatch(cpu_only, wrapper, [extent])
    aten.as_strided_.default.redispatch(
        cpu_only, wrapper, data.shape, data.stride(), data.storage_offset())


def _wrap_results(out, index, originals):
    if isinstance(out, torch.Tensor):
        return _wrap_one(out, index, originals)
    if isinstance(out, (tuple, list)):
        return type(out)(_wrap_one(o, index, originals) if isinstance(o, torch.Tensor) else o
                         for o in out)
    return out


def _wrap_one(t, index, originals):
    original = originals.get(id(t))
    if original is not None:
        _match_metadata(original)
        return original
    if index is None or t.device.type != "cpu":
        return t
    return VTensor(t, index)

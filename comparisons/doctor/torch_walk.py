"""Walking a module's replicas for what `replicate` shares instead of copying.

`replicate` copies parameters, buffers and children (`_modules`) per device; every other entry of a
module's `__dict__` is shared by reference with the original, so a tensor there stays on the device
it was created on, and a module there (or in a plain list or dict) is the original, not the
replica's copy. Cost: one pass over each replica's `__dict__`s and the containers in them.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

_INTERNALS = frozenset(vars(nn.Module())) | {"_is_replica", "_former_parameters", "_flat_weight_refs"}
_MAX_DEPTH = 4  # containers nested deeper than this are not searched
_MAX_ITEMS = 10_000


@dataclass
class Shared:
    """A tensor or module found outside the registered slots of a replica."""

    path: str                 # "encoder.layers[2].scale"
    obj: object               # the tensor or module (the same object on every replica)
    wrong_on: dict[int, str]  # replica index -> device the object's tensors are on, where not its own
    holders: dict[int, tuple[nn.Module, str]] = field(default_factory=dict)  # replica -> (module, attribute)

    def replaced_on_every_replica(self) -> bool:
        """True when, on every replica it was wrong for, the attribute now holds another value.

        A forward pre-hook that recomputes the attribute (spectral_norm's `weight`) replaces the
        shared tensor on each replica before anything reads it. Tensors inside containers never are.
        """
        return len(self.holders) == len(self.wrong_on) and all(
            vars(module).get(name) is not self.obj for module, name in self.holders.values())


def module_attributes(module: nn.Module) -> Iterator[tuple[str, object]]:
    """(name, value) for the __dict__ entries replicate shares by reference."""
    for name, value in vars(module).items():
        if name not in _INTERNALS and name not in module._parameters and name not in module._buffers:
            yield name, value


def entries(prefix: str, value: object, depth: int = 0) -> Iterator[tuple[str, object]]:
    """Tensors and modules in `value`, recursing into lists, tuples and dicts, with their paths."""
    if isinstance(value, (torch.Tensor, nn.Module)):
        yield prefix, value
    elif depth < _MAX_DEPTH and isinstance(value, (list, tuple)):
        for i, item in enumerate(value[:_MAX_ITEMS]):
            yield from entries(f"{prefix}[{i}]", item, depth + 1)
    elif depth < _MAX_DEPTH and isinstance(value, dict):
        for key, item in list(value.items())[:_MAX_ITEMS]:
            yield from entries(f"{prefix}[{key!r}]", item, depth + 1)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def module_tensors(module: nn.Module) -> list[torch.Tensor]:
    """Parameters and buffers of `module` and of its children (registered ones only)."""
    return [*module.parameters(), *module.buffers()]


def _wrong_device(tensors: list[torch.Tensor], device: torch.device) -> str | None:
    """The device of the first tensor not on `device` (0-dim CPU tensors act as scalars), or None."""
    for tensor in tensors:
        if tensor.device != device and not (tensor.device.type == "cpu" and tensor.dim() == 0):
            return str(tensor.device)
    return None


def find_shared(replicas: list[nn.Module], devices: list[torch.device]) -> tuple[list[Shared], list[Shared]]:
    """(tensors, modules) every replica reaches through plain attributes, with where each is misplaced.

    A module with no tensors (a list of activations) is harmless and not returned; neither is a
    tensor or module that is on every replica's own device.
    """
    found: dict[tuple[str, int], Shared] = {}
    for index, (replica, device) in enumerate(zip(replicas, devices)):
        for path, module in replica.named_modules():
            for name, value in module_attributes(module):
                for entry_path, obj in entries(_join(path, name), value):
                    tensors = module_tensors(obj) if isinstance(obj, nn.Module) else [obj]
                    wrong = _wrong_device(tensors, device)
                    if wrong is None:
                        continue
                    shared = found.setdefault((entry_path, id(obj)), Shared(entry_path, obj, {}))
                    shared.wrong_on[index] = wrong
                    if value is obj:
                        shared.holders[index] = (module, name)
    tensors = [s for s in found.values() if isinstance(s.obj, torch.Tensor)]
    modules = [s for s in found.values() if isinstance(s.obj, nn.Module)]
    return tensors, modules


def state_snapshot(replicas: list[nn.Module]) -> list[dict[str, dict[str, object]]]:
    """Per replica: module path -> {attribute: value}, for user-defined modules only.

    torch's own modules may cache on self during forward (RNNs); that is not the user's state.
    """
    return [{path: _own_state(m) for path, m in replica.named_modules() if not _is_torch_class(m)}
            for replica in replicas]


_DATA = ".data"
_ABSENT = object()


def _own_state(module: nn.Module) -> dict[str, object]:
    """A module's attributes, sub-modules and buffers, each of which `self.name = ...` may rebind.

    `self.head = nn.Linear(...)` lands in `_modules`, `self.ema = 0.9 * self.ema + ...` in `_buffers`,
    both the replica's own dicts; an in-place update keeps the buffer's identity and is not a rebinding.
    """
    # `self.buffer.data = new` keeps the buffer object but swaps its memory: the "<name>.data" entries see that
    storage = {f"{name}{_DATA}": memory_span(value) for name, value in module._buffers.items() if value is not None}
    return {**{name: value for name, value in vars(module).items() if name not in _INTERNALS},
            **module._modules, **module._buffers, **storage}


def _is_torch_class(module: nn.Module) -> bool:
    return type(module).__module__.split(".")[0] == "torch"


@dataclass
class SharedContainer:
    """A list, dict or set on a user module: replicate shares it, so every replica fills the same one."""

    path: str                 # "encoder.cache"
    owner: nn.Module          # the original module whose attribute it is
    name: str
    container: object
    before: object            # its fingerprint before the replicas ran

    def filled(self) -> bool:
        """True when the replicas changed it, other than by entries keyed by a device (a per-replica cache)."""
        if isinstance(self.container, dict) and isinstance(self.before, tuple):
            old = dict(self.before)
            changed = [key for key, print_ in _fingerprint(self.container) if old.get(key) != print_]
            return any(not _names_a_device(key) for key in changed) or len(old) > len(self.container)
        return _fingerprint(self.container) != self.before


def shared_containers(replica: nn.Module) -> list[SharedContainer]:
    """The lists, dicts and sets on the user's modules of a replica (the same objects on every replica)."""
    found, seen = [], set()
    for path, module in replica.named_modules():
        if _is_torch_class(module):
            continue  # torch's own layers keep their caches to themselves (RNNs' flat weights)
        for name, value in module_attributes(module):
            if isinstance(value, (list, dict, set)) and id(value) not in seen:
                seen.add(id(value))
                found.append(SharedContainer(_join(path, name), module, name, value, _fingerprint(value)))
    return found


def _fingerprint(value: object, depth: int = 0) -> object:
    """What a fill changes: the identities of a container's entries, nested containers included.

    For a dict, a tuple of (key, fingerprint of the value) pairs. Cost: one pass over the entries.
    """
    if depth >= _MAX_DEPTH or not isinstance(value, (list, tuple, dict, set)):
        return id(value)
    if isinstance(value, dict):
        return tuple((key, _fingerprint(item, depth + 1)) for key, item in list(value.items())[:_MAX_ITEMS])
    if isinstance(value, set):
        return frozenset(map(id, value))
    return (id(value), tuple(_fingerprint(item, depth + 1) for item in value[:_MAX_ITEMS]), len(value))


def _names_a_device(key: object) -> bool:
    """`x.device`, or a tuple holding one (`(x.device, x.dtype)`): the idiom for a cache per replica."""
    if isinstance(key, tuple):
        return any(isinstance(part, torch.device) for part in key)
    return isinstance(key, torch.device)


def assigned_since(before: dict[str, dict[str, object]], replica: nn.Module) -> list[tuple[str, nn.Module, str]]:
    """(module path, module, attribute) assigned on `replica` since `before` was taken."""
    changed = []
    for path, module in replica.named_modules():
        if path not in before:
            continue
        found = [name for name, value in _own_state(module).items()
                 if (earlier := before[path].get(name, _ABSENT)) is _ABSENT
                 or (earlier != value if name.endswith(_DATA) else earlier is not value)]
        # a buffer rebound as a whole (`self.ema = ...`) swaps its memory too: one finding, under its own name
        changed += [(path, module, name) for name in found
                    if not (name.endswith(_DATA) and name[:-len(_DATA)] in found)]
    return changed


def registered_slots(replica: nn.Module) -> list[tuple[str, torch.Tensor, bool]]:
    """(path, tensor, expected_to_change) for every parameter and buffer slot of a replica.

    A replica keeps its parameter copies in `_former_parameters` (as plain tensors in __dict__).
    `expected_to_change` marks the buffers of torch's own layers (BatchNorm's running statistics),
    whose replica-0-only update is DataParallel's documented behaviour.
    """
    slots = []
    for path, module in replica.named_modules():
        params = getattr(module, "_former_parameters", None) or module._parameters
        slots.extend((_join(path, name), t, False) for name, t in params.items() if t is not None)
        slots.extend((_join(path, name), t, _torch_owned_buffer(module, name))
                     for name, t in module._buffers.items() if t is not None)
    return slots


def _torch_owned_buffer(module: nn.Module, name: str) -> bool:
    """True for a buffer of a torch layer, also when the user subclasses the layer (timm's BatchNorms).

    A subclass's own buffers stay the user's: only the names the torch base class registers count.
    """
    if _is_torch_class(module):
        return True
    return isinstance(module, _NormBase) and name in _NORM_BUFFERS


_NormBase = nn.modules.batchnorm._NormBase  # BatchNorm*, InstanceNorm*, SyncBatchNorm and their Lazy forms
_NORM_BUFFERS = frozenset({"running_mean", "running_var", "num_batches_tracked"})


def memory_span(tensor: torch.Tensor) -> tuple[int, int, int]:
    """(storage address, first byte, end byte) of the memory a tensor can touch.

    Virtual-device tensors have no storage of their own; their CPU data's storage stands in.
    """
    data = cpu_data(tensor)
    start = data.storage_offset() * data.element_size()
    extent = 1 + sum((size - 1) * stride for size, stride in zip(data.shape, data.stride())) if data.numel() else 0
    return data.untyped_storage().data_ptr(), start, start + extent * data.element_size()


def cpu_data(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.device.type in ("cpu", "cuda", "meta"):
        return tensor
    from dp_torch import virtual

    return virtual.cpu_view(tensor) if virtual.is_installed() else tensor

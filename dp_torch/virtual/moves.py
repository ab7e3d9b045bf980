"""Modules moved while an autograd graph holds their parameters: CUDA's semantics, without an abort.

`module.to()` sets `param.data` on vdev as on CUDA (`VTensor` is not a traceable wrapper, so
`Module._apply` takes that path): the move succeeds and the Parameters stay the same objects. The
graph built before the move still names the old device, and a backward through it fails where
CUDA's kernels meet two devices: accumulating into the moved `param.grad`, or a backward formula
reading the moved parameter itself. On vdev such an error, raised inside a backward node, would
abort the process (PyTorch's Python device guard cannot run while it is pending; see
docs/virtual_devices.md), so the backward engine asks `stale_graph_error` first and raises the
same RuntimeError before the engine starts. The walk runs only once a move under a live graph
has happened in this process.
"""
from __future__ import annotations

import torch

_moves_under_graphs = 0  # how many vdev tensors moved while a graph held them (gates the walk)


def note_move(tensor: torch.Tensor, new: torch.Tensor) -> None:
    """Records, on `tensor` itself, the device a graph may still expect it on, if a graph holds it.

    Called by `VTensor.data`'s setter before the move. A use count above one means some C++
    object (an AccumulateGrad node, a saved variable) holds the tensor: only a graph does.
    """
    global _moves_under_graphs
    if new.device != tensor.device and tensor._use_count() > 1:
        tensor._moved_under_graph_from = tensor.device
        _moves_under_graphs += 1


def check_backward(roots, accumulate_grad: bool) -> None:
    """Raises the RuntimeError CUDA would raise in this backward, before the engine starts.

    Free until a move under a live graph happens; then it walks the graph (about 1% of a vdev backward).
    """
    if not _moves_under_graphs:
        return
    error = stale_graph_error(roots, accumulate_grad)
    if error is not None:
        raise error


def stale_graph_error(roots, accumulate_grad: bool) -> RuntimeError | None:
    """The first place where the graph from `roots` meets a parameter moved since it was built."""
    stack = [root.grad_fn if isinstance(root, torch.Tensor) else root.node for root in roots]
    seen: dict[int, object] = {}  # id -> node: holding the node keeps its id unique during the walk
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        error = _accumulator_error(node) if accumulate_grad else None
        error = error or _saved_parameter_error(node)
        if error is not None:
            return error
        stack.extend(fn for fn, _ in node.next_functions)
    return None


def _accumulator_error(node) -> RuntimeError | None:
    """CUDA's `param.grad += new_grad` with the gradient moved and the new one on the old device."""
    if type(node).__name__ != "AccumulateGrad":
        return None
    param, expected = node.variable, node._input_metadata[0].device
    grad = param.grad
    if param.device == expected or grad is None or grad.device == expected:
        return None  # no gradient yet: CUDA's AccumulateGrad keeps the new one where it comes
    return _moved_error(expected, grad.device, param, f"accumulating into its .grad (on {grad.device})")


def _saved_parameter_error(node) -> RuntimeError | None:
    """A moved parameter that the graph saved, met by gradients on the graph's device."""
    grad_devices = {meta.device for meta in getattr(node, "_input_metadata", ())}
    for name in dir(node):
        if not name.startswith("_saved_"):
            continue
        try:
            saved = getattr(node, name)
        except RuntimeError:  # freed by an earlier backward: the engine says so itself
            continue
        for tensor in saved if isinstance(saved, (tuple, list)) else (saved,):
            moved_from = getattr(tensor, "_moved_under_graph_from", None)
            if moved_from is not None and tensor.device not in grad_devices and grad_devices:
                where = f"{node.name()} reading it (saved as {name[len('_saved_'):]})"
                return _moved_error(next(iter(grad_devices)), tensor.device, tensor, where)
    return None


def _moved_error(graph_device, now_device, param: torch.Tensor, where: str) -> RuntimeError:
    return RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"{graph_device} and {now_device}! This backward runs through a graph built while a parameter "
        f"of shape {tuple(param.shape)} was on {graph_device}; the module has moved it to {param.device} "
        f"since (module.to() under a live graph), and CUDA fails here too, at {where}. Run backward "
        "before moving the module, or run the forward again after the move"
    )

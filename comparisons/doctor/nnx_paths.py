"""Where things sit in a user's NNX module: `blocks[0].norm` paths, the user's line that built them, and the
`nnx-default` findings (layer settings that are not torch's, from `comparisons.judge.nnx_traps`) at those paths.

Cost: walks of the module graph (`nnx.iter_modules`, `nnx.iter_graph`) and one read of each user class's source
per finding; nothing is traced or run. Flax is imported only when called.
"""
from __future__ import annotations

from typing import Any

from comparisons.doctor.findings import Finding
from comparisons.doctor.source import construction_line, is_user_file

_GRAPH_MODE = True  # as dp_jax.nnx: graph-mode walks, so a shared layer has one path


def layer_path(path: tuple) -> str:
    """('blocks', 0, 'norm') -> 'blocks[0].norm', as the user writes it in Python."""
    text = ""
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else str(key))
    return text


def joined(prefix: str, path: tuple) -> str:
    """`prefix` (a name the function reads, or '') followed by the layer path; the prefix alone for the root."""
    inner = layer_path(path)
    if not prefix or not inner:
        return prefix or inner or "(the model)"
    return prefix + inner if inner.startswith("[") else f"{prefix}.{inner}"


def layer_line(modules: dict[tuple, Any], path: tuple) -> str | None:
    """The user's 'file.py:line' assigning the attribute that holds the node at `path` (`self.norm = ...` in the
    class of `blocks[0]`), or None. `modules` is `dict(nnx.iter_modules(model))`."""
    for index in range(len(path) - 1, -1, -1):
        owner = modules.get(path[:index])
        if isinstance(path[index], str) and owner is not None and _is_user_class(type(owner)):
            return construction_line(type(owner), path[index])
    return None


def _is_user_class(cls: type) -> bool:
    import inspect

    try:
        return is_user_file(inspect.getsourcefile(cls) or "<unknown>")
    except (OSError, TypeError):  # a class defined in `python -c` or a notebook cell has no source file
        return False


def trap_findings(model: Any, prefix: str = "") -> list[Finding]:
    """An `nnx-default` finding per setting of `model`'s layers that is not torch's, at its path and line."""
    from flax import nnx

    from comparisons.judge import nnx_traps

    modules = dict(nnx.iter_modules(model, graph=_GRAPH_MODE))
    by_dotted = {".".join(map(str, path)) or "(the model)": path for path in modules}
    findings = []
    for trap in nnx_traps(model):
        path = by_dotted.get(trap.path, ())
        findings.append(Finding("nnx-default", joined(prefix, path), (), (), trap.cause, trap.hint,
                                layer_line(modules, path)))
    return findings


def static_arrays(model: Any) -> dict[int, tuple[Any, tuple[str, str | None]]]:
    """{id(array): (array, (path, user's line))} of every jax.Array inside a static attribute of `model` (a frozen
    dataclass field, a module with pytree=False): `nnx.split` keeps such a value in the GraphDef, so a traced
    call reads it as a constant from its own device."""
    import jax
    from flax import nnx

    from dp_jax.nnx import arrays_inside

    modules = dict(nnx.iter_modules(model, graph=_GRAPH_MODE))
    found: dict[int, tuple[Any, tuple[str, str | None]]] = {}
    for path, node in modules.items():
        for name, value in vars(node).items():
            if name.startswith("_") or isinstance(value, (nnx.Variable, nnx.Module, jax.Array)):
                continue
            for suffix, array in arrays_inside(value, depth=4):
                found.setdefault(id(array), (array, (joined(layer_path(path), (name,)) + suffix,
                                                     layer_line(modules, (*path, name)))))
    return found


NNX_FIXES = {
    "closed-over-array": "hold it in the module: an nnx.Variable (or a plain array attribute), which nnx.split "
                         "carries as state, so DataParallel puts a copy on every device",
    "state-on-self": "hold it in an nnx.Variable (e.g. a Variable subclass), whose change dp_jax writes back "
                     "from replica 0, or return the value from __call__",
}

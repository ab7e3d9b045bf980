"""nnx_traps: the settings of an NNX twin's layers that differ from torch's, read from the modules.

NNX defaults that are not torch's, each a port difference the float64 check sees and a verdict can
name: nnx.BatchNorm's momentum 0.99 (torch's 0.1 is Flax's 0.9), its biased running variance, its
one-pass `use_fast_variance=True`, nnx.LayerNorm's and nnx.RMSNorm's epsilon 1e-6, and a `dtype`
fixed at construction (nnx.Embed's float32), which keeps a layer in float32 in a float64 run.
Cost: one walk of the NNX graph and of torch's `named_modules`; nothing runs.
"""
from __future__ import annotations

from typing import Any, NamedTuple

TORCH_DEFAULTS = {"BatchNorm": {"momentum": 0.1, "eps": 1e-5}, "LayerNorm": {"eps": 1e-5}, "RMSNorm": {"eps": None}}


class NNXTrap(NamedTuple):
    """One NNX setting that differs from torch's: the layer's path, the kind, a one-line cause and a hint."""

    path: str
    kind: str
    cause: str
    hint: str


def nnx_traps(nnx_model: Any, torch_model: Any = None, *, dtype: str = "float64") -> tuple[NNXTrap, ...]:
    """List the settings of `nnx_model`'s layers that differ from torch's.

    Args:
        nnx_model: the Flax NNX twin (an `nnx.Module`).
        torch_model: the torch module; each NNX layer is matched to the torch layer at the same
            dotted path (`blocks.0.norm`), else to the torch layers of its kind when they agree on the
            setting. None compares with torch's defaults.
        dtype: the dtype the twin is run in ("float64" for the float64 check): a layer whose `dtype`
            was fixed to another at construction is listed.
    Returns:
        NNXTrap records in the model's graph order; empty for a twin that follows torch.
    """
    from flax import nnx

    torch_layers = dict(torch_model.named_modules()) if torch_model is not None else None
    traps: list[NNXTrap] = []
    for path, module in nnx.iter_modules(nnx_model):
        name = ".".join(map(str, path))
        for kind in ("BatchNorm", "LayerNorm", "RMSNorm"):
            if isinstance(module, getattr(nnx, kind)):
                torch_settings = _torch_settings(kind, name, torch_layers)
                if torch_settings is not None:
                    traps += _norm_traps(kind, name or "(the model)", module, torch_settings)
        traps += _fixed_dtype(name or "(the model)", module, dtype)
    return tuple(traps)


def _torch_settings(kind: str, name: str, torch_layers: dict | None) -> dict | None:
    """The torch counterpart's settings: same path, else the layers of the kind if they agree, else None."""
    if torch_layers is None:
        return TORCH_DEFAULTS[kind]
    same = torch_layers.get(name)
    candidates = [same] if same is not None and _torch_kind(same) == kind else [
        m for m in torch_layers.values() if _torch_kind(m) == kind]
    settings = [{key: getattr(m, key, None) for key in TORCH_DEFAULTS[kind]} for m in candidates]
    return settings[0] if settings and all(s == settings[0] for s in settings) else None


def _torch_kind(module: Any) -> str | None:
    names = [cls.__name__ for cls in type(module).__mro__]
    if "_BatchNorm" in names:
        return "BatchNorm"
    return next((kind for kind in ("LayerNorm", "RMSNorm") if kind in names), None)


def _norm_traps(kind: str, name: str, module: Any, torch: dict) -> list[NNXTrap]:
    traps = []
    if kind == "BatchNorm":
        traps += _batchnorm_traps(name, module, torch)
    eps = torch["eps"]
    if eps is None:
        traps.append(NNXTrap(name, "rmsnorm-epsilon", (
            f"torch's RMSNorm has eps=None, i.e. finfo(dtype).eps (1.2e-07 in float32, 2.2e-16 in float64); "
            f"nnx.RMSNorm's epsilon={module.epsilon} is one fixed number"),
            "give torch's RMSNorm an explicit eps and nnx.RMSNorm the same epsilon"))
    elif module.epsilon != eps:
        traps.append(NNXTrap(name, f"{kind.lower()}-epsilon",
                             f"nnx.{kind} epsilon={module.epsilon:g}, torch's eps={eps:g}",
                             f"nnx.{kind}(..., epsilon={eps:g})"))
    return traps


def _batchnorm_traps(name: str, module: Any, torch: dict) -> list[NNXTrap]:
    traps = [NNXTrap(name, "batchnorm-variance",
                     "nnx.BatchNorm keeps the biased batch variance in its running `var`; torch keeps the "
                     "unbiased one (n / (n - 1))",
                     "a BatchNorm that tracks n / (n - 1) x the variance (comparisons.models.nnx_nets.TorchBatchNorm)")]
    momentum = torch["momentum"]
    if momentum is None:
        traps.append(NNXTrap(name, "batchnorm-momentum", "torch's momentum=None is a cumulative average, "
                             "which nnx.BatchNorm has no setting for", "give torch's BatchNorm a momentum"))
    elif abs(module.momentum - (1 - momentum)) > 1e-12:
        traps.append(NNXTrap(name, "batchnorm-momentum",
                             f"nnx.BatchNorm momentum={module.momentum:g} weighs the old running value; torch's "
                             f"momentum={momentum:g} weighs the new batch, so Flax's equivalent is {1 - momentum:g}",
                             f"nnx.BatchNorm(..., momentum={1 - momentum:g})"))
    if module.use_fast_variance:
        traps.append(NNXTrap(name, "batchnorm-fast-variance",
                             "nnx.BatchNorm use_fast_variance=True computes E[x²] - E[x]², which cancels where "
                             "the mean is large; torch subtracts the mean first",
                             "nnx.BatchNorm(..., use_fast_variance=False)"))
    return traps


def _fixed_dtype(name: str, module: Any, dtype: str) -> list[NNXTrap]:
    import numpy as np

    fixed = getattr(module, "dtype", None)
    if fixed is None or not isinstance(fixed, (type, np.dtype)) or np.dtype(fixed) == np.dtype(dtype):
        return []
    layer = type(module).__name__
    return [NNXTrap(name, "fixed-dtype",
                    f"{layer} fixed dtype={np.dtype(fixed).name} at construction (nnx.Embed's dtype=None takes "
                    f"param_dtype's, float32): it computes in {np.dtype(fixed).name} in a {dtype} run",
                    f"build it with dtype and param_dtype of the run ({layer}(..., dtype=..., param_dtype=...))")]


# The leaves each kind of trap moves, by the leaf's own name; a kind not listed moves every leaf of its layer.
_MOVES = {"batchnorm-momentum": ("mean", "var"), "batchnorm-variance": ("var",)}
# Named on their own layer's leaves only: the variance kept moves `var` alone, and E[x²] - E[x]² differs from
# torch's two-pass variance by rounding unless the mean is large, so naming it on every leaf would mislead.
_LOCAL = ("batchnorm-variance", "batchnorm-fast-variance")


def with_traps(checks: list, traps: tuple[NNXTrap, ...]) -> list:
    """`checks` with each failing torch-vs-JAX leaf's message naming the NNX traps of the layer that owns it
    (`nnx_traps`: "NNX trap at `bn`: <cause>; fix: <hint>"), or, for a leaf no trap owns (an output, a layer
    before the trap), the trapped layers by path; the check's detail quotes the new messages. One line each.
    Why: a verdict that says "port" at `bn.mean` leaves the user to find momentum=0.99 alone.
    Cost: a pass over the failing leaves; checks with no trap to name come back unchanged."""
    import dataclasses

    spread = [trap for trap in traps if trap.kind not in _LOCAL]
    elsewhere = ("NNX settings unlike torch's in the twin: " + ", ".join(f"`{t.path}` {t.kind}" for t in spread)
                 if spread else "")
    named = []
    for check in checks:
        if check.passed or not check.compared.startswith("torch DP vs "):
            named.append(check)
            continue
        leaves = tuple(leaf if leaf.passed else _named(leaf, traps, elsewhere) for leaf in check.leaves)
        detail = check.detail
        for before, after in zip(check.leaves, leaves):
            if before.message and after is not before:
                detail = detail.replace(before.message, after.message, 1)
        named.append(dataclasses.replace(check, leaves=leaves, detail=detail))
    return named


def _named(leaf: Any, traps: tuple[NNXTrap, ...], elsewhere: str) -> Any:
    """`leaf` with the traps of its own layer in its message, else `elsewhere`; itself when there are none."""
    import dataclasses

    owned = [trap for trap in traps if _owns(trap, leaf.path)]
    words = "; ".join(f"NNX trap at `{t.path}`: {t.cause}; fix: {t.hint}" for t in owned) or elsewhere
    if not words:
        return leaf
    return dataclasses.replace(leaf, message=f"{leaf.message}; {words}" if leaf.message else words)


def _owns(trap: NNXTrap, leaf_path: str) -> bool:
    """Whether `trap`'s layer holds the leaf `leaf_path` and the trap moves a leaf of that name."""
    layer, _, name = leaf_path.rpartition(".")
    if layer != trap.path and not (trap.path == "(the model)" and "." not in leaf_path):
        return False
    return name in _MOVES.get(trap.kind, (name,))

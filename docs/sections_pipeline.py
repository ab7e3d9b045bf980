"""Generators for the pipeline pages (index, scatter, uneven_batches): placements and chunk sizes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sections import generator

# --- shared helpers ------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def table(header: list[str], rows: list[list]) -> str:
    """A Markdown table; cells are formatted with str()."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows])


def _sizes(chunks) -> str:
    return ", ".join(str(len(chunk)) for chunk in chunks)


# --- index.md: where replicate puts every parameter and buffer -----------------------------------

# Virtual torch devices are process-global, so the torch half runs in a child interpreter.
_TORCH_PLACEMENT_CHILD = """
import json
import torch
from torch import nn
import dp_torch
from dp_torch import virtual
from comparisons import placement_of

devices = virtual.install(4)[:3]
torch.manual_seed(0)
model = nn.Sequential()
model.add_module("fc", nn.Linear(3, 2))
model.add_module("bn", nn.BatchNorm1d(2))
model.to(devices[0])
model.scale = torch.full((2,), 2.0, device=devices[0])  # a plain attribute: neither parameter nor buffer
replicas = dp_torch.replicate(model, devices)
print(json.dumps({"placement": placement_of(replicas, devices=devices, original=model).to_rows(),
                  "plain": [[str(r.scale.device), r.scale is model.scale] for r in replicas]}))
"""

# The torch tensor each Flax variable holds, layer by layer (None: Flax has no counterpart).
_TWINS = {"fc.weight": "params.fc.kernel", "fc.bias": "params.fc.bias", "bn.weight": "params.bn.scale",
          "bn.bias": "params.bn.bias", "bn.running_mean": "batch_stats.bn.mean",
          "bn.running_var": "batch_stats.bn.var", "bn.num_batches_tracked": None}
# ... and the NNX Variable (or plain array attribute) of the NNX twin.
_NNX_TWINS = {"fc.weight": "fc.kernel", "fc.bias": "fc.bias", "bn.weight": "bn.scale", "bn.bias": "bn.bias",
              "bn.running_mean": "bn.mean", "bn.running_var": "bn.var", "bn.num_batches_tracked": None}


def _where(records) -> dict[str, list]:
    """{path: [(device, aliases the original) per replica]}."""
    cells: dict[str, list] = {}
    for record in sorted(records, key=lambda r: r.replica):
        cells.setdefault(record.path, []).append((record.device, bool(record.aliases_original)))
    return cells


def _cell(*places) -> str:
    """'`vdev:1` · `cpu:1` · `cpu:1`' (torch · linen · NNX), plus ', the original' when every framework's replica
    holds the original."""
    shared = {aliases for _, aliases in places}
    if len(shared) != 1:
        raise AssertionError(f"torch and JAX alias differently: {places}")
    return " · ".join(f"`{device}`" for device, _ in places) + (", the original" if shared.pop() else "")


def _placement_rows(torch_map, jax_map, plain, nnx_cells) -> list[list[str]]:
    torch_cells, jax_cells = _where(torch_map), _where(jax_map)
    roles = {r.path: r.role for r in torch_map}
    if set(_TWINS) != set(torch_cells) or {t for t in _TWINS.values() if t} != set(jax_cells):
        raise AssertionError(f"unpaired tensors: torch {sorted(torch_cells)}, JAX {sorted(jax_cells)}")
    rows = []
    for path, twin in _TWINS.items():
        nnx_twin = _NNX_TWINS[path]
        places = (zip(torch_cells[path], jax_cells[twin], nnx_cells[nnx_twin]) if twin
                  else ((t,) for t in torch_cells[path]))
        rows.append([path.split(".")[0], roles[path], f"`{path}`", f"`{twin}`" if twin else "— (none, see below)",
                     f"`{nnx_twin}`" if nnx_twin else "—", *(_cell(*p) for p in places)])
    rows.append(["(the model)", "plain attribute", "`scale`", "— (not a variable)", "`scale` (carried by nnx.split)",
                 *(f"`{device}`" + (", the original" if same else "") + f" · NNX `{nnx_device}`"
                   + (", the original" if nnx_same else "")
                   for (device, same), (nnx_device, nnx_same) in zip(plain, nnx_cells["scale"]))])
    return rows


def _nnx_placement(devices) -> dict[str, list]:
    """{NNX path: [(device, is the original's array) per replica]} for the NNX twin, plain attribute included."""
    import jax
    import numpy as np
    from flax import nnx

    import dp_jax

    class Net(nnx.Module):
        def __init__(self):
            self.fc = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
            self.bn = nnx.BatchNorm(2, rngs=nnx.Rngs(0))
            self.scale = np.full((2,), 2.0, np.float32)  # a plain attribute: no Variable

    model = Net()
    nnx.update(model, jax.device_put(nnx.state(model, graph=True), devices[0]))

    def leaves(module):
        flat = nnx.to_flat_state(nnx.state(module, graph=True))
        return {".".join(map(str, path)): getattr(v, "get_value", lambda v=v: v)() for path, v in flat}

    original = leaves(model)
    cells: dict[str, list] = {}
    for replica in dp_jax.replicate(model, devices):
        for path, leaf in leaves(replica).items():
            device = next(iter(leaf.devices()))
            cells.setdefault(path, []).append((f"{device.platform}:{device.id}", leaf is original[path]))
    return cells


@generator("placement")
def placement_table() -> str:
    import flax.linen as nn
    import jax
    import numpy as np

    import dp_jax
    from comparisons import PlacementMap, placement_of

    child = subprocess.run([sys.executable, "-c", _TORCH_PLACEMENT_CHILD], capture_output=True, text=True,
                           check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    torch_side = json.loads(child.stdout)
    torch_map = PlacementMap.from_rows(torch_side["placement"])

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.BatchNorm(use_running_average=False, name="bn")(nn.Dense(2, name="fc")(x))

    devices = jax.devices()[:3]
    variables = jax.device_put(Net().init(jax.random.key(0), np.ones((4, 3), np.float32)), devices[0])
    replicas = dp_jax.replicate(variables, devices)
    jax_map = placement_of(replicas, devices=devices, original=variables, per_replica=True)
    header = ["layer", "role", "torch tensor", "JAX (linen) tensor", "NNX Variable", "replica 0", "replica 1",
              "replica 2"]
    return table(header, _placement_rows(torch_map, jax_map, torch_side["plain"], _nnx_placement(devices)))


# --- scatter.md, uneven_batches.md: chunk sizes ---------------------------------------------------


@generator("chunk-sizes")
def chunk_size_table() -> str:
    import jax
    import numpy as np
    import torch

    import dp_jax
    import dp_torch

    counts = (2, 3, 4, 8)
    rows = []
    for batch in (1, 3, 5, 6, 8, 9, 10, 13, 16):
        row = [str(batch)]
        for n in counts:
            torch_chunks = dp_torch.scatter(torch.zeros(batch, 1), ["cpu"] * n)
            jax_chunks = dp_jax.scatter(np.zeros((batch, 1), np.float32), jax.devices()[:n])
            if _sizes(torch_chunks) != _sizes(jax_chunks):
                raise AssertionError(f"batch {batch} on {n}: torch {_sizes(torch_chunks)}, jax {_sizes(jax_chunks)}")
            row.append(_sizes(torch_chunks))
        rows.append(row)
    return table(["batch", *(f"{n} devices" for n in counts)], rows)


# --- uneven_batches.md: what each strategy does with B rows on 4 devices --------------------------


@generator("uneven-strategies")
def uneven_strategy_table() -> str:
    import flax.linen as nn
    import jax
    import torch

    import dp_jax
    import dp_torch

    rows = []
    for batch in (5, 10, 13):
        chunks = dp_torch.scatter(torch.zeros(batch, 1), ["cpu"] * 4)
        rows.append([batch, "PyTorch `DataParallel`", len(chunks), _sizes(chunks), 0, "one thread per replica"])
        runs = [(strategy, "exact") for strategy in dp_jax.STRATEGIES] + [("pmap", "pad")]
        for strategy, uneven in runs:
            dp = dp_jax.DataParallel(nn.Dense(2), jax.devices()[:4], strategy=strategy, uneven=uneven)
            plan = dp.plan(batch)
            computed = [len(plan.rows(i)) + (plan.pad_rows if i == len(plan.devices) - 1 else 0)
                        for i in range(len(plan.devices))]
            label = f"dp_jax `{strategy}`" + (", `uneven='pad'`" if uneven == "pad" else "")
            rows.append([batch, label, len(plan.devices), ", ".join(map(str, computed)), plan.pad_rows,
                         _how(plan)])
    return table(["batch", "runs as", "replicas", "rows computed per replica", "padding rows", "how"], rows)


def _how(plan) -> str:
    """How the plan's replicas run, in a few words."""
    if plan.mapped_replicas == 0:
        return "one call per replica"
    if plan.short_replica is not None:
        return (f"one program over replicas 0..{plan.mapped_replicas - 1}; replica {plan.short_replica} "
                "computes its short chunk alone")
    return "one program over every replica" + ("; last chunk padded" if plan.pad_rows else "")

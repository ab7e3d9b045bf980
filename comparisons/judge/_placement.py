"""Placement verdicts: torch's PlacementMap against each JAX strategy's, through the pair's mapping.

torch and Flax split a layer into different tensors (one packed MHA in_proj_weight vs query/key/
value kernels, LSTM's two biases vs one per gate), so tensors are compared per mapped layer: each
layer's params/buffers/grads of each replica collapse into one record (its device, its aliasing).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from comparisons.placement import PlacementMap, PlacementRecord
from comparisons.verdicts import Check

_LAYERED_ROLES = ("param", "buffer", "grad")


def by_layer(placement: PlacementMap, prefixes: Sequence[str]) -> PlacementMap:
    """Collapse param/buffer/grad records into one record per (replica, role, layer prefix).

    A group spread over several devices gets logical_index -1 (so it never matches); aliasing is
    True only if every tensor of the group aliases. Records outside any prefix are kept as they are.
    """
    groups: dict[tuple, list[PlacementRecord]] = {}
    kept: list[PlacementRecord] = []
    for record in placement:
        prefix = layer_of(record.path, prefixes) if record.role in _LAYERED_ROLES else None
        if prefix is None:
            kept.append(record)
        else:
            groups.setdefault((record.replica, record.role, prefix), []).append(record)
    collapsed = [_collapse(prefix, records) for (_, _, prefix), records in groups.items()]
    return PlacementMap(tuple(collapsed + kept))


def layer_of(path: str, prefixes: Iterable[str]) -> str | None:
    """The longest prefix that is `path` or a dotted parent of it (None if none is)."""
    matches = [p for p in prefixes if path == p or path.startswith(p + ".") or p == ""]  # "": the root module
    return max(matches, key=len) if matches else None


def _collapse(prefix: str, records: list[PlacementRecord]) -> PlacementRecord:
    indices = {r.logical_index for r in records}
    aliases = {r.aliases_original for r in records}
    return dataclasses.replace(
        records[0], path=prefix, logical_index=indices.pop() if len(indices) == 1 else -1,
        shape=(sum(r.size for r in records),),
        aliases_original=None if None in aliases else all(aliases))


def layer_name_map(pair) -> tuple[list[str], list[str], dict[str, str | None]]:
    """torch layer prefixes, Flax layer prefixes (for each collection) and torch -> Flax names."""
    torch_prefixes, flax_prefixes, names = [], [], {}
    for layer in pair.mapping:
        flax = "".join(f".{part}" for part in layer.flax.split("/") if part)  # "" for the root module
        torch_prefixes.append(layer.torch)
        flax_prefixes += [f"params{flax}", f"batch_stats{flax}"]
        names[layer.torch] = f"params{flax}"
    return torch_prefixes, flax_prefixes, names


def compare_placement(pair, torch_map: PlacementMap, jax_map: PlacementMap, label: str,
                      padded_replica: int | None = None) -> Check:
    """torch vs JAX: every layer of every replica, every input chunk, the output, the grads.

    A mapped strategy pads one replica's input chunk (`padded_replica`); its size is not compared
    here (the `chunks` check and the notes cover padding), its device and aliasing are.
    """
    torch_prefixes, flax_prefixes, names = layer_name_map(pair)
    # Layer names are mapped for layered roles only: a layer called "out" is not the output "out".
    mine = PlacementMap(tuple(
        dataclasses.replace(r, path=names[r.path]) if r.role in _LAYERED_ROLES and r.path in names
        else r for r in by_layer(_without_declared(torch_map, pair.is_torch_only), torch_prefixes)))
    theirs = by_layer(_without_declared(jax_map, pair.is_flax_only), flax_prefixes)
    # A torch layer's buffers live in Flax's batch_stats collection, its params in params.
    theirs = PlacementMap(tuple(
        dataclasses.replace(r, path="params." + r.path.removeprefix("batch_stats."))
        if r.role == "buffer" else r for r in theirs))
    if _one_sided_gradients(pair):
        mine, theirs = _buffer_as_parameter(mine, theirs)
    differences = mine.diff(theirs, fields=("logical_index", "aliases_original"))
    differences += _unpadded_inputs(mine, padded_replica).diff(_unpadded_inputs(theirs, padded_replica),
                                                               fields=("size",))
    detail = "; ".join(map(str, differences[:4])) + (f" (+{len(differences) - 4} more)"
                                                     if len(differences) > 4 else "")
    padding = "" if padded_replica is None else f"; replica {padded_replica}'s input is padded (size not compared)"
    return Check("placement", f"torch vs {label}", not differences,
                 detail=detail or f"{len(mine)} layer/input/output records agree{padding}")


def _buffer_as_parameter(mine: PlacementMap, theirs: PlacementMap) -> tuple[PlacementMap, PlacementMap]:
    """The declared known difference: a torch buffer record where Flax has a parameter record reads as a
    parameter, and a Flax gradient record with no torch twin (torch gives a buffer none) is left out."""
    flax_params = {(r.replica, r.path) for r in theirs if r.role == "param"}
    torch_params = {(r.replica, r.path) for r in mine if r.role == "param"}
    mine = PlacementMap(tuple(
        dataclasses.replace(r, role="param") if r.role == "buffer" and (r.replica, r.path) in flax_params
        and (r.replica, r.path) not in torch_params else r for r in mine))
    torch_grads = {(r.replica, r.path) for r in mine if r.role == "grad"}
    theirs = PlacementMap(tuple(r for r in theirs if r.role != "grad" or (r.replica, r.path) in torch_grads))
    return mine, theirs


def _unpadded_inputs(placement: PlacementMap, padded_replica: int | None) -> PlacementMap:
    return PlacementMap(tuple(r for r in placement.filter(role="input") if r.replica != padded_replica))


def _without_declared(placement: PlacementMap, declared) -> PlacementMap:
    """Without the records a pair declares one-sided (torch's num_batches_tracked always is).

    Names are matched as declared: torch 'a.b.weight', Flax 'params.a.b.kernel', outputs 'logits.0'
    (an input or output record's path without its argument name: 'out.logits.0' -> 'logits.0').
    """
    def name(record: PlacementRecord) -> str:
        return record.path.partition(".")[2] if record.role in ("output", "input") else record.path
    return PlacementMap(tuple(r for r in placement if not declared(name(r))))


def check_aliasing(placement: PlacementMap, label: str) -> Check:
    """Replica 0's params/buffers share the original's memory; the other replicas' do not."""
    replicated = [r for r in placement if r.replica is not None and r.role in ("param", "buffer")]
    wrong = [r for r in replicated if r.aliases_original is not (r.replica == 0)]
    detail = "; ".join(f"replica {r.replica} {r.path}: aliases_original={r.aliases_original}"
                       for r in wrong[:4])
    return Check("aliasing", f"{label}: replica 0 shares, others copy", bool(replicated) and not wrong,
                 detail=detail or f"{len(replicated)} replica tensors checked")


def _one_sided_gradients(pair) -> bool:
    """Whether a declared known difference leaves Flax gradients without a torch twin."""
    return bool({"torch_buffer_flax_parameter", "frozen_in_torch"} & set(pair.known_differences))

"""Where every tensor of a data-parallel step lives, in one format for torch and JAX.

    _map.py    PlacementRecord, PlacementMap, placement_of: records, their diff, grid and JSON
    _walk.py   the walkers behind placement_of: each torch/JAX leaf, its device, its memory
    _paths.py  canonical_path: the one dotted spelling of a tensor's path in every report; path_matches

The bottom layer of comparisons beside `verdicts` and `convert`: it imports nothing else of the
package, and torch or JAX only when the value it inspects holds their types.
"""
from comparisons.placement._map import ROLES, PlacementDifference, PlacementMap, PlacementRecord, placement_of
from comparisons.placement._paths import canonical_path, path_matches
from comparisons.placement._walk import device_label, virtual_device_type

__all__ = ["ROLES", "PlacementDifference", "PlacementMap", "PlacementRecord", "canonical_path", "device_label",
           "path_matches", "placement_of", "virtual_device_type"]

"""Importing this module registers a pair (the `--import module` route)."""
import dataclasses

from tiny_pairs import TINY

from comparisons.models import register

register(dataclasses.replace(TINY, name="tiny_imported", description="registered on import"))

"""Generator for your_models.md: every Hugging Face family with a Flax twin, as the sweep recorded it.

The sweep (`python -m comparisons.hf.sweep --write docs/hf_families.json`) takes minutes, so the page
is generated from its record, which `tests/comparisons/hf/test_hf_sweep.py` (slow) reruns and checks.
"""
from __future__ import annotations

import json
from pathlib import Path

from sections import generator

RECORD = Path(__file__).resolve().parent / "hf_families.json"
HEADS = Path(__file__).resolve().parent / "hf_heads.json"  # `--heads --write docs/hf_heads.json`: the other heads


@generator("hf-families")
def hf_families() -> str:
    return _table(json.loads(RECORD.read_text()), "families")


@generator("hf-heads")
def hf_heads() -> str:
    return _table(json.loads(HEADS.read_text()), "heads")


def _table(record: dict, what: str) -> str:
    """A record's summary line and its table, a row per outcome."""
    outcomes = record["outcomes"]
    counts = {}
    for o in outcomes:
        counts[o["status"]] = counts.get(o["status"], 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    lines = [f"{len(outcomes)} {what} (transformers {record['transformers']}, JAX {record['jax']}, torch "
             f"{record['torch']}; strategies {', '.join(record['strategies'])}; batch {record['batch_size']} on "
             f"{record['devices']} devices): {summary}; {sum(o['seconds'] for o in outcomes):.0f} s in all on a "
             "shared 2-core CPU.", "",
             "| family | torch class | status | reason | seconds |", "|---|---|---|---|---:|"]
    for o in outcomes:
        reason = o["reason"].replace("|", "\\|")
        reason = reason if len(reason) <= 160 else reason[:157] + "..."
        lines.append(f"| {o['family']} | `{o['torch_class']}` | {o['status']} | {reason} | {o['seconds']:.0f} |")
    return "\n".join(lines)

"""What the doctor reports: one `Finding` per problem, in a `DoctorReport`.

Plain data with no torch or JAX import, so rendering and the CLI's exit code never load a framework.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

# Every kind the doctor knows, with the fix it suggests. Torch kinds first, then JAX's, then the
# one that says the run itself failed (a crash the other kinds do not explain).
FIXES = {
    "unreplicated-tensor": "register it: self.register_buffer(name, tensor, persistent=False) (or an "
                           "nn.Parameter); for a list or dict of tensors, one buffer per entry",
    "unreplicated-module": "hold sub-modules in nn.ModuleList / nn.ModuleDict (or assign them as "
                           "attributes), so replicate copies them and .to() and parameters() see them",
    "fixed-device-creation": "create it on the replica's device: device=x.device (x an input), or "
                             "torch.zeros_like(x) / x.new_zeros(...)",
    "cross-device-op": "move the odd operand onto the replica's device (.to(x.device)), or make it a "
                       "buffer or an input so DataParallel places it",
    "lost-inplace-update": "return the update as an output and apply it to the original module after "
                           "the forward, or compute it outside DataParallel",
    "state-on-self": "return the value from forward instead of storing it on self (a replica is "
                     "thrown away after the forward)",
    "shared-cache": "keep per-call values local to forward (or return them); a cache that must outlive "
                    "the call is keyed by device (self.cache[x.device]) or built in __init__ as buffers",
    "closed-over-array": "pass it in the variables (a collection such as 'constants') or as an "
                         "argument, so dp_jax.replicate puts a copy on every device",
    "side-effect-in-trace": "keep the function pure: return the value, or use jax.debug.print / "
                            "jax.debug.callback for effects that must happen per step",
    "nnx-default": "give the NNX layer torch's setting (the finding names the argument): nnx.BatchNorm, "
                   "nnx.LayerNorm, nnx.RMSNorm and nnx.Embed default to values torch does not use",
    "run-error": "fix the error above; the doctor's other findings are what it saw before it",
}
KINDS = tuple(FIXES)
# fmt -> function(report) -> str; filled by comparisons.doctor.render when the package is imported.
RENDERERS: dict = {}


@dataclass(frozen=True)
class Finding:
    """One problem: its kind, where it is, the replicas and devices involved, what happens, the fix.

    `where` is an attribute path (`encoder.layers[2].scale`) or the user's `file.py:line`;
    `source` is the user's line when `where` is a path and the line is known.
    """

    kind: str
    where: str
    replicas: tuple[int, ...]
    devices: tuple[str, ...]
    message: str
    fix: str
    source: str | None = None

    def to_dict(self) -> dict:
        record = asdict(self)
        record["replicas"], record["devices"] = list(self.replicas), list(self.devices)
        return record


@dataclass(frozen=True)
class DoctorReport:
    """The findings of one doctor run and what was run (`backend`: 'torch' or 'jax')."""

    target: str
    backend: str
    devices: tuple[str, ...]
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.findings

    def kinds(self) -> list[str]:
        return [f.kind for f in self.findings]

    def to_dict(self) -> dict:
        return {"findings": [f.to_dict() for f in self.findings], "target": self.target,
                "backend": self.backend, "devices": list(self.devices), "ok": self.ok,
                "notes": list(self.notes)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def render(self, fmt: str = "table") -> str:
        """The report as 'table', 'json' or 'html'."""
        if fmt not in RENDERERS:
            raise ValueError(f"render: fmt={fmt!r}; choose one of {', '.join(RENDERERS) or 'table, json, html'}")
        return RENDERERS[fmt](self)


def replica_list(replicas) -> str:
    """`[1, 2, 3]` -> 'replicas 1, 2, 3'; `[0]` -> 'replica 0'."""
    replicas = sorted(replicas)
    word = "replica" if len(replicas) == 1 else "replicas"
    return f"{word} {', '.join(map(str, replicas))}"

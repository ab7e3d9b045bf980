"""From what the torch probe saw to Findings: one per (kind, where), in words a user can act on."""
from __future__ import annotations

from comparisons.doctor.findings import FIXES, KINDS, Finding, replica_list
from comparisons.doctor.torch_recorder import Evidence, Recorder


def findings_of(recorder: Recorder) -> list[Finding]:
    """The recorder's evidence as Findings, sorted by kind then place; the first run error last."""
    findings = []
    for evidence in recorder.evidence.values():
        message = _MESSAGES[evidence.kind](evidence)
        if message is not None:
            message += _renamed_words(recorder, evidence)
            findings.append(Finding(evidence.kind, evidence.where, tuple(sorted(evidence.replicas)),
                                    tuple(sorted(evidence.devices)), message, FIXES[evidence.kind],
                                    _source(evidence)))
    findings.sort(key=lambda f: (KINDS.index(f.kind), f.where))
    if recorder.errors:
        findings.append(_run_error(*recorder.errors[0]))
    return findings


def _renamed_words(recorder: Recorder, evidence: Evidence) -> str:
    """Where a device in the finding is the virtual stand-in for a `cuda:k` the model names."""
    pairs = [f"{device} is the model's {recorder.renamed[device][0]}" for device in sorted(evidence.devices)
             if device in recorder.renamed]
    return f" ({'; '.join(pairs)}, run on virtual devices)" if pairs else ""


def _source(evidence: Evidence) -> str | None:
    if evidence.kind in ("fixed-device-creation", "cross-device-op"):
        return evidence.where
    if evidence.kind == "shared-cache":
        return evidence.detail.get("filled_at") or (evidence.uses[0] if evidence.uses else None)
    return evidence.uses[0] if evidence.uses and ":" in evidence.uses[0] else None


def _used(evidence: Evidence) -> str:
    return f"; used at {', '.join(evidence.uses)}" if evidence.uses else ""


def _at(evidence: Evidence) -> str:
    return f" (at {evidence.uses[0]})" if evidence.uses else ""


def _device_words(evidence: Evidence) -> str:
    return ", ".join(sorted(evidence.devices)) or "another device"


def _unreplicated_tensor(evidence: Evidence) -> str:
    return (f"a plain tensor attribute, neither parameter nor buffer: replicate shares it by reference and "
            f".to() skips it, so {replica_list(evidence.replicas)} read it on {_device_words(evidence)}, not "
            f"on their own device{_used(evidence)}")


def _unreplicated_module(evidence: Evidence) -> str:
    name = type(evidence.detail.get("obj")).__name__
    return (f"a {name} held outside _modules (a plain list, dict or attribute): replicate does not copy it, "
            f".to() does not move it and parameters() does not list it, so {replica_list(evidence.replicas)} "
            f"call the one original, whose tensors are on {_device_words(evidence)}{_used(evidence)}")


def _fixed_device_creation(evidence: Evidence) -> str:
    made = evidence.ops[0] if evidence.ops else "a tensor"
    return (f"forward creates a tensor on a fixed device ({made}), not on the replica's: "
            f"{replica_list(evidence.replicas)} mix it with their own tensors{_used(evidence)}")


def _cross_device_op(evidence: Evidence) -> str:
    ops = ", ".join(evidence.ops)
    return (f"{ops} on {replica_list(evidence.replicas)} mixes the replica's device with "
            f"{_device_words(evidence)}: that operand is neither an input, a parameter or buffer, nor made "
            f"from them on the replica's device (a global tensor, or one kept on another object)")


def _lost_inplace_update(evidence: Evidence) -> str | None:
    writers = evidence.detail.get("writers", set())
    lost = sorted(w for w in writers if w != 0)
    if not lost:
        return None  # replica 0 alone writes the original's storage: kept, as BatchNorm's statistics are
    op = evidence.ops[0] if evidence.ops else "an in-place op"
    kept = (" Replica 0's write is kept (replica 0 shares the original's storage, as for BatchNorm's "
            "running statistics), so the original sees chunk 0's update only." if 0 in writers else "")
    at = f" at {evidence.uses[0]}" if evidence.uses else ""
    return (f"{replica_list(lost)} write this parameter/buffer in place ({op}{at}); their "
            f"copies are discarded after the forward, so these updates are lost.{kept}")


def _state_on_self(evidence: Evidence) -> str:
    owner = evidence.detail.get("owner")
    name = evidence.where.rsplit(".", 1)[-1]
    return (f"{replica_list(evidence.replicas)} assign self.{name} during forward"
            f"{' in ' + type(owner).__name__ if owner is not None else ''}{_at(evidence)}; each replica is a "
            f"throwaway shallow copy, so the original module never sees the value (and the next forward "
            f"starts without it)")


def _run_error(error: BaseException, line: str | None, replica: int | None) -> Finding:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    where = line or "DataParallel"
    on = f" in replica {replica}" if replica is not None else ""
    message = (f"the run stopped{on} with {type(error).__name__}: {text}; what the doctor could not repair "
               f"(a shape that depends on the batch, an error of the model itself)")
    replicas = (replica,) if replica is not None else ()
    return Finding("run-error", where, replicas, (), message, FIXES["run-error"], line)


def _shared_cache(evidence: Evidence) -> str:
    container = type(evidence.detail.get("container")).__name__
    read = (f"; replicas read entries another replica stored, on its device, at {', '.join(evidence.uses)}"
            if evidence.uses else "")
    return (f"a {container} on the module, filled during forward{_at_line(evidence)}: replicate shares it by "
            f"reference, so {replica_list(evidence.replicas)} fill the one original concurrently, in no fixed "
            f"order, and a tensor one replica stores is on that replica's device when another reads it (on "
            f"GPUs: 'Expected all tensors to be on the same device' in replica 1){read}")


def _at_line(evidence: Evidence) -> str:
    line = evidence.detail.get("filled_at")
    return f" (at {line})" if line else ""


_MESSAGES = {
    "unreplicated-tensor": _unreplicated_tensor,
    "unreplicated-module": _unreplicated_module,
    "fixed-device-creation": _fixed_device_creation,
    "cross-device-op": _cross_device_op,
    "lost-inplace-update": _lost_inplace_update,
    "state-on-self": _state_on_self,
    "shared-cache": _shared_cache,
}

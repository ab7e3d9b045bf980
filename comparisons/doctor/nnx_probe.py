"""`doctor_jax(model, *inputs)` for a bound Flax NNX module: what DataParallel will not put on each device.

Run as dp_jax runs an NNX module: `nnx.split` into GraphDef and state, then a functional call that merges a
copy and calls it. One trace of that call (`jax.make_jaxpr`, no compile) shows
- `closed-over-array`: a committed array the call reads that is not in the state: a global or closure of the
  module's methods (by name), or an array inside a static attribute (by its path, `blocks[0].table`);
- `side-effect-in-trace`: a global the call changes, a print();
- `state-on-self`: an attribute the call rebinds or fills that is not a Variable (`self.calls += 1`): it lives
  in the GraphDef, so each replica changes its own copy and DataParallel writes back Variables only;
- `nnx-default`: a layer whose setting is not torch's, at its path (`comparisons.judge.nnx_traps`).
Then dp_jax.DataParallel(copy of the model) runs once (twice, counting traces, when there are side effects);
its failure is a `run-error`. The user's module is never changed: the runs use `nnx.clone` copies.
Cost: one trace, then one or two DataParallel calls (the first compiles per device).
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from comparisons.doctor.findings import DoctorReport, Finding
from comparisons.doctor.jax_probe import (
    Holder,
    Runs,
    closed_over,
    device_list_of,
    device_name,
    effects_and_run,
    error_finding,
    fingerprint,
    reached_state,
    recording_prints,
    run_guarded,
)
from comparisons.doctor.jax_reach import reachable_from_classes
from comparisons.doctor.nnx_paths import NNX_FIXES, joined, static_arrays, trap_findings
from comparisons.doctor.source import assignment_line, fill_line

_GRAPH_MODE = True  # as dp_jax.nnx
MODULE_HOLDER = Holder("read by the NNX module's call", "the module's state (nnx.split carries Variables and "
                       "array attributes)", NNX_FIXES["closed-over-array"])


def doctor_nnx(model: Any, *inputs: Any, devices: int | Sequence[Any] = 4, kwargs: dict[str, Any] | None = None,
               target: str | None = None) -> DoctorReport:
    """Report what dp_jax.DataParallel(model) would not put on each device, and NNX settings that are not torch's.

    Args:
        model: a bound `nnx.Module` (constructed, holding its weights).
        *inputs: the whole batch, as `model(*inputs)` takes it (dp_jax.scatter splits it).
        devices: a count (the first N of `jax.devices()`) or a list of devices; at least 2.
        kwargs: keyword inputs of the call.
        target: a name for the report (default: the module's class).
    Returns:
        A DoctorReport with backend 'jax'. The module's Python runs once per trace: one here and one per device
        in the first DataParallel call, so a side effect happens again. `model` itself is not changed.
    """
    import jax
    from flax import nnx

    _refuse_variables(model, inputs)
    device_list, kwargs = device_list_of(devices), kwargs or {}
    modules = dict(nnx.iter_modules(model, graph=_GRAPH_MODE))
    reach = reachable_from_classes([type(module) for module in modules.values()])
    reached, functions = list(reach.values.values()), reach.functions
    before = {item.name: reached_state(item) for item in reached}
    name, device_names = target or type(model).__name__, tuple(device_name(d) for d in device_list)
    graphdef, state = nnx.split(model, graph=_GRAPH_MODE)
    rebound: list[Finding] = []
    with recording_prints() as printed:
        try:
            closed = jax.make_jaxpr(functools.partial(_merged_call, graphdef, kwargs, rebound))(state, *inputs)
        except Exception as error:  # noqa: BLE001 - the user's module failing to trace is a finding
            return DoctorReport(name, "jax", device_names, (error_finding(error, f"tracing {name}'s call"),))
    arrays = static_arrays(model)
    static = _static_array_findings(arrays, device_list)
    consts = [const for const in closed.consts if id(const) not in arrays]  # named by their path above
    findings = static + closed_over(consts, reached, functions, device_list, MODULE_HOLDER)
    findings += rebound + trap_findings(model)
    runs = _module_runs(model, inputs, kwargs, device_list)
    if static:
        runs = runs._replace(refused="dp_jax.DataParallel refuses a module holding a jax.Array in a static "
                                     "attribute, so the doctor did not call it; fix those first")
    more, notes = effects_and_run(reached, before, functions, printed, runs)
    return DoctorReport(name, "jax", device_names, tuple(findings + more), notes)


def _refuse_variables(model: Any, inputs: tuple) -> None:
    """`doctor_jax(model, variables, x)`, the function form, given a module that holds its own state."""
    from flax import nnx

    first = inputs[0] if inputs else None
    if isinstance(first, nnx.State) or (isinstance(first, dict) and (not first or "params" in first)):
        from comparisons.errors import UsageTypeError

        raise UsageTypeError(f"doctor_jax: the NNX module {type(model).__name__} holds its own state, and its first "
                             f"input is {type(first).__name__} variables; pass its inputs alone: "
                             "doctor_jax(model, *inputs)")


def _merged_call(graphdef: Any, kwargs: dict, rebound: list[Finding], state: Any, *inputs: Any) -> Any:
    """The replica's call, as dp_jax makes it: a module merged from (graphdef, state), called; records the
    attributes outside the state that the call changed (lost under DataParallel)."""
    from flax import nnx

    model = nnx.merge(graphdef, state)
    before = _plain_attributes(model)
    output = model(*inputs, **kwargs)
    after = _plain_attributes(model)
    modules = dict(nnx.iter_modules(model, graph=_GRAPH_MODE))
    rebound += [_kept_on_self(modules[path], path, attribute, before.get((path, attribute)))
                for (path, attribute), mark in after.items() if before.get((path, attribute)) != mark]
    return output


def _plain_attributes(model: Any) -> dict[tuple, object]:
    """{(module path, attribute): fingerprint} of every attribute that is not state (a Variable, an array, a
    sub-module): what nnx.split keeps in the GraphDef."""
    import jax
    from flax import nnx

    return {(path, name): fingerprint(value)
            for path, module in nnx.iter_modules(model, graph=_GRAPH_MODE)
            for name, value in vars(module).items()
            if not name.startswith("_") and not isinstance(value, (nnx.Variable, nnx.Module, jax.Array))}


def _kept_on_self(module: Any, path: tuple, attribute: str, before: object) -> Finding:
    where = joined("", (*path, attribute))
    value = getattr(module, attribute, None)
    rebound = before is None or before[0] != id(value)
    verb = "rebinds" if rebound else "changes"
    line = (assignment_line if rebound else fill_line)(type(module), attribute)
    message = (f"the call {verb} {where} ({type(value).__name__}), which is not an nnx.Variable: nnx.split keeps "
               "it in the GraphDef, each replica changes its own copy, and DataParallel writes back Variables "
               "only, so the change is lost (a plain call keeps it)")
    return Finding("state-on-self", where, (), (), message, NNX_FIXES["state-on-self"], line)


def _static_array_findings(arrays: dict[int, tuple[Any, tuple[str, str | None]]], devices: list) -> list[Finding]:
    """A jax.Array inside a static attribute, read or not: nnx.split keeps it in the GraphDef, so no replica gets
    a copy, and dp_jax.DataParallel refuses the module (dp_jax.nnx.check_static_arrays)."""
    findings = []
    for array, (where, line) in arrays.values():
        on = tuple(sorted(array.devices(), key=lambda d: d.id))
        replicas = tuple(i for i, d in enumerate(devices) if d not in on)
        placed = f"committed to {device_name(on[0])}" if array.committed and len(on) == 1 else "a jax.Array"
        message = (f"{placed} inside a static attribute (not an nnx.Variable, not an array attribute): nnx.split "
                   "keeps it in the GraphDef, not the state, so DataParallel copies it to no replica; a traced call "
                   "bakes it in as a constant, and dp_jax.DataParallel refuses the module")
        findings.append(Finding("closed-over-array", where, replicas, tuple(map(device_name, on)), message,
                                NNX_FIXES["closed-over-array"], line))
    return findings


def _module_runs(model: Any, inputs: tuple, kwargs: dict, devices: list) -> Runs:
    """dp_jax.DataParallel calls of copies of `model` (the caller's module keeps its state): plain, and through
    a wrapper that counts traces (one wrapper, so its second call finds the compiled programs)."""
    from flax import nnx

    import dp_jax

    counts = [0]
    counting = _counting(nnx.clone(model), counts)
    return Runs(lambda: run_guarded(lambda: dp_jax.DataParallel(nnx.clone(model), device_ids=devices)(
                    *inputs, **kwargs)),
                lambda: run_guarded(lambda: dp_jax.DataParallel(counting, device_ids=devices)(*inputs, **kwargs)),
                counts, traced="the module's call")


def _counting(model: Any, counts: list[int]) -> Any:
    """An NNX module calling `model`, adding 1 to counts[0] each time its Python runs (once per trace)."""
    from flax import nnx

    class Counting(nnx.Module):
        def __init__(self, inner: Any):
            self.inner = inner

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            counts[0] += 1
            return self.inner(*args, **kwargs)

    return Counting(model)

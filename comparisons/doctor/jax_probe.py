"""`doctor_jax`: what an apply function closes over and does in Python, seen by tracing it once.

Two kinds exist in JAX, where torch has six: a JAX function has no module tree to copy, so only the
counterparts of "shared, not replicated" (`closed-over-array`) and "state outside the function's
outputs" (`side-effect-in-trace`) remain. A third is about porting: `nnx-default`, an NNX layer the
function reaches whose setting is not torch's (`comparisons.judge.nnx_traps`), at its path.
A bound NNX module goes to `nnx_probe.doctor_nnx` (the public `doctor_jax` dispatches); its
helpers (`closed_over`, `effects_and_run`, ...) are shared from here.
Cost: one trace (`jax.make_jaxpr`, no compile), then
two dp_jax.DataParallel calls (the first compiles per device) to count how often Python runs.
"""
from __future__ import annotations

import builtins
import contextlib
import inspect
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from comparisons.doctor.findings import FIXES, DoctorReport, Finding, replica_list
from comparisons.doctor.jax_reach import Reached, reachable
from comparisons.doctor.source import error_line, is_user_file, short_path, user_line


def doctor_jax(apply_fn: Any, variables: Any, *inputs: Any, devices: int | Sequence[Any] = 4,
               kwargs: dict[str, Any] | None = None, target: str | None = None) -> DoctorReport:
    """Report arrays `apply_fn` closes over that are committed to one device, and trace-time effects.

    Args:
        apply_fn: `apply_fn(variables, *inputs, **kwargs)`, e.g. a Flax module's `apply`.
        variables: the variables pytree (what dp_jax.replicate copies to every device).
        *inputs: the whole batch (dp_jax.scatter splits it).
        devices: a count (the first N of `jax.devices()`) or a list of devices; at least 2.
        kwargs: keyword inputs.
        target: a name for the report.
    Returns:
        A DoctorReport with backend 'jax'. Runs the function's Python once per trace: one trace here
        and one per device in the first DataParallel call, so its side effects happen again.
    """
    import jax

    _refuse_nnx(apply_fn)
    device_list = device_list_of(devices)
    kwargs = kwargs or {}
    reach = reachable(apply_fn)
    reached, functions = list(reach.values.values()), reach.functions
    before = {item.name: reached_state(item) for item in reached}
    name = target or _function_name(apply_fn)
    with recording_prints() as printed:
        try:
            closed = jax.make_jaxpr(lambda v, *a: apply_fn(v, *a, **kwargs))(variables, *inputs)
        except Exception as error:  # noqa: BLE001 - the user's function failing to trace is a finding
            return DoctorReport(name, "jax", tuple(device_name(d) for d in device_list),
                                (error_finding(error, "tracing the apply function"),))
    findings = closed_over(closed.consts, reached, functions, device_list) + _nnx_defaults(apply_fn, reached)
    counts = [0]
    counted = _counted(apply_fn, counts)
    runs = Runs(lambda: _run_data_parallel(apply_fn, variables, inputs, kwargs, device_list),
                lambda: _run_data_parallel(counted, variables, inputs, kwargs, device_list), counts)
    more, notes = effects_and_run(reached, before, functions, printed, runs)
    return DoctorReport(name, "jax", tuple(device_name(d) for d in device_list), tuple(findings + more), notes)


class Runs(NamedTuple):
    """One dp_jax.DataParallel call of the user's model: as given, and counting how often its Python runs."""

    plain: Callable[[], Finding | None]
    counting: Callable[[], Finding | None]  # the same call, adding 1 to counts[0] per trace
    counts: list[int]
    refused: str | None = None  # why DataParallel was not called (a refusal already reported as a finding)
    traced: str = "the apply function"  # what the trace ran, for the findings' words


def effects_and_run(reached: list[Reached], before: dict, functions: list, printed: list[str],
                    runs: Runs) -> tuple[list[Finding], tuple[str, ...]]:
    """Side effects seen while tracing (reached values changed, prints), counted in two DataParallel calls; else
    one plain DataParallel call. Returns the findings (a failed call is a run-error) and the report's notes."""
    changed = [item for item in reached if reached_state(item) != before[item.name]]
    if runs.refused is not None:
        findings = [_side_effect(item, functions, [], runs.traced) for item in changed]
        return findings + [_print_effect(line, []) for line in dict.fromkeys(printed)], (runs.refused,)
    if not (changed or printed):
        error = runs.plain()
        return ([error] if error is not None else []), ()
    traces, error = _count_traces(runs)
    findings = [_side_effect(item, functions, traces, runs.traced) for item in changed]
    findings += [_print_effect(line, traces) for line in dict.fromkeys(printed)]
    findings += [error] if error is not None else []
    return findings, ("to count traces the doctor called dp_jax.DataParallel twice, so the side effects ran again",)


def _refuse_nnx(apply_fn: Any) -> None:
    """An NNX class, GraphDef or State is neither a function nor a bound module: refused in one line."""
    from comparisons.errors import UsageTypeError
    from comparisons.models.jax_nnx import is_nnx_module, nnx_kind

    what = f"an NNX Module ({type(apply_fn).__name__})" if is_nnx_module(apply_fn) else nnx_kind(apply_fn)
    if what is not None:
        raise UsageTypeError(f"doctor_jax: got {what}; the doctor takes a bound NNX module and its inputs, "
                             "comparisons.doctor_jax(model, *inputs), or a function, doctor_jax(apply_fn, "
                             "variables, *inputs)")


def _function_name(fn: Any) -> str:
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, type):
        return f"{type(owner).__name__}.{fn.__name__}"
    return getattr(fn, "__qualname__", type(fn).__name__)


def device_list_of(devices: int | Sequence[Any]) -> list:
    import jax

    if isinstance(devices, int):
        available = jax.devices()
        if devices < 2 or len(available) < devices:
            raise ValueError(
                f"doctor_jax: devices={devices}, and JAX has {len(available)} devices; pass 2 or more, and on "
                f"a CPU set XLA_FLAGS=--xla_force_host_platform_device_count={max(devices, 2)} before JAX starts")
        return available[:devices]
    device_list = list(devices)
    if len(set(device_list)) < 2:
        raise ValueError(f"doctor_jax: devices={device_list}; pass at least 2 distinct jax devices")
    return device_list


def device_name(device: Any) -> str:
    return f"{device.platform}:{device.id}"


class Holder(NamedTuple):
    """How a closed-over array reaches the program, and its fix, for a function or an NNX module."""

    how: str
    state: str
    fix: str


FUNCTION_HOLDER = Holder("closed over by the apply function", "the variables", FIXES["closed-over-array"])


def closed_over(consts: list, reached: list[Reached], functions: list, devices: list,
                 holder: Holder = FUNCTION_HOLDER) -> list[Finding]:
    """A constant of the trace that is a committed array on one device (named when the walk saw it)."""
    named = {id(item.value): item for item in reached}
    findings = []
    for const in consts:
        on = _single_committed_device(const)
        if on is None:
            continue
        item = named.get(id(const))
        where = item.name if item else f"an array {const.dtype}{list(const.shape)}"
        source = _first_mention(item.functions or functions, item.name) if item else None
        replicas = tuple(i for i, d in enumerate(devices) if d != on)
        message = (f"{holder.how}, committed to {device_name(on)}: it is not in {holder.state}, so "
                   f"dp_jax.replicate never copies it; jit bakes it into every replica's "
                   f"program as a constant (copied per compile, never trained, stale if rebound), and "
                   f"op by op {replica_list(replicas)} fail with 'Received incompatible devices'")
        findings.append(Finding("closed-over-array", where, replicas, (device_name(on),), message, holder.fix,
                                source))
    return findings


def _nnx_defaults(apply_fn: Any, reached: list[Reached]) -> list[Finding]:
    """NNX layers the function calls whose settings are not torch's (comparisons.judge.nnx_traps), by path."""
    from comparisons.doctor.nnx_paths import trap_findings
    from dp_jax.nnx import is_nnx_module

    owner = getattr(apply_fn, "__self__", None)
    roots = {"self": owner} if is_nnx_module(owner) else {}
    roots.update({item.name: item.value for item in reached if is_nnx_module(item.value)})
    findings, seen = [], set()
    for name, model in roots.items():
        if id(model) not in seen:
            seen.add(id(model))
            findings += trap_findings(model, name)
    return findings


def _single_committed_device(value: Any):
    import jax

    if not isinstance(value, jax.Array) or isinstance(value, jax.core.Tracer) or not value.committed:
        return None
    devices = value.devices()
    return next(iter(devices)) if len(devices) == 1 else None


def reached_state(item: Reached) -> object:
    """A cheap fingerprint of what a side effect changes: rebinding, container contents, attributes."""
    return fingerprint(item.global_of.get(item.name.split(".")[-1]) if item.global_of is not None else item.value)


def fingerprint(value: Any) -> object:
    """Identity and contents (list items, dict entries, set members, attributes) of `value`, by id."""
    if isinstance(value, (list, tuple)):
        contents = tuple(map(id, value))
    elif isinstance(value, dict):
        contents = tuple((k, id(v)) for k, v in value.items())
    elif isinstance(value, set):
        contents = frozenset(map(id, value))
    elif hasattr(value, "__dict__") and not callable(value):
        contents = tuple((k, id(v)) for k, v in vars(value).items())
    else:
        contents = None
    return id(value), contents


@contextlib.contextmanager
def recording_prints():
    """print() during the trace: record the user's line, then print as usual."""
    lines: list[str] = []
    original = builtins.print

    def recording_print(*args, **kwargs):
        lines.append(user_line(sys._getframe(1)) or "print")
        return original(*args, **kwargs)

    builtins.print = recording_print
    try:
        yield lines
    finally:
        builtins.print = original


def _counted(apply_fn: Callable, counts: list[int]) -> Callable:
    def counted(v, *a, **k):
        counts[0] += 1
        return apply_fn(v, *a, **k)

    return counted


def _count_traces(runs: Runs) -> tuple[list[int], Finding | None]:
    """How often the model's Python runs in a first and a second dp_jax.DataParallel call."""
    traces = []
    for _ in range(2):
        start = runs.counts[0]
        error = runs.counting()
        traces.append(runs.counts[0] - start)
        if error is not None:
            return traces, error
    return traces, None


def _run_data_parallel(apply_fn, variables, inputs, kwargs, devices) -> Finding | None:
    import dp_jax

    return run_guarded(lambda: dp_jax.data_parallel(apply_fn, variables, tuple(inputs), device_ids=devices,
                                                    module_kwargs=kwargs or None))


def run_guarded(call: Callable[[], Any]) -> Finding | None:
    """Run one dp_jax.DataParallel call; its failure is a run-error finding at the user's line."""
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the user's model failing is a finding
        return error_finding(error, "dp_jax.DataParallel")
    return None


def error_finding(error: BaseException, during: str) -> Finding:
    line = error_line(error)
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return Finding("run-error", line or during, (), (), f"{during} failed with {type(error).__name__}: {text}",
                   FIXES["run-error"], line)


def _traces_words(traces: list[int]) -> str:
    if not traces:
        return "JAX runs Python once per trace, not once per step"
    first, second = traces[0], traces[1] if len(traces) > 1 else 0
    return (f"JAX runs Python once per trace, not per step: in one dp_jax.DataParallel call it ran {first} "
            f"time(s) (a trace per device), in the next {second} (cached)")


def _side_effect(item: Reached, functions: list, traces: list[int], traced: str) -> Finding:
    source = _first_mention(item.functions or tuple(functions), item.name)
    what = "rebinds the global" if _rebound(item) else "changes"
    stored = " (and what it stores are tracers, not values)" if _holds_tracer(item) else ""
    message = (f"tracing {traced} {what} {item.name} ({type(item.value).__name__}); "
               f"{_traces_words(traces)}, so it does not happen once per replica or per step{stored}")
    return Finding("side-effect-in-trace", item.name, (), (), message, FIXES["side-effect-in-trace"], source)


def _holds_tracer(item: Reached) -> bool:
    import jax

    value = item.global_of.get(item.name) if item.global_of is not None else item.value
    values = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple, set)) else [value]
    return any(isinstance(v, jax.core.Tracer) for v in values)


def _rebound(item: Reached) -> bool:
    return item.global_of is not None and item.global_of.get(item.name) is not item.value


def _print_effect(line: str, traces: list[int]) -> Finding:
    message = f"print() during tracing prints tracers, not values; {_traces_words(traces)}"
    return Finding("side-effect-in-trace", line, (), (), message, FIXES["side-effect-in-trace"], line)


def _first_mention(functions, name: str) -> str | None:
    """'file.py:line' of the first line in these functions' source naming `name` (else its first part)."""
    for candidate in dict.fromkeys((name, name.split(".")[0])):
        if candidate == "self":
            continue
        line = _first_line_matching(functions, re.compile(rf"(?<![\w.]){re.escape(candidate)}\b"))
        if line is not None:
            return line
    return None


def _first_line_matching(functions, pattern: re.Pattern) -> str | None:
    for fn in reversed(tuple(functions)):
        try:
            lines, first = inspect.getsourcelines(fn)
            filename = inspect.getsourcefile(fn)
        except (OSError, TypeError):
            continue
        if not filename or not is_user_file(filename):
            continue
        for offset, text in enumerate(lines[1:], 1):
            if pattern.search(text.split("#")[0]) and not text.strip().startswith("global "):
                return f"{short_path(filename)}:{first + offset}"
    return None

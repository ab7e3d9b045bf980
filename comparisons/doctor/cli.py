"""`python -m comparisons doctor TARGET`: load the user's model, make inputs, run a doctor, print.

TARGET is `package.module:name` or `path/to/file.py:name`: a bound Flax NNX module, or a factory returning
a torch `nn.Module` (torch doctor), an NNX module, a linen module or `(linen_module, variables)` (JAX doctor). Exit
status: 0 nothing found, 1 findings, 2 bad usage (message on stderr).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any

from comparisons.doctor.render import FORMATS
from comparisons.errors import UsageError

DESCRIPTION = ("Find what DataParallel will not put on each device in your own model: one DataParallel "
               "forward on N distinct devices (virtual ones on a CPU). Exit 0 clean, 1 findings, 2 bad usage.")


BATCH_MARK = "B"  # `--input-shape B,3,32,32`: the batch's place, in doctor and run --torch alike


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="package.module:name or path/to/file.py:name: a Flax NNX module, or a "
                                       "factory returning a torch nn.Module, an NNX module, a linen module, or "
                                       "(linen_module, variables)")
    parser.add_argument("--input-shape", action="append", metavar="SHAPE", default=[],
                        help="an input's shape, batch first, e.g. 8,3, or B,3 for --batch rows (the form run "
                             "--torch takes too); repeatable for several inputs")
    parser.add_argument("--dtype", default="float32",
                        help="dtype of --input-shape inputs (default float32; integer dtypes draw 0..9)")
    parser.add_argument("--inputs", metavar="MODULE:FUNCTION",
                        help="make_inputs(batch_size) returning the args, or (args, kwargs)")
    parser.add_argument("--batch", type=int, help="batch size passed to --inputs (default 2 x --devices)")
    parser.add_argument("--devices", type=int, default=4, help="number of devices (default 4)")
    parser.add_argument("--backward", action="store_true",
                        help="also run backward on the sum of the floating outputs (torch)")
    parser.add_argument("--format", default="table", choices=FORMATS, help="output format (default table)")
    parser.add_argument("--out", help="write the report here instead of stdout")
    _take_negative_looking_shapes(parser)


def _take_negative_looking_shapes(parser: argparse.ArgumentParser) -> None:
    """Let `--input-shape -1,3` reach the shape check, which names the fix, instead of argparse's
    "expected one argument".

    argparse before Python 3.13 takes only `-1` or `-0.5` for a negative number, and reads `-1,3` as an
    unknown option. This widens that private pattern on this parser alone (the doctor has no option
    that looks like a number); where the attribute is gone (3.13 changed it), argparse needs no help.
    """
    if isinstance(getattr(parser, "_negative_number_matcher", None), re.Pattern):
        parser._negative_number_matcher = re.compile(r"^-\d[\d,\s]*$|^-\d*\.\d+$")


def run(args: argparse.Namespace) -> int:
    """The doctor subcommand: 0 clean, 1 findings, 2 bad usage."""
    try:
        if args.out is not None:
            check_writable(args.out)
        _set_jax_cpu_devices(max(8, args.devices))
        report = _diagnose(args)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    text = report.render(args.format)
    if args.out is not None:
        try:
            Path(args.out).write_text(text + "\n", encoding="utf-8")
        except OSError as error:
            print(f"error: cannot write {args.out}: {error}", file=sys.stderr)
            return 2
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text + "\n")
    return 0 if report.ok else 1


def check_writable(out: str, flag: str = "--out", example: str = "doctor.html") -> None:
    """Refuse `flag` before any work when the report could not be written there: an empty path, a folder (or a
    path ending in a slash), a missing folder, a pipe or a device (a FIFO with no reader would block forever),
    or a folder this user cannot write in. A symlink counts as its target."""
    import stat
    import tempfile

    if not out:
        raise UsageError(f"{flag} '': an empty path; pass a file path, e.g. {flag} {example}")
    target = Path(out).resolve() if Path(out).is_symlink() else Path(out)
    if target.is_dir() or out.endswith(("/", os.sep)):
        state = "is a folder" if target.is_dir() else "names a folder (it ends in a slash)"
        raise UsageError(f"{flag} {out}: {state}; pass a file path, e.g. {flag} {target / example}")
    if target.exists() and not stat.S_ISREG(target.stat().st_mode):
        raise UsageError(f"{flag} {out}: is not a regular file (a pipe or a device, which could block or swallow "
                         "the report); pass a file path")
    folder = target.parent
    if not folder.is_dir():
        raise UsageError(f"{flag} {out}: folder {folder} does not exist; create it or pass a path in an existing one")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".dp-compare-probe-"):
            pass
    except OSError as error:
        raise UsageError(f"{flag} {out}: cannot write in {folder} ({error.strerror}); pass a writable path") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m comparisons doctor", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


def _diagnose(args: argparse.Namespace):
    if args.devices < 2:
        raise UsageError(f"--devices {args.devices}: DataParallel problems need at least 2 devices; pass 2 or more")
    if bool(args.input_shape) == bool(args.inputs):
        raise UsageError("pass the inputs as --input-shape SHAPE (repeatable) or as --inputs MODULE:FUNCTION, "
                         "exactly one of the two")
    if args.batch is not None and args.batch < 1:
        raise UsageError(f"--batch {args.batch}: pass a positive number of rows, e.g. --batch {2 * args.devices}")
    backend, model, variables = _classify(_made(load(args.target, "TARGET"), args.target), args.target)
    batch = args.batch if args.batch is not None else 2 * args.devices
    inputs, kwargs = (_random_inputs(args.input_shape, args.dtype, backend, batch) if args.input_shape
                      else _user_inputs(args.inputs, batch))
    name = args.target
    try:
        if backend == "torch":
            from comparisons.doctor.torch_run import doctor_torch

            return doctor_torch(model, *inputs, devices=args.devices, backward=args.backward, kwargs=kwargs,
                                target=name)
        report = _doctor_flax(backend, model, variables, inputs, kwargs, args)
        if args.backward:
            notes = (*report.notes, "--backward is for torch targets; the JAX doctor runs the forward only")
            report = dataclasses.replace(report, notes=notes)
        return report
    except ValueError as error:  # the doctors' refusals (too few devices, ...)
        raise UsageError(str(error)) from error


def _doctor_flax(backend: str, model: Any, variables: Any, inputs: tuple, kwargs: dict, args: argparse.Namespace):
    """The JAX doctor: an NNX module as it is (`doctor_nnx`), a linen module through its `apply`."""
    if backend == "nnx":
        from comparisons.doctor.nnx_probe import doctor_nnx

        return doctor_nnx(model, *inputs, devices=args.devices, kwargs=kwargs, target=args.target)
    from comparisons.doctor.jax_probe import doctor_jax

    if variables is None:
        variables = _flax_init(model, inputs, kwargs)
    return doctor_jax(model.apply, variables, *inputs, devices=args.devices, kwargs=kwargs, target=args.target)


def load(spec: str, what: str) -> Any:
    """The object named by 'package.module:name' or 'path/to/file.py:name'."""
    module_name, sep, attribute = spec.rpartition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(f"{what} {spec!r}: expected package.module:name or path/to/file.py:name")
    if module_name.endswith(".py") or os.sep in module_name:
        module = _load_file(Path(module_name), what)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise UsageError(f"{what} {spec!r}: cannot import {module_name!r} ({error}); run from the directory "
                             f"that holds the package, or pass path/to/file.py:{attribute}") from error
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise UsageError(f"{what} {spec!r}: {module_name} has no attribute {attribute!r}") from None


def _load_file(path: Path, what: str):
    if not path.is_file():
        raise UsageError(f"{what}: no file {str(path)!r}")
    name = f"_doctor_target_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # inspect finds class sources through sys.modules
    sys.path.insert(0, str(path.resolve().parent))  # the file's own imports of its neighbours
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001 - a broken target file is bad usage
        raise UsageError(f"{what}: importing {str(path)!r} raised {type(error).__name__}: {error}") from error
    return module


def _call(factory: Any, spec: str, *args: Any) -> Any:
    if not callable(factory):
        raise UsageError(f"{spec!r} is a {type(factory).__name__}, not a callable")
    try:
        return factory(*args)
    except Exception as error:  # noqa: BLE001 - the user's factory failing is bad usage, not a finding
        raise UsageError(f"calling {spec}({', '.join(map(repr, args))}) raised {type(error).__name__}: "
                         f"{error}") from error


def _made(loaded: Any, spec: str) -> Any:
    """What TARGET names: a bound NNX module as it is (it is callable, but calling it runs the model), else what
    the factory returns. An NNX class is refused: its constructor needs arguments the doctor cannot guess."""
    words = _nnx_words(loaded)
    if words == "module":
        return loaded
    if words is not None and isinstance(loaded, type):
        raise UsageError(f"TARGET {spec!r} is {words}, and pass {spec.rpartition(':')[0]}:<name of the module> "
                         "(e.g. model = Net(...) in the file) or a factory returning it")
    return _call(loaded, spec)


def _nnx_words(value: Any) -> str | None:
    """'module' for a bound NNX module (a bridged one too: the doctor runs it as dp_jax does), the one-line words
    for an NNX class, GraphDef or State, None otherwise (a linen module, nnx.bridge.to_linen's included)."""
    if sys.modules.get("flax.nnx") is None:
        return None
    from comparisons.models.jax_nnx import is_nnx_module, nnx_kind

    linen = sys.modules.get("flax.linen")
    if is_nnx_module(value):
        return "module"
    return None if linen is not None and isinstance(value, linen.Module) else nnx_kind(value)


def _classify(made: Any, spec: str) -> tuple[str, Any, Any]:
    """('torch', module, None), ('nnx', nnx_module, None) or ('jax', linen_module, variables or None)."""
    words = _nnx_words(made)
    if words == "module":
        return "nnx", made, None
    if words is not None:
        raise UsageError(f"TARGET {spec!r} returned {words}")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(made, torch.nn.Module):
        return "torch", made, None
    linen = sys.modules.get("flax.linen")
    if linen is not None:
        if isinstance(made, linen.Module):
            return "jax", made, None
        if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], linen.Module):
            return "jax", made[0], made[1]
    raise UsageError(f"TARGET {spec!r} returned a {type(made).__name__}; return a torch nn.Module, a Flax NNX "
                     "Module, a linen Module, or (linen_module, variables)")


def _random_inputs(shapes: list[str], dtype: str, backend: str, batch: int) -> tuple[tuple, dict]:
    import numpy as np

    parsed = [_shape(shape, batch) for shape in shapes]
    try:
        np_dtype = np.dtype(dtype)
    except TypeError as error:
        raise UsageError(f"--dtype {dtype!r}: {error}; pass a numpy dtype such as float32 or int64") from error
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 10, shape).astype(np_dtype) if np_dtype.kind in "iu"
              else rng.standard_normal(shape).astype(np_dtype) for shape in parsed]
    if backend == "torch":
        import torch

        return tuple(torch.from_numpy(a) for a in arrays), {}
    return tuple(arrays), {}


def _shape(text: str, batch: int) -> tuple[int, ...]:
    """'8,3' -> (8, 3); every dim a positive integer, batch first; 'B,3' -> (batch, 3)."""
    dims = [n for n in text.split(",") if n.strip()]
    if dims and dims[0].strip() == BATCH_MARK:
        dims[0] = str(batch)
    try:
        shape = tuple(int(n) for n in dims)
    except ValueError as error:
        raise UsageError(f"--input-shape {text}: {error}; shapes look like 8,3") from error
    if not shape or min(shape) < 1:
        raise UsageError(f"--input-shape {text}: dims must be positive integers, batch first; shapes look "
                         "like 8,3")
    return shape


def _user_inputs(spec: str, batch: int) -> tuple[tuple, dict]:
    made = _call(load(spec, "--inputs"), spec, batch)
    if (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], (tuple, list))
            and isinstance(made[1], dict)):
        return tuple(made[0]), dict(made[1])
    return (tuple(made) if isinstance(made, (tuple, list)) else (made,)), {}


def _flax_init(model: Any, inputs: tuple, kwargs: dict) -> Any:
    import jax

    return model.init(jax.random.key(0), *inputs, **kwargs)


def _set_jax_cpu_devices(count: int) -> None:
    """JAX reads its CPU device count when it starts; set it before a target imports JAX."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()

"""No function or method in the packages takes more than 8 parameters in all, nor runs past 60 lines: more
parameters is a missing record (a `Settings`, a `Bounds`, a `Sides`), more lines a missing name for a step.

Every parameter counts: positional, keyword-only, *args and **kwargs alike; only a method's bound self/cls
does not. The exceptions are the public entry points, whose settings stay keyword-only so that an editor
shows them (they build a record and pass it on). The check reads the source with `ast`, so it imports nothing.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIMIT = 8
LINES = 60
PACKAGES = ("dp_torch", "dp_jax", "comparisons")
# The public entry points: every parameter past the first few is keyword-only, shown by an editor.
ENTRY_POINTS = {"comparisons/harness/_compare.py:compare", "comparisons/models/derive.py:pair_from_modules",
                "comparisons/hf/_pair.py:pair", "dp_jax/data_parallel.py:data_parallel",
                "comparisons/distributed/compare.py:compare_distributed"}


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> int:
    """Every parameter of `node` (positional, keyword-only, *args, **kwargs), without a method's bound first."""
    arguments = node.args
    names = [arg.arg for arg in arguments.posonlyargs + arguments.args]
    is_static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    if in_class and not is_static and names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + len(arguments.kwonlyargs) + (arguments.vararg is not None) + (arguments.kwarg is not None)


def functions(package: str, root: pathlib.Path = ROOT):
    """('file:function', node, whether it is a class's) for every function of `package` under `root`."""
    for path in sorted((root / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        in_class = {id(child) for node in ast.walk(tree) if isinstance(node, ast.ClassDef) for child in node.body}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{path.relative_to(root).as_posix()}:{node.name}", node, id(node) in in_class


def offenders(package: str, root: pathlib.Path = ROOT) -> list[str]:
    """'file:function (n)' for every function of `package` with more than LIMIT parameters (entry points aside)."""
    return [f"{name} ({count})" for name, node, in_class in functions(package, root)
            if (count := parameter_count(node, in_class)) > LIMIT and name not in ENTRY_POINTS]


def long_functions(package: str, root: pathlib.Path = ROOT) -> list[str]:
    """'file:function (n lines)' for every function of `package` longer than LINES lines, docstring included."""
    return [f"{name} ({length} lines)" for name, node, _ in functions(package, root)
            if (length := node.end_lineno - node.lineno + 1) > LINES]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_takes_more_than_8_parameters(package):
    assert (ROOT / package).is_dir(), package
    assert offenders(package) == [], f"pass a record (Settings, Bounds, Sides) to: {', '.join(offenders(package))}"


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_is_longer_than_60_lines(package):
    assert long_functions(package) == [], f"name the steps of: {', '.join(long_functions(package))}"


def test_the_entry_points_exist_and_keep_their_settings_keyword_only():
    found = {name: node for package in PACKAGES for name, node, _ in functions(package)}
    for name in ENTRY_POINTS:
        assert len(found[name].args.kwonlyargs) >= 3, name


def test_the_count_takes_every_parameter_but_self_and_fails_on_a_function_with_9(tmp_path):
    source = ("class A:\n"
              "    def m(self, a, b, c, d, e, f, g, h): ...\n"
              "    @staticmethod\n"
              "    def s(self, a, b, c, d, e, f, g): ...\n"
              "def g(a, b, /, c, *args, d, e, **kwargs): ...\n"
              "def nine(a, b, c, d, e, f, *, g, h, i): ...\n")
    tree = ast.parse(source)
    method, static = tree.body[0].body
    assert parameter_count(method, in_class=True) == 8
    assert parameter_count(static, in_class=True) == 8
    assert parameter_count(tree.body[1], in_class=False) == 7
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(source + "def long():\n" + "    pass\n" * 60)
    assert offenders("pkg", tmp_path) == ["pkg/m.py:nine (9)"]
    assert long_functions("pkg", tmp_path) == ["pkg/m.py:long (61 lines)"]

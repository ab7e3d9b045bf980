"""The import rule: no cycle inside dp_torch, dp_jax and comparisons, and each package loads only its own framework.

The cycle test reads every module's source (AST, nothing is imported) and takes every `import`
statement in it: module level, inside functions, and under `if TYPE_CHECKING:` alike. A lazy
import inside a function still runs, just later, so a cycle through one is still a cycle
(judging that imports rendering "only when needed" is the reverse dependency all the same).
Only imports of the three packages count; `from pkg import name` points at `pkg.name` when that
is a module, else at `pkg` itself.

The isolation tests import one package in a fresh interpreter and list the frameworks it loaded.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dp_torch", "dp_jax", "comparisons")


def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """{dotted module name: source file} for every .py file of `packages` under `root`."""
    files = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that the source of module `name` (at `path`) imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            targets.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                           for alias in node.names)
    return (targets & known) - {name}  # an import of a module that does not exist fails elsewhere


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = ".".join(parts[:len(parts) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None (depth-first search, white/grey/black)."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "grey"
        stack.append(node)
        for child in sorted(graph.get(node, ())):
            if state.get(child) == "grey":
                return stack[stack.index(child):] + [child]
            if child not in state and (cycle := visit(child)):
                return cycle
        stack.pop()
        state[node] = "black"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    files = module_files(root, packages)
    return {name: imported_modules(name, path, set(files)) for name, path in files.items()}


def test_no_import_cycle_in_the_three_packages():
    graph = import_graph()
    assert len(graph) > 30 and "comparisons.harness._compare" in graph  # the walk really found the modules
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# comparisons' layers, lowest first; a module imports only from its own layer or those below it.
LAYERS = (
    ("comparisons.errors", "comparisons.verdicts", "comparisons.placement", "comparisons.convert"),
    ("comparisons.models",),
    ("comparisons.runs",),
    ("comparisons.judge",),
    ("comparisons.layers",),
    ("comparisons.harness", "comparisons.render", "comparisons.hf", "comparisons.bench"),
    ("comparisons", "comparisons.__main__", "comparisons.cli", "comparisons.distributed", "comparisons.doctor",
     "comparisons.traced"),
)


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest prefix of `module` (a folder's modules share its layer)."""
    matches = [(len(name), i) for i, names in enumerate(LAYERS) for name in names
               if module == name or module.startswith(name + ".")]
    assert matches, f"{module} is in no layer of LAYERS: add it"
    return max(matches)[1]


def upward_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """{module: the modules it imports from a higher layer}, for every comparisons module that has some."""
    found = {name: sorted(d for d in deps if d.startswith("comparisons") and layer_of(d) > layer_of(name))
             for name, deps in graph.items() if name.startswith("comparisons")}
    return {name: deps for name, deps in found.items() if deps}


def test_comparisons_is_layered_each_folder_importing_only_those_below_it():
    graph = import_graph()
    assert upward_imports(graph) == {}, "modules import from a layer above their own"
    assert {"comparisons.judge._numerics", "comparisons.runs.jax_run", "comparisons.cli._main"} <= set(graph)


def test_the_layer_check_names_a_planted_upward_import():
    graph = {"comparisons.runs._x": {"comparisons.judge._numerics", "comparisons.placement._map"},
             "comparisons.render.text": {"comparisons.verdicts"}}
    assert upward_imports(graph) == {"comparisons.runs._x": ["comparisons.judge._numerics"]}


def private_imports(root: Path, folders: tuple[str, ...]) -> list[str]:
    """'file: module' for every import of a private module `comparisons.X._y` from outside comparisons/X/.

    Reads every .py file under `folders` of `root`. A private module is one with a component after
    `comparisons.X` that starts with one underscore (dunders such as `__main__` are public)."""
    files = module_files(root, ("comparisons",))
    offenders = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            for target in imported_modules(name, path, set(files)):
                parts = target.split(".")
                private = [i for i, part in enumerate(parts) if i >= 2 and part.startswith("_")
                           and not part.startswith("__")]
                owner = root.joinpath(*parts[:private[0]]) if private else None
                if owner is not None and owner not in path.parents:
                    offenders.append(f"{path.relative_to(root)}: {target}")
    return offenders


def test_a_folders_private_modules_are_imported_only_from_inside_it():
    assert private_imports(ROOT, ("comparisons", "tests", "benchmarks", "docs")) == []


def test_the_private_import_check_names_a_planted_one(tmp_path):
    for folder in ("comparisons/runs", "comparisons/judge", "tests"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "comparisons" / "__init__.py").write_text("")
    (tmp_path / "comparisons" / "runs" / "__init__.py").write_text("from comparisons.runs._x import f\n")
    (tmp_path / "comparisons" / "runs" / "_x.py").write_text("def f():\n    pass\n")
    (tmp_path / "comparisons" / "judge" / "__init__.py").write_text("from comparisons.runs import _x\n")
    (tmp_path / "tests" / "test_a.py").write_text("def test():\n    from comparisons.runs._x import f\n")
    assert private_imports(tmp_path, ("comparisons", "tests")) == [
        "comparisons/judge/__init__.py: comparisons.runs._x", "tests/test_a.py: comparisons.runs._x"]


PATCHERS = ("setattr", "delattr", "patch", "setitem")
PRIVATE_PATH = re.compile(r"^(?:dp_torch|dp_jax|comparisons)(?:\.\w+)*?\._(?!_)\w*")


def private_string_paths(root: Path, folders: tuple[str, ...]) -> list[str]:
    """'file:line: path' for every string path into a private module or name (`comparisons.harness._compare._x`)
    handed to a patcher (monkeypatch.setattr / delattr, mock.patch): a test that reaches past the public seams,
    which the import check above cannot see, since a string imports nothing until the test runs."""
    offenders = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.Call):
                    continue
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                offenders += [f"{path.relative_to(root)}:{arg.lineno}: {arg.value}" for arg in node.args
                              if name in PATCHERS and isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                              and PRIVATE_PATH.match(arg.value)]
    return offenders


def test_tests_patch_no_string_path_into_a_private_module():
    assert private_string_paths(ROOT, ("tests", "benchmarks")) == [], "patch a public seam or use a fixture"


def test_the_string_path_check_names_planted_ones(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text(
        "def test(monkeypatch):\n"
        "    monkeypatch.setattr('comparisons.harness._compare._run_all', None)\n"
        "    monkeypatch.setattr('dp_jax._private_thing', None)\n"
        "    mock.patch('comparisons.cli._main._run')\n"
        "    monkeypatch.setattr('comparisons.harness.compare', None)\n"  # public: allowed
        "    monkeypatch.setattr(harness, '_private', None)\n"  # an object and a name, not a path
        "    print('comparisons.harness._compare')\n")  # not a patcher
    assert private_string_paths(tmp_path, ("tests",)) == [
        "tests/test_a.py:2: comparisons.harness._compare._run_all", "tests/test_a.py:3: dp_jax._private_thing",
        "tests/test_a.py:4: comparisons.cli._main._run"]


def test_the_cycle_finder_names_a_planted_cycle(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from pkg.a import f\n")
    (tmp_path / "pkg" / "a.py").write_text("from . import b\n\ndef f():\n    pass\n")
    (tmp_path / "pkg" / "b.py").write_text("def g():\n    from pkg.a import f  # lazy, still a cycle\n")
    (tmp_path / "pkg" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                           "    import pkg.a\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.a"}}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]
    assert find_cycle({"x": {"y"}, "y": set()}) is None


def loaded_after_import(modules: str, roots: tuple[str, ...]) -> list[str]:
    """The top-level names among `roots` in sys.modules after `import {modules}` in a fresh process."""
    code = (f"import sys, {modules}; "
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(roots)!r}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    return ast.literal_eval(result.stdout.strip().splitlines()[-1])


JAX_FAMILY = ("jax", "jaxlib", "flax", "optax")


@pytest.mark.parametrize("modules, forbidden", [
    ("dp_torch, dp_torch.virtual", (*JAX_FAMILY, "comparisons")),
    ("dp_jax", ("torch", "comparisons")),
    ("comparisons, comparisons.__main__, comparisons.models, comparisons.placement, comparisons.render",
     ("torch", *JAX_FAMILY)),
    # torchax renames torch's PrivateUse1 backend and turns off the MHA fast path, process-wide: only the traced
    # comparison's worker process may import it, never `import comparisons` (nor the CLI, nor comparisons.traced)
    ("comparisons, comparisons.__main__, comparisons.cli, comparisons.traced, comparisons.traced.cli",
     ("torchax", "torch", *JAX_FAMILY)),
])
def test_importing_a_package_loads_no_other_framework(modules, forbidden):
    assert loaded_after_import(modules, forbidden) == []


def test_the_isolation_probe_sees_what_a_package_loads():
    assert loaded_after_import("dp_torch", ("torch", "dp_torch")) == ["dp_torch", "torch"]
    assert loaded_after_import("dp_jax", ("jax", "dp_jax")) == ["dp_jax", "jax"]

"""No function or method in the packages takes more than 6 positional parameters: more is a missing record.

Keyword-only parameters, *args and a method's self/cls do not count. The check reads the source with
`ast`, so it imports nothing.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIMIT = 6
PACKAGES = ("dp_torch", "dp_jax", "comparisons")


def positional_count(node: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> int:
    """Positional parameters of `node`, without the bound first one of a method."""
    names = [arg.arg for arg in node.args.posonlyargs + node.args.args]
    is_static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    if in_class and not is_static and names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names)


def offenders(package: str) -> list[str]:
    """'file:function (n)' for every function of `package` with more than LIMIT positional parameters."""
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        in_class = {id(child) for node in ast.walk(tree) if isinstance(node, ast.ClassDef) for child in node.body}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                count = positional_count(node, id(node) in in_class)
                if count > LIMIT:
                    found.append(f"{path.relative_to(ROOT)}:{node.name} ({count})")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_takes_more_than_6_positional_parameters(package):
    assert (ROOT / package).is_dir(), package
    assert offenders(package) == [], f"pass a record or keyword-only arguments to: {', '.join(offenders(package))}"


def test_the_count_skips_self_keyword_only_and_star_args_but_not_a_static_method_s_first():
    source = ("class A:\n"
              "    def m(self, a, b, c, d, e, f): ...\n"
              "    @staticmethod\n"
              "    def s(self, a, b, c, d, e, f): ...\n"
              "def g(a, b, /, c, d, e, f, *args, g, h): ...\n")
    tree = ast.parse(source)
    method, static = tree.body[0].body
    assert positional_count(method, in_class=True) == 6
    assert positional_count(static, in_class=True) == 7
    assert positional_count(tree.body[1], in_class=False) == 6

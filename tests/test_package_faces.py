"""Every `__init__.py` of the three packages is a face: a docstring, imports, `__all__`, and no work.

The work lives in named modules, done on first use where it can be. The one exception is the documented
import-time call of `comparisons/hf/__init__.py` (docs/your_models.md says why it cannot wait).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("comparisons", "dp_jax", "dp_torch")
# (the __init__, relative to the root; the call as written): the only statements besides the face allowed
ALLOWED_CALLS = {("comparisons/hf/__init__.py", "_before_flax_models.prepare_for_flax_models()")}


def work_in(path: Path, relative: str) -> list[str]:
    """'line: statement' for every statement of the __init__ at `path` that is not its face: anything but the
    docstring, imports, the `__all__` assignment and an allowed call; also a missing docstring or __all__."""
    body = ast.parse(path.read_text()).body
    found = []
    if not (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        found.append("1: no docstring")
    if not any(_is_all(node) for node in body):
        found.append("1: no __all__")
    for index, node in enumerate(body):
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)) or _is_all(node):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and (
                (relative, ast.unparse(node)) in ALLOWED_CALLS):
            continue
        found.append(f"{node.lineno}: {ast.unparse(node).splitlines()[0]}")
    return found


def _is_all(node: ast.stmt) -> bool:
    return (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "__all__")


def faces(root: Path) -> dict[str, list[str]]:
    """{__init__ path: the work it does} for every __init__.py of the three packages under `root` that does some."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("__init__.py")):
            relative = path.relative_to(root).as_posix()
            work = work_in(path, relative)
            if work:
                found[relative] = work
    return found


def test_every_init_of_the_three_packages_is_a_face():
    inits = [path for package in PACKAGES for path in (ROOT / package).rglob("__init__.py")]
    assert len(inits) >= 15  # the walk found the packages' folders
    assert faces(ROOT) == {}


def test_the_one_allowed_call_is_made_and_documented_where_users_read():
    for relative, call in ALLOWED_CALLS:
        body = ast.parse((ROOT / relative).read_text()).body
        assert call in [ast.unparse(node) for node in body], f"{relative} no longer makes {call}: drop it here"
        name = call.split(".")[-1].removesuffix("()")
        assert name in (ROOT / "docs" / "your_models.md").read_text()


@pytest.mark.parametrize("planted, named", [
    ("x = 1\n", "x = 1"),
    ("def f():\n    pass\n", "def f():"),
    ("for name in []:\n    pass\n", "for name in []:"),
    ("register_rules()\n", "register_rules()"),
    ("_before_flax_models.prepare_for_flax_models()\n", "_before_flax_models.prepare_for_flax_models()"),
    ("import logging\nlogging.getLogger('x').addFilter(len)\n", "logging.getLogger('x').addFilter(len)"),
    ("if True:\n    import os\n", "if True:"),
])
def test_the_face_check_names_planted_work(tmp_path, planted, named):
    for package in PACKAGES:
        (tmp_path / package / "inner").mkdir(parents=True)
        for path in (tmp_path / package / "__init__.py", tmp_path / package / "inner" / "__init__.py"):
            path.write_text('"""A face."""\nfrom os import path\n\n__all__ = ["path"]\n')
    face = tmp_path / "dp_jax" / "inner" / "__init__.py"
    face.write_text(face.read_text() + planted)
    # the allowed call is allowed in hf's __init__ only, so planted elsewhere it is work
    assert faces(tmp_path) == {"dp_jax/inner/__init__.py": [f"{5 + planted.startswith('import')}: {named}"]}


def test_the_face_check_names_a_missing_docstring_or_all(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text('"""A face."""\n__all__ = []\n')
    (tmp_path / "dp_torch" / "__init__.py").write_text("from os import path\n")
    (tmp_path / "comparisons" / "__init__.py").write_text('"""A face."""\nfrom os import path\n')
    assert faces(tmp_path) == {"comparisons/__init__.py": ["1: no __all__"],
                               "dp_torch/__init__.py": ["1: no docstring", "1: no __all__"]}

"""Every Python block in docs/ runs, and every generated table is up to date."""
import importlib.util
import re
import subprocess
import sys

import pytest
from _helpers_docs import DOCS, PAGES, ROOT, python_blocks

# A page that changes process-global state (virtual torch devices) runs in its own interpreter.
OWN_PROCESS = "<!-- docs-test: own-process -->"
# A page whose snippets use Hugging Face models is skipped when the hf extra is absent.
NEEDS_TRANSFORMERS = "<!-- docs-test: needs transformers -->"
# A page whose snippets trace a torch model with torchax is skipped when the auto extra is absent.
NEEDS_TORCHAX = "<!-- docs-test: needs torchax -->"


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.name)
def test_every_python_block_of_the_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # snippets that write files write them here
    if NEEDS_TRANSFORMERS in page.read_text():
        pytest.importorskip("transformers", reason=f"{page.name} needs the hf extra: pip install -e '.[hf]'")
    if NEEDS_TORCHAX in page.read_text() and importlib.util.find_spec("torchax") is None:
        pytest.skip(f"{page.name} needs torchax (not installed): pip install -e '.[auto]'")
    blocks = python_blocks(page)
    if OWN_PROCESS in page.read_text():
        script = "\n\n".join(blocks)
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              cwd=tmp_path, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
        assert done.returncode == 0, f"{page.name}:\n{done.stdout}\n{done.stderr}"
        return
    namespace: dict = {"__name__": f"docs.{page.stem}"}
    for number, block in enumerate(blocks, 1):
        try:
            exec(compile(block, f"{page.name} block {number}", "exec"), namespace)
        except Exception as error:
            raise AssertionError(f"{page.name}, python block {number} failed:\n{block}") from error


def test_generated_sections_are_up_to_date():
    sys.path.insert(0, str(DOCS))
    try:
        import generate

        stale = generate.stale_pages()
    finally:
        sys.path.remove(str(DOCS))
    assert not stale, f"run `python docs/generate.py`; stale: {[p.name for p in stale]}"


def test_generator_check_mode_flags_a_stale_section(tmp_path):
    sys.path.insert(0, str(DOCS))
    try:
        import generate
        import sections
    finally:
        sys.path.remove(str(DOCS))
    token = f"value-{id(tmp_path)}"
    sections.GENERATORS["probe"] = lambda: token
    try:
        page = tmp_path / "page.md"
        page.write_text("# t\n<!-- generated:probe -->\nold\n<!-- /generated:probe -->\n")
        assert generate.stale_pages([page]) == [page]
        generate.stale_pages([page], write=True)
        assert token in page.read_text() and generate.stale_pages([page]) == []
    finally:
        del sections.GENERATORS["probe"]


def test_every_picture_a_page_links_is_in_docs_and_drawn_by_the_generator():
    sys.path.insert(0, str(DOCS))
    try:
        import sections
    finally:
        sys.path.remove(str(DOCS))
    linked = {name for page in PAGES for name in re.findall(r"!\[[^\]]*\]\(([^)\s]+\.svg)\)", page.read_text())}
    assert "drift_layernorm_epsilon.svg" in linked
    for name in linked:
        assert name in sections.ASSETS, f"{name}: no `sections.asset` draws it; `python docs/generate.py` could not"
        text = (DOCS / name).read_text()
        assert text.startswith("<svg") and "</svg>" in text, name

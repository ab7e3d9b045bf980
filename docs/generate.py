"""Regenerate the tables in docs/*.md from the code: `python docs/generate.py [--check]`.

A generated section sits between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->`;
its body is whatever the generator registered under NAME returns. `--check` rewrites nothing
and exits 1 when a section is stale, so a test can keep the pages honest. Without --check it also
writes the files the pages link (`sections.asset`: the drift chart).
"""
from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

DOCS = Path(__file__).resolve().parent
SECTION = re.compile(
    r"(<!-- generated:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /generated:(?P=name) -->)", re.S
)


def render(text: str, generators: dict[str, Callable[[], str]], cache: dict[str, str]) -> str:
    """Return `text` with every generated section's body replaced by its generator's output."""
    def fill(match: re.Match) -> str:
        name = match["name"]
        if name not in generators:
            raise KeyError(f"docs: section {name!r} has no generator; known: {sorted(generators)}")
        if name not in cache:
            cache[name] = generators[name]().rstrip("\n") + "\n"
        return match.group(1) + cache[name] + match.group(4)
    return SECTION.sub(fill, text)


def stale_pages(pages: list[Path] | None = None, write: bool = False) -> list[Path]:
    """Pages whose generated sections differ from what the code produces now (rewritten if `write`)."""
    from sections import GENERATORS

    cache: dict[str, str] = {}
    stale = []
    for page in pages or sorted(DOCS.glob("*.md")):
        old = page.read_text()
        new = render(old, GENERATORS, cache)
        if new != old:
            stale.append(page)
            if write:
                page.write_text(new)
    return stale


def write_assets() -> list[Path]:
    """Write every registered file (`sections.asset`) into docs/; the paths written."""
    from sections import ASSETS

    written = []
    for name, produce in ASSETS.items():
        path = DOCS / name
        path.write_text(produce())
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail on stale sections, write nothing")
    args = parser.parse_args(argv)
    stale = stale_pages(write=not args.check)
    verb = "stale" if args.check else "regenerated"
    for page in stale:
        print(f"{verb}: {page.relative_to(DOCS.parent)}")
    if not args.check:
        for path in write_assets():
            print(f"drawn: {path.relative_to(DOCS.parent)}")
    return 1 if (args.check and stale) else 0


sys.path.insert(0, str(DOCS))
if __name__ == "__main__":
    import os

    # The tables show 4- and 8-device runs: JAX must see 8 CPU devices before it initialises.
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    sys.exit(main())

"""docs/architecture.md's map names every folder of the three packages and every module in it, and
tests/comparisons/ mirrors comparisons/: one test folder per code folder, test files named for it."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dp_torch", "dp_jax", "comparisons")


def map_entries(page: str) -> dict[str, str]:
    """{folder: its entry's text} from the first ```text block after '## The map' (continuation lines indented)."""
    block = page.split("## The map", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    entries: dict[str, str] = {}
    folder = None
    for line in block.splitlines():
        if line and not line[0].isspace():
            folder, _, text = line.partition(" ")
            entries[folder] = text
        elif folder is not None:
            entries[folder] += " " + line.strip()
    return entries


def missing_from_map(root: Path, page: str) -> list[str]:
    """'folder/module.py' for every package module the map's entry for its folder does not name."""
    entries = map_entries(page)
    missing = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            folder = path.parent.relative_to(root).as_posix() + "/"
            text = entries.get(folder)
            if text is None:
                missing.append(f"{folder} (no entry)")
            elif path.stem != "__init__" and not re.search(rf"(?<![\w.]){re.escape(path.stem)}(?![\w])", text):
                missing.append(f"{folder}{path.name}")
    return sorted(set(missing))


def test_the_map_names_every_module_of_the_three_packages():
    assert missing_from_map(ROOT, (ROOT / "docs" / "architecture.md").read_text()) == []


def test_the_map_check_names_a_module_left_out(tmp_path):
    (tmp_path / "dp_jax" / "strategies").mkdir(parents=True)
    for name in ("dp_jax/__init__.py", "dp_jax/replicate.py", "dp_jax/strategies/switch.py",
                 "dp_jax/strategies/_new.py"):
        (tmp_path / name).write_text("")
    for package in ("dp_torch", "comparisons"):
        (tmp_path / package).mkdir()
    page = ("## The map\n\n```text\ndp_jax/   the steps: replicate\n"
            "dp_jax/strategies/   the switch program (switch)\n  and more\n```\n")
    assert map_entries(page)["dp_jax/strategies/"].endswith("and more")
    assert missing_from_map(tmp_path, page) == ["dp_jax/strategies/_new.py"]
    assert missing_from_map(tmp_path, page.replace("dp_jax/   the steps: replicate\n", "")) == [
        "dp_jax/ (no entry)", "dp_jax/strategies/_new.py"]


def unmirrored(root: Path) -> list[str]:
    """Where tests/comparisons/ stops mirroring comparisons/: a code folder with no `test_<folder>_*.py` in
    tests/comparisons/<folder>/, and a test file outside such a folder or not named for its folder."""
    code = {path.parent.name for path in (root / "comparisons").glob("*/__init__.py")}
    tests = root / "tests" / "comparisons"
    problems = [f"comparisons/{folder}/ (no tests/comparisons/{folder}/test_{folder}_*.py)" for folder in sorted(code)
                if not any((tests / folder).glob(f"test_{folder}_*.py"))]
    for path in sorted(tests.rglob("test_*.py")):
        folder = path.parent.relative_to(tests).as_posix()
        if folder not in code or not path.name.startswith(f"test_{folder}_"):
            problems.append(path.relative_to(root).as_posix())
    return problems


def test_tests_of_comparisons_mirror_its_folders_and_test_names_are_unique():
    assert unmirrored(ROOT) == []
    names = [path.name for path in (ROOT / "tests").rglob("test_*.py")]
    assert sorted({name for name in names if names.count(name) > 1}) == []  # the folders are not packages


def test_the_mirror_check_names_an_untested_folder_and_a_stray_test(tmp_path):
    for name in ("comparisons/judge/__init__.py", "comparisons/runs/__init__.py",
                 "tests/comparisons/judge/test_judge_numerics.py", "tests/comparisons/test_harness_drift.py",
                 "tests/comparisons/judge/test_runs_records.py", "tests/comparisons/judge/_helpers.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert unmirrored(tmp_path) == ["comparisons/runs/ (no tests/comparisons/runs/test_runs_*.py)",
                                    "tests/comparisons/judge/test_runs_records.py",
                                    "tests/comparisons/test_harness_drift.py"]

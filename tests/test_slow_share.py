"""`--slow-share` (tests/_slow_share.py): the N shares of the slow tier are disjoint and cover it; `commit/N`
selects the same tests for the same commit; every slow test in a file the tree changes runs; the header says
how to reproduce it.

Most tests run pytest with the plugin alone (`-p _slow_share`) in a scratch git repository of fresh slow tests, so
what each commit changes is known; one runs the project's own conftest on a real test file."""
from __future__ import annotations

import os
import random
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
MATRIX = "tests/oracle/test_oracle_vs_dp_torch_matrix.py"  # hundreds of slow tests, collected in seconds
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def pytest_run(where: Path, *options: str, quiet: bool = True) -> subprocess.CompletedProcess:
    """`pytest --collect-only -m slow` in `where` with only the slow-share plugin loaded."""
    env = {**os.environ, **GIT_ENV, "PYTHONPATH": str(TESTS), "GIT_CEILING_DIRECTORIES": str(where.parent)}
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", *(["-q"] if quiet else []),
                           "-p", "_slow_share", "-p", "no:randomly", "-p", "no:cacheprovider", "-m", "slow", *options],
                          cwd=where, env=env, capture_output=True, text=True, timeout=120)


def ids(done: subprocess.CompletedProcess) -> set[str]:
    assert done.returncode == 0, done.stdout + done.stderr
    return {line for line in done.stdout.splitlines() if "::" in line}


def git(where: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=where, env={**os.environ, **GIT_ENV}, capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


def write_tests(where: Path, name: str, count: int) -> set[str]:
    """A test file of `count` slow tests with fresh names and one fast test; the slow tests' ids."""
    names = random.sample(range(10**6), count)
    body = "import pytest\n\n\ndef test_fast():\n    pass\n" + "".join(
        f"\n\n@pytest.mark.slow\ndef test_n{n}():\n    pass\n" for n in names)
    (where / name).write_text(body)
    return {f"{name}::test_n{n}" for n in names}


@pytest.fixture
def repo(tmp_path) -> Path:
    """A git repository of two committed test files, then a commit that touches neither."""
    where = tmp_path / "repo"
    where.mkdir()
    (where / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    git(where, "init", "-q")
    write_tests(where, "test_a.py", random.randint(40, 80))
    write_tests(where, "test_b.py", random.randint(40, 80))
    git(where, "add", ".")
    git(where, "commit", "-q", "-m", "tests")
    (where / "notes.txt").write_text(str(random.random()))
    git(where, "add", ".")
    git(where, "commit", "-q", "-m", "notes")
    return where


def of_file(selected: set[str], name: str) -> set[str]:
    return {test for test in selected if test.startswith(f"{name}::")}


def test_the_shares_of_the_slow_tier_are_disjoint_and_cover_it(repo):
    every = ids(pytest_run(repo))
    shares = [ids(pytest_run(repo, "--slow-share", f"{k}/3")) for k in range(3)]
    assert set().union(*shares) == every and sum(map(len, shares)) == len(every)
    assert all(len(share) > len(every) / 6 for share in shares), [len(share) for share in shares]
    assert ids(pytest_run(repo, "--slow-share", "today/3")) in shares


def test_two_selections_of_one_commit_are_identical_and_follow_its_hash(repo):
    n = random.randint(2, 9)
    first, second = (ids(pytest_run(repo, "--slow-share", f"commit/{n}")) for _ in range(2))
    assert first == second
    assert first == ids(pytest_run(repo, "--slow-share", f"{int(git(repo, 'rev-parse', 'HEAD'), 16) % n}/{n}"))


def test_every_slow_test_of_a_file_the_commit_changes_is_selected(repo):
    every_a = of_file(ids(pytest_run(repo)), "test_a.py")
    every_b = write_tests(repo, "test_b.py", random.randint(40, 80))
    git(repo, "commit", "-q", "-am", "change test_b")
    n = 8
    selected = ids(pytest_run(repo, "--slow-share", f"commit/{n}"))
    assert of_file(selected, "test_b.py") == every_b
    assert of_file(selected, "test_a.py") < every_a  # the untouched file gives only its share
    assert selected == ids(pytest_run(repo, "--slow-share", f"{int(git(repo, 'rev-parse', 'HEAD'), 16) % n}/{n}"))


def test_every_slow_test_of_an_uncommitted_or_new_file_is_selected(repo):
    every_a = write_tests(repo, "test_a.py", random.randint(40, 80))  # changed, not committed
    every_c = write_tests(repo, "test_c.py", random.randint(40, 80))  # new, not added
    selected = ids(pytest_run(repo, "--slow-share", "commit/8"))
    assert of_file(selected, "test_a.py") == every_a and of_file(selected, "test_c.py") == every_c
    assert of_file(selected, "test_b.py") < of_file(ids(pytest_run(repo)), "test_b.py")


def test_a_shallow_clone_says_it_cannot_know_what_head_changed(repo, tmp_path):
    every_b = write_tests(repo, "test_b.py", random.randint(40, 80))
    git(repo, "commit", "-q", "-am", "change test_b")
    git(tmp_path, "clone", "-q", "--depth", "1", repo.as_uri(), "shallow")
    shallow = tmp_path / "shallow"
    done = pytest_run(shallow, "--slow-share", "commit/8", quiet=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "a shallow clone: HEAD's own changes are unknown" in done.stdout
    assert of_file(ids(pytest_run(shallow, "--slow-share", "commit/8")), "test_b.py") < every_b  # only its share


def test_the_header_names_the_share_and_a_command_that_reproduces_the_selection(repo):
    write_tests(repo, "test_b.py", random.randint(40, 80))
    git(repo, "commit", "-q", "-am", "change test_b")
    head = git(repo, "rev-parse", "HEAD")
    done = pytest_run(repo, "--slow-share", "commit/5", quiet=False)
    assert done.returncode == 0, done.stdout + done.stderr
    k = int(head, 16) % 5
    share_line = next(line for line in done.stdout.splitlines() if line.startswith("slow tier:"))
    assert f"share {k} of 5" in share_line and head[:7] in share_line and "test_b.py" in share_line
    command = next(line for line in done.stdout.splitlines() if line.startswith("reproduce this selection"))
    argv = shlex.split(command.partition(": ")[2])
    assert argv[:3] == ["python", "-m", "pytest"] and f"--slow-share {k}/5" in shlex.join(argv)
    env = {**os.environ, "PYTHONPATH": str(TESTS), "GIT_CEILING_DIRECTORIES": str(repo.parent)}
    again = subprocess.run([sys.executable, *argv[1:], "-q"], cwd=repo, env=env, capture_output=True, text=True,
                           timeout=120)
    quiet = subprocess.run([sys.executable, "-m", "pytest", "-p", "_slow_share", "-m", "slow", "-q", "--slow-share",
                            "commit/5"], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert share_line in quiet.stdout and f"-q --slow-share {k}/5" in quiet.stdout  # -q hides only the header
    assert ids(again) == ids(pytest_run(repo, "--slow-share", "commit/5"))


def test_a_share_by_commit_without_git_says_to_give_it_explicitly(tmp_path):
    write_tests(tmp_path, "test_a.py", 5)
    done = pytest_run(tmp_path, "--slow-share", "commit/4")
    assert done.returncode != 0 and "--slow-share 'commit/4'" in done.stdout + done.stderr
    assert "--slow-share 0/4" in done.stdout + done.stderr
    assert len(ids(pytest_run(tmp_path, "--slow-share", "0/1"))) == 5  # an explicit share needs no git


@pytest.mark.parametrize("share", ["3/3", "x/2", "today/0", "commit/0", "commit/x", "-1/2", "1"])
def test_a_bad_share_is_refused_naming_the_option(repo, share):
    done = pytest_run(repo, f"--slow-share={share}")
    assert done.returncode != 0 and f"--slow-share {share!r}" in done.stdout + done.stderr


def test_the_project_runs_the_share_of_its_commit():
    root = TESTS.parent
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-p", "no:randomly", MATRIX, "-m", "slow",
                           "--slow-share", "commit/3"], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    head = git(root, "rev-parse", "HEAD")
    assert f"share {int(head, 16) % 3} of 3" in done.stdout and "--slow-share " in done.stdout

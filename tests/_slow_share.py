"""`--slow-share K/N`: run a share of the slow tier, the same share for the same tree.

Each slow test's share is fixed by a crc32 of its id. `commit/N` takes share (HEAD's hash) mod N, so two runs of
one commit select the same tests, as PyTorch's `run_test.py --shard i n` does; `today/N` takes (days since 1970)
mod N, for local use. Whatever the share, every slow test in a file that HEAD changes (against its first parent)
or that is changed and not yet committed runs in full: a change to a slow test is tested by the run that lands it.
The run's header (and its summary, which `-q` keeps) names the share and the command that reproduces the
selection. A pytest plugin: tests/conftest.py imports its hooks; `-p _slow_share` loads it alone
(tests/test_slow_share.py does, in a scratch repository).
"""
from __future__ import annotations

import shlex
import subprocess
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Share:
    """Share `k` of `n` of the slow tier, plus every slow test in `changed` (absolute paths); `why` says how `k`
    was chosen (`commit 28bbc87`, `the day`, `given`); `caveat`, what `changed` could not know, or ""."""

    k: int
    n: int
    changed: frozenset[Path]
    why: str
    caveat: str = ""

    def keeps(self, item: pytest.Item) -> bool:
        return (not item.get_closest_marker("slow") or zlib.crc32(item.nodeid.encode()) % self.n == self.k
                or Path(item.path).resolve() in self.changed)


def pytest_addoption(parser):
    parser.addoption(
        "--slow-share", default=None, metavar="K/N",
        help="of the tests marked slow, run only share K of N (0 <= K < N), each test's share fixed by a hash of its "
             "id; 'commit/N' is (HEAD's hash) mod N, the same share for the same commit (CI runs commit/16); "
             "'today/N' is (days since 1970) mod N. Every slow test in a file that HEAD or uncommitted work "
             "changes runs whatever the share. Tests not marked slow are not affected.")


def pytest_configure(config):
    spec = config.getoption("--slow-share")
    if spec is not None:
        config.stash[_SHARE] = parse_share(spec, Path(config.rootpath))


def pytest_collection_modifyitems(config, items):
    share = config.stash.get(_SHARE, None)
    if share is None:
        return
    dropped = [item for item in items if not share.keeps(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if share.keeps(item)]


def pytest_report_header(config):
    share = config.stash.get(_SHARE, None)
    if share is None:
        return None
    names = sorted(path.name for path in share.changed)
    changed = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "") or "none"
    return [f"slow tier: share {share.k} of {share.n} ({share.why}), plus every slow test in the files this tree "
            f"changes ({changed}){share.caveat}",
            f"reproduce this selection on this tree: {reproduce_command(config, share)}"]


def pytest_terminal_summary(terminalreporter, config):
    """The header's lines again at the end, where `-q` (which hides the header, as in .ci/run) still shows them."""
    for line in pytest_report_header(config) or ():
        terminalreporter.write_line(line)


def reproduce_command(config, share: Share) -> str:
    """The command line this run was started with, its `--slow-share` given as the explicit `K/N` it resolved to."""
    args, explicit, skip = [], f"{share.k}/{share.n}", False
    for arg in config.invocation_params.args:
        if skip:
            args.append(explicit)
            skip = False
        elif arg == "--slow-share":
            args.append(arg)
            skip = True
        elif arg.startswith("--slow-share="):
            args.append(f"--slow-share={explicit}")
        else:
            args.append(arg)
    return shlex.join(["python", "-m", "pytest", *args])


def parse_share(spec: str, root: Path) -> Share:
    """`K/N`, `commit/N` or `today/N` as a Share; a bad value is a pytest.UsageError naming the option."""
    k, _, n = spec.partition("/")
    try:
        n_shares, k_share = int(n), 0 if k in ("commit", "today") else int(k)
    except ValueError:
        n_shares = k_share = 0
    if not 0 <= k_share < n_shares:
        raise pytest.UsageError(f"--slow-share {spec!r}: give K/N with 0 <= K < N, commit/N or today/N "
                                "(e.g. --slow-share commit/8 or --slow-share 0/3)")
    head = _git(root, "rev-parse", "HEAD")
    if k == "commit":
        if head is None:
            raise pytest.UsageError(f"--slow-share {spec!r}: no git commit here (git is absent or {root} is not a "
                                    f"repository), so no share by commit; give it explicitly, e.g. "
                                    f"--slow-share 0/{n_shares}")
        k_share, why = int(head, 16) % n_shares, f"--slow-share {spec} at commit {head[:7]}"
    elif k == "today":
        k_share, why = time.time_ns() // 86_400_000_000_000 % n_shares, f"--slow-share {spec}: the day's"
    else:
        why = f"--slow-share {spec}"
    changed, caveat = changed_files(root) if head else (frozenset(), "")
    return Share(k_share, n_shares, changed, why, caveat)


def changed_files(root: Path) -> tuple[frozenset[Path], str]:
    """(the files HEAD changes against its first parent (all of them for a first commit) and the files changed,
    staged or new and not yet committed, as absolute paths; what that could not know, or ""). Empty outside a
    git repository. A shallow clone without HEAD's parent gives only the uncommitted changes, and says so."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None:
        return frozenset(), ""
    parent, caveat = _git(root, "rev-parse", "--verify", "--quiet", "HEAD^1"), ""
    if parent:
        committed = _git(root, "diff", "--name-only", parent, "HEAD")
    elif _git(root, "rev-parse", "--is-shallow-repository") == "true":
        committed, caveat = None, "; a shallow clone: HEAD's own changes are unknown (clone with --depth 2 or more)"
    else:
        committed = _git(root, "ls-tree", "-r", "--name-only", "HEAD")
    uncommitted = _git(root, "diff", "--name-only", "HEAD")
    untracked = _git(root, "ls-files", "--others", "--exclude-standard")
    names = "\n".join(text for text in (committed, uncommitted, untracked) if text).split()
    return frozenset(Path(top, name).resolve() for name in names), caveat


def _git(root: Path, *args: str) -> str | None:
    """git's stripped output in `root`, or None when git is absent or fails (not a repository, no such commit)."""
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


_SHARE = pytest.StashKey[Share]()

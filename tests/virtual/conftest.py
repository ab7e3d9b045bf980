"""Virtual-device tests run in their own pytest process: `python -m pytest tests/virtual`.

`virtual.install` changes process-global torch state for good (torch.accelerator reports vdev,
CPU pin_memory fails, backward runs on the calling thread), so it must not happen in the main
run. This folder therefore collects nothing unless the command line names it (or a path in it),
and then installs vdev:0..3 during collection, before any test runs.
"""
import sys
from pathlib import Path

from dp_torch import virtual

HERE = Path(__file__).resolve().parent
# tests/ holds the model zoo and the case table these tests share with the CPU-oracle tests
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))


def _named_on_command_line(config) -> bool:
    base = config.invocation_params.dir
    paths = ((base / str(arg).split("::")[0]).resolve() for arg in config.args)
    return any(path == HERE or HERE in path.parents for path in paths)


def pytest_ignore_collect(collection_path, config):
    if not _named_on_command_line(config):
        return True  # the main run: leave torch's global state alone
    virtual.install()  # idempotent
    return None

"""The user's own mistakes exit 2 with a message naming the flag or their file and line, never 70 ("a bug of
dp-compare"): errors raised in their model, factory or inputs, and ops torchax cannot trace (issue 36)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from comparisons.cli import main

NETS = '''
import torch
from torch import nn


def raises():
    raise RuntimeError("factory broke on purpose")


def linear():
    return nn.Sequential(nn.Linear(4, 3))


def batch_norm():
    return nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))


def parameter_free():
    return nn.ReLU()


class NonZero(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        y = self.lin(x)
        return y[torch.nonzero(y > 0, as_tuple=True)].sum() + y.sum()


def nonzero():
    return NonZero()
'''
# torch on the CPU repeated: the default (auto) would install virtual devices in this process (tests/conftest.py)
QUICK = ("--steps", "1", "--strategy", "explicit", "--precision", "off", "--torch-devices", "cpu")


@pytest.fixture(scope="module")
def nets(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("user") / "user_nets.py"
    path.write_text(NETS)
    return str(path)


def run(capsys, nets: str, factory: str, *flags: str) -> tuple[int, str]:
    status = main(["run", "--torch", f"{nets}:{factory}", *QUICK, *flags])
    return status, capsys.readouterr().err


def line_of(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


MISTAKES = [  # (factory, flags, what the message must say)
    ("raises", ("--input-shape", "4"), ["factory broke on purpose", f"line {line_of(NETS, 'raise RuntimeError')}"]),
    ("linear", ("--input-shape", "5"), ["mat1 and mat2 shapes cannot be multiplied", "check --input-shape"]),
    ("linear", ("--input-shape", "4", "--int-inputs", "5"), ["same dtype", "--int-inputs"]),
    ("linear", ("--input-shape", "4", "--input-shape", "4"), ["positional argument", "--input-shape"]),
    ("parameter_free", ("--input-shape", "4"), ["no trainable parameter"]),
    ("linear", ("--input-shape", "4", "--seed", str(2**70)), [f"seed={2**70}", "from 0 to 4294967295"]),
]


@pytest.mark.parametrize("factory, flags, said", MISTAKES)
def test_a_mistake_of_the_user_exits_2_saying_what_and_where(capsys, nets, factory, flags, said):
    status, err = run(capsys, nets, factory, *flags)
    assert status == 2, err
    assert "internal error" not in err and "Traceback" not in err
    for text in said:
        assert text in err, text
    if factory == "raises":
        assert nets in err


def chunks(batch: int, devices: int) -> list[int]:
    size = -(-batch // devices)
    return [min(size, batch - start) for start in range(0, batch, size)]


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(devices=st.integers(2, 5), rows=st.integers(0, 3))
def test_a_one_row_chunk_into_batch_norm_names_a_batch_and_devices_that_avoid_it(capsys, nets, devices, rows):
    one_row = [b for b in range(2, 40) if chunks(b, devices)[-1] == 1]  # torch.chunk's last chunk of one row
    batch = one_row[rows % len(one_row)]
    status, err = run(capsys, nets, "batch_norm", "--input-shape", "4", "--batch", str(batch),
                      "--devices", str(devices))
    assert status == 2, err
    assert f"--batch {batch} on --devices {devices}" in err
    suggested = int(err.split("pass --batch ")[1].split(",")[0].split()[0])
    assert min(chunks(suggested, devices)) >= 2
    if ", or --devices " in err:
        fewer = int(err.split(", or --devices ")[1].split()[0])
        assert fewer < devices and min(chunks(batch, fewer)) >= 2


def test_an_op_torchax_cannot_trace_is_refused_naming_the_op_and_the_users_line(capsys, nets):
    status, err = run(capsys, nets, "nonzero", "--input-shape", "4")
    assert status == 2, err
    assert "aten.nonzero (torch.nonzero)" in err
    assert f"{nets}, line {line_of(NETS, 'torch.nonzero(')}" in err

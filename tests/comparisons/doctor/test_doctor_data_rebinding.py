"""The doctor sees a buffer rebound through `.data` in forward: DataParallel loses each replica's update
(the buffer object stays, its memory is swapped) (issue 36)."""
from __future__ import annotations

import json

import pytest
from _helpers_harness import run_cli

NET = '''
import torch
from torch import nn


class Ema(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("ema", torch.zeros(3))

    def forward(self, x):
        y = self.lin(x)
        self.ema{update}
        return y


def make():
    return Ema()
'''


@pytest.mark.parametrize("update, found", [(".data = 0.9 * self.ema + 0.1 * y.detach().mean(0)", True),
                                            (".mul_(0.9).add_(0.1 * y.detach().mean(0))", False)])
def test_a_buffer_rebound_through_data_is_found_and_an_in_place_update_is_not(tmp_path, update, found):
    # A fresh process: the doctor's --devices 2 installs virtual torch devices, which are process-wide.
    path = tmp_path / "ema_net.py"
    path.write_text(NET.format(update=update))
    done = run_cli("doctor", f"{path}:make", "--input-shape", "8,3", "--devices", "2", "--format", "json")
    status, report = done.returncode, json.loads(done.stdout)
    rebound = [f for f in report["findings"] if f["kind"] == "state-on-self" and "ema" in json.dumps(f)]
    assert bool(rebound) == found and status == (1 if found else status)

"""dp_torch against PyTorch's real nn.DataParallel on CUDA, for every device list PyTorch accepts there.

For each candidate `device_ids` / `output_device` spelling (None, ints, "cuda:i" strings,
torch.devices, a repeated GPU, reversed order, a CPU output device) and each batch (1, 5, 16,
one uneven), stock `torch.nn.DataParallel` runs a BatchNorm MLP forward and backward. Where it
accepts the list, dp_torch must accept it too and give the same output, gradients and running
statistics; where it refuses, what dp_torch does is recorded beside it. One JSON row per case.

    python -m benchmarks.cuda_device_lists --out results/device_lists.json
    python -m benchmarks.cuda_device_lists --dry-run --out x.json   # no CUDA call: the cases only

Exit status: 0 when every accepted list agrees, 1 when one disagrees, 2 without CUDA (not dry-run).
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

BATCHES = (1, 5, 16)
TOLERANCE = 1e-5


def candidates(n_gpus: int) -> list[dict[str, Any]]:
    """The device spellings tried on a machine with `n_gpus` GPUs (labels are what a user writes)."""
    cases: list[dict[str, Any]] = [
        {"label": "device_ids=None", "device_ids": None, "output_device": None},
        {"label": "device_ids=[0]", "device_ids": [0], "output_device": None},
        {"label": "device_ids=['cuda:0']", "device_ids": ["cuda:0"], "output_device": None},
        {"label": "device_ids=[torch.device('cuda', 0)]", "device_ids": [("cuda", 0)], "output_device": None},
        {"label": "device_ids=[0, 0]", "device_ids": [0, 0], "output_device": None},
        {"label": "device_ids=[0], output_device='cpu'", "device_ids": [0], "output_device": "cpu"},
        {"label": f"device_ids=list(range({n_gpus}))", "device_ids": list(range(n_gpus)), "output_device": None},
    ]
    if n_gpus > 1:
        cases += [
            {"label": f"device_ids=[{n_gpus - 1}, 0]", "device_ids": [n_gpus - 1, 0], "output_device": None},
            {"label": "device_ids=[0, 1], output_device=1", "device_ids": [0, 1], "output_device": 1},
        ]
    return cases


def _spelled(ids: Any) -> Any:
    import torch

    if ids is None:
        return None
    return [torch.device(*i) if isinstance(i, tuple) else i for i in ids]


def _model(seed: int) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 3)).cuda()


def _run(wrapper_cls: Any, module: Any, case: dict[str, Any], x: Any) -> dict[str, Any]:
    """Forward and backward through one DataParallel; the numbers, or the error it raised."""
    try:
        wrapper = wrapper_cls(module, device_ids=_spelled(case["device_ids"]), output_device=case["output_device"])
        out = wrapper(x)
        out.float().square().sum().backward()
    except Exception as error:  # a refusal is a finding: recorded, compared with the other side's
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
    return {"out": out.detach().cpu(), "device": str(out.device),
            "grads": [p.grad.detach().cpu() for p in module.parameters()],
            "stats": [b.detach().cpu() for b in module.buffers()]}


def _max_diff(a: list, b: list) -> float:
    return max((float((x.double() - y.double()).abs().max()) for x, y in zip(a, b) if x.numel()), default=0.0)


def compare_case(case: dict[str, Any], batch: int) -> dict[str, Any]:
    """One row: what stock torch and dp_torch did with this device list and batch, and whether they agree."""
    import torch

    import dp_torch

    ours = _model(batch)
    theirs = copy.deepcopy(ours)
    x = torch.randn(batch, 5, device="cuda:0")
    stock = _run(torch.nn.DataParallel, theirs, case, x)
    port = _run(dp_torch.DataParallel, ours, case, x)
    row: dict[str, Any] = {"case": case["label"], "batch": batch}
    if "error" in stock:
        row.update(stock="refuses", stock_error=stock["error"],
                   dp_torch="refuses" if "error" in port else "accepts", dp_torch_error=port.get("error"))
        row["verdict"] = "stock refuses (recorded)"
        return row
    if "error" in port:
        row.update(stock="accepts", dp_torch="refuses", dp_torch_error=port["error"], verdict="DISAGREE")
        return row
    diffs = {"output": _max_diff([port["out"]], [stock["out"]]), "grads": _max_diff(port["grads"], stock["grads"]),
             "running_stats": _max_diff(port["stats"], stock["stats"])}
    same_device = port["device"] == stock["device"]
    agree = same_device and all(d <= TOLERANCE for d in diffs.values())
    row.update(stock="accepts", dp_torch="accepts", output_device=stock["device"],
               dp_torch_output_device=port["device"], max_abs=diffs, verdict="agree" if agree else "DISAGREE")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cuda_device_lists", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--dry-run", action="store_true", help="write the cases without calling CUDA")
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.dry_run:
        rows = [{"case": c["label"], "batch": b, "verdict": "dry run: not run"} for c in candidates(1) for b in BATCHES]
        args.out.write_text(json.dumps({"cuda": False, "dry_run": True, "rows": rows}, indent=1))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("cuda_device_lists: torch.cuda.is_available() is False; use --dry-run on a CPU", file=sys.stderr)
        return 2
    n = torch.cuda.device_count()
    rows = [compare_case(case, batch) for case in candidates(n) for batch in BATCHES]
    args.out.write_text(json.dumps({"cuda": True, "gpus": n, "gpu": torch.cuda.get_device_name(0), "rows": rows},
                                   indent=1, default=str))
    for row in rows:
        print(f"{row['verdict']:<26} batch {row['batch']:>2}  {row['case']}")
    return 1 if any(row["verdict"] == "DISAGREE" for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

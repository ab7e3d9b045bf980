#!/usr/bin/env bash
# The prepared GPU check: run it from the repository root on a machine with CUDA.
#
#   bash benchmarks/gpu_check.sh [--dry-run] [OUT_DIR]
#
# In under 10 minutes (each step has its own time limit: 140 + 50 + 160 + 70 + 3 x 60 s) it runs, writing everything
# to OUT_DIR (default gpu_results/<UTC time>):
#   1. pytest on every test file with a `gpu` mark, `-m gpu`   -> pytest.log, pytest.xml
#   2. dp_torch against PyTorch's real nn.DataParallel on CUDA, for every device list PyTorch
#      accepts there (benchmarks/cuda_device_lists.py)           -> device_lists.json, .log
#   3. python -m benchmarks --device gpu, in two runs: the GPU sections (jax_strategies, torch_stock,
#      train_step) -> results.json, performance.md; the others -> results_rest.json (+ their .log)
#   4. python -m comparisons run --bench (every side's training step timed once every check passed) on two
#      built-in pairs (mlp, cnn_bn) and one Hugging Face pair (tiny GPT-2, benchmarks/hf_pair.py)
#                                                                 -> bench_<pair>.json (+ .log)
#   and summary.txt: one line per step with its exit status and seconds, then the machine.
# Nothing is installed: packages run from the tree (PYTHONPATH=.) with the python on PATH
# ($PYTHON overrides). --dry-run runs every step on the CPU up to the CUDA calls (the gpu tests
# skip, the device-list check writes its cases only, the benchmarks run --quick on CPU), so the
# script itself is tested without a GPU (tests/test_gpu_check.py). Exit status: 0 when every
# step passed, else 1.
set -u

DRY_RUN=0
if [ "${1:-}" = "--dry-run" ]; then DRY_RUN=1; shift; fi
OUT="${1:-gpu_results/$(date -u +%Y%m%dT%H%M%SZ)}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
FAILED=0

# step NAME SECONDS LOG OK_CODES CMD...: run CMD under a time limit, log its output, record its
# exit status and time; a status outside OK_CODES (space-separated) fails the check.
step() {
  local name="$1" limit="$2" log="$3" ok="$4"
  shift 4
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$log" 2>&1
  local rc=$?
  [ "$rc" -eq 124 ] && echo "(timed out after ${limit}s)" >> "$OUT/$log"
  local verdict=ok
  case " $ok " in *" $rc "*) ;; *) verdict=FAILED; FAILED=1 ;; esac
  printf '%-13s %-6s rc=%-3s %4ss  %s\n' "$name" "$verdict" "$rc" "$((SECONDS - start))" "$*" >> "$SUMMARY"
}

GPU_TESTS=$(grep -rl --include='test_*.py' 'mark\.gpu' tests | sort | tr '\n' ' ')
PYTEST=("$PY" -m pytest -q -p no:cacheprovider -o addopts= -m gpu -rs --junitxml="$OUT/pytest.xml")
if [ "$DRY_RUN" = 1 ]; then
  # without CUDA every gpu test skips, and pytest exits 5 when all selected tests skipped
  step pytest-gpu 170 pytest.log "0 5" "${PYTEST[@]}" $GPU_TESTS
  step device-lists 60 device_lists.log 0 "$PY" -m benchmarks.cuda_device_lists --dry-run \
    --out "$OUT/device_lists.json"
  step benchmarks 200 benchmarks.log 0 "$PY" -m benchmarks --quick --only train_step \
    --json "$OUT/results.json" --write-docs "$OUT/performance.md"
  step benchmarks-rest 60 benchmarks_rest.log 0 "$PY" -m benchmarks --quick --only replication \
    --json "$OUT/results_rest.json"
else
  step pytest-gpu 140 pytest.log 0 "${PYTEST[@]}" $GPU_TESTS
  step device-lists 50 device_lists.log 0 "$PY" -m benchmarks.cuda_device_lists --out "$OUT/device_lists.json"
  # two runs, so a slow section cannot take the GPU figures with it (results are written at the end of a run)
  step benchmarks 160 benchmarks.log 0 "$PY" -m benchmarks --device gpu --only jax_strategies torch_stock \
    train_step --json "$OUT/results.json" --write-docs "$OUT/performance.md"
  step benchmarks-rest 70 benchmarks_rest.log 0 "$PY" -m benchmarks --device gpu --only breakdown replication \
    harness virtual --json "$OUT/results_rest.json"
fi

# run --bench on two built-in pairs and one Hugging Face pair; the dry run at tiny sizes, one strategy
if [ "$DRY_RUN" = 1 ]; then
  BENCH=(--devices 2 --batch 4 --steps 1 --precision off --strategy shard_map --bench --bench-steps 2 --format json)
  BENCH_LIMIT=240  # cold compiles of a GPT-2 on 2 shared cores
else
  GPUS=$("$PY" -c 'import torch; print(max(1, torch.cuda.device_count()))' 2>/dev/null || echo 1)
  BENCH=(--devices "$GPUS" --batch $((8 * GPUS)) --steps 1 --bench --bench-steps 20 --format json)
  BENCH_LIMIT=60
fi
for model in mlp cnn_bn; do
  step "bench-$model" "$BENCH_LIMIT" "bench_$model.log" 0 "$PY" -m comparisons run --model "$model" "${BENCH[@]}" \
    --out "$OUT/bench_$model.json"
done
step bench-gpt2 "$BENCH_LIMIT" bench_gpt2.log 0 "$PY" -m comparisons run --import benchmarks.hf_pair --model gpt2-tiny \
  "${BENCH[@]}" --out "$OUT/bench_gpt2.json"

{
  echo
  echo "dry run: $DRY_RUN"
  "$PY" -c 'import platform, jax, torch; print("python", platform.python_version(), "| torch", torch.__version__,
"| jax", jax.__version__, "| cuda", torch.cuda.is_available(), torch.cuda.device_count(),
"|", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")' 2>&1
} >> "$SUMMARY"
cat "$SUMMARY"
exit "$FAILED"

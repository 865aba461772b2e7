#!/usr/bin/env bash
# The GPU acceptance check on a lent GPU machine (docs/gpu.md, "The GPU acceptance check"), from the repository root:
#   bash tasks/bench/gpu_run.sh [flags of `python -m rlep.tasks.bench.gpu`, e.g. --device cpu]
# 1-2. (tasks/bench/gpu_site.sh) installs the carried wheels (`make gpu-wheels`: pydantic, math-verify, ...;
#    $GPU_WHEELS, default build/gpu-wheels) into a folder of their own, nothing fetched, and makes the checkout
#    importable as rlep.* through a shim folder of links;
# 3. runs the check within $BUDGET seconds (default 480; the process is stopped at $BUDGET + 90) and writes the
#    JSON report and the log under $OUT (the device tool's folder; default bench/results).
# Exit status: the check's: 0 every part passed, 1 a part failed or could not start in time, 3 a part not
# verified (the vllm part where vLLM does not import: the lent machines' image has none; add
# `--parts distributed train async update` to leave it out), 2 no GPU seen or bad flags.
set -euo pipefail
PYTHON=${PYTHON:-python3}
WHEELS=${GPU_WHEELS:-build/gpu-wheels}
OUT_DIR=${OUT:-bench/results}
BUDGET=${BUDGET:-480}
source "$(dirname "$0")/gpu_site.sh"
mkdir -p "$OUT_DIR"
"$PYTHON" -c 'import sys, torch, transformers, pydantic, math_verify; print("python", sys.version.split()[0], "torch",
torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__, "pydantic",
pydantic.VERSION)'
STAMP=$(date -u +%Y%m%d-%H%M%S)
set +e
timeout --kill-after=10 $((BUDGET + 90)) "$PYTHON" -m rlep.tasks.bench.gpu --budget-seconds "$BUDGET" \
  --out "$OUT_DIR/gpu-$STAMP.json" "$@" 2>&1 | tee "$OUT_DIR/gpu-$STAMP.log"
status=${PIPESTATUS[0]}
set -e
rm -rf "$SITE"
exit "$status"

#!/usr/bin/env bash
# The GPU acceptance check on a lent GPU machine (docs/gpu.md, "The GPU acceptance check"), from the repository root:
#   bash tasks/bench/gpu_run.sh [flags of `python -m rlep.tasks.bench.gpu`, e.g. --device cpu]
# 1. installs the carried wheels (`make gpu-wheels`: pydantic, math-verify, ...; $GPU_WHEELS, default
#    build/gpu-wheels) into a folder of their own with `pip install --no-deps --target`: nothing else is installed,
#    nothing is fetched;
# 2. makes the checkout importable as rlep.* through a shim folder of links (rlep/flows -> ./flows, ...), which is
#    what `pip install -e .` maps, without building anything;
# 3. runs the check within $BUDGET seconds (default 480; the process is stopped at $BUDGET + 90) and writes the
#    JSON report and the log under $OUT (the device tool's folder; default bench/results).
# Exit status: the check's (0: every part passed).
set -euo pipefail
PYTHON=${PYTHON:-python3}
WHEELS=${GPU_WHEELS:-build/gpu-wheels}
OUT_DIR=${OUT:-bench/results}
BUDGET=${BUDGET:-480}
[ -f tasks/bench/gpu.py ] || { echo "run from the repository root" >&2; exit 2; }
ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "no wheels in $WHEELS: run \`make gpu-wheels\` and carry it" >&2; exit 2; }
mkdir -p "$OUT_DIR"
SITE=$(mktemp -d "${TMPDIR:-/tmp}/rlep-gpu-site.XXXXXX")
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
  --target "$SITE/lib" "$WHEELS"/*.whl
mkdir -p "$SITE/shim/rlep"
for package in flows tasks verifiers data; do ln -s "$PWD/$package" "$SITE/shim/rlep/$package"; done
export PYTHONPATH="$SITE/lib:$SITE/shim${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 DO_NOT_TRACK=1 VLLM_NO_USAGE_STATS=1
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

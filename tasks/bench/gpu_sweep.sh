#!/usr/bin/env bash
# A sweep of the update benchmark (`python -m rlep.tasks.bench.update`) on a lent GPU, beside the acceptance check
# (docs/gpu.md, "Measured on an H100"): micro-batch size, activation checkpointing, the KL reference with the
# old-log-prob pass, and the 7B shape with LoRA on one GPU. Set up as tasks/bench/gpu_run.sh is (the carried
# wheels of `make gpu-wheels`, the checkout linked as rlep.*); each line under its own time limit; one JSON report
# per line under $OUT. From the repository root, carrying build/gpu-wheels:
#   bash tasks/bench/gpu_sweep.sh          (DRY=1 PYTHON=.venv/bin/python GPU_WHEELS=build/gpu-wheels-py311 on the CPU)
set -uo pipefail
PYTHON=${PYTHON:-python3}; WHEELS=${GPU_WHEELS:-build/gpu-wheels}; OUT_DIR=${OUT:-bench/results}
source "$(dirname "$0")/gpu_site.sh"
mkdir -p "$OUT_DIR"
if [ -n "${DRY:-}" ]; then COMMON="--device cpu --precision fp32 --prompts 2 --group-size 2 --prompt-tokens 8 --response-tokens 8"; M05=tiny; M15=tiny; M7=tiny
else COMMON="--device cuda --precision bf16 --prompt-tokens 256 --response-tokens 768"; M05=qwen2.5-0.5b; M15=qwen2.5-1.5b; M7=qwen2.5-7b; fi
run() { name=$1; lim=$2; shift 2; echo "== $name: $*"; s=$(date +%s)
  timeout --kill-after=5 "$lim" "$PYTHON" -m rlep.tasks.bench.update $COMMON --out "$OUT_DIR/$name.json" "$@" 2>&1 | grep -v "it/s\]" | tail -6
  rc=${PIPESTATUS[0]}; echo "== $name rc=$rc in $(( $(date +%s) - s )) s"; [ "$rc" = 0 ] || failed=$((failed + 1)); }
failed=0
run u05-mb16 90 --model $M05 --micro-batch-size 16
run u15-mb8 90 --model $M15 --micro-batch-size 8
run u15-ac-mb16 90 --model $M15 --micro-batch-size 16 --activation-checkpointing
run u15-kl-2upd 200 --model $M15 --micro-batch-size 4 --kl --updates-per-epoch 2
run u7-lora16-ac 180 --model $M7 --micro-batch-size 8 --lora-rank 16 --activation-checkpointing
rm -rf "$SITE"
echo "sweep: $failed line(s) failed"
exit $((failed > 0))

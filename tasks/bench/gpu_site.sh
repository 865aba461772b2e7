# Sourced by tasks/bench/gpu_run.sh and gpu_sweep.sh (bash, from the repository root, with PYTHON and WHEELS set):
# installs the carried wheels (`make gpu-wheels`) with `pip install --no-deps --target` into a folder of their own
# (nothing else is installed, nothing is fetched), makes the checkout importable as rlep.* through a shim folder of
# links (rlep/flows -> ./flows, ...: what `pip install -e .` maps, without building anything) and exports the
# environment. Sets SITE (the caller removes it).
[ -f tasks/bench/gpu.py ] || { echo "run from the repository root" >&2; exit 2; }
ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "no wheels in $WHEELS: run \`make gpu-wheels\` and carry it" >&2; exit 2; }
SITE=$(mktemp -d "${TMPDIR:-/tmp}/rlep-gpu-site.XXXXXX")
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
  --target "$SITE/lib" "$WHEELS"/*.whl || exit
mkdir -p "$SITE/shim/rlep"
for package in flows tasks verifiers data; do ln -s "$PWD/$package" "$SITE/shim/rlep/$package"; done
export PYTHONPATH="$SITE/lib:$SITE/shim${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 DO_NOT_TRACK=1 VLLM_NO_USAGE_STATS=1
